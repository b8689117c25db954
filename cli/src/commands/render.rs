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
/// volume), with `secrets` (`NAME` or `NAME=FILE`) and a host `policy`.
fn spec_for(
    cli: &Cli,
    repo: &Path,
    secrets: &[(String, PathBuf)],
    policy: Option<&Path>,
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
    Ok(RunSpec::documented(&cli.image, &layout))
}

pub fn run(cli: &Cli, a: &RenderArgs) -> Result<i32> {
    airlock_cli::names::validate_name(&a.name)?;
    let spec = spec_for(cli, &a.repo, &[], None)?;
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
    let spec = spec_for(cli, &a.path, &secrets, a.policy.as_deref())?;
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
    } = &a.command;
    airlock_cli::names::validate_name(name)?;
    let paths = Paths::resolve(cli.data_dir.as_deref())?;
    let secrets = parse_secrets(&paths, secrets)?;
    let spec = spec_for(cli, repo, &secrets, policy.as_deref())?;
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
