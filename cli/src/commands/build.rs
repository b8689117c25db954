//! `airlock build`: the images, by the airlock project's own scripts (`scripts/build-image`,
//! and `scripts/build-agent-image AGENT` for an agent's image), so there is one way to build
//! them. The source tree is `--source` (or `AIRLOCK_SOURCE`), else the tree this binary was
//! built from; never one found from the current directory (that may be any checkout, a
//! sandbox's branch included). Before a script runs, the tree is checked to be the airlock
//! project's (its CLI crate is there) and the script and every directory above it to be
//! owned by root or by the operator and not writable by everyone.

use airlock_cli::cli::{BuildArgs, Cli};
use airlock_cli::exit::{Code, Failure};
use anyhow::{Context, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tree this binary was built from.
fn built_from() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The source tree: `explicit` when given, else `built_from`; it must hold
/// `scripts/build-image` and the CLI crate.
fn source_in(explicit: Option<&Path>, built_from: &Path) -> Result<PathBuf> {
    let tree = explicit.unwrap_or(built_from);
    let ours = tree.join("scripts/build-image").is_file()
        && std::fs::read_to_string(tree.join("cli/Cargo.toml"))
            .is_ok_and(|t| t.contains("name = \"airlock-cli\""));
    if !ours {
        return Err(Failure::new(
            Code::Usage,
            format!(
                "no airlock source tree at {} (scripts/build-image and cli/Cargo.toml): give it with --source DIR (or AIRLOCK_SOURCE); airlock never builds from the current directory",
                tree.display()
            ),
        )
        .into());
    }
    std::fs::canonicalize(tree)
        .with_context(|| format!("cannot read the source tree {}", tree.display()))
}

fn source(explicit: Option<&Path>) -> Result<PathBuf> {
    source_in(explicit, &built_from())
}

/// The accounts whose files a build may run: root, us, and under sudo the invoking user.
fn trusted_owners() -> Vec<u32> {
    let mut owners = vec![0, nix::unistd::geteuid().as_raw()];
    if let Some(uid) = std::env::var("SUDO_UID").ok().and_then(|u| u.parse().ok()) {
        owners.push(uid);
    }
    owners
}

/// `script` and every directory above it are owned by one
/// of `owners` and not writable by everyone (a sticky directory such as /tmp aside), so no
/// other account could have put what runs there.
fn check_trusted(script: &Path, owners: &[u32]) -> Result<()> {
    let mut at = Some(script);
    while let Some(p) = at {
        let m =
            std::fs::symlink_metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        let open = m.mode() & 0o002 != 0 && !m.file_type().is_symlink() && !sticky_dir;
        if !owners.contains(&m.uid()) || open {
            return Err(Failure::new(
                Code::Refused,
                format!(
                    "{} is {} (owner uid {}, mode {:o}): airlock runs build scripts only from a tree root or you own and not everyone can write; fix the tree or give another with --source",
                    p.display(),
                    if open { "writable by others" } else { "owned by another account" },
                    m.uid(),
                    m.mode() & 0o7777
                ),
            )
            .into());
        }
        at = p.parent();
    }
    Ok(())
}

/// The command running `script` of the tree `src`, once the tree is checked.
fn script(src: &Path, name: &str) -> Result<Command> {
    let path = src.join("scripts").join(name);
    check_trusted(&path, &trusted_owners())?;
    let mut c = Command::new(&path);
    c.current_dir(src);
    Ok(c)
}

/// `--build-missing`: the engine lacks `image`, so build it as `airlock build` would (the
/// agent's image when `image` is `airlock:<agent>`, else the base image under that tag). The
/// scripts' output goes to stderr: stdout belongs to the agent.
pub fn missing(ctx: &super::Ctx, image: &str, agent: &str) -> Result<()> {
    let explicit = std::env::var_os("AIRLOCK_SOURCE").map(PathBuf::from);
    let src = source(explicit.as_deref())?;
    eprintln!(
        "airlock: the image {image} is missing: building it from {} (once: about 4 minutes on 2 cores, 10 with no base image; an agent's image a few minutes more; the steps follow)",
        src.display()
    );
    let mut cmd = if agent != "shell" && image == format!("airlock:{agent}") {
        let mut c = script(&src, "build-agent-image")?;
        c.arg(agent).env("AIRLOCK_IMAGE", &ctx.image);
        c
    } else {
        let mut c = script(&src, "build-image")?;
        c.arg(image);
        c
    };
    cmd.stdout(std::io::stderr());
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
            let mut c = script(&src, "build-agent-image")?;
            c.arg(agent);
            if let Some(tag) = &a.tag {
                c.arg(tag);
            }
            // The agent image is built on the base image this CLI uses.
            c.env("AIRLOCK_IMAGE", &cli.image);
            c
        }
        None => {
            let mut c = script(&src, "build-image")?;
            c.arg(a.tag.as_deref().unwrap_or(&cli.image));
            c
        }
    };
    let status = cmd
        .status()
        .with_context(|| format!("cannot run the build scripts in {}", src.display()))?;
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path) -> PathBuf {
        let t = root.join("airlock");
        std::fs::create_dir_all(t.join("scripts")).unwrap();
        std::fs::create_dir_all(t.join("cli")).unwrap();
        std::fs::write(t.join("scripts/build-image"), "#!/bin/sh\n").unwrap();
        std::fs::write(
            t.join("cli/Cargo.toml"),
            "[package]\nname = \"airlock-cli\"\n",
        )
        .unwrap();
        t
    }

    #[test]
    fn the_tree_is_the_one_given_or_the_one_built_from_never_the_current_directory() {
        let d = tempfile::tempdir().unwrap();
        let t = tree(d.path());
        assert_eq!(
            source_in(Some(&t), Path::new("/nonexistent")).unwrap(),
            t.canonicalize().unwrap()
        );
        assert_eq!(source_in(None, &t).unwrap(), t.canonicalize().unwrap());
        // The tree this binary was built from is gone: one line naming --source, and the
        // current directory (whatever it holds) is not looked at.
        let e = source_in(None, Path::new("/nonexistent/airlock"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--source") && e.contains("never builds from the current directory"),
            "{e}"
        );
        // A directory with a build-image script is not enough: it must be airlock's.
        let other = d.path().join("other");
        std::fs::create_dir_all(other.join("scripts")).unwrap();
        std::fs::write(other.join("scripts/build-image"), "#!/bin/sh\n").unwrap();
        assert!(source_in(Some(&other), &t).is_err());
    }

    #[test]
    fn a_script_others_can_write_or_another_account_owns_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let t = tree(d.path());
        let s = t.join("scripts/build-image");
        let me = nix::unistd::geteuid().as_raw();
        check_trusted(&s, &[0, me]).unwrap();
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_trusted(&s, &[0, me]).unwrap_err().to_string();
        assert!(e.contains("writable by others"), "{e}");
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(t.join("scripts"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert!(check_trusted(&s, &[0, me]).is_err(), "a directory above it");
        std::fs::set_permissions(t.join("scripts"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_eq!(
            me, 0,
            "this test chowns a file to another account: run it as root (scripts/test does)"
        );
        std::os::unix::fs::lchown(&s, Some(4242), None).unwrap();
        let e = check_trusted(&s, &[0, me]).unwrap_err().to_string();
        assert!(e.contains("owned by another account"), "{e}");
    }
}
