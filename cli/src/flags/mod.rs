//! The one definition of how an airlock container is run (docs/docker.md, "The run command,
//! line by line"): capabilities, read-only root, sized tmpfs mounts, limits, security options,
//! mounts and environment, as a pure value ([`RunSpec`]). The facts it is made of (paths,
//! capabilities, tmpfs mounts and sizes, limits, variable names) are `airlock-control`'s,
//! which the entrypoint's preflight checks a container against: what is rendered here is
//! what the container accepts.
//!
//! Every way of starting the appliance is a rendering of this value, so they cannot drift:
//! [`RunSpec::docker_args`] (`docker run` flags, as `docker/run-flags.sh` spells them and as
//! `devcontainer.json` carries them), [`RunSpec::engine_body`] (the Docker Engine API
//! container-create body the CLI sends), [`compose`] (`compose.yaml` service text),
//! [`devcontainer`] and [`k8s`] (a Pod manifest). The tests compare the renderings with each
//! other and with the files the repository ships.

pub mod compose;
pub mod devcontainer;
pub mod engine;
pub mod k8s;

use std::path::PathBuf;

use airlock_control::env;
pub use airlock_control::limits::{CPUS, MEMORY, PIDS_LIMIT};
pub use airlock_control::paths::{
    AGENT_HOME, AUDIT_DIR, CONTROL_DIR, EXTRA_CA, HIDDEN_GIT_DIR, POLICY, SECRETS_DIR,
    SHARED_OBJECTS_DIR, STORES_PARENT, UPSTREAM_CA, WORKSPACE,
};
pub use airlock_control::tmpfs::{GIT_COVER, TMPFS, Tmpfs, parse_size};

/// The default image.
pub const DEFAULT_IMAGE: &str = "airlock:latest";

/// The source of a bind mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A host path.
    Host(PathBuf),
    /// A named volume.
    Volume(String),
}

impl Source {
    /// As `docker run -v` spells it.
    pub fn spelled(&self) -> String {
        match self {
            Source::Host(p) => p.display().to_string(),
            Source::Volume(v) => v.clone(),
        }
    }
}

/// One mount of the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// What is mounted.
    pub source: Source,
    /// Where.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

impl Mount {
    /// `SRC:DST[:ro]`, the `-v` / `Binds` / compose spelling.
    pub fn bind_spec(&self) -> String {
        let ro = if self.read_only { ":ro" } else { "" };
        format!("{}:{}{ro}", self.source.spelled(), self.target)
    }
}

/// What is mounted where: the host side of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Host path of the work tree, mounted at [`WORKSPACE`].
    pub work_tree: PathBuf,
    /// Host path of the git dir handed to the git service, if the work tree is a checkout.
    pub git_dir: Option<PathBuf>,
    /// Host path of an object store the git dir borrows from (a `--shared` clone).
    pub shared_objects: Option<PathBuf>,
    /// Host paths of the stores `shared_objects` chains to (`<stores>/<name>.git`), each
    /// mounted read-only at `STORES_PARENT/<name>.git/objects`.
    pub chained_stores: Vec<PathBuf>,
    /// The audit volume or directory.
    pub audit: Source,
    /// `(name, host file)`: mounted read-only at `/run/secrets/<name>`.
    pub secrets: Vec<(String, PathBuf)>,
    /// A volume holding the secrets (root's 0400 files), mounted read-only at
    /// [`SECRETS_DIR`]: the CLI's way ([`crate::engine::volumes`]).
    pub secrets_volume: Option<Source>,
    /// A host policy file mounted over the image's default.
    pub policy: Option<PathBuf>,
    /// A host PEM file of upstream roots for the proxy alone (a test CA), mounted read-only
    /// at [`UPSTREAM_CA`] and named by `AIRLOCK_UPSTREAM_CA`.
    pub upstream_ca: Option<PathBuf>,
    /// A host PEM file of the operator's extra CA (corporate proxy, private mirror), mounted
    /// read-only at [`EXTRA_CA`] and named by `AIRLOCK_EXTRA_CA`.
    pub extra_ca: Option<PathBuf>,
    /// What is mounted at [`AGENT_HOME`] instead of its tmpfs: the CLI's per-sandbox volume,
    /// so the agent's conversations, history and tools survive `stop`/`start` (removed with
    /// the sandbox). `None`: the sized tmpfs, a fresh home per start.
    pub home: Option<Source>,
    /// The host directory mounted (read-write) at [`CONTROL_DIR`]: where the CLI reads the
    /// start's readiness record (and, later, reaches the admin socket). `None`: PID 1 makes
    /// the control directory on the container's `/run`.
    pub control: Option<PathBuf>,
}

impl Layout {
    /// The layout of `scripts/docker-run` on a plain checkout (`REPO/.git` a directory).
    pub fn checkout(repo: impl Into<PathBuf>, audit: Source, git: bool) -> Layout {
        let work_tree = repo.into();
        let git_dir = git.then(|| work_tree.join(".git"));
        Layout {
            work_tree,
            git_dir,
            shared_objects: None,
            chained_stores: Vec::new(),
            audit,
            secrets: Vec::new(),
            secrets_volume: None,
            policy: None,
            upstream_ca: None,
            extra_ca: None,
            home: None,
            control: None,
        }
    }
}

/// The whole definition of one container run. Pure data; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The image reference.
    pub image: String,
    /// Capabilities added after `--cap-drop ALL`.
    pub cap_add: Vec<&'static str>,
    /// `--security-opt no-new-privileges`.
    pub no_new_privileges: bool,
    /// `--read-only`.
    pub read_only: bool,
    /// Every tmpfs, the `.git` cover last when present.
    pub tmpfs: Vec<Tmpfs>,
    /// `--pids-limit`.
    pub pids_limit: i64,
    /// `--memory` as written (`4g`).
    pub memory: &'static str,
    /// `--cpus`.
    pub cpus: u32,
    /// Bind and volume mounts, in `docker/run-flags.sh` order.
    pub mounts: Vec<Mount>,
    /// Environment `NAME=value` pairs given to the container (never a secret: those are files).
    pub env: Vec<(String, String)>,
    /// Labels, so the CLI can find its containers.
    pub labels: Vec<(String, String)>,
    /// The command (empty: the image's `CMD`).
    pub command: Vec<String>,
    /// Allocate a TTY and keep stdin open.
    pub tty: bool,
    /// The engine network to join (`--network`; none: the engine's default bridge).
    pub network: Option<String>,
    /// DNS servers for the engine's resolver to forward to (`--dns`).
    pub dns: Vec<String>,
}

impl RunSpec {
    /// The documented run of `image` on `layout` (docs/docker.md).
    pub fn documented(image: &str, layout: &Layout) -> RunSpec {
        let mut tmpfs: Vec<Tmpfs> = TMPFS
            .iter()
            .filter(|t| layout.home.is_none() || t.target != AGENT_HOME)
            .copied()
            .collect();
        let mut mounts = vec![
            Mount {
                source: Source::Host(layout.work_tree.clone()),
                target: WORKSPACE.into(),
                read_only: false,
            },
            Mount {
                source: layout.audit.clone(),
                target: AUDIT_DIR.into(),
                read_only: false,
            },
        ];
        if let Some(home) = &layout.home {
            mounts.push(Mount {
                source: home.clone(),
                target: AGENT_HOME.into(),
                read_only: false,
            });
        }
        if let Some(git_dir) = &layout.git_dir {
            mounts.push(Mount {
                source: Source::Host(git_dir.clone()),
                target: HIDDEN_GIT_DIR.into(),
                read_only: false,
            });
            tmpfs.push(GIT_COVER);
        }
        if let Some(objects) = &layout.shared_objects {
            mounts.push(Mount {
                source: Source::Host(objects.clone()),
                target: SHARED_OBJECTS_DIR.into(),
                read_only: true,
            });
        }
        for store in &layout.chained_stores {
            let name = store.file_name().map(|n| n.to_string_lossy().into_owned());
            mounts.push(Mount {
                source: Source::Host(store.join("objects")),
                target: format!("{STORES_PARENT}/{}/objects", name.unwrap_or_default()),
                read_only: true,
            });
        }
        if let Some(volume) = &layout.secrets_volume {
            mounts.push(Mount {
                source: volume.clone(),
                target: SECRETS_DIR.into(),
                read_only: true,
            });
        }
        for (name, file) in &layout.secrets {
            mounts.push(Mount {
                source: Source::Host(file.clone()),
                target: format!("{SECRETS_DIR}/{name}"),
                read_only: true,
            });
        }
        if let Some(policy) = &layout.policy {
            mounts.push(Mount {
                source: Source::Host(policy.clone()),
                target: POLICY.into(),
                read_only: true,
            });
        }
        if let Some(ca) = &layout.upstream_ca {
            mounts.push(Mount {
                source: Source::Host(ca.clone()),
                target: UPSTREAM_CA.into(),
                read_only: true,
            });
        }
        if let Some(ca) = &layout.extra_ca {
            mounts.push(Mount {
                source: Source::Host(ca.clone()),
                target: EXTRA_CA.into(),
                read_only: true,
            });
        }
        if let Some(control) = &layout.control {
            mounts.push(Mount {
                source: Source::Host(control.clone()),
                target: CONTROL_DIR.into(),
                read_only: false,
            });
        }
        // The host side of each mount, as labels for the entrypoint's refusals (it names the
        // host file); never read as files (scripts/docker-run, compose.yaml).
        let mut env = vec![(
            env::HOST_REPO.to_string(),
            layout.work_tree.display().to_string(),
        )];
        if let Some(policy) = &layout.policy {
            env.push((env::HOST_POLICY.into(), policy.display().to_string()));
        }
        for (name, file) in &layout.secrets {
            env.push((env::host_secret_file(name), file.display().to_string()));
        }
        if layout.upstream_ca.is_some() {
            env.push((env::UPSTREAM_CA.into(), UPSTREAM_CA.into()));
        }
        if let Some(ca) = &layout.extra_ca {
            env.push((env::EXTRA_CA.into(), EXTRA_CA.into()));
            env.push((env::HOST_EXTRA_CA.into(), ca.display().to_string()));
        }
        RunSpec {
            image: image.into(),
            cap_add: airlock_control::caps::names(),
            no_new_privileges: true,
            read_only: true,
            tmpfs,
            pids_limit: PIDS_LIMIT,
            memory: MEMORY,
            cpus: CPUS,
            mounts,
            env,
            labels: Vec::new(),
            command: Vec::new(),
            tty: false,
            network: None,
            dns: Vec::new(),
        }
    }

    /// `--memory` in bytes.
    pub fn memory_bytes(&self) -> u64 {
        parse_size(self.memory).unwrap_or(0)
    }

    /// The `docker run` flags (without `--rm`, `-it`, the image and the command), in the order
    /// and spelling of `docker/run-flags.sh` (tmpfs mounts grouped after `--read-only`; the
    /// `.git` hand-over and cover last).
    pub fn docker_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec!["--cap-drop".into(), "ALL".into()];
        for cap in &self.cap_add {
            a.extend(["--cap-add".into(), (*cap).to_string()]);
        }
        if self.no_new_privileges {
            a.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        if self.read_only {
            a.push("--read-only".into());
        }
        let cover = |t: &Tmpfs| t.target == GIT_COVER.target;
        for t in self.tmpfs.iter().filter(|t| !cover(t)) {
            a.extend(["--tmpfs".into(), format!("{}:{}", t.target, t.options)]);
        }
        a.extend(["--pids-limit".into(), self.pids_limit.to_string()]);
        a.extend(["--memory".into(), self.memory.into()]);
        a.extend(["--cpus".into(), self.cpus.to_string()]);
        for m in &self.mounts {
            a.extend(["-v".into(), m.bind_spec()]);
            if m.target == HIDDEN_GIT_DIR {
                for t in self.tmpfs.iter().filter(|t| cover(t)) {
                    a.extend(["--tmpfs".into(), format!("{}:{}", t.target, t.options)]);
                }
            }
        }
        for (k, v) in &self.env {
            a.extend(["-e".into(), format!("{k}={v}")]);
        }
        for (k, v) in &self.labels {
            a.extend(["--label".into(), format!("{k}={v}")]);
        }
        if let Some(net) = &self.network {
            a.extend(["--network".into(), net.clone()]);
        }
        for d in &self.dns {
            a.extend(["--dns".into(), d.clone()]);
        }
        a
    }
}

#[cfg(test)]
mod tests;
