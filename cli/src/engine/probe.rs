//! What `airlock doctor` asks the engine: its facts (`/info`) and what a short-lived
//! container of the image sees (the kernel's netfilter and IPv6 as the firewall will).

use super::{Engine, EngineError, call};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, LogsOptions, RemoveContainerOptions};
use futures_util::StreamExt;

/// The engine's facts that matter to a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// `1`, `2`, or empty when the engine does not say.
    pub cgroup_version: String,
    /// `name=seccomp,profile=default`-style entries.
    pub security_options: Vec<String>,
    /// Where the engine keeps images and containers (on its machine).
    pub root_dir: String,
    /// The engine's kernel.
    pub kernel: String,
}

impl Engine {
    /// The engine's `/info`.
    pub async fn facts(&self) -> Result<Facts, EngineError> {
        let i = self
            .docker
            .info()
            .await
            .map_err(call("report the facts of", &self.host))?;
        Ok(Facts {
            cgroup_version: i.cgroup_version.map(|v| v.to_string()).unwrap_or_default(),
            security_options: i.security_options.unwrap_or_default(),
            root_dir: i.docker_root_dir.unwrap_or_default(),
            kernel: i.kernel_version.unwrap_or_default(),
        })
    }

    /// Run `script` with `/bin/sh` in a throwaway container of `image` as root with only
    /// `NET_ADMIN` (what the entrypoint has for the firewall), no network beyond the
    /// default; its exit code and output. The container is removed whatever happens.
    pub async fn probe(
        &self,
        image: &str,
        name: &str,
        script: &str,
    ) -> Result<(i64, String), EngineError> {
        let body = ContainerCreateBody {
            image: Some(image.into()),
            entrypoint: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
            cmd: Some(Vec::new()),
            host_config: Some(HostConfig {
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: Some(vec!["NET_ADMIN".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(name.into()),
            platform: String::new(),
        };
        let created = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(call("create", name))?;
        let result = self.probe_run(&created.id).await;
        let rm = RemoveContainerOptions {
            v: true,
            force: true,
            link: false,
        };
        let _ = self.docker.remove_container(&created.id, Some(rm)).await;
        result
    }

    async fn probe_run(&self, id: &str) -> Result<(i64, String), EngineError> {
        self.start(id).await?;
        let code = self.wait_exit(id).await?;
        let opts = LogsOptions {
            stdout: true,
            stderr: true,
            tail: "all".into(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut logs = self.docker.logs(id, Some(opts));
        while let Some(chunk) = logs.next().await {
            out.extend_from_slice(&chunk.map_err(call("read the logs of", id))?.into_bytes());
        }
        Ok((code, String::from_utf8_lossy(&out).into_owned()))
    }
}
