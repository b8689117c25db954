//! The run flags for another engine, from the one definition: `airlock render` (any
//! format, on stdout), `airlock devcontainer PATH` (writes `.devcontainer/devcontainer.json`)
//! and `airlock k8s render NAME` (the Pod or the SIG's objects, the fence, the admission policy).

use super::new::parse_secrets;
use airlock_cli::cli::{Cli, DevcontainerArgs, K8sArgs, K8sCmd, RenderArgs, Target};
use airlock_cli::flags::{Layout, RunSpec, Source, compose, devcontainer, k8s};
use airlock_cli::paths::Paths;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The documented run on the checkout at `repo` (the audit log in the `airlock-audit`
/// volume), with `secrets` (`NAME` or `NAME=FILE`) and a host `policy`, for `agent` (its
/// image and command; `shell`: the image's shell), with a terminal: another engine starts
/// it as `docker run -it` would (a devcontainer's `runArgs`, the Pod's `stdin`/`tty` for
/// `kubectl attach`, compose's `stdin_open`/`tty`).
fn spec_for(
    cli: &Cli,
    repo: &Path,
    secrets: &[(String, PathBuf)],
    policy: Option<&Path>,
    agent: &str,
) -> Result<RunSpec> {
    let not_dir = |why: String| -> anyhow::Error {
        airlock_cli::exit::Failure::new(
            airlock_cli::exit::Code::Usage,
            format!(
                "{} is not a project directory ({why}): give the top directory of your project",
                repo.display()
            ),
        )
        .into()
    };
    let repo = std::fs::canonicalize(repo).map_err(|e| not_dir(e.to_string()))?;
    if !repo.is_dir() {
        return Err(not_dir("not a directory".into()));
    }
    let git = repo.join(".git").is_dir();
    let mut layout = Layout::checkout(repo, Source::Volume("airlock-audit".into()), git);
    layout.secrets = secrets.to_vec();
    layout.policy = policy
        .map(|p| {
            std::fs::canonicalize(p)
                .with_context(|| format!("cannot read the policy {}", p.display()))
        })
        .transpose()?;
    let (image, command) = super::new::agent_image(&cli.image, agent, &[])?;
    let mut spec = RunSpec::documented(&image, &layout);
    spec.command = command;
    spec.tty = true;
    Ok(spec)
}

/// The same rule as a CLI sandbox's secrets (root's, unreadable by the agent), for a
/// container airlock does not start and so cannot give a copy of its own: the file is
/// mounted as it is, so it must be root's with no group or other permission, or the
/// sandbox would refuse to start (exit 78) naming it. Refused here, with the fix.
fn root_only(secrets: &[(String, PathBuf)]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for (name, file) in secrets {
        let m = std::fs::metadata(file)
            .with_context(|| format!("cannot read secret {name} from {}", file.display()))?;
        if m.uid() != 0 || m.mode() & 0o077 != 0 {
            return Err(airlock_cli::exit::Failure::new(
                airlock_cli::exit::Code::Usage,
                format!(
                    "--secret {name}: {} is uid {}'s with mode {:o}; this engine mounts the file as it is and the agent could read it (the sandbox refuses to start so): make it root's, mode 0400 (sudo chown root:root {f} && sudo chmod 0400 {f}), or store it with `sudo airlock secret set {name}`",
                    file.display(),
                    m.uid(),
                    m.mode() & 0o7777,
                    f = file.display()
                ),
            )
            .into());
        }
    }
    Ok(())
}

pub fn run(cli: &Cli, a: &RenderArgs) -> Result<i32> {
    airlock_cli::names::validate_name(&a.name)?;
    let spec = spec_for(cli, &a.repo, &[], None, "shell")?;
    let text = match a.target {
        Target::Compose => compose::render(&spec, &a.name),
        Target::Devcontainer => pretty(&devcontainer::render(&spec, &a.name))?,
        Target::K8s => pretty(&k8s::pod(&spec, &a.name)?)?,
        Target::Engine => pretty(&spec.engine_body())?,
        Target::Docker => spec.docker_args().join("\n") + "\n",
    };
    print!("{text}");
    Ok(0)
}

/// `airlock devcontainer PATH`: write `PATH/.devcontainer/devcontainer.json`; an existing
/// one is kept unless `--force`; never through a symlink (the directory or the file), even
/// with `--force` ([`airlock_cli::files::write_in`]).
pub fn devcontainer_file(cli: &Cli, a: &DevcontainerArgs) -> Result<i32> {
    use airlock_cli::exit::{Code, Failure};
    use airlock_cli::files::WriteError;
    airlock_cli::names::validate_name(&a.name)?;
    let paths = Paths::resolve(cli.data_dir.as_deref())?;
    let secrets = parse_secrets(&paths, &a.secrets)?;
    root_only(&secrets)?;
    let spec = spec_for(cli, &a.path, &secrets, a.policy.as_deref(), &a.agent)?;
    let text = pretty(&devcontainer::render(&spec, &a.name))?;
    let top = std::fs::canonicalize(&a.path)
        .with_context(|| format!("cannot read {}", a.path.display()))?;
    match airlock_cli::files::write_in(
        &top,
        ".devcontainer",
        "devcontainer.json",
        text.as_bytes(),
        a.force,
    ) {
        Ok(file) => {
            println!("{}", file.display());
            Ok(0)
        }
        Err(WriteError::Exists { path }) => Err(Failure::new(
            Code::Refused,
            format!(
                "{} exists already: `airlock devcontainer {} --force` replaces it",
                path.display(),
                a.path.display()
            ),
        )
        .into()),
        Err(e @ (WriteError::Symlink { .. } | WriteError::NotA { .. })) => {
            Err(Failure::new(Code::Refused, e.to_string()).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// `airlock k8s check`: what the cluster serves of the agent-sandbox API
/// ([`airlock_cli::kube::served`]).
fn k8s_check() -> Result<i32> {
    use airlock_cli::exit::{Code, Failure};
    use airlock_cli::kube::{self, Served};
    let kubectl = kube::kubectl();
    let versions = kube::api_versions(&kubectl).map_err(|e| Failure::new(Code::Failure, e))?;
    let served = kube::served(&versions);
    match served {
        Served::Current => {
            println!("{}", served.line());
            Ok(0)
        }
        Served::Old(_) => Err(Failure::new(Code::Refused, served.line()).into()),
        Served::Missing(_) => Err(Failure::new(Code::NotFound, served.line()).into()),
    }
}

/// `airlock k8s render NAME`: the objects of one sandbox (docs/kubernetes.md).
pub fn k8s_cmd(cli: &Cli, a: &K8sArgs) -> Result<i32> {
    use airlock_cli::exit::{Code, Failure};
    use k8s::{fence, objects};
    let r = match &a.command {
        K8sCmd::Render(r) => r,
        K8sCmd::Check => return k8s_check(),
    };
    airlock_cli::names::validate_name(&r.name)?;
    let paths = Paths::resolve(cli.data_dir.as_deref())?;
    let secrets = parse_secrets(&paths, &r.secrets)?;
    // The values go into a Secret whose files the kubelet mounts root's with mode 0400: the
    // root-only rule holds whatever the host file's owner.
    let spec = spec_for(cli, &r.repo, &secrets, r.policy.as_deref(), &r.agent)?;
    let policy = match &r.policy {
        Some(p) => Some(
            airlock_policy::Policy::load(p)
                .map_err(|e| Failure::new(Code::Usage, format!("--policy {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let storage = k8s_storage(r)?;
    for c in &r.pod_cidrs {
        fence::parse_cidr("--pod-cidr", c).map_err(k8s_refused)?;
    }
    for c in &r.service_cidrs {
        fence::parse_cidr("--service-cidr", c).map_err(k8s_refused)?;
    }
    let pod = k8s::PodOptions {
        name: &r.name,
        storage: &storage,
        runtime_class: r.runtime_class.as_deref(),
        claim_templates: false,
    };
    if r.admission {
        let shape = k8s::admission::Shape::of(&k8s::pod_spec(&spec, &pod).map_err(k8s_refused)?);
        let docs = k8s::admission::objects(&r.name, r.host_paths, &shape);
        print!("{}", k8s::stream(&docs));
        return Ok(0);
    }
    let kind = if r.sandbox {
        objects::Kind::Sandbox
    } else if r.template {
        objects::Kind::Template {
            warm_pool: r.warm_pool,
            claims: r.claims.clone(),
        }
    } else {
        objects::Kind::Pod
    };
    let policy_text = match (&storage, &r.policy) {
        (k8s::Storage::Claims(_), Some(p)) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the policy {}", p.display()))?,
        ),
        _ => None,
    };
    let rendering = objects::Rendering {
        spec: &spec,
        pod,
        kind,
        secrets: secret_values(&secrets)?,
        policy_text,
        fence: fence::Fence {
            ports: fence::policy_ports(policy.as_ref()),
            pod_cidrs: r.pod_cidrs.clone(),
            service_cidrs: r.service_cidrs.clone(),
        },
        base_template: base_template(r.base_template.as_deref())?,
    };
    let docs = objects::render(&rendering).map_err(k8s_refused)?;
    if !rendering.secrets.is_empty() {
        eprintln!(
            "airlock: the Secret {} holds the values of {} secret(s): pipe it to kubectl, do not commit it",
            k8s::secret_name(&r.name),
            rendering.secrets.len()
        );
    }
    if !r.claims.is_empty() {
        eprintln!(
            "airlock: the template lets a claim add variables (its branch, for the seed): apply `airlock k8s render NAMESPACE --admission` first, whose policy refuses every other"
        );
    }
    print!("{}", k8s::stream(&docs));
    Ok(0)
}

/// A rendering refused: a managed template is refused (exit 4), anything else is usage.
fn k8s_refused(e: k8s::K8sError) -> anyhow::Error {
    use airlock_cli::exit::{Code, Failure};
    let code = match e {
        k8s::K8sError::Managed { .. } => Code::Refused,
        _ => Code::Usage,
    };
    Failure::new(code, e.to_string()).into()
}

/// Where the workspace and the audit live: the node's paths (`--host-paths`), or claims
/// seeded from `--clone` (each flag checked, one line for the first that does not read).
fn k8s_storage(r: &airlock_cli::cli::K8sRenderArgs) -> Result<k8s::Storage> {
    use airlock_cli::exit::{Code, Failure};
    if r.host_paths {
        return Ok(k8s::Storage::HostPaths);
    }
    let url = match &r.clone {
        Some(u) => u.clone(),
        None => origin_url(&r.repo)?,
    };
    k8s::check_url(&url).map_err(k8s_refused)?;
    if let Some(b) = &r.branch {
        k8s::check_branch(b).map_err(k8s_refused)?;
    }
    let base_ok = !r.base.is_empty()
        && !r.base.starts_with(['-', '+'])
        && !r.base.contains(':')
        && !r.base.chars().any(|c| c.is_whitespace() || c.is_control());
    if !base_ok {
        return Err(Failure::new(
            Code::Usage,
            format!(
                "--base {:?} is not a commit or ref: give e.g. main, v1.2 or a commit id",
                r.base
            ),
        )
        .into());
    }
    k8s::check_size("--workspace-size", &r.workspace_size).map_err(k8s_refused)?;
    k8s::check_size("--audit-size", &r.audit_size).map_err(k8s_refused)?;
    let audit = match &r.audit_claim {
        Some(c) => {
            airlock_cli::names::validate_name(c)?;
            k8s::Audit::Named(c.clone())
        }
        None => k8s::Audit::Create(r.audit_size.clone()),
    };
    Ok(k8s::Storage::Claims(k8s::Claims {
        seed: k8s::Seed {
            url,
            base: r.base.clone(),
            branch: r.branch.clone(),
        },
        workspace_size: r.workspace_size.clone(),
        audit,
    }))
}

/// `--base-template FILE`: a template read from the cluster, as JSON.
fn base_template(file: Option<&Path>) -> Result<Option<serde_json::Value>> {
    use airlock_cli::exit::{Code, Failure};
    let Some(f) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(f)
        .with_context(|| format!("cannot read --base-template {}", f.display()))?;
    let v = serde_json::from_str(&text).map_err(|e| {
        Failure::new(
            Code::Usage,
            format!(
                "--base-template {} is not JSON ({e}): give `kubectl get sandboxtemplate NAME -o json`",
                f.display()
            ),
        )
    })?;
    Ok(Some(v))
}

/// The secrets' values, read from their host files.
fn secret_values(secrets: &[(String, std::path::PathBuf)]) -> Result<Vec<(String, Vec<u8>)>> {
    secrets
        .iter()
        .map(|(n, file)| {
            let v = std::fs::read(file)
                .with_context(|| format!("cannot read secret {n} from {}", file.display()))?;
            Ok((n.clone(), v))
        })
        .collect()
}

/// The URL of the origin remote of the repository `repo`, without any credential.
fn origin_url(repo: &Path) -> Result<String> {
    use airlock_cli::checkout::remotes;
    let top = std::fs::canonicalize(repo)
        .with_context(|| format!("cannot read the repository {}", repo.display()))?;
    let entries = remotes::of_operator(&top)?;
    entries
        .iter()
        .find(|(k, _)| k == "remote.origin.url")
        .map(|(_, v)| remotes::without_userinfo(v))
        .ok_or_else(|| {
            airlock_cli::exit::Failure::new(
                airlock_cli::exit::Code::Usage,
                format!(
                    "{} has no origin remote to clone in the cluster: give --clone URL (the repository's https URL), or --host-paths on a single node",
                    top.display()
                ),
            )
            .into()
        })
}

fn pretty(v: &serde_json::Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}
