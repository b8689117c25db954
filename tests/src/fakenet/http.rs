//! fakenet's HTTP/1.1 servers (plain and TLS): the endpoints listed in the module docs of
//! [`crate::fakenet`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::log::Log;

/// How much of a request body the echo keeps (the rest is counted, not kept).
const ECHO_BODY_CAP: usize = 64 * 1024;
/// Chunk size of `/bytes/<n>`.
const CHUNK: usize = 16 * 1024;

/// Accepts connections forever; each is served on its own task.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    log: Arc<Log>,
) -> anyhow::Result<()> {
    let server = listener.local_addr()?;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("fakenet: accept on {server} failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        log.write(
            json!({"kind": "conn", "server": server.to_string(), "from": peer.to_string(),
                         "tls": tls.is_some()}),
        );
        let conn = Conn {
            server,
            peer,
            tls: tls.is_some(),
            sni: None,
            log: log.clone(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => conn.serve(stream).await,
                Some(config) => conn.serve_tls(stream, config).await,
            }
        });
    }
}

/// One accepted connection.
#[derive(Debug, Clone)]
struct Conn {
    server: SocketAddr,
    peer: SocketAddr,
    tls: bool,
    sni: Option<String>,
    log: Arc<Log>,
}

impl Conn {
    async fn serve_tls(mut self, stream: tokio::net::TcpStream, config: Arc<ServerConfig>) {
        let acceptor =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
        let start = match acceptor.await {
            Ok(s) => s,
            Err(e) => return self.tls_error(&e),
        };
        self.sni = start.client_hello().server_name().map(str::to_owned);
        match start.into_stream(config).await {
            Ok(tls) => {
                let version = tls.get_ref().1.protocol_version().map(|v| format!("{v:?}"));
                self.log
                    .write(json!({"kind": "tls", "server": self.server.to_string(),
                    "from": self.peer.to_string(), "sni": self.sni, "version": version}));
                self.serve(tls).await;
            }
            Err(e) => self.tls_error(&e),
        }
    }

    fn tls_error(&self, e: &std::io::Error) {
        self.log.write(
            json!({"kind": "tls_error", "server": self.server.to_string(),
            "from": self.peer.to_string(), "sni": self.sni, "error": e.to_string()}),
        );
    }

    async fn serve<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let log = self.log.clone();
        let (server, peer) = (self.server, self.peer);
        let conn = Arc::new(self);
        let service = hyper::service::service_fn(move |req| {
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(conn.handle(req).await) }
        });
        let result = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades()
            .await;
        if let Err(e) = result {
            log.write(json!({"kind": "http_error", "server": server.to_string(),
                "from": peer.to_string(), "error": e.to_string()}));
        }
    }

    /// The request as JSON: what the echo answers and what the log records.
    fn describe(&self, req: &Request<Incoming>) -> Map<String, Value> {
        let mut headers = Map::new();
        let mut raw = Vec::new();
        for (name, value) in req.headers() {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            raw.push(json!([name.as_str(), v]));
            match headers.get_mut(name.as_str()) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(&v);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(v));
                }
            }
        }
        let host = req
            .headers()
            .get(hyper::header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .or_else(|| req.uri().authority().map(ToString::to_string));
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let mut m = Map::new();
        m.insert("kind".into(), json!("http"));
        m.insert("server".into(), json!(self.server.to_string()));
        m.insert("from".into(), json!(self.peer.to_string()));
        m.insert("tls".into(), json!(self.tls));
        m.insert("sni".into(), json!(self.sni));
        m.insert("method".into(), json!(req.method().as_str()));
        m.insert("path".into(), json!(path));
        m.insert("uri".into(), json!(req.uri().to_string()));
        m.insert("host".into(), json!(host));
        m.insert("version".into(), json!(format!("{:?}", req.version())));
        m.insert("headers".into(), Value::Object(headers));
        m.insert("raw_headers".into(), Value::Array(raw));
        m
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<FakeBody> {
        let mut info = self.describe(&req);
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let host = info.get("host").and_then(Value::as_str).map(str::to_owned);
        if let Some((route, git)) = super::git::route(host.as_deref(), &path, &query) {
            self.log.write(Value::Object(info));
            return self.git(req, &route, git).await;
        }
        if path == "/upload" {
            let from = info.get("from").cloned();
            self.log.write(Value::Object(info));
            let (resp, end) = upload(req.into_body()).await;
            // How the body ended, as this server saw it (a cut upload must not look whole).
            self.log.write(
                json!({"kind": "upload_end", "server": self.server.to_string(),
                "from": from, "len": end.0, "error": end.1}),
            );
            return resp;
        }
        if let Some(n) = path.strip_prefix("/bytes/") {
            self.log.write(Value::Object(info));
            return match n.parse::<u64>() {
                Ok(n) => bytes(n, query_param(&query, "chunked").is_some_and(|v| v == "1")),
                Err(_) => text(StatusCode::BAD_REQUEST, "bad byte count\n"),
            };
        }
        if path == "/sse" {
            self.log.write(Value::Object(info));
            let n = query_param(&query, "n")
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            let ms = query_param(&query, "ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(200);
            return sse(n, ms);
        }
        if path == "/reflect" {
            // Every request header back as a response header `x-reflect-<name>` (and the
            // echo as body): what a server that reflects credentials would do.
            let reflected: Vec<_> = req
                .headers()
                .iter()
                .filter_map(|(n, v)| {
                    let name = format!("x-reflect-{}", n.as_str());
                    hyper::header::HeaderName::from_bytes(name.as_bytes())
                        .ok()
                        .map(|n| (n, v.clone()))
                })
                .collect();
            let value = Value::Object(info);
            self.log.write(value.clone());
            let mut resp = json_response(StatusCode::OK, &value);
            for (n, v) in reflected {
                resp.headers_mut().append(n, v);
            }
            return resp;
        }
        if path == "/echo-auth-gz" {
            // The credential the request carried, echoed in a gzip'd body: an upstream that
            // reflects credentials and compresses its answers (`curl --compressed` undoes
            // it on the agent's side).
            let carried: Vec<String> = ["authorization", "x-api-key"]
                .iter()
                .filter_map(|h| req.headers().get(*h))
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect();
            self.log.write(Value::Object(info));
            let mut body = json!({ "you sent": carried, "pad": "echo ".repeat(60) }).to_string();
            body.push('\n');
            let mut resp = response(
                StatusCode::OK,
                "application/json",
                FakeBody::Full(Some(Bytes::from(gzip(body.as_bytes())))),
            );
            resp.headers_mut().insert(
                hyper::header::CONTENT_ENCODING,
                hyper::header::HeaderValue::from_static("gzip"),
            );
            return resp;
        }
        if path == "/redirect" {
            self.log.write(Value::Object(info));
            let to = query_param(&query, "to").unwrap_or_else(|| "/".to_owned());
            return redirect(&to);
        }
        if path == "/upgrade" && req.headers().contains_key(hyper::header::UPGRADE) {
            self.log.write(Value::Object(info));
            return upgrade(req);
        }
        if path == "/slow" {
            let ms = query_param(&query, "ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let status = path
            .strip_prefix("/status/")
            .and_then(|c| c.parse::<u16>().ok())
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::OK);
        // Echo: read the body first so the log line carries it.
        let (kept, len, err) = read_body(req.into_body()).await;
        info.insert("body".into(), json!(String::from_utf8_lossy(&kept)));
        info.insert("body_len".into(), json!(len));
        if let Some(e) = err {
            info.insert("body_error".into(), json!(e));
        }
        let value = Value::Object(info);
        self.log.write(value.clone());
        json_response(status, &value)
    }
}

impl Conn {
    /// A git smart-HTTP request, answered by `git http-backend` ([`super::git`]).
    async fn git(
        &self,
        req: Request<Incoming>,
        route: &super::git::Route,
        git: &'static super::git::GitHttp,
    ) -> Response<FakeBody> {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (method, query) = (
            req.method().as_str().to_owned(),
            req.uri().query().unwrap_or("").to_owned(),
        );
        let (content_type, content_encoding, git_protocol, authorization) = (
            header("content-type"),
            header("content-encoding"),
            header("git-protocol"),
            header("authorization"),
        );
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes().to_vec(),
            Err(e) => return text(StatusCode::BAD_REQUEST, &format!("body error: {e}\n")),
        };
        let route = route.clone();
        let remote_addr = self.peer.ip().to_string();
        let answer = tokio::task::spawn_blocking(move || {
            super::git::serve(
                git,
                &route,
                &super::git::Request {
                    method: &method,
                    query: &query,
                    content_type: content_type.as_deref(),
                    content_encoding: content_encoding.as_deref(),
                    git_protocol: git_protocol.as_deref(),
                    authorization: authorization.as_deref(),
                    remote_addr,
                    body,
                },
            )
        })
        .await;
        let Ok(answer) = answer else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "git task failed\n");
        };
        let mut resp = Response::new(FakeBody::Full(Some(Bytes::from(answer.body))));
        *resp.status_mut() =
            StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (k, v) in answer.headers {
            if let (Ok(k), Ok(v)) = (
                hyper::header::HeaderName::from_bytes(k.as_bytes()),
                hyper::header::HeaderValue::from_str(&v),
            ) {
                resp.headers_mut().append(k, v);
            }
        }
        resp
    }
}

async fn read_body(mut body: Incoming) -> (Vec<u8>, u64, Option<String>) {
    let mut kept = Vec::new();
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    len += data.len() as u64;
                    let room = ECHO_BODY_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Err(e) => return (kept, len, Some(e.to_string())),
        }
    }
    (kept, len, None)
}

/// The body's length and hash as the answer; also (bytes read, error) for the log.
async fn upload(mut body: Incoming) -> (Response<FakeBody>, (u64, Option<String>)) {
    let mut hasher = Sha256::new();
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    len += data.len() as u64;
                    hasher.update(data);
                }
            }
            Err(e) => {
                let resp = text(StatusCode::BAD_REQUEST, &format!("body error: {e}\n"));
                return (resp, (len, Some(e.to_string())));
            }
        }
    }
    let resp = json_response(
        StatusCode::OK,
        &json!({"len": len, "sha256": hex::encode(hasher.finalize())}),
    );
    (resp, (len, None))
}

fn bytes(n: u64, chunked: bool) -> Response<FakeBody> {
    // CHUNK is a multiple of 256, so every chunk continues the pattern where the last ended.
    let pattern = super::bytes_pattern(CHUNK);
    let body = FakeBody::Pattern {
        remaining: n,
        chunk: Bytes::from(pattern),
        chunked,
    };
    response(StatusCode::OK, "application/octet-stream", body)
}

fn sse(n: u32, ms: u64) -> Response<FakeBody> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        for i in 0..n {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let event = format!("id: {i}\ndata: {{\"i\":{i}}}\n\n");
            if tx.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
    });
    let mut resp = response(StatusCode::OK, "text/event-stream", FakeBody::Channel(rx));
    resp.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    resp
}

fn redirect(to: &str) -> Response<FakeBody> {
    let mut resp = text(StatusCode::FOUND, "redirect\n");
    match hyper::header::HeaderValue::from_str(to) {
        Ok(v) => {
            resp.headers_mut().insert(hyper::header::LOCATION, v);
            resp
        }
        Err(_) => text(StatusCode::BAD_REQUEST, "bad redirect target\n"),
    }
}

fn upgrade(mut req: Request<Incoming>) -> Response<FakeBody> {
    let protocol = req.headers().get(hyper::header::UPGRADE).cloned();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut io = TokioIo::new(upgraded);
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if io.write_all(&buf[..n]).await.is_err() || io.flush().await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut resp = Response::new(FakeBody::Full(None));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("upgrade"),
    );
    if let Some(p) = protocol {
        resp.headers_mut().insert(hyper::header::UPGRADE, p);
    }
    resp
}

/// Value of `key` in a query string (no percent-decoding except `%3A` and `%2F`, enough for
/// redirect targets).
fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| {
            v.replace("%3A", ":")
                .replace("%3a", ":")
                .replace("%2F", "/")
                .replace("%2f", "/")
        })
    })
}

fn response(status: StatusCode, content_type: &'static str, body: FakeBody) -> Response<FakeBody> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn json_response(status: StatusCode, value: &Value) -> Response<FakeBody> {
    let mut body = value.to_string();
    body.push('\n');
    response(
        status,
        "application/json",
        FakeBody::Full(Some(Bytes::from(body))),
    )
}

fn text(status: StatusCode, body: &str) -> Response<FakeBody> {
    response(
        status,
        "text/plain",
        FakeBody::Full(Some(Bytes::from(body.to_owned()))),
    )
}

/// Response bodies: a full buffer, a generated byte pattern, or frames from a channel.
#[derive(Debug)]
enum FakeBody {
    Full(Option<Bytes>),
    Pattern {
        remaining: u64,
        chunk: Bytes,
        chunked: bool,
    },
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            FakeBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            FakeBody::Pattern {
                remaining, chunk, ..
            } => {
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                let n = usize::try_from(*remaining).map_or(chunk.len(), |r| r.min(chunk.len()));
                *remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(chunk.slice(..n)))))
            }
            FakeBody::Channel(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            FakeBody::Full(b) => b.is_none(),
            FakeBody::Pattern { remaining, .. } => *remaining == 0,
            FakeBody::Channel(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FakeBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            FakeBody::Pattern {
                remaining,
                chunked: false,
                ..
            } => SizeHint::with_exact(*remaining),
            FakeBody::Pattern { .. } | FakeBody::Channel(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params() {
        assert_eq!(query_param("n=3&ms=10", "ms").as_deref(), Some("10"));
        assert_eq!(
            query_param("to=https%3A%2F%2Fblocked.test%2F", "to").as_deref(),
            Some("https://blocked.test/")
        );
        assert_eq!(query_param("chunked", "chunked").as_deref(), Some(""));
        assert_eq!(query_param("", "n"), None);
    }
}
