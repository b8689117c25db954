//! `airlock build`: the images, by the repository's own scripts (`scripts/build-image`, and
//! `scripts/build-agent-image AGENT` for an agent's image), so there is one way to build
//! them. The source tree is `--source`, else `AIRLOCK_SOURCE`, else the tree this binary
//! was built from, else the current directory.

use airlock_cli::cli::{BuildArgs, Cli};
use airlock_cli::exit::{Code, Failure};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The source tree holding `scripts/build-image`.
fn source(explicit: Option<&Path>) -> Result<PathBuf> {
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => vec![built_from, PathBuf::from(".")],
    };
    for c in &candidates {
        if c.join("scripts/build-image").is_file() {
            return std::fs::canonicalize(c)
                .with_context(|| format!("cannot read the source tree {}", c.display()));
        }
    }
    Err(Failure::new(
        Code::Usage,
        format!(
            "no airlock source tree with scripts/build-image at {}: give it with --source DIR (or AIRLOCK_SOURCE)",
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    )
    .into())
}

/// `--build-missing`: the engine lacks `image`, so build it as `airlock build` would (the
/// agent's image when `image` is `airlock:<agent>`, else the base image under that tag). The
/// scripts' output goes to stderr: stdout belongs to the agent.
pub fn missing(ctx: &super::Ctx, image: &str, agent: &str) -> Result<()> {
    let explicit = std::env::var_os("AIRLOCK_SOURCE").map(PathBuf::from);
    let src = source(explicit.as_deref())?;
    eprintln!(
        "airlock: the image {image} is missing: building it from {} (the first build takes a few minutes)",
        src.display()
    );
    let mut cmd = if agent != "shell" && image == format!("airlock:{agent}") {
        let mut c = Command::new(src.join("scripts/build-agent-image"));
        c.arg(agent).env("AIRLOCK_IMAGE", &ctx.image);
        c
    } else {
        let mut c = Command::new(src.join("scripts/build-image"));
        c.arg(image);
        c
    };
    cmd.current_dir(&src).stdout(std::io::stderr());
    let status = cmd
        .status()
        .with_context(|| format!("cannot run the build scripts in {}", src.display()))?;
    if !status.success() {
        return Err(Failure::new(
            Code::ImageMissing,
            format!(
                "the image {image} is missing and building it failed (exit {}): see the lines above, fix, then `airlock build`",
                status.code().unwrap_or(1)
            ),
        )
        .into());
    }
    Ok(())
}

pub fn run(cli: &Cli, a: &BuildArgs) -> Result<i32> {
    let src = source(a.source.as_deref())?;
    let mut cmd = match &a.agent {
        Some(agent) => {
            let mut c = Command::new(src.join("scripts/build-agent-image"));
            c.arg(agent);
            if let Some(tag) = &a.tag {
                c.arg(tag);
            }
            // The agent image is built on the base image this CLI uses.
            c.env("AIRLOCK_IMAGE", &cli.image);
            c
        }
        None => {
            let mut c = Command::new(src.join("scripts/build-image"));
            c.arg(a.tag.as_deref().unwrap_or(&cli.image));
            c
        }
    };
    cmd.current_dir(&src);
    let status = cmd
        .status()
        .with_context(|| format!("cannot run the build scripts in {}", src.display()))?;
    Ok(status.code().unwrap_or(1))
}
