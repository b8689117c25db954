//! The Unix-socket server: authenticate, decide, run, stream.

use crate::argv::{self, Checked, Class, Refusal};
use crate::log::{Decision, Log};
use crate::push::{self, Facts, PushRules, Update};
use crate::run::GitEnv;
use crate::visible::{self, FetchSpec, Visibility};
use airlock_wire::auth::DEFAULT_RATE;
use airlock_wire::frame::{self, CHUNK, MAX_FRAME, write_frame, write_json};
use airlock_wire::invocation::PASSED_ENV;
use airlock_wire::{Auth, Denied, Exit, FrameKind, Invocation, PROTOCOL_VERSION, Reason, Verifier};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Largest auth header accepted.
const MAX_AUTH: usize = 4096;
/// How long a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything a connection handler needs.
#[derive(Debug)]
pub struct Server {
    /// How git runs.
    pub env: GitEnv,
    /// The only uid allowed to connect.
    pub agent_uid: u32,
    /// Push rules.
    pub rules: PushRules,
    /// Which remote branches this sandbox sees.
    pub vis: Visibility,
    /// HMAC verification and the nonce cache.
    pub verifier: Mutex<Verifier>,
    /// Serialises operations that write the repository.
    pub write_lock: Mutex<()>,
    /// Concurrent connections at most.
    pub max_connections: usize,
    /// The decision log.
    pub log: Log,
    active: AtomicUsize,
    /// Whether this git's `bisect` is the shell script of git < 2.40 (read once).
    bisect_script: std::sync::OnceLock<bool>,
}

impl Server {
    /// A server; see the fields.
    #[must_use]
    pub fn new(
        env: GitEnv,
        agent_uid: u32,
        rules: PushRules,
        vis: Visibility,
        verifier: Verifier,
        max_connections: usize,
    ) -> Server {
        Server {
            env,
            agent_uid,
            rules,
            vis,
            verifier: Mutex::new(verifier),
            write_lock: Mutex::new(()),
            max_connections,
            log: Log::stderr(None),
            active: AtomicUsize::new(0),
            bisect_script: std::sync::OnceLock::new(),
        }
    }

    /// The same server logging to `log` (default: stderr, without a session id).
    #[must_use]
    pub fn with_log(mut self, log: Log) -> Server {
        self.log = log;
        self
    }

    /// Accept connections forever, one thread each.
    pub fn serve(self: Arc<Server>, listener: &UnixListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let server = Arc::clone(&self);
            if server.active.fetch_add(1, Ordering::SeqCst) >= server.max_connections {
                server.active.fetch_sub(1, Ordering::SeqCst);
                let mut s = stream;
                let r = Refusal::new(
                    Reason::Busy,
                    "the git API is at its connection limit; retry",
                );
                server
                    .log
                    .unauthenticated(&decision(peer_uid(&s), &[], Err(&r)));
                deny(&mut s, &r);
                continue;
            }
            std::thread::spawn(move || {
                server.connection(stream);
                server.active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }

    fn connection(&self, mut stream: UnixStream) {
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

    /// Peer uid, then the signed request.
    fn authenticate(
        &self,
        stream: &mut UnixStream,
        peer: Option<u32>,
    ) -> Result<Invocation, Refusal> {
        if peer != Some(self.agent_uid) {
            return Err(Refusal::new(
                Reason::PeerNotAgent,
                format!(
                    "connection from uid {peer:?}: the git API serves only the agent (uid {})",
                    self.agent_uid
                ),
            ));
        }
        let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
        let malformed = |what: &str| {
            Refusal::new(
                Reason::MalformedRequest,
                format!("malformed request: {what}"),
            )
        };
        let read = |s: &mut UnixStream, max: usize, kind: FrameKind| -> Result<Vec<u8>, Refusal> {
            match frame::read_frame(s, max) {
                Ok(Some(f)) if f.kind == kind => Ok(f.payload),
                Ok(Some(_)) => Err(malformed("unexpected frame")),
                Ok(None) => Err(malformed("connection closed early")),
                Err(airlock_wire::WireError::FrameTooLarge { len, max }) => Err(Refusal::new(
                    Reason::RequestTooLarge,
                    format!("request frame of {len} bytes exceeds {max}"),
                )),
                Err(e) => Err(malformed(&e.to_string())),
            }
        };
        let auth_bytes = read(stream, MAX_AUTH, FrameKind::Auth)?;
        let auth: Auth =
            frame::decode(&auth_bytes, "auth").map_err(|e| malformed(&e.to_string()))?;
        let body = read(stream, MAX_FRAME, FrameKind::Body)?;
        let verifier = || {
            self.verifier
                .lock()
                .map_err(|_| Refusal::new(Reason::Internal, "verifier poisoned"))
        };
        // Signature first (consumes nothing), then the body must parse, and only then does
        // the request take a rate token and its nonce: a malformed body costs neither.
        // (Each verdict is taken into a variable first: the guard must be gone before
        // `auth_refusal` locks again.)
        let checked = verifier()?.check(&auth, &body, SystemTime::now());
        let authentic = checked.map_err(|reason| self.auth_refusal(reason))?;
        let inv = Invocation::from_body(&body).map_err(|e| malformed(&e.to_string()))?;
        if inv.version != PROTOCOL_VERSION {
            return Err(Refusal::new(
                Reason::UnsupportedVersion,
                "the shim and the git API versions differ",
            ));
        }
        let admitted = verifier()?.admit(authentic, SystemTime::now());
        admitted.map_err(|reason| self.auth_refusal(reason))?;
        let _ = stream.set_read_timeout(None);
        Ok(inv)
    }

    /// The refusal of a request the verifier turned down, with what to do about it.
    fn auth_refusal(&self, reason: Reason) -> Refusal {
        if reason == Reason::RateLimited {
            let rate = self.verifier.lock().map_or(DEFAULT_RATE, |v| v.rate());
            return Refusal::new(
                reason,
                format!(
                    "too many git requests: the git API runs at most {} a second ({} at once); \
                     wait a moment and run the command again (a script that runs git in a \
                     tight loop should pause between runs)",
                    rate.per_second, rate.burst
                ),
            );
        }
        Refusal::new(
            reason,
            format!(
                "request refused: {reason} (sign with the current session key, once, within 30 s)"
            ),
        )
    }

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
        if matches!(checked.subcommand.as_str(), "apply" | "am")
            && let Some(patch) = &inv.stdin
        {
            crate::patch::refuse_git_dir(&checked.subcommand, patch)?;
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
        let mut config = Vec::new();
        if inv.stdout_tty {
            config.push("color.ui=always".to_owned());
        }
        let mut args = checked.argv.clone();
        harden_args(&checked, &mut args);
        if checked.subcommand == "bisect" && self.bisect_is_script() {
            bisect_helper(&checked, &mut args);
        }
        if let Some(n) = &checked.notice {
            let _ = write_frame(stream, FrameKind::Stderr, n.as_bytes());
        }
        match checked.class {
            Class::Read => self.stream_git(stream, inv, &cwd, &config, &args, true),
            Class::Write => {
                let _g = self
                    .write_lock
                    .lock()
                    .map_err(|_| Refusal::new(Reason::Internal, "lock poisoned"))?;
                if needs_fresh_index(&checked) {
                    // What the agent's last `git status` would have written natively (the
                    // git API's reads take no optional locks, so they never refresh it).
                    let _ = self.q(&["update-index", "-q", "--refresh"]);
                }
                self.stream_git(stream, inv, &cwd, &config, &args, false)
            }
            Class::Fetch => {
                let _g = self
                    .write_lock
                    .lock()
                    .map_err(|_| Refusal::new(Reason::Internal, "lock poisoned"))?;
                self.fetch(stream, inv, &cwd, &config, &checked)
            }
            Class::ListRemote => self.ls_remote(stream, inv, &cwd, &config, &checked),
            Class::Push => {
                let _g = self
                    .write_lock
                    .lock()
                    .map_err(|_| Refusal::new(Reason::Internal, "lock poisoned"))?;
                let (args, transport) = self.resolve_push(&checked)?;
                config.extend(transport);
                self.stream_git(stream, inv, &cwd, &config, &args, false)
            }
        }
    }

    /// git < 2.40 (Debian bookworm's 2.39) runs `git bisect` as a shell script, and a shell
    /// drops the split identity (design §5): every bisect step then fails on the hidden git
    /// dir. Such a git ships the builtin `bisect--helper` the script calls.
    fn bisect_is_script(&self) -> bool {
        *self.bisect_script.get_or_init(|| {
            let Some(dir) = self.env.query(&["--exec-path"]).ok().and_then(|q| q.line()) else {
                return false;
            };
            let dir = Path::new(&dir);
            let script = std::fs::read(dir.join("git-bisect")).unwrap_or_default();
            script.starts_with(b"#!") && dir.join("git-bisect--helper").exists()
        })
    }

    fn q(&self, args: &[&str]) -> Result<crate::run::Query, Refusal> {
        self.env
            .query(args)
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))
    }

    fn remotes(&self) -> Result<Vec<String>, Refusal> {
        Ok(self
            .q(&["remote"])?
            .stdout
            .lines()
            .map(str::to_owned)
            .collect())
    }

    fn current_branch(&self) -> Result<Option<String>, Refusal> {
        Ok(self.q(&["symbolic-ref", "-q", "--short", "HEAD"])?.line())
    }

    fn default_remote(&self, branch: Option<&str>) -> Result<String, Refusal> {
        if let Some(b) = branch {
            for key in [
                format!("branch.{b}.pushRemote"),
                "remote.pushDefault".into(),
                format!("branch.{b}.remote"),
            ] {
                if let Some(r) = self.q(&["config", "--get", &key])?.line() {
                    return Ok(r);
                }
            }
        }
        Ok("origin".into())
    }

    /// The remote must be configured and every URL it uses authorized. Returns the
    /// configuration that makes git talk HTTPS to an authorized SSH URL (`url.<https>.
    /// insteadOf=<the URL>`); the agent's configuration keeps the URL as written.
    fn check_remote(&self, remote: &str, push: bool) -> Result<Vec<String>, Refusal> {
        if !self.remotes()?.iter().any(|r| r == remote) {
            return Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!(
                    "{remote} is not a configured remote: the git API talks only to the operator's remotes (see `git remote -v`)"
                ),
            ));
        }
        let mut urls = Vec::new();
        if push {
            urls = self
                .q(&["config", "--get-all", &format!("remote.{remote}.pushurl")])?
                .stdout
                .lines()
                .map(str::to_owned)
                .collect();
        }
        if urls.is_empty() {
            urls = self
                .q(&["config", "--get-all", &format!("remote.{remote}.url")])?
                .stdout
                .lines()
                .map(str::to_owned)
                .collect();
        }
        if urls.is_empty() {
            return Err(Refusal::new(
                Reason::RepositoryNotAuthorized,
                format!("remote {remote} has no URL"),
            ));
        }
        let mut transport = Vec::new();
        for url in urls {
            let id = self.rules.check_repository(remote, &url)?;
            if let Some(https) = push::https_form(&url, &id) {
                transport.push(self.env.rewrite(&url, &https, &id));
            }
        }
        Ok(transport)
    }

    /// The remote `fetch`, `pull` and `ls-remote` use when none is named.
    fn fetch_remote(&self, branch: Option<&str>) -> Result<String, Refusal> {
        if let Some(b) = branch
            && let Some(r) = self
                .q(&["config", "--get", &format!("branch.{b}.remote")])?
                .line()
        {
            return Ok(r);
        }
        Ok("origin".into())
    }

    /// The remote's refs as `ls-remote` lists them through the proxy (unfiltered; never
    /// shown to the agent as such). `Err(Ok(query))`: git failed, pass its words on.
    fn list_remote(
        &self,
        remote: &str,
        config: &[String],
    ) -> Result<Result<String, crate::run::Query>, Refusal> {
        let q = self
            .env
            .query_with(config, &["ls-remote", "--", remote])
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))?;
        Ok(if q.ok { Ok(q.stdout) } else { Err(q) })
    }

    /// Delete `refs`; one line per ref on the agent's stderr when `say`.
    fn delete_refs(
        &self,
        stream: &mut UnixStream,
        refs: &[String],
        say: bool,
    ) -> Result<(), Refusal> {
        for r in refs {
            let q = self.q(&["update-ref", "--no-deref", "-d", r])?;
            if !q.ok {
                return Err(Refusal::new(
                    Reason::Internal,
                    format!("deleting a hidden ref failed: {}", q.stderr.trim()),
                ));
            }
            if say {
                let short = r.strip_prefix("refs/remotes/").unwrap_or(r);
                let _ = write_frame(
                    stream,
                    FrameKind::Stderr,
                    format!(" - [deleted]         (none)     -> {short}\n").as_bytes(),
                );
            }
        }
        Ok(())
    }

    /// Remote-tracking refs of hidden branches (and, with `prune`, of branches the remote
    /// no longer lists) of `remote`, deleted.
    fn prune_remote(
        &self,
        stream: Option<&mut UnixStream>,
        remote: &str,
        specs: &[FetchSpec],
        listed: Option<&[String]>,
        prune: bool,
    ) -> Result<(), Refusal> {
        let q = self.q(&["for-each-ref", "--format=%(refname)"])?;
        if !q.ok {
            return Err(Refusal::new(
                Reason::Internal,
                format!("listing refs failed: {}", q.stderr.trim()),
            ));
        }
        let local: Vec<String> = q.stdout.lines().map(str::to_owned).collect();
        let mut config = self.config_fetch_specs(remote)?;
        config.extend(specs.iter().cloned());
        let hidden = visible::stale_tracking_refs(&local, remote, &config, None, false, &self.vis);
        let pruned: Vec<String> = if prune {
            visible::stale_tracking_refs(&local, remote, specs, listed, true, &self.vis)
                .into_iter()
                .filter(|r| !hidden.contains(r))
                .collect()
        } else {
            Vec::new()
        };
        match stream {
            Some(s) => {
                self.delete_refs(s, &hidden, false)?;
                self.delete_refs(s, &pruned, true)
            }
            None => {
                for r in hidden.iter().chain(&pruned) {
                    self.q(&["update-ref", "--no-deref", "-d", r])?;
                }
                Ok(())
            }
        }
    }

    fn config_fetch_specs(&self, remote: &str) -> Result<Vec<FetchSpec>, Refusal> {
        Ok(self
            .q(&["config", "--get-all", &format!("remote.{remote}.fetch")])?
            .stdout
            .lines()
            .map(FetchSpec::parse)
            .collect())
    }

    /// Delete remote-tracking refs of hidden branches of every configured remote (the
    /// operator's clone may have them). Run when the server starts.
    pub fn hide_existing(&self) -> Result<(), Refusal> {
        for r in self.remotes()? {
            self.prune_remote(None, &r, &[], None, false)?;
        }
        Ok(())
    }

    /// `git ls-remote`: the remote checked, its output filtered of hidden refs.
    fn ls_remote(
        &self,
        stream: &mut UnixStream,
        inv: &Invocation,
        cwd: &Path,
        config: &[String],
        c: &Checked,
    ) -> Result<i32, Refusal> {
        let (options, operands) = split_operands(c);
        let mut operands = operands.into_iter();
        let remote = match operands.next() {
            Some(r) => r,
            None => self.fetch_remote(self.current_branch()?.as_deref())?,
        };
        let mut config = config.to_vec();
        config.extend(self.check_remote(&remote, false)?);
        let mut args = global_and_sub(c);
        args.extend(options);
        args.push("--".into());
        args.push(remote);
        args.extend(operands);
        let out = self
            .env
            .command(cwd, &inv.env, &config, &args)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Refusal::new(Reason::Internal, format!("running git: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let (shown, kept) = visible::filter_ls_remote(&text, &self.vis);
        let mut code = out
            .status
            .code()
            .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
        // `--exit-code` must not tell a hidden match from no match.
        if code == 0 && kept == 0 && c.argv.iter().any(|a| a == "--exit-code") {
            code = 2;
        }
        for chunk in shown.as_bytes().chunks(CHUNK) {
            let _ = write_frame(stream, FrameKind::Stdout, chunk);
        }
        if !out.stderr.is_empty() {
            let _ = write_frame(stream, FrameKind::Stderr, &out.stderr);
        }
        let _ = write_json(stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// `git fetch` / `git pull`: every remote checked, then git runs per remote with
    /// explicit refspecs for visible refs only (see [`crate::visible`]).
    fn fetch(
        &self,
        stream: &mut UnixStream,
        inv: &Invocation,
        cwd: &Path,
        config: &[String],
        c: &Checked,
    ) -> Result<i32, Refusal> {
        let pull = c.subcommand == "pull";
        let (mut options, operands) = split_operands(c);
        let all = options.iter().any(|a| a == "--all");
        let multiple = options.iter().any(|a| a == "--multiple");
        // fetch's short options take no value, so `-pv` is `-p -v`.
        let short_p = |a: &str| {
            a == "-p" || (!pull && !a.starts_with("--") && a.starts_with('-') && a.contains('p'))
        };
        let prune = options.iter().any(|a| a == "--prune" || short_p(a))
            || (!options.iter().any(|a| a == "--no-prune") && self.prune_configured(&operands)?);
        options.retain(|a| a != "--all" && a != "--multiple");
        if pull && (all || multiple) {
            return Err(Refusal::new(
                Reason::FetchFormNotSupported,
                "git pull --all/--multiple is not run by the git API: run git fetch --all, then git pull",
            ));
        }
        let branch = self.current_branch()?;
        // (remote, refspecs as written)
        let plan: Vec<(String, Vec<String>)> = if all || multiple {
            if all && !operands.is_empty() {
                return Err(Refusal::new(
                    Reason::FetchFormNotSupported,
                    "git fetch --all takes no remote or refspec",
                ));
            }
            let remotes = if all { self.remotes()? } else { operands };
            remotes.into_iter().map(|r| (r, Vec::new())).collect()
        } else {
            let mut ops = operands.into_iter();
            let remote = match ops.next() {
                Some(r) => r,
                None => self.fetch_remote(branch.as_deref())?,
            };
            vec![(remote, ops.collect())]
        };
        let mut config = config.to_vec();
        for (remote, _) in &plan {
            config.extend(self.check_remote(remote, false)?);
        }
        let mut status = 0;
        for (remote, written) in plan {
            let user_specs: Vec<FetchSpec> = written.iter().map(|s| FetchSpec::parse(s)).collect();
            let specs = if !user_specs.is_empty() {
                user_specs.clone()
            } else if pull {
                self.pull_merge_specs(&remote, branch.as_deref())?
            } else {
                self.config_fetch_specs(&remote)?
            };
            // Refuse by name before anything goes on the wire.
            visible::expand(&specs, &[], &self.vis)?;
            let listed = match self.list_remote(&remote, &config)? {
                Ok(l) => l,
                Err(q) => {
                    let _ = write_frame(stream, FrameKind::Stderr, q.stderr.as_bytes());
                    status = q.code.unwrap_or(128);
                    continue;
                }
            };
            let listed = visible::remote_refs(&listed);
            let explicit = visible::expand(&specs, &listed, &self.vis)?;
            self.prune_remote(Some(stream), &remote, &[], None, false)?;
            if !explicit.is_empty() {
                let mut args = global_and_sub(c);
                args.extend(options.iter().cloned());
                args.push(remote.clone());
                args.extend(explicit);
                let code = self.run_streamed(stream, inv, cwd, &config, &args, false)?;
                if code != 0 && status == 0 {
                    status = code;
                }
            }
            let wildcards: Vec<FetchSpec> = if user_specs.is_empty() && !pull {
                specs.clone()
            } else {
                user_specs
            };
            self.prune_remote(Some(stream), &remote, &wildcards, Some(&listed), prune)?;
        }
        let _ = write_json(stream, FrameKind::Exit, &Exit { code: status }, "exit");
        Ok(status)
    }

    /// `fetch.prune` / `remote.<name>.prune` of the first remote named (or origin).
    fn prune_configured(&self, operands: &[String]) -> Result<bool, Refusal> {
        let remote = operands.first().map_or("origin", String::as_str);
        for key in [format!("remote.{remote}.prune"), "fetch.prune".into()] {
            if let Some(v) = self.q(&["config", "--type=bool", "--get", &key])?.line() {
                return Ok(v == "true");
            }
        }
        Ok(false)
    }

    /// What a `git pull` without refspecs merges: the current branch's `branch.<b>.merge`
    /// when its remote is `remote`.
    fn pull_merge_specs(
        &self,
        remote: &str,
        branch: Option<&str>,
    ) -> Result<Vec<FetchSpec>, Refusal> {
        let none = || {
            Refusal::new(
                Reason::FetchFormNotSupported,
                format!(
                    "the current branch has no upstream on {remote}: name the branch, \
                     git pull {remote} <branch> (or git branch --set-upstream-to={remote}/<branch>)"
                ),
            )
        };
        let Some(b) = branch else {
            return Err(none());
        };
        let configured = self
            .q(&["config", "--get", &format!("branch.{b}.remote")])?
            .line();
        if configured.as_deref() != Some(remote) {
            return Err(none());
        }
        let merges: Vec<FetchSpec> = self
            .q(&["config", "--get-all", &format!("branch.{b}.merge")])?
            .stdout
            .lines()
            .filter(|l| !l.is_empty())
            .map(FetchSpec::parse)
            .collect();
        if merges.is_empty() || merges.iter().any(|m| m.negative || m.src.contains('*')) {
            return Err(none());
        }
        Ok(merges)
    }

    /// Resolve `git push ...` into explicit updates, judge them, and return the argv to run.
    /// Also returns the transport configuration of the remote (see `check_remote`).
    fn resolve_push(&self, c: &Checked) -> Result<(Vec<String>, Vec<String>), Refusal> {
        let (global, rest) = c.argv.split_at((c.sub_index + 1).min(c.argv.len()));
        let mut options = Vec::new();
        let mut operands = Vec::new();
        let mut after_dashes = false;
        for a in rest {
            if !after_dashes && a == "--" {
                after_dashes = true;
            } else if !after_dashes && a.starts_with('-') {
                options.push(a.clone());
            } else {
                operands.push(a.clone());
            }
        }
        let branch = self.current_branch()?;
        let remote = match operands.first() {
            Some(r) => r.clone(),
            None => self.default_remote(branch.as_deref())?,
        };
        let transport = self.check_remote(&remote, true)?;
        let specs: Vec<push::Refspec> = if operands.len() > 1 {
            operands[1..]
                .iter()
                .map(|s| push::parse_refspec(s))
                .collect::<Result<_, _>>()?
        } else {
            let Some(b) = &branch else {
                return Err(Refusal::new(
                    Reason::PushFormNotSupported,
                    "HEAD is detached: name the branch to push (git push origin HEAD:sandbox/<name>/<branch>)",
                ));
            };
            vec![push::Refspec {
                src: b.clone(),
                dst: None,
            }]
        };
        let mut refspecs = Vec::new();
        for spec in specs {
            let (src_ref, dst) = self.resolve_refspec(&spec, branch.as_deref())?;
            let new = self
                .q(&["rev-parse", "--verify", "-q", &src_ref])?
                .line()
                .ok_or_else(|| {
                    Refusal::new(
                        Reason::PushFormNotSupported,
                        format!("{} does not name a commit", spec.src),
                    )
                })?;
            let old = match dst.strip_prefix("refs/heads/") {
                Some(b) => self
                    .q(&[
                        "rev-parse",
                        "--verify",
                        "-q",
                        &format!("refs/remotes/{remote}/{b}^{{commit}}"),
                    ])?
                    .line(),
                None => None,
            };
            let update = Update {
                dst: dst.clone(),
                old: old.clone(),
                new: Some(new.clone()),
            };
            self.rules.judge_push(&update, &remote, &spec.src)?;
            let facts = self.facts(&remote, old.as_deref(), &new)?;
            self.rules.judge_facts(&update, &facts)?;
            refspecs.push(format!("{src_ref}:{dst}"));
        }
        let mut out: Vec<String> = global.to_vec();
        out.extend(options);
        out.push(remote);
        out.extend(refspecs);
        Ok((out, transport))
    }

    fn resolve_refspec(
        &self,
        spec: &push::Refspec,
        branch: Option<&str>,
    ) -> Result<(String, String), Refusal> {
        let exists = |r: &str| -> Result<bool, Refusal> {
            Ok(self.q(&["rev-parse", "--verify", "-q", r])?.ok)
        };
        let (src_ref, default_dst) = if spec.src == "HEAD" || spec.src == "@" {
            match branch {
                Some(b) => (format!("refs/heads/{b}"), Some(format!("refs/heads/{b}"))),
                None => ("HEAD".to_owned(), None),
            }
        } else if spec.src.starts_with("refs/heads/") || spec.src.starts_with("refs/tags/") {
            (spec.src.clone(), Some(spec.src.clone()))
        } else if exists(&format!("refs/heads/{}", spec.src))? {
            (
                format!("refs/heads/{}", spec.src),
                Some(format!("refs/heads/{}", spec.src)),
            )
        } else if exists(&format!("refs/tags/{}", spec.src))? {
            (
                format!("refs/tags/{}", spec.src),
                Some(format!("refs/tags/{}", spec.src)),
            )
        } else {
            (spec.src.clone(), None)
        };
        let dst = match (&spec.dst, default_dst) {
            (Some(d), _) if d.starts_with("refs/") => d.clone(),
            (Some(d), _) if src_ref.starts_with("refs/tags/") => format!("refs/tags/{d}"),
            (Some(d), _) => format!("refs/heads/{d}"),
            (None, Some(d)) => d,
            (None, None) => {
                return Err(Refusal::new(
                    Reason::PushFormNotSupported,
                    format!(
                        "name the destination: git push <remote> {}:<branch>",
                        spec.src
                    ),
                ));
            }
        };
        if dst.contains("..") || dst.contains(['*', ' ', '~', '^', ':', '?', '[', '\\']) {
            return Err(Refusal::new(
                Reason::PushFormNotSupported,
                format!("{dst} is not a valid ref name"),
            ));
        }
        Ok((src_ref, dst))
    }

    fn facts(&self, remote: &str, old: Option<&str>, new: &str) -> Result<Facts, Refusal> {
        let fast_forward = match old {
            None => true,
            Some(o) => {
                let q = self.q(&["merge-base", "--is-ancestor", o, new])?;
                match q.code {
                    Some(0) => true,
                    Some(1) => false,
                    _ => {
                        return Err(Refusal::new(
                            Reason::Internal,
                            format!("merge-base failed: {}", q.stderr.trim()),
                        ));
                    }
                }
            }
        };
        let remotes = format!("--remotes={remote}");
        let mut args = vec![
            "log",
            "--no-renames",
            "--name-only",
            "--format=format:",
            "--cc",
            new,
            "--not",
        ];
        match old {
            Some(o) => args.push(o),
            None => args.push(&remotes),
        }
        let q = self.q(&args)?;
        if !q.ok {
            return Err(Refusal::new(
                Reason::Internal,
                format!("listing pushed paths failed: {}", q.stderr.trim()),
            ));
        }
        let touched = q
            .stdout
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(Facts {
            fast_forward,
            touched,
        })
    }

    /// Run git and stream its output as frames; returns the exit code sent.
    fn stream_git(
        &self,
        stream: &mut UnixStream,
        inv: &Invocation,
        cwd: &Path,
        config: &[String],
        args: &[String],
        read_only: bool,
    ) -> Result<i32, Refusal> {
        let code = self.run_streamed(stream, inv, cwd, config, args, read_only)?;
        let _ = write_json(stream, FrameKind::Exit, &Exit { code }, "exit");
        Ok(code)
    }

    /// Run git and stream its stdout and stderr as frames (no exit frame); its exit code.
    fn run_streamed(
        &self,
        stream: &mut UnixStream,
        inv: &Invocation,
        cwd: &Path,
        config: &[String],
        args: &[String],
        read_only: bool,
    ) -> Result<i32, Refusal> {
        let mut cmd = self.env.command(cwd, &inv.env, config, args);
        if let Some(w) = inv.term_width {
            cmd.env("COLUMNS", w.to_string());
        }
        if read_only {
            cmd.env("GIT_OPTIONAL_LOCKS", "0");
        }
        cmd.stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            Refusal::new(
                Reason::Internal,
                format!("starting {}: {e}", self.env.git.display()),
            )
        })?;
        let pid = child.id();
        let out = Mutex::new(
            stream
                .try_clone()
                .map_err(|e| Refusal::new(Reason::Internal, e.to_string()))?,
        );
        let gone = AtomicBool::new(false);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let status = std::thread::scope(|s| {
            if let (Some(mut w), Some(data)) = (stdin, inv.stdin.as_deref()) {
                s.spawn(move || {
                    let _ = w.write_all(data);
                });
            }
            let pump = |r: Option<Box<dyn Read + Send>>, kind: FrameKind| {
                let (out, gone) = (&out, &gone);
                move || {
                    let Some(mut r) = r else { return };
                    let mut buf = vec![0u8; CHUNK];
                    loop {
                        let n = match r.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if gone.load(Ordering::Relaxed) {
                            continue;
                        }
                        let ok = out
                            .lock()
                            .is_ok_and(|mut w| write_frame(&mut *w, kind, &buf[..n]).is_ok());
                        if !ok {
                            gone.store(true, Ordering::Relaxed);
                            if read_only {
                                // Nobody reads any more; a read-only git can stop. A writing
                                // git always finishes (a push the upstream took is never cut).
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid as i32),
                                    nix::sys::signal::Signal::SIGTERM,
                                );
                            }
                        }
                    }
                }
            };
            s.spawn(pump(
                stdout.map(|r| Box::new(r) as Box<dyn Read + Send>),
                FrameKind::Stdout,
            ));
            s.spawn(pump(
                stderr.map(|r| Box::new(r) as Box<dyn Read + Send>),
                FrameKind::Stderr,
            ));
            child.wait()
        });
        let status =
            status.map_err(|e| Refusal::new(Reason::Internal, format!("waiting for git: {e}")))?;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
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

/// The global options and the subcommand of a checked invocation.
fn global_and_sub(c: &Checked) -> Vec<String> {
    let end = (c.sub_index + 1).min(c.argv.len());
    c.argv[..end].to_vec()
}

/// The subcommand's options (with their values, in order; `--` dropped) and its operands.
fn split_operands(c: &Checked) -> (Vec<String>, Vec<String>) {
    let start = global_and_sub(c).len();
    let mut options = Vec::new();
    let mut operands = Vec::new();
    for (i, a) in c.argv.iter().enumerate().skip(start) {
        if c.operands.contains(&i) {
            operands.push(a.clone());
        } else if a != "--" && a != "--end-of-options" {
            options.push(a.clone());
        }
    }
    (options, operands)
}

/// Add `--no-ext-diff` / `--no-textconv` where git accepts them; `git remote show` never
/// queries the remote (`-n`): its listing would include other sandboxes' branches.
fn harden_args(c: &Checked, args: &mut Vec<String>) {
    // `git submodule` is a shell script, and a shell drops the split identity (design §5):
    // its status is the builtin helper's.
    if c.subcommand == "submodule" {
        if let Some(&p) = c.operands.first()
            && args.get(p).is_some_and(|a| a == "status")
        {
            args.remove(p);
        }
        args[c.sub_index] = "submodule--helper".to_owned();
        args.insert(c.sub_index + 1, "status".to_owned());
        return;
    }
    if c.subcommand == "remote"
        && let Some(&p) = c.operands.first()
        && args.get(p).is_some_and(|a| a == "show")
    {
        args.insert(p + 1, "-n".to_owned());
        return;
    }
    let extra: &[&str] = match c.subcommand.as_str() {
        "diff" | "log" | "show" | "diff-tree" | "diff-index" | "diff-files" => {
            &["--no-ext-diff", "--no-textconv"]
        }
        "grep" | "blame" => &["--no-textconv"],
        _ => &[],
    };
    if args.get(c.sub_index) == Some(&c.subcommand) {
        for (i, e) in extra.iter().enumerate() {
            args.insert(c.sub_index + 1 + i, (*e).to_owned());
        }
    }
}

/// `git apply --index` / `--3way` compare the work tree with the index by its stat data:
/// a file changed and changed back since the index was written looks changed ("does not
/// match index") unless the index is refreshed first.
fn needs_fresh_index(c: &Checked) -> bool {
    c.subcommand == "apply"
        && c.argv[c.sub_index + 1..]
            .iter()
            .take_while(|a| *a != "--")
            .any(|a| a == "--index" || a == "--3way" || a == "-3")
}

/// `git bisect <step> ...` as git-bisect.sh (git < 2.40) runs it, without the shell:
/// `bisect--helper state <verdict> ...` for bad, good, new and old (the policy admits no
/// custom terms), `bisect--helper <step> ...` for the rest.
fn bisect_helper(c: &Checked, args: &mut Vec<String>) {
    let Some(step) = args.get(c.sub_index + 1) else {
        return;
    };
    let verdict = ["bad", "good", "new", "old"].contains(&step.as_str());
    args[c.sub_index] = "bisect--helper".to_owned();
    if verdict {
        args.insert(c.sub_index + 1, "state".to_owned());
    }
}

/// The working directory: relative, no `..`, and inside the work tree after symlinks.
pub fn resolve_cwd(work_tree: &Path, rel: &str) -> Result<PathBuf, Refusal> {
    let outside = || {
        Refusal::new(
            Reason::OutsideWorkspace,
            format!("working directory {rel:?} is not inside the workspace"),
        )
    };
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(outside());
    }
    let joined = work_tree.join(p);
    let real = joined.canonicalize().map_err(|_| outside())?;
    if !real.starts_with(work_tree) || !real.is_dir() {
        return Err(outside());
    }
    Ok(real)
}

fn peer_uid(stream: &UnixStream) -> Option<u32> {
    nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

fn deny(stream: &mut UnixStream, r: &Refusal) {
    let _ = write_json(
        stream,
        FrameKind::Denied,
        &Denied::new(r.reason, r.message.clone()),
        "denied",
    );
}

/// The log record of one outcome: git's exit code or the refusal.
fn decision<'a>(
    uid: Option<u32>,
    argv: &'a [String],
    outcome: Result<i32, &'a Refusal>,
) -> Decision<'a> {
    Decision {
        uid,
        argv,
        decision: if outcome.is_ok() { "allow" } else { "deny" },
        reason: outcome.err().map(|r| r.reason.as_str()),
        message: outcome.err().map(|r| r.message.as_str()),
        exit: outcome.ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(s: &str) -> Checked {
        let argv: Vec<String> = s.split(' ').map(str::to_owned).collect();
        argv::check(&argv).unwrap()
    }

    #[test]
    fn fetch_options_keep_their_values_and_operands_are_found() {
        let c = checked("--no-pager fetch --depth 1 -v origin -- main");
        assert_eq!(global_and_sub(&c), ["--no-pager", "fetch"]);
        let (options, operands) = split_operands(&c);
        assert_eq!(options, ["--depth", "1", "-v"]);
        assert_eq!(operands, ["origin", "main"]);
        let c = checked("pull -X ours --rebase origin sandbox/nstest/x");
        let (options, operands) = split_operands(&c);
        assert_eq!(options, ["-X", "ours", "--rebase"]);
        assert_eq!(operands, ["origin", "sandbox/nstest/x"]);
        let c = checked("ls-remote --heads --sort=-refname origin sandbox/*");
        assert_eq!(c.class, Class::ListRemote);
        assert_eq!(split_operands(&c).1, ["origin", "sandbox/*"]);
    }

    #[test]
    fn bisect_steps_run_as_the_helper_of_a_scripted_bisect() {
        let run = |s: &str| {
            let c = checked(s);
            let mut args = c.argv.clone();
            bisect_helper(&c, &mut args);
            args.join(" ")
        };
        assert_eq!(
            run("bisect start HEAD v1.0"),
            "bisect--helper start HEAD v1.0"
        );
        assert_eq!(run("bisect bad"), "bisect--helper state bad");
        assert_eq!(run("bisect good v1.0"), "bisect--helper state good v1.0");
        assert_eq!(run("bisect reset"), "bisect--helper reset");
        assert_eq!(run("bisect log"), "bisect--helper log");
        assert_eq!(
            run("-c color.ui=never bisect skip"),
            "-c color.ui=never bisect--helper skip"
        );
    }

    #[test]
    fn apply_to_the_index_refreshes_it_first() {
        // The shim sends the patch on standard input: no file operand reaches the API.
        assert!(needs_fresh_index(&checked("apply --index")));
        assert!(needs_fresh_index(&checked("apply -3")));
        assert!(!needs_fresh_index(&checked("apply --cached")));
        assert!(!needs_fresh_index(&checked("apply --check")));
        assert!(!needs_fresh_index(&checked("status --short")));
    }

    #[test]
    fn remote_show_never_queries_the_remote() {
        for (s, want) in [
            ("remote show origin", "remote show -n origin"),
            ("remote -v show origin", "remote -v show -n origin"),
            ("remote -v", "remote -v"),
        ] {
            let c = checked(s);
            let mut args = c.argv.clone();
            harden_args(&c, &mut args);
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn submodule_status_runs_the_builtin_helper_not_the_shell_script() {
        for (s, want) in [
            ("submodule", "submodule--helper status"),
            ("submodule status", "submodule--helper status"),
            (
                "submodule --cached status",
                "submodule--helper status --cached",
            ),
            ("submodule status -- x", "submodule--helper status -- x"),
        ] {
            let c = checked(s);
            let mut args = c.argv.clone();
            harden_args(&c, &mut args);
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn cwd_must_stay_inside_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let wt = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(wt.join("src/a")).unwrap();
        std::os::unix::fs::symlink("/etc", wt.join("link")).unwrap();
        assert_eq!(resolve_cwd(&wt, "").unwrap(), wt);
        assert_eq!(resolve_cwd(&wt, "src/a").unwrap(), wt.join("src/a"));
        for bad in [
            "..",
            "src/../..",
            "/etc",
            "link",
            "missing",
            "src/a/../../..",
        ] {
            assert_eq!(
                resolve_cwd(&wt, bad).unwrap_err().reason,
                Reason::OutsideWorkspace,
                "{bad}"
            );
        }
    }
}
