//! `airlock render`: the run flags for another engine, from the one definition.

use airlock_cli::cli::{Cli, RenderArgs, Target};
use airlock_cli::flags::{Layout, RunSpec, Source, compose, devcontainer, k8s};
use anyhow::{Context, Result};

pub fn run(cli: &Cli, a: &RenderArgs) -> Result<i32> {
    airlock_cli::names::validate_name(&a.name)?;
    let repo = std::fs::canonicalize(&a.repo)
        .with_context(|| format!("cannot read the repository {}", a.repo.display()))?;
    let git = repo.join(".git").is_dir();
    let layout = Layout::checkout(repo, Source::Volume("airlock-audit".into()), git);
    let spec = RunSpec::documented(&cli.image, &layout);
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

fn pretty(v: &serde_json::Value) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}
