//! The Docker Engine API container-create body (`POST /containers/create`) for a
//! [`RunSpec`]: what the CLI sends through bollard, field for field what `docker run` with
//! [`RunSpec::docker_args`] would send.

use super::RunSpec;
use serde_json::{Map, Value, json};

impl RunSpec {
    /// The create body as JSON (the Engine API's field names).
    pub fn engine_body(&self) -> Value {
        let tmpfs: Map<String, Value> = self
            .tmpfs
            .iter()
            .map(|t| (t.target.to_string(), Value::String(t.options.to_string())))
            .collect();
        let binds: Vec<String> = self.mounts.iter().map(|m| m.bind_spec()).collect();
        let security_opt: Vec<&str> = if self.no_new_privileges {
            vec!["no-new-privileges"]
        } else {
            vec![]
        };
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let labels: Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut body = json!({
            "Image": self.image,
            "Env": env,
            "Labels": labels,
            "Tty": self.tty,
            "OpenStdin": self.tty,
            "AttachStdin": self.tty,
            "AttachStdout": true,
            "AttachStderr": true,
            "HostConfig": {
                "CapDrop": ["ALL"],
                "CapAdd": self.cap_add,
                "SecurityOpt": security_opt,
                "ReadonlyRootfs": self.read_only,
                "Tmpfs": tmpfs,
                "PidsLimit": self.pids_limit,
                "Memory": self.memory_bytes(),
                "NanoCpus": u64::from(self.cpus) * 1_000_000_000,
                "Binds": binds,
            },
        });
        if !self.command.is_empty()
            && let Some(obj) = body.as_object_mut()
        {
            obj.insert("Cmd".into(), json!(self.command));
        }
        if let Some(host) = body["HostConfig"].as_object_mut() {
            if let Some(net) = &self.network {
                host.insert("NetworkMode".into(), json!(net));
            }
            if !self.dns.is_empty() {
                host.insert("Dns".into(), json!(self.dns));
            }
        }
        body
    }
}
