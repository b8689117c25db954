//! One request, from the accepted connection to its log line: authenticate, check the
//! environment, the working directory and the argv, reshape the argv, then run git by the
//! command's class (under the repository lock when it writes) and log the outcome.

use super::audit::decision;
use super::listen::{deny, peer_uid};
use super::rewrite::{bisect_helper, harden_args, needs_fresh_index, pin_config, pin_tail};
use super::spawn::Job;
use super::{Server, resolve_cwd};
use crate::argv::{self, Class, Refusal};
use crate::nested::{self, Watch};
use airlock_wire::frame::{write_frame, write_json};
use airlock_wire::invocation::PASSED_ENV;
use airlock_wire::{Exit, FrameKind, Invocation, Reason};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::MutexGuard;

impl Server {
    /// One connection: authenticated, executed, logged; a refusal is sent as a denial frame.
    pub(super) fn connection(&self, mut stream: UnixStream) {
        let peer = peer_uid(&stream);
        let outcome = self.authenticate(&mut stream, peer);
        let inv = match outcome {
            Ok(inv) => inv,
            Err(r) => {
                // Unsigned, forged, replayed or over the rate: the agent can send these as
                // fast as it likes, so their lines are throttled.
                self.log.unauthenticated(&decision(peer, &[], Err(&r)));
                deny(&mut stream, &r);
                return;
            }
        };
        match self.execute(&mut stream, &inv) {
            Ok(code) => self.log.decision(&decision(peer, &inv.argv, Ok(code))),
            Err(r) => {
                self.log.decision(&decision(peer, &inv.argv, Err(&r)));
                deny(&mut stream, &r);
            }
        }
    }

    /// The request checked and run; git's exit code.
    fn execute(&self, stream: &mut UnixStream, inv: &Invocation) -> Result<i32, Refusal> {
        for k in inv.env.keys() {
            if !PASSED_ENV.contains(&k.as_str()) {
                return Err(Refusal::new(
                    Reason::EnvNotAllowed,
                    format!("environment variable {k} is not passed to the git API"),
                ));
            }
        }
        if inv.env.values().any(|v| v.contains('\0')) || inv.argv.iter().any(|a| a.contains('\0')) {
            return Err(Refusal::new(
                Reason::MalformedRequest,
                "NUL byte in an argument",
            ));
        }
        let cwd = resolve_cwd(&self.env.work_tree, &inv.cwd)?;
        let checked = argv::check(&inv.argv).map_err(|r| not_installed(r, &inv.argv))?;
        nested::check_options(&checked)?;
        if matches!(checked.subcommand.as_str(), "apply" | "am")
            && let Some(patch) = &inv.stdin
        {
            crate::argv::patch::refuse_git_dir(&checked.subcommand, patch)?;
            crate::argv::gitdirs::refuse_gitlink_patch(&checked.subcommand, patch)?;
        }
        let edited;
        let inv = if checked.editor_true {
            // git's prepared message is accepted as is (the shim never passes GIT_EDITOR).
            let mut i = inv.clone();
            i.env.insert("GIT_EDITOR".into(), "true".into());
            edited = i;
            &edited
        } else {
            inv
        };
        // Nested repositories stay closed on every command, including those whose argv is
        // built elsewhere (fetch, pull, ls-remote): the agent's `-c` cannot set these keys
        // to anything else (argv::dashc), and the argv below repeats them after its own.
        let mut config: Vec<String> = nested::PINNED_CONFIG
            .iter()
            .map(|kv| (*kv).to_owned())
            .collect();
        if inv.stdout_tty {
            config.push("color.ui=always".to_owned());
        }
        let mut args = checked.argv.clone();
        pin_tail(&checked, &mut args);
        harden_args(&checked, &mut args);
        if checked.subcommand == "bisect" && self.bisect_is_script() {
            bisect_helper(&checked, &mut args);
        }
        pin_config(&checked, &mut args);
        if let Some(n) = &checked.notice {
            let _ = write_frame(stream, FrameKind::Stderr, n.as_bytes());
        }
        // Held until git is done: the children read it as their own descriptor.
        let layer = self.home.as_ref().and_then(crate::global::AgentHome::layer);
        let mut job = Job {
            stream,
            inv,
            cwd: &cwd,
            config,
            global: layer.as_ref().map(|l| l.path().to_path_buf()),
        };
        match checked.class {
            Class::Read => self.stream_git(&mut job, &args, true),
            Class::Write => {
                let _g = self.write_guard()?;
                if needs_fresh_index(&checked) {
                    // What the agent's last `git status` would have written natively (the
                    // git API's reads take no optional locks, so they never refresh it).
                    let _ = self.query(&["update-index", "-q", "--refresh"]);
                }
                if checked.subcommand == "rm" {
                    nested::check_rm(&self.env, &checked, &cwd)?;
                }
                if checked.global_write {
                    return self.global_write(&mut job, &args);
                }
                if checked.subcommand == "remote" {
                    return self.remote_write(&mut job, &checked, &args);
                }
                match Watch::of(&checked.subcommand) {
                    None => self.stream_git(&mut job, &args, false),
                    Some(watch) => self.watched(&mut job, &args, watch),
                }
            }
            Class::Fetch => {
                let _g = self.write_guard()?;
                self.fetch(&mut job, &checked)
            }
            Class::ListRemote => self.ls_remote(&mut job, &checked),
            Class::Push => {
                let _g = self.write_guard()?;
                let (mut args, transport) = self.resolve_push(&checked)?;
                pin_config(&checked, &mut args);
                job.config.extend(transport);
                self.stream_git(&mut job, &args, false)
            }
        }
    }

    /// A command whose index (and commit) must not record a nested repository: run, then
    /// checked, and undone with a refusal instead of its exit status when it did.
    fn watched(&self, job: &mut Job<'_>, args: &[String], watch: Watch) -> Result<i32, Refusal> {
        let guard = nested::Guard::before(&self.env, watch)?;
        let code = self.run_streamed(job, args, false)?;
        guard.after(code)?;
        let _ = write_json(job.stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// `git config --global` that writes: git edits a copy of the agent's `~/.gitconfig` in
    /// the private directory, and the copy replaces the file when git succeeded
    /// ([`crate::global`]).
    fn global_write(&self, job: &mut Job<'_>, args: &[String]) -> Result<i32, Refusal> {
        let refuse = |e: crate::global::HomeError| {
            Refusal::new(
                Reason::ConfigKeyNotWritable,
                format!(
                    "git config --global is not written: {e}; outside the workspace git \
                     writes ~/.gitconfig as it is (git -C ~ config --global ...), and git \
                     in the workspace reads its identity and preferences from there"
                ),
            )
        };
        let home = self
            .home
            .as_ref()
            .ok_or_else(|| refuse(crate::global::HomeError::NoScratch))?;
        let edit = home.edit().map_err(refuse)?;
        job.global = Some(edit.path().to_path_buf());
        let code = self.run_streamed(job, args, false)?;
        if code == 0 {
            edit.store().map_err(refuse)?;
        }
        let _ = write_json(job.stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// The repository lock: held while a command writes the repository or the work tree.
    fn write_guard(&self) -> Result<MutexGuard<'_, ()>, Refusal> {
        self.write_lock
            .lock()
            .map_err(|_| Refusal::new(Reason::Internal, "lock poisoned"))
    }
}

/// Where git finds `git-<name>` commands (its exec path, then PATH).
const EXEC_DIRS: &[&str] = &[
    "/usr/lib/git-core",
    "/usr/libexec/git-core",
    "/usr/local/bin",
    "/usr/bin",
    "/bin",
];

/// A refused subcommand that git does not know and no `git-<name>` provides is a missing
/// tool (`git lfs` without git-lfs), not a policy decision: say so.
fn not_installed(r: Refusal, argv: &[String]) -> Refusal {
    if r.reason != Reason::SubcommandNotAllowed {
        return r;
    }
    let Some(name) = argv::subcommand_name(argv) else {
        return r;
    };
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !plain
        || argv::known_subcommand(name)
        || EXEC_DIRS
            .iter()
            .any(|d| Path::new(d).join(format!("git-{name}")).exists())
    {
        return r;
    }
    Refusal::new(
        Reason::NotInstalled,
        format!(
            "git {name}: there is no git command {name} and git-{name} is not installed in the \
             sandbox, so there is nothing to run (aliases are not expanded: spell the command \
             out); this is not a policy refusal. If the work needs git-{name}, the operator \
             adds it to the image"
        ),
    )
}
