//! The start's readiness record in the control directory ([`airlock_control::status`]):
//! `starting` as soon as PID 1 runs, `ready` with each step's time just before the agent
//! starts, `refused` with the line when the start fails; and [`probe`], what
//! `airlock-entrypoint --ready` answers (a Kubernetes readiness probe).
//!
//! The control directory is `<run dir>/operator/control`
//! ([`airlock_control::paths::control_dir`]): the host's directory when the CLI mounts one
//! there, else one PID 1 makes on the `/run` tmpfs. Its parent is made root's 0700 here,
//! before anything runs as the agent, so the agent can neither list it nor reach what is in
//! it, whoever owns the control directory itself (a host directory's owner may well be the
//! agent's uid).
//!
//! The record is written while PID 1 still holds `CAP_DAC_OVERRIDE` (the ready record just
//! before PID 1 gives it up): a control directory mounted from the host is the host user's,
//! not root's.

use airlock_control::paths;
use airlock_control::status::{self, State, Status, Steps};
use anyhow::{Context, Result};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// This start's record and where it goes.
#[derive(Debug)]
pub struct Record {
    run_dir: PathBuf,
    status: Status,
    /// A second copy, where the proxy reads it for the admin API's status (its state
    /// directory: the proxy cannot enter the control directory's root-only parent).
    mirror: Option<PathBuf>,
}

/// Unix milliseconds now.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Record {
    /// The record of a start that begins now, in the control directory of `run_dir`: the
    /// directory is prepared, an earlier start's record removed and `starting` written. Best
    /// effort: a directory that cannot be prepared yet (the checks that follow say why the
    /// container is wrong) fails the start at [`Record::ready`], which tries again.
    pub fn begin(run_dir: &Path) -> Record {
        let record = Record {
            run_dir: run_dir.to_path_buf(),
            status: Status::starting(env!("CARGO_PKG_VERSION"), now_ms()),
            mirror: None,
        };
        let _ = record.write();
        record
    }

    /// Also keep a copy in `dir` from now on (written now; best effort, as the copy only
    /// feeds the admin API's status, which says when it has none).
    pub fn mirror(&mut self, dir: &Path) {
        self.mirror = Some(dir.to_path_buf());
        let _ = status::write(dir, &self.status);
    }

    /// The control directory.
    pub fn dir(&self) -> PathBuf {
        paths::control_dir(&self.run_dir)
    }

    /// What the checks found out: this start's session and sandbox name.
    pub fn known(&mut self, session: &str, sandbox: &str) {
        self.status.session = Some(session.to_owned());
        self.status.sandbox = Some(sandbox.to_owned());
    }

    /// The start is ready after `steps`: written, or the start fails (the host waits for it).
    pub fn ready(&mut self, steps: Steps) -> Result<()> {
        self.status = self.status.clone().ready(now_ms(), steps);
        self.write()
    }

    /// The start was refused for `reason`: written if it can be (best effort; the line is
    /// on stderr anyway). A start that was ready stays ready: what fails after it is the
    /// agent's run, not the start.
    pub fn refused(&mut self, reason: &str) {
        if self.status.state == State::Ready {
            return;
        }
        self.status = self.status.clone().refused(reason);
        let _ = self.write();
    }

    /// Prepare the directory and write the record whole.
    fn write(&self) -> Result<()> {
        if let Some(m) = &self.mirror {
            let _ = status::write(m, &self.status);
        }
        let dir = prepare(&self.run_dir)?;
        status::write(&dir, &self.status)
            .with_context(|| "fix: give the container a writable control directory (docs/docker.md, \"Readiness\")".to_owned())
    }
}

/// The root-only parent (0700) and the control directory in it; returns the latter. A
/// directory PID 1 makes is root's 0700; one already there (the host's mount) keeps its
/// owner and mode.
fn prepare(run_dir: &Path) -> Result<PathBuf> {
    let gate = paths::operator_dir(run_dir);
    std::fs::create_dir_all(&gate).with_context(|| {
        format!(
            "cannot create the control directory's parent {}",
            gate.display()
        )
    })?;
    let meta = std::fs::symlink_metadata(&gate)
        .with_context(|| format!("cannot read {}", gate.display()))?;
    anyhow::ensure!(
        meta.is_dir(),
        "{} is not a directory: the control directory's parent must be one",
        gate.display()
    );
    std::os::unix::fs::lchown(&gate, Some(0), Some(0))
        .with_context(|| format!("cannot give {} to root", gate.display()))?;
    std::fs::set_permissions(&gate, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot set the mode of {}", gate.display()))?;
    let dir = paths::control_dir(run_dir);
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot set the mode of {}", dir.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot create the control directory {}", dir.display()));
        }
    }
    Ok(dir)
}

/// The line a refused start's record carries for `err`: the problems' lines, or the error
/// with its causes.
pub fn reason(err: &anyhow::Error) -> String {
    match err.downcast_ref::<crate::problems::Refused>() {
        Some(crate::problems::Refused(lines)) => lines.join("; "),
        None => format!("{err:#}"),
    }
}

/// `--ready`: the start's state from its record in the control directory of `run_dir`, then,
/// once the record says ready, from the proxy's admin API (`GET /v1/status` on the socket
/// there): ready only while the proxy answers, and says so. One line and an exit status: 0
/// ready, 1 not yet (no readable record, or a proxy that does not answer), 78 refused.
pub fn probe(run_dir: &Path) -> (i32, String) {
    let dir = paths::control_dir(run_dir);
    match status::read(&dir) {
        Ok(Some(s)) => match s.state {
            State::Ready => match live_status(&dir.join(airlock_control::admin::SOCKET)) {
                Ok(live) if live.state == State::Ready => (
                    0,
                    format!("ready (session {})", live.session.unwrap_or_default()),
                ),
                Ok(live) => (1, format!("the proxy says {:?}", live.state)),
                Err(e) => (1, format!("the proxy's admin API does not answer: {e}")),
            },
            State::Refused => (
                i32::from(airlock_control::exit::REFUSED),
                format!("refused: {}", s.reason.unwrap_or_default()),
            ),
            State::Starting | State::Unknown => (1, "starting".to_owned()),
        },
        Ok(None) => (1, format!("no readiness record in {} yet", dir.display())),
        Err(e) => (1, e.to_string()),
    }
}

/// How long the probe waits for the proxy's answer.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// The largest status answer read.
const ANSWER_LIMIT: u64 = 1 << 20;

/// The proxy's `GET /v1/status` on the admin socket (one request, `Connection: close`; the
/// answer's head read with `httparse`, its body by its length).
fn live_status(socket: &Path) -> Result<Status, String> {
    use airlock_control::admin::{Request, Response};
    use std::io::{Read as _, Write as _};
    let http = Request::Status.to_http().ok_or("the status has no route")?;
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    let timeouts = stream
        .set_read_timeout(Some(ASK_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(ASK_TIMEOUT)));
    timeouts.map_err(|e| e.to_string())?;
    let request = format!(
        "{} {} HTTP/1.1\r\nHost: airlock-probe\r\nConnection: close\r\n\r\n",
        http.method.as_str(),
        http.target
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("sending: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(ANSWER_LIMIT)
        .read_to_end(&mut answer)
        .map_err(|e| format!("reading: {e}"))?;
    let crate::http_answer::Answer { status, body } =
        crate::http_answer::parse(&answer).map_err(|e| match e {
            crate::http_answer::Unread::Incomplete => "an incomplete answer".to_owned(),
            crate::http_answer::Unread::NotHttp(e) => format!("an answer that is not HTTP: {e}"),
            crate::http_answer::Unread::NoLength => "an answer without a length".to_owned(),
        })?;
    if status != 200 {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(body).trim()
        ));
    }
    match serde_json::from_slice::<Response>(body) {
        Ok(Response::Status(s)) => Ok(s),
        Ok(other) => Err(format!("asked for the status, got {other:?}")),
        Err(e) => Err(format!("an answer that does not read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    /// What a probe runs is this flag of this binary.
    #[test]
    fn the_probe_command_is_the_ready_flag() {
        use clap::Parser as _;
        let cli = crate::config::Cli::try_parse_from(airlock_control::status::PROBE).unwrap();
        assert!(cli.ready && !cli.check && cli.command.is_empty());
    }

    /// A stand-in for the proxy's admin socket in `dir`: each connection gets the record's
    /// status as the proxy serves it (the real proxy's answer is the Docker tier's:
    /// tests/smoke/claim.sh), or `raw` when given.
    fn serve_status(dir: &Path, raw: Option<&'static str>) {
        use std::io::{Read as _, Write as _};
        let listener =
            std::os::unix::net::UnixListener::bind(dir.join(airlock_control::admin::SOCKET))
                .unwrap();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let mut conn = conn.unwrap();
                // The head, however the client's writes cut it.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap() == 1 {
                    head.push(byte[0]);
                }
                assert!(head.starts_with(b"GET /v1/status HTTP/1.1\r\n"));
                let body = match raw {
                    Some(r) => r.to_owned(),
                    None => serde_json::to_string(&airlock_control::admin::Response::Status(
                        status::read(&dir).unwrap().unwrap(),
                    ))
                    .unwrap(),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
    }

    #[test]
    fn ready_is_the_record_and_a_proxy_that_answers_so() {
        let run = tempfile::tempdir().unwrap();
        let mut r = Record::begin(run.path());
        r.known("s1", "demo");
        r.ready(Steps::default()).unwrap();
        let (code, line) = probe(run.path());
        assert_eq!(code, 1);
        assert!(
            line.starts_with("the proxy's admin API does not answer: "),
            "{line}"
        );
        serve_status(&r.dir(), Some("{\"kind\":\"counters\"}"));
        let (code, line) = probe(run.path());
        assert_eq!(code, 1);
        assert!(
            line.contains("does not read") || line.contains("got"),
            "{line}"
        );
        std::fs::remove_file(r.dir().join(airlock_control::admin::SOCKET)).unwrap();
        serve_status(&r.dir(), None);
        assert_eq!(probe(run.path()), (0, "ready (session s1)".to_owned()));
    }

    #[test]
    fn a_start_is_starting_then_ready_and_a_later_failure_does_not_unready_it() {
        let run = tempfile::tempdir().unwrap();
        let mut r = Record::begin(run.path());
        assert_eq!(probe(run.path()).0, 1);
        let gate = std::fs::metadata(paths::operator_dir(run.path())).unwrap();
        assert_eq!(
            (gate.uid(), gate.mode() & 0o777),
            (0, 0o700),
            "root's, 0700"
        );
        r.known("s1", "demo");
        r.ready(Steps {
            total_ms: 5,
            ..Steps::default()
        })
        .unwrap();
        serve_status(&r.dir(), None);
        assert_eq!(probe(run.path()), (0, "ready (session s1)".to_owned()));
        r.refused("the agent's command failed");
        assert_eq!(probe(run.path()).0, 0);
        let s = status::read(&r.dir()).unwrap().unwrap();
        assert_eq!(s.sandbox.as_deref(), Some("demo"));
        assert_eq!(s.steps.map(|s| s.total_ms), Some(5));
    }

    #[test]
    fn a_refused_start_says_why_and_a_new_start_forgets_the_old_record() {
        let run = tempfile::tempdir().unwrap();
        let mut r = Record::begin(run.path());
        r.refused("--read-only (the root filesystem is writable)");
        assert_eq!(
            probe(run.path()),
            (
                78,
                "refused: --read-only (the root filesystem is writable)".to_owned()
            )
        );
        Record::begin(run.path());
        assert_eq!(probe(run.path()), (1, "starting".to_owned()));
    }

    /// The host's directory is mounted there already: it keeps its owner and mode (the
    /// host user's), and only its root-only parent is PID 1's to set.
    #[test]
    fn a_mounted_control_directory_keeps_its_owner_and_mode() {
        let run = tempfile::tempdir().unwrap();
        let dir = paths::control_dir(run.path());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::lchown(&dir, Some(1000), Some(1000)).unwrap();
        let mut r = Record::begin(run.path());
        r.ready(Steps::default()).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (1000, 0o750));
        serve_status(&dir, None);
        assert_eq!(probe(run.path()).0, 0);
    }

    #[test]
    fn a_link_in_place_of_the_parent_is_refused() {
        let run = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), paths::operator_dir(run.path())).unwrap();
        let mut r = Record::begin(run.path());
        let e = r.ready(Steps::default()).unwrap_err();
        assert!(format!("{e:#}").contains("is not a directory"), "{e:#}");
        assert!(
            std::fs::read_dir(elsewhere.path())
                .unwrap()
                .next()
                .is_none()
        );
    }
}
