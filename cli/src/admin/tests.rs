//! The client against an in-process hyper server on a Unix socket in a temporary directory:
//! the framing, the errors and the stream (the real proxy's answers are the Docker tier's).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::testserver::{Answer, Handler, json, rt, serve};
use super::*;
use airlock_control::admin::{
    AuditState, Cursor, Event, Log, Note, NoteCode, Session, SessionKind,
};
use airlock_control::status::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

fn counters() -> Counters {
    Counters {
        requests: 10,
        allowed: 7,
        denied: 3,
        denied_by_reason: BTreeMap::from([("blocked_by_policy".to_owned(), 3)]),
        bytes_out_by_host: BTreeMap::from([("api.example".to_owned(), 1234)]),
        open_connections: 2,
        open_circuits: Vec::new(),
        budgets: Vec::new(),
        audit: AuditState::Writing,
    }
}

fn revision() -> PolicyRevision {
    PolicyRevision {
        revision: 2,
        hash: "ab".repeat(32),
        loaded_at_ms: 1_764_300_000_000,
        origin: "/home/me/policy.toml".into(),
        rules: Vec::new(),
    }
}

/// A server that routes with the protocol's own table and answers each operation.
fn routed(seen: Arc<Mutex<Vec<Request>>>) -> Handler {
    Arc::new(move |method, target, body| {
        let req = match Request::from_http(method, target, body) {
            Ok(r) => r,
            Err(e) => return json(e.code.http_status(), &e),
        };
        seen.lock().unwrap().push(req.clone());
        match req {
            Request::Status => json(
                200,
                &Response::Status(
                    Status::starting("0.1.0", 1_764_300_000_000)
                        .ready(1_764_300_001_000, Default::default()),
                ),
            ),
            Request::Sessions => json(
                200,
                &Response::Sessions(Sessions {
                    sessions: vec![Session {
                        id: "1764300000-abcdef".into(),
                        kind: SessionKind::Agent,
                        uid: Some(1000),
                        started_at_ms: 1_764_300_000_000,
                        number: 1,
                    }],
                }),
            ),
            Request::Policy => json(200, &Response::Policy(revision())),
            Request::Counters => json(200, &Response::Counters(counters())),
            Request::Metrics => Answer::Fixed(200, b"airlock_requests_total 10\n".to_vec()),
            Request::Reload(r) if r.text.as_deref() == Some("broken") => json(
                422,
                &ErrorBody {
                    code: ErrorCode::InvalidPolicy,
                    message: "/home/me/policy.toml:3: expected `=`".into(),
                },
            ),
            Request::Reload(_) => json(
                200,
                &Response::Reloaded(Reloaded {
                    revision: 3,
                    hash: "cd".repeat(32),
                    loaded_at_ms: 1_764_300_002_000,
                    changed: true,
                    closed: 1,
                }),
            ),
            _ => Answer::Fixed(500, Vec::new()),
        }
    })
}

#[test]
fn every_operation_round_trips_through_the_protocols_routes() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let socket = serve(dir.path(), routed(seen.clone()));
        let c = Client::new("box", dir.path());
        assert_eq!(c.socket(), Some(socket.as_path()));
        assert_eq!(c.status().await.unwrap().state, State::Ready);
        assert_eq!(c.sessions().await.unwrap().sessions[0].uid, Some(1000));
        assert_eq!(c.policy().await.unwrap(), revision());
        assert_eq!(c.counters().await.unwrap(), counters());
        assert_eq!(c.metrics().await.unwrap(), "airlock_requests_total 10\n");
        let reload = ReloadRequest {
            text: Some("[network]\nallow = [\"a.example\"]\n".into()),
            origin: Some("/home/me/policy.toml".into()),
        };
        let done = c.reload(reload.clone()).await.unwrap();
        assert_eq!((done.revision, done.changed, done.closed), (3, true, 1));
        // The server read the body as the same request.
        assert_eq!(seen.lock().unwrap().last(), Some(&Request::Reload(reload)));
        // A reload with no file: the proxy re-reads its own.
        c.reload(ReloadRequest::default()).await.unwrap();
        assert_eq!(
            seen.lock().unwrap().last(),
            Some(&Request::Reload(ReloadRequest::default()))
        );
    });
}

#[test]
fn a_refused_reload_is_the_servers_code_and_line() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        serve(dir.path(), routed(Arc::default()));
        let c = Client::new("box", dir.path());
        let e = c
            .reload(ReloadRequest {
                text: Some("broken".into()),
                origin: None,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidPolicy));
        assert_eq!(e.to_string(), "/home/me/policy.toml:3: expected `=`");
    });
}

#[test]
fn no_socket_says_the_sandbox_is_not_running_or_predates_the_api() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let c = Client::new("box", dir.path());
        let e = c.status().await.unwrap_err();
        assert!(e.is_not_running(), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(
                "the sandbox box is not running, or started before the admin API: restart it (no socket at "
            ),
            "{text}"
        );
        // A socket left behind by a stopped proxy: nobody listens.
        let socket = dir.path().join(SOCKET);
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let e = c.counters().await.unwrap_err();
        assert!(e.is_not_running(), "{e:?}");
        assert!(e.to_string().contains("nothing answers on"), "{e}");
    });
}

#[test]
fn a_socket_this_user_may_not_open_says_whose_it_is() {
    // The tests run as root, whom no mode stops: the mapping of the kernel's answer.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(SOCKET);
    let _l = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let c = Client::new("box", dir.path());
    let e = c.connect_error(&socket, &io::Error::from(io::ErrorKind::PermissionDenied));
    let uid = nix::unistd::geteuid().as_raw();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot connect to {}: permission denied (the admin socket is uid {uid}'s, 0600): run airlock as that user, or with sudo",
            socket.display()
        )
    );
}

#[test]
fn a_peer_of_another_version_is_named_as_such() {
    rt().block_on(async {
        // A newer proxy that speaks v2 only: its routing answers unknown-version.
        let dir = tempfile::tempdir().unwrap();
        serve(
            dir.path(),
            Arc::new(|_, target, _| {
                json(
                    404,
                    &ErrorBody {
                        code: ErrorCode::UnknownVersion,
                        message: format!("this appliance speaks version 2 of the admin API (/v2/...), not {target}"),
                    },
                )
            }),
        );
        let e = Client::new("box", dir.path()).policy().await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::UnknownVersion));
        let text = e.to_string();
        assert!(text.starts_with("the sandbox box speaks another version of the admin API (this appliance speaks version 2"), "{text}");
        assert!(text.contains("use the airlock CLI that matches its image"), "{text}");

        // A server with no /v1 at all: a bare 404.
        let dir = tempfile::tempdir().unwrap();
        serve(dir.path(), Arc::new(|_, _, _| Answer::Fixed(404, b"not found".to_vec())));
        let e = Client::new("box", dir.path()).status().await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::UnknownVersion), "{e}");

        // A 2xx answer that is no response of the protocol.
        let dir = tempfile::tempdir().unwrap();
        serve(dir.path(), Arc::new(|_, _, _| Answer::Fixed(200, b"<html>".to_vec())));
        let e = Client::new("box", dir.path()).status().await.unwrap_err();
        assert!(matches!(e, AdminError::Protocol { .. }), "{e:?}");
        // A response of another operation.
        let dir = tempfile::tempdir().unwrap();
        serve(dir.path(), Arc::new(|_, _, _| json(200, &Response::Policy(revision()))));
        let e = Client::new("box", dir.path()).counters().await.unwrap_err();
        assert!(e.to_string().contains("asked for the counters"), "{e}");
    });
}

fn record(n: u64) -> StreamLine {
    StreamLine::Record(Event {
        cursor: Cursor(format!("s1:{n}")),
        log: Log::Audit,
        record: serde_json::json!({"ts": "2026-11-28T14:00:00.000Z", "n": n}),
    })
}

fn line(l: &StreamLine) -> Vec<u8> {
    let mut v = serde_json::to_vec(l).unwrap();
    v.push(b'\n');
    v
}

/// A server whose event stream is fed by the test; the query it was asked with is kept.
fn streaming(dir: &Path) -> (mpsc::Sender<Vec<u8>>, Arc<Mutex<Vec<String>>>) {
    let (tx, rx) = mpsc::channel(16);
    let rx = Arc::new(Mutex::new(Some(rx)));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let a = asked.clone();
    serve(
        dir,
        Arc::new(move |_, target, _| {
            a.lock().unwrap().push(target.to_owned());
            match rx.lock().unwrap().take() {
                Some(rx) => Answer::Stream(rx),
                None => Answer::Fixed(503, Vec::new()),
            }
        }),
    );
    (tx, asked)
}

#[test]
fn the_stream_yields_each_line_as_it_comes_whatever_the_chunks() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (tx, asked) = streaming(dir.path());
        let c = Client::new("box", dir.path());
        let query = EventsQuery {
            after: Some(Cursor("s1:0".into())),
            decision: Some("deny".into()),
            follow: true,
            ..EventsQuery::default()
        };
        let mut s = c.events(query).await.unwrap();
        assert_eq!(
            asked.lock().unwrap().as_slice(),
            ["/v1/events?after=s1:0&decision=deny&follow=true"]
        );
        // One line, then nothing more for now: it is read before anything else comes.
        tx.send(line(&record(1))).await.unwrap();
        assert_eq!(s.next().await.unwrap(), Some(record(1)));
        // Two lines and a half in one chunk, the rest of the half in the next, one byte at a
        // time after that.
        let mut all = [line(&record(2)), line(&record(3)), line(&record(4))].concat();
        let rest = all.split_off(all.len() - 10);
        tx.send(all).await.unwrap();
        assert_eq!(s.next().await.unwrap(), Some(record(2)));
        assert_eq!(s.next().await.unwrap(), Some(record(3)));
        tx.send(rest).await.unwrap();
        assert_eq!(s.next().await.unwrap(), Some(record(4)));
        let note = StreamLine::Note(Note {
            code: NoteCode::Gap,
            message: "records before s1:5 are gone".into(),
        });
        for b in line(&note) {
            tx.send(vec![b]).await.unwrap();
        }
        assert_eq!(s.next().await.unwrap(), Some(note));
        // A blank line is skipped, a kind this CLI does not know reads as Unknown.
        tx.send(b"\n{\"kind\":\"heartbeat\",\"at\":1}\n".to_vec())
            .await
            .unwrap();
        assert_eq!(s.next().await.unwrap(), Some(StreamLine::Unknown));
        // A record's text as the server wrote it (the log's line, keys in its order).
        let exact =
            r#"{"ts":"2026-11-28T14:00:00.000Z","session":"s1","decision":"deny","chain":"x"}"#;
        tx.send(
            format!(r#"{{"kind":"record","cursor":"s1:9","log":"audit","record":{exact}}}"#)
                .into_bytes()
                .into_iter()
                .chain([b'\n'])
                .collect(),
        )
        .await
        .unwrap();
        let (line, text) = s.next_with_text().await.unwrap().unwrap();
        assert!(matches!(line, StreamLine::Record(_)), "{line:?}");
        assert_eq!(text.as_deref(), Some(exact));
        // The server ends the stream: None, and None again.
        drop(tx);
        assert_eq!(s.next().await.unwrap(), None);
        assert_eq!(s.next().await.unwrap(), None);
    });
}

#[test]
fn a_stream_cut_inside_a_line_or_carrying_garbage_is_an_error() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (tx, _) = streaming(dir.path());
        let mut s = Client::new("box", dir.path())
            .events(EventsQuery::default())
            .await
            .unwrap();
        let whole = line(&record(1));
        tx.send(whole[..whole.len() / 2].to_vec()).await.unwrap();
        drop(tx);
        let e = s.next().await.unwrap_err();
        assert!(e.to_string().contains("ended inside a line"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let (tx, _) = streaming(dir.path());
        let mut s = Client::new("box", dir.path())
            .events(EventsQuery::default())
            .await
            .unwrap();
        tx.send(b"not json\n".to_vec()).await.unwrap();
        let e = s.next().await.unwrap_err();
        assert!(
            e.to_string().contains("an event line that does not read"),
            "{e}"
        );
    });
}

#[test]
fn a_filter_the_server_refuses_is_its_bad_request() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        serve(
            dir.path(),
            Arc::new(|_, _, _| {
                json(
                    400,
                    &ErrorBody {
                        code: ErrorCode::BadRequest,
                        message: "colour is not a filter of the event stream".into(),
                    },
                )
            }),
        );
        let e = Client::new("box", dir.path())
            .events(EventsQuery::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest));
        assert_eq!(e.to_string(), "colour is not a filter of the event stream");
    });
}

/// A relay as `kubectl exec -i … airlock-entrypoint __admin` is: standard input and output
/// copied to the socket (here python's, the entrypoint's own is the Docker tier's).
const PY_RELAY: &str = "import os,socket,sys,threading
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
def up():
    while True:
        b=os.read(0,65536)
        if not b: break
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up,daemon=True).start()
while True:
    b=s.recv(65536)
    if not b: break
    os.write(1,b)
";

fn relayed(name: &str, socket: &Path) -> Client {
    let argv = ["python3", "-c", PY_RELAY, &socket.display().to_string()]
        .map(str::to_owned)
        .to_vec();
    Client::relay(name, argv)
}

#[test]
fn a_relay_command_carries_requests_and_the_stream_like_the_socket() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let socket = serve(dir.path(), routed(Arc::default()));
        let c = relayed("k8s:sb/p", &socket);
        assert_eq!(c.socket(), None);
        assert_eq!(c.status().await.unwrap().state, State::Ready);
        assert_eq!(c.policy().await.unwrap(), revision());
        let e = c
            .reload(ReloadRequest {
                text: Some("broken".into()),
                origin: None,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidPolicy));

        let sdir = tempfile::tempdir().unwrap();
        let (tx, _) = streaming(sdir.path());
        let c = relayed("k8s:sb/p", &sdir.path().join(SOCKET));
        let mut s = c.events(EventsQuery::default()).await.unwrap();
        tx.send(line(&record(1))).await.unwrap();
        assert_eq!(s.next().await.unwrap(), Some(record(1)));
        drop(tx);
        assert_eq!(s.next().await.unwrap(), None);
    });
}

#[test]
fn a_relay_that_fails_is_named_with_its_last_words() {
    rt().block_on(async {
        let argv = [
            "sh",
            "-c",
            "echo 'Error from server (NotFound): pods \"p\" not found' >&2; exit 1",
        ]
        .map(str::to_owned)
        .to_vec();
        let e = Client::relay("k8s:sb/p", argv).status().await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("the admin API of k8s:sb/p (sh -c ")
                && text.ends_with(
                    "the relay said: Error from server (NotFound): pods \"p\" not found"
                ),
            "{text}"
        );
        let e = Client::relay("k8s:sb/p", vec!["/nonexistent/kubectl".into()])
            .status()
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("cannot run /nonexistent/kubectl"),
            "{e}"
        );
    });
}
