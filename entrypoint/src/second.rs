//! A second confined session: `docker exec -it NAME airlock-entrypoint __session [-- CMD]`
//! (or `airlock-session [-- CMD]` where the image links that name to the entrypoint).
//!
//! Plain `docker exec NAME bash` is root with the container's capabilities (`NET_ADMIN`
//! included: it can flush the firewall), and `docker exec -u <agent>` has neither the proxy
//! settings nor the shims' variables. This mode turns the exec'd process into the agent the
//! way PID 1 made the first one: the same identity (uid, gid, groups), empty capability sets,
//! `no_new_privs`, airlock's seccomp filter, all verified from `/proc/self/status` before
//! `exec`, and the same environment (proxy, CA, session, shims, placeholders), in the
//! workspace. Its traffic is the agent's uid's, so the proxy audits it as the agent.
//!
//! PID 1 saves what the drop needs ([`save`]: `agent.json` in the runtime directory, root's
//! 0600: the agent cannot read or change it; it holds placeholders, never a real secret) and
//! this mode reads it back ([`main`]). It `exec`s in place: the session is the `docker exec`
//! process itself, so the terminal, signals and exit status are docker's as usual.

use crate::identity::Identity;
use crate::spawn::{RunAs, Session as TtySession};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The program name that selects this mode (a link to the entrypoint: `airlock-session`).
pub const PROGRAM: &str = "airlock-session";
/// Hidden first argument of this mode.
pub const ARG: &str = "__session";
/// The saved agent inside the runtime directory.
pub const FILE: &str = "agent.json";

/// What PID 1 knew about the agent when it started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: PathBuf,
    pub shell: PathBuf,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

impl Saved {
    fn identity(&self) -> Identity {
        Identity {
            name: self.name.clone(),
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            home: self.home.clone(),
            shell: self.shell.clone(),
        }
    }
}

/// Save the agent for later sessions: `<run_dir>/agent.json`, root's, 0600.
pub fn save(
    run_dir: &Path,
    agent: &Identity,
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> Result<()> {
    let saved = Saved {
        name: agent.name.clone(),
        uid: agent.uid,
        gid: agent.gid,
        groups: agent.groups.clone(),
        home: agent.home.clone(),
        shell: agent.shell.clone(),
        cwd: cwd.to_path_buf(),
        env: env.clone(),
    };
    let json = serde_json::to_vec(&saved).context("cannot encode the agent for sessions")?;
    let path = run_dir.join(FILE);
    let tmp = run_dir.join(format!(".{FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(&json)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot install {}", path.display()))
}

/// The command to run: what follows `--` (or the arguments as they are), else the agent's
/// shell. Pure.
pub fn command_of(args: &[OsString], shell: &Path) -> Vec<OsString> {
    let args = match args.first() {
        Some(first) if first == "--" => &args[1..],
        _ => args,
    };
    if args.is_empty() {
        vec![shell.as_os_str().to_owned()]
    } else {
        args.to_vec()
    }
}

/// Become the agent and `exec` the command; returns only on failure.
pub fn main(args: &[OsString]) -> Result<()> {
    crate::identity::require_root().context(
        "a session starts as root (docker exec's default user) and drops to the agent itself",
    )?;
    let run_dir = std::env::var_os("AIRLOCK_RUN_DIR")
        .map_or_else(|| PathBuf::from(airlock_channels::RUN_DIR), PathBuf::from);
    let path = run_dir.join(FILE);
    let text = std::fs::read(&path).with_context(|| {
        format!(
            "cannot read {}: is airlock running in this container (a session needs a started appliance)?",
            path.display()
        )
    })?;
    let saved: Saved = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a saved agent", path.display()))?;
    let command = command_of(args, &saved.shell);
    let Some((program, rest)) = command.split_first() else {
        bail!("no command");
    };
    let run_as = RunAs {
        identity: saved.identity(),
        filters: Some(Arc::new(crate::seccomp::agent_filters()?)),
        // docker exec made this process a session leader: it keeps its group and terminal.
        session: TtySession::Inherit,
        real_uid: None,
    };
    let err = run_as
        .command(Path::new(program), &saved.env, &saved.cwd)
        .args(rest)
        .exec();
    Err(err).with_context(|| format!("cannot start {program:?} as {}", saved.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_what_follows_the_dashes_or_the_shell() {
        let sh = Path::new("/bin/bash");
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(command_of(&[], sh), os(&["/bin/bash"]));
        assert_eq!(command_of(&os(&["--"]), sh), os(&["/bin/bash"]));
        assert_eq!(command_of(&os(&["--", "ls", "-l"]), sh), os(&["ls", "-l"]));
        assert_eq!(command_of(&os(&["ls"]), sh), os(&["ls"]));
    }

    #[test]
    fn the_saved_agent_is_root_only_and_reads_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let agent = Identity::test_agent();
        let env = BTreeMap::from([("HTTP_PROXY".to_owned(), "http://127.0.0.1:3128".to_owned())]);
        save(dir.path(), &agent, Path::new("/workspace"), &env).unwrap();
        let meta = std::fs::metadata(dir.path().join(FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let saved: Saved =
            serde_json::from_slice(&std::fs::read(dir.path().join(FILE)).unwrap()).unwrap();
        assert_eq!(saved.identity().uid, 1000);
        assert_eq!(saved.env, env);
        assert_eq!(saved.cwd, Path::new("/workspace"));
    }
}
