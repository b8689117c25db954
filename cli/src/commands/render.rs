//! The run flags for another engine, from the one definition: `airlock render` (any
//! format, on stdout), `airlock devcontainer PATH` (writes `.devcontainer/devcontainer.json`)
//! and `airlock k8s render NAME` (a Secret and a Pod).

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
        Target::K8s => pretty(&k8s::pod(&spec, &a.name))?,
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

/// `airlock k8s render NAME`: the Secret (the named secrets' values) and the Pod.
pub fn k8s_cmd(cli: &Cli, a: &K8sArgs) -> Result<i32> {
    let K8sCmd::Render {
        name,
        repo,
        secrets,
        policy,
        agent,
    } = &a.command;
    airlock_cli::names::validate_name(name)?;
    let paths = Paths::resolve(cli.data_dir.as_deref())?;
    let secrets = parse_secrets(&paths, secrets)?;
    // The values go into a Secret whose files the kubelet mounts root's with mode 0400: the
    // root-only rule holds whatever the host file's owner.
    let spec = spec_for(cli, repo, &secrets, policy.as_deref(), agent)?;
    let mut values = Vec::new();
    for (n, file) in &secrets {
        let v = std::fs::read(file)
            .with_context(|| format!("cannot read secret {n} from {}", file.display()))?;
        values.push((n.clone(), v));
    }
    if !values.is_empty() {
        eprintln!(
            "airlock: the Secret {} holds the values of {} secret(s): pipe it to kubectl, do not commit it",
            k8s::secret_name(name),
            values.len()
        );
    }
    print!("{}", k8s::manifests(&spec, name, &values));
    Ok(0)
}

fn pretty(v: &serde_json::Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}
