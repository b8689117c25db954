//! The client of a sandbox's admin API: HTTP/1.1 with JSON bodies (the protocol of
//! [`airlock_control::admin`]) on the Unix socket [`SOCKET`] that the proxy serves in the
//! sandbox's control directory. On the host that directory is the checkout's `control/`
//! ([`crate::checkout::Checkout::control`]), so the CLI connects to the socket directly, no
//! engine in between. The socket is 0600, its control directory's owner's.
//!
//! A sandbox on Kubernetes is reached through a relay instead ([`Client::relay`]): a command
//! (`kubectl exec -i POD … airlock-entrypoint __admin`, [`crate::kube`]) whose standard input
//! and output are a connection to the same socket inside the pod.
//!
//! One connection per request (hyper's HTTP/1.1 client over [`tokio::net::UnixStream`], or
//! over one run of the relay).
//! [`Client::call`] sends a [`Request`] and reads the [`Response`] (a non-2xx answer is the
//! [`ErrorBody`] it carries); [`Client::events`] opens the event stream and yields its NDJSON
//! lines as [`StreamLine`]s one at a time. Every failure is one line saying what to do:
//! no socket (the sandbox does not run, or started before the admin API existed), a socket
//! the user may not open, a peer of another protocol version.

use airlock_control::admin::{
    AnswerRequest, Approval, ApprovalQuery, CheckQuery, Checked, Counters, ErrorBody, ErrorCode,
    EventsQuery, PolicyRevision, ReloadRequest, Reloaded, Request, Response, RevokeRequest, SOCKET,
    Sessions, StreamLine,
};
use airlock_control::status::Status;
use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// The largest answer read (a status, the counters, the metrics): anything larger is not
/// one.
const ANSWER_LIMIT: usize = 16 << 20;
/// The longest line of the event stream (one audit record).
const LINE_LIMIT: usize = 4 << 20;
/// How long a request may take before the proxy is said not to answer. A reload answers
/// after its swap, and judging the open connections: it gets [`RELOAD_TIMEOUT`].
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a reload may take.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the admin API could not be used.
#[derive(Debug, Error)]
pub enum AdminError {
    /// No socket, or nobody listening on it.
    #[error(
        "the sandbox {name} is not running, or started before the admin API: restart it ({} {})",
        if *.missing { "no socket at" } else { "nothing answers on" },
        .socket.display()
    )]
    NotRunning {
        /// The sandbox.
        name: String,
        /// The socket.
        socket: PathBuf,
        /// Whether the socket file is missing (else it is there and refuses connections).
        missing: bool,
    },
    /// The socket may not be opened by this user.
    #[error(
        "cannot connect to {}: permission denied (the admin socket is {owner}'s, 0600): run airlock as that user, or with sudo",
        .socket.display()
    )]
    PermissionDenied {
        /// The socket.
        socket: PathBuf,
        /// Who owns it (`uid N`).
        owner: String,
    },
    /// The proxy speaks another version of the protocol.
    #[error(
        "the sandbox {name} speaks another version of the admin API ({message}): use the airlock CLI that matches its image, or recreate the sandbox with this CLI's image"
    )]
    UnknownVersion {
        /// The sandbox.
        name: String,
        /// The server's line.
        message: String,
    },
    /// The server refused or failed the request: its code and its line.
    #[error("{}", .0.message)]
    Refused(ErrorBody),
    /// Connecting, sending or reading failed.
    #[error("the admin API of {name} ({via}) failed: {detail}")]
    Transport {
        /// The sandbox.
        name: String,
        /// The socket, or the relay's command line.
        via: String,
        /// What failed.
        detail: String,
    },
    /// The answer is not what the protocol says.
    #[error("the admin API of {name} answered what this CLI cannot read: {detail}")]
    Protocol {
        /// The sandbox.
        name: String,
        /// What was wrong.
        detail: String,
    },
}

impl AdminError {
    /// The server's error code, when the server answered with one.
    #[must_use]
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AdminError::Refused(b) => Some(b.code),
            AdminError::UnknownVersion { .. } => Some(ErrorCode::UnknownVersion),
            _ => None,
        }
    }

    /// Whether the sandbox simply has no admin API to talk to (not running, or an older
    /// image): the callers fall back to what they did before it.
    #[must_use]
    pub fn is_not_running(&self) -> bool {
        matches!(self, AdminError::NotRunning { .. })
    }
}

/// How the admin socket is reached.
#[derive(Debug, Clone)]
enum Reach {
    /// The socket itself, on this host.
    Socket(PathBuf),
    /// A command whose standard input and output are a connection to it.
    Relay(Vec<String>),
}

/// A client of one sandbox's admin socket.
#[derive(Debug, Clone)]
pub struct Client {
    name: String,
    reach: Reach,
}

impl Client {
    /// The client of sandbox `name`, whose host control directory is `control`.
    #[must_use]
    pub fn new(name: &str, control: &Path) -> Client {
        Client::at(name, &control.join(SOCKET))
    }

    /// The client of the socket at `socket` (tests).
    #[must_use]
    pub fn at(name: &str, socket: &Path) -> Client {
        Client {
            name: name.to_owned(),
            reach: Reach::Socket(socket.to_path_buf()),
        }
    }

    /// The client of sandbox `name` through the relay command `argv` (its program first),
    /// run once per connection: `kubectl exec -i … airlock-entrypoint __admin`.
    #[must_use]
    pub fn relay(name: &str, argv: Vec<String>) -> Client {
        Client {
            name: name.to_owned(),
            reach: Reach::Relay(argv),
        }
    }

    /// The socket, when it is reached directly.
    #[must_use]
    pub fn socket(&self) -> Option<&Path> {
        match &self.reach {
            Reach::Socket(p) => Some(p),
            Reach::Relay(_) => None,
        }
    }

    /// The sandbox.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the API is reached, for a message: the socket, or the relay's command line.
    fn via(&self) -> String {
        match &self.reach {
            Reach::Socket(p) => p.display().to_string(),
            Reach::Relay(argv) => argv.join(" "),
        }
    }

    fn transport(&self, detail: impl std::fmt::Display) -> AdminError {
        AdminError::Transport {
            name: self.name.clone(),
            via: self.via(),
            detail: detail.to_string(),
        }
    }

    fn protocol(&self, detail: impl Into<String>) -> AdminError {
        AdminError::Protocol {
            name: self.name.clone(),
            detail: detail.into(),
        }
    }

    fn connect_error(&self, socket: &Path, e: &io::Error) -> AdminError {
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => AdminError::NotRunning {
                name: self.name.clone(),
                socket: socket.to_path_buf(),
                missing: e.kind() == io::ErrorKind::NotFound,
            },
            io::ErrorKind::PermissionDenied => AdminError::PermissionDenied {
                socket: socket.to_path_buf(),
                owner: std::fs::metadata(socket)
                    .map_or_else(|_| "its owner".to_owned(), |m| format!("uid {}", m.uid())),
            },
            _ => self.transport(format!("cannot connect: {e}")),
        }
    }

    /// One connection: the socket, or a run of the relay (with what it says on stderr).
    async fn connect(&self) -> Result<(Box<dyn relay::Conn>, Option<relay::Said>), AdminError> {
        match &self.reach {
            Reach::Socket(socket) => {
                let stream = tokio::net::UnixStream::connect(socket)
                    .await
                    .map_err(|e| self.connect_error(socket, &e))?;
                Ok((Box::new(stream), None))
            }
            Reach::Relay(argv) => {
                let (io, said) = relay::spawn(argv).map_err(|e| self.transport(e))?;
                Ok((Box::new(io), Some(said)))
            }
        }
    }

    /// A transport failure, with the relay's last words when there is a relay: kubectl's
    /// "pods not found", or the in-pod relay's own line.
    async fn failed(&self, said: Option<&relay::Said>, e: impl std::fmt::Display) -> AdminError {
        match said {
            Some(said) => match said.last_line().await {
                Some(line) => self.transport(format!("{e}; the relay said: {line}")),
                None => self.transport(e),
            },
            None => self.transport(e),
        }
    }

    /// Send `request`; the response head (status checked: a non-2xx answer is its error).
    async fn send(&self, request: &Request) -> Result<hyper::Response<Incoming>, AdminError> {
        let http = request
            .to_http()
            .ok_or_else(|| self.protocol("an operation with no route"))?;
        let (stream, said) = self.connect().await?;
        let (mut sender, conn) =
            match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
                Ok(c) => c,
                Err(e) => return Err(self.failed(said.as_ref(), e).await),
            };
        // The connection is driven beside the request; it ends with the response's body.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut builder = hyper::Request::builder()
            .method(http.method.as_str())
            .uri(&http.target)
            .header(HOST, "airlock-admin");
        if http.body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::from(http.body.unwrap_or_default())))
            .map_err(|e| self.transport(e))?;
        let resp = match sender.send_request(req).await {
            Ok(r) => r,
            Err(e) => return Err(self.failed(said.as_ref(), e).await),
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let body = self.read_body(resp.into_body()).await?;
        Err(self.error_of(status.as_u16(), &body))
    }

    /// The error of a non-2xx answer: its [`ErrorBody`] (bare, or as [`Response::Error`]),
    /// else what can be said of it.
    fn error_of(&self, status: u16, body: &[u8]) -> AdminError {
        let parsed =
            serde_json::from_slice::<ErrorBody>(body).ok().or_else(
                || match serde_json::from_slice::<Response>(body) {
                    Ok(Response::Error(b)) => Some(b),
                    _ => None,
                },
            );
        match parsed {
            Some(b) if b.code == ErrorCode::UnknownVersion => AdminError::UnknownVersion {
                name: self.name.clone(),
                message: b.message,
            },
            Some(b) => AdminError::Refused(b),
            // A 404 with no error of this protocol: a server that knows no /v1 at all.
            None if status == 404 => AdminError::UnknownVersion {
                name: self.name.clone(),
                message: format!("HTTP 404 on {}, with no error of version 1", self.via()),
            },
            None => self.protocol(format!(
                "HTTP {status} with a body that is not an error: {}",
                head(body)
            )),
        }
    }

    async fn read_body(&self, body: Incoming) -> Result<Bytes, AdminError> {
        let limited = http_body_util::Limited::new(body, ANSWER_LIMIT);
        limited
            .collect()
            .await
            .map(http_body_util::Collected::to_bytes)
            .map_err(|e| self.transport(format!("reading the answer: {e}")))
    }

    /// Send `request` and read its answer.
    ///
    /// # Errors
    /// [`AdminError`]: the socket cannot be used, the server refused (its [`ErrorBody`]), or
    /// the answer does not read as a [`Response`].
    pub async fn call(&self, request: &Request) -> Result<Response, AdminError> {
        let limit = match request {
            Request::Reload(_) => RELOAD_TIMEOUT,
            _ => TIMEOUT,
        };
        let exchange = async {
            let resp = self.send(request).await?;
            let body = self.read_body(resp.into_body()).await?;
            serde_json::from_slice::<Response>(&body)
                .map_err(|e| self.protocol(format!("{e}: {}", head(&body))))
        };
        let answer = tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| self.transport(format!("no answer in {} s", limit.as_secs())))??;
        match answer {
            Response::Error(b) if b.code == ErrorCode::UnknownVersion => {
                Err(AdminError::UnknownVersion {
                    name: self.name.clone(),
                    message: b.message,
                })
            }
            Response::Error(b) => Err(AdminError::Refused(b)),
            other => Ok(other),
        }
    }

    fn unexpected(&self, what: &str, got: &Response) -> AdminError {
        self.protocol(format!("asked for {what}, got {got:?}"))
    }

    /// The start's readiness (`GET /v1/status`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn status(&self) -> Result<Status, AdminError> {
        match self.call(&Request::Status).await? {
            Response::Status(s) => Ok(s),
            other => Err(self.unexpected("the status", &other)),
        }
    }

    /// The sessions (`GET /v1/sessions`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn sessions(&self) -> Result<Sessions, AdminError> {
        match self.call(&Request::Sessions).await? {
            Response::Sessions(s) => Ok(s),
            other => Err(self.unexpected("the sessions", &other)),
        }
    }

    /// The policy revision in force (`GET /v1/policy`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn policy(&self) -> Result<PolicyRevision, AdminError> {
        match self.call(&Request::Policy).await? {
            Response::Policy(p) => Ok(p),
            other => Err(self.unexpected("the policy revision", &other)),
        }
    }

    /// The counters (`GET /v1/counters`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn counters(&self) -> Result<Counters, AdminError> {
        match self.call(&Request::Counters).await? {
            Response::Counters(c) => Ok(c),
            other => Err(self.unexpected("the counters", &other)),
        }
    }

    /// Load a new policy revision (`POST /v1/policy/reload`); answered after the swap.
    ///
    /// # Errors
    /// As [`Client::call`]; a policy that does not load is [`ErrorCode::InvalidPolicy`], a
    /// change only a restart applies [`ErrorCode::RestartNeeded`] (both [`AdminError::Refused`]).
    pub async fn reload(&self, request: ReloadRequest) -> Result<Reloaded, AdminError> {
        match self.call(&Request::Reload(request)).await? {
            Response::Reloaded(r) => Ok(r),
            other => Err(self.unexpected("a reload's outcome", &other)),
        }
    }

    /// What the revision in force decides for a URL, nothing sent (`GET /v1/policy/check`).
    ///
    /// # Errors
    /// As [`Client::call`] (a URL the proxy cannot read is [`ErrorCode::BadRequest`]).
    pub async fn check(&self, query: CheckQuery) -> Result<Checked, AdminError> {
        match self.call(&Request::Check(query)).await? {
            Response::Checked(c) => Ok(c),
            other => Err(self.unexpected("a policy check", &other)),
        }
    }

    /// The operator's inbox, pending items first (`GET /v1/approvals`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn approvals(&self) -> Result<Vec<Approval>, AdminError> {
        match self.call(&Request::Approvals).await? {
            Response::Approvals(a) => Ok(a.items),
            other => Err(self.unexpected("the approvals", &other)),
        }
    }

    /// One item with its review token (`GET /v1/approval?id=`).
    ///
    /// # Errors
    /// As [`Client::call`] (an unknown id is [`ErrorCode::NotFound`]).
    pub async fn approval(&self, id: &str) -> Result<Approval, AdminError> {
        let q = ApprovalQuery { id: id.to_owned() };
        match self.call(&Request::Approval(q)).await? {
            Response::Approval(a) => Ok(a),
            other => Err(self.unexpected("an approval", &other)),
        }
    }

    /// The operator's answer to one item (`POST /v1/approval/answer`); the item as it left
    /// it.
    ///
    /// # Errors
    /// As [`Client::call`] (answered already or a stale token: [`ErrorCode::Conflict`]).
    pub async fn answer(&self, answer: AnswerRequest) -> Result<Approval, AdminError> {
        match self.call(&Request::Answer(answer)).await? {
            Response::Approval(a) => Ok(a),
            other => Err(self.unexpected("an answer", &other)),
        }
    }

    /// Takes back the grant `id` (`POST /v1/grants/revoke`); the revision without it.
    ///
    /// # Errors
    /// As [`Client::call`] (no such grant: [`ErrorCode::NotFound`]).
    pub async fn revoke(&self, id: &str) -> Result<Reloaded, AdminError> {
        let r = RevokeRequest { id: id.to_owned() };
        match self.call(&Request::Revoke(r)).await? {
            Response::Reloaded(r) => Ok(r),
            other => Err(self.unexpected("a revocation's outcome", &other)),
        }
    }

    /// The Prometheus metrics, as text (`GET /metrics`).
    ///
    /// # Errors
    /// As [`Client::call`].
    pub async fn metrics(&self) -> Result<String, AdminError> {
        let exchange = async {
            let resp = self.send(&Request::Metrics).await?;
            let body = self.read_body(resp.into_body()).await?;
            String::from_utf8(body.to_vec())
                .map_err(|_| self.protocol("metrics that are not UTF-8"))
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| self.transport(format!("no answer in {} s", TIMEOUT.as_secs())))?
    }

    /// Open the event stream with `query` (`GET /v1/events`); read it with
    /// [`EventStream::next`].
    ///
    /// # Errors
    /// As [`Client::call`] (a filter the server does not know is [`ErrorCode::BadRequest`]).
    pub async fn events(&self, query: EventsQuery) -> Result<EventStream, AdminError> {
        let resp = tokio::time::timeout(TIMEOUT, self.send(&Request::Events(query)))
            .await
            .map_err(|_| self.transport(format!("no answer in {} s", TIMEOUT.as_secs())))??;
        Ok(EventStream {
            client: self.clone(),
            body: resp.into_body(),
            buf: Vec::new(),
            done: false,
        })
    }
}

/// The first bytes of a body, for a message.
fn head(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    text.trim().to_owned()
}

/// A record line's `record` as its text.
#[derive(serde::Deserialize)]
struct RawRecord<'a> {
    #[serde(borrow)]
    record: &'a serde_json::value::RawValue,
}

/// An open event stream: NDJSON, one [`StreamLine`] per line.
#[derive(Debug)]
pub struct EventStream {
    client: Client,
    body: Incoming,
    /// Bytes read past the last whole line.
    buf: Vec<u8>,
    done: bool,
}

impl EventStream {
    /// The next line; `None` when the server ended the stream (a stream that is not
    /// followed ends after the last record it holds; a followed one when the proxy stops,
    /// or after a [`airlock_control::admin::NoteCode::Dropped`] note).
    ///
    /// # Errors
    /// The connection failed, a line is longer than any record, or a line does not read as
    /// a [`StreamLine`] (a line of a kind this CLI does not know reads as
    /// [`StreamLine::Unknown`], not as an error).
    pub async fn next(&mut self) -> Result<Option<StreamLine>, AdminError> {
        Ok(self.next_with_text().await?.map(|(line, _)| line))
    }

    /// As [`EventStream::next`], with a record's JSON text exactly as the server sent it
    /// (the log's line as written: its keys in their order, for `--json` and the hash
    /// chain); `None` for a line that is not a record.
    ///
    /// # Errors
    /// As [`EventStream::next`].
    pub async fn next_with_text(
        &mut self,
    ) -> Result<Option<(StreamLine, Option<String>)>, AdminError> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let line = &line[..i];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let parsed = serde_json::from_slice::<StreamLine>(line).map_err(|e| {
                    self.client.protocol(format!(
                        "an event line that does not read ({e}): {}",
                        head(line)
                    ))
                })?;
                let text = match parsed {
                    StreamLine::Record(_) => serde_json::from_slice::<RawRecord<'_>>(line)
                        .ok()
                        .map(|r| r.record.get().to_owned()),
                    _ => None,
                };
                return Ok(Some((parsed, text)));
            }
            if self.done {
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                return Err(self.client.protocol(format!(
                    "the stream ended inside a line: {}",
                    head(&self.buf)
                )));
            }
            if self.buf.len() > LINE_LIMIT {
                return Err(self.client.protocol(format!(
                    "an event line longer than {} MiB",
                    LINE_LIMIT >> 20
                )));
            }
            match self.body.frame().await {
                None => self.done = true,
                Some(Err(e)) => {
                    return Err(self.client.transport(format!("the stream broke: {e}")));
                }
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
            }
        }
    }
}

pub mod live;
mod relay;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testserver;
