//! A fake of a sandbox's admin API for the tests that need no engine (`top`, `policy`):
//! a registered sandbox whose control socket this process serves, answering with the
//! protocol's own routing (`Request::from_http`) and fixed numbers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use airlock_cli::registry::{Registry, Sandbox, State};
use airlock_control::admin::{
    AuditState, Checked, Counters, EffectiveRule, ErrorBody, ErrorCode, EventsQuery,
    PolicyRevision, ReloadRequest, Reloaded, Request, Response, Sessions,
};
use airlock_control::status::Status;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Register `name` as running in `<dir>/data` (its registry) and serve a fake of its admin
/// API on its control socket; the data directory and the fake.
pub fn sandbox(dir: &Path, name: &str) -> (PathBuf, Arc<Fake>) {
    let data = dir.join("data");
    register(&data, name);
    let control = data.join("sandboxes").join(name).join("control");
    std::fs::create_dir_all(&control).unwrap();
    let fake = Arc::new(Fake::default());
    serve(&control.join(airlock_control::admin::SOCKET), fake.clone());
    (data, fake)
}

/// Register `name` as running in the registry of `data`, with no admin socket.
pub fn register(data: &Path, name: &str) {
    std::fs::create_dir_all(data).unwrap();
    let reg = Registry::open(&data.join("registry.sqlite")).unwrap();
    reg.claim(&Sandbox {
        name: name.into(),
        repository: "/nowhere".into(),
        branch: format!("sandbox/{name}"),
        base: "0".repeat(40),
        agent: "shell".into(),
        image: "airlock:latest".into(),
        image_digest: String::new(),
        policy_hash: String::new(),
        container_id: format!("airlock-{name}"),
        created: 1,
        last_seen: 1,
        ttl_seconds: 3600,
        state: State::Running,
        oneshot: false,
    })
    .unwrap();
    drop(reg);
}

/// The fake's state: how many denials it counted, and the followers to push records to.
#[derive(Default)]
pub struct Fake {
    /// The denials counted.
    pub denied: AtomicU64,
    /// The open event streams.
    pub followers: Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// The reloads asked for.
    pub reloads: Mutex<Vec<ReloadRequest>>,
    /// The event streams asked for.
    pub queries: Mutex<Vec<EventsQuery>>,
}

fn json(status: u16, v: &impl serde::Serialize) -> hyper::Response<BoxBody<Bytes, Infallible>> {
    hyper::Response::builder()
        .status(status)
        .body(Full::new(Bytes::from(serde_json::to_vec(v).unwrap())).boxed())
        .unwrap()
}

fn answer(fake: &Fake, req: Request) -> hyper::Response<BoxBody<Bytes, Infallible>> {
    match req {
        Request::Status => json(
            200,
            &Response::Status(
                Status::starting("0.1.0", 1_764_300_000_000)
                    .ready(1_764_300_001_000, Default::default()),
            ),
        ),
        Request::Policy => json(
            200,
            &Response::Policy(PolicyRevision {
                revision: 7,
                hash: "feedface0123456789".into(),
                loaded_at_ms: 1_764_300_000_000,
                origin: "/etc/airlock/policy.toml".into(),
                rules: vec![
                    EffectiveRule {
                        list: "network.allow".into(),
                        rule: "api.anthropic.com".into(),
                        origin: "file network.allow[0]".into(),
                    },
                    EffectiveRule {
                        list: "rules".into(),
                        // A name reaches the terminal escaped.
                        rule: "deny merges\u{1b}[2J".into(),
                        origin: "preset github (l7.presets[0])".into(),
                    },
                ],
            }),
        ),
        Request::Sessions => json(200, &Response::Sessions(Sessions::default())),
        Request::Counters => {
            let denied = fake.denied.load(Ordering::SeqCst);
            json(
                200,
                &Response::Counters(Counters {
                    requests: 40 + denied,
                    allowed: 40,
                    denied,
                    denied_by_reason: BTreeMap::from([("blocked-by-policy".into(), denied)]),
                    bytes_out_by_host: BTreeMap::new(),
                    open_connections: 3,
                    open_circuits: Vec::new(),
                    budgets: Vec::new(),
                    audit: AuditState::Writing,
                }),
            )
        }
        Request::Events(q) => {
            fake.queries.lock().unwrap().push(q);
            let (tx, rx) = mpsc::channel::<Bytes>(16);
            fake.followers.lock().unwrap().push(tx);
            let chunks = futures_util::stream::unfold(rx, |mut rx| async {
                let b = rx.recv().await?;
                Some((Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            hyper::Response::builder()
                .body(BodyExt::boxed(StreamBody::new(chunks)))
                .unwrap()
        }
        Request::Reload(r) => {
            fake.reloads.lock().unwrap().push(r.clone());
            let origin = r
                .origin
                .unwrap_or_else(|| "/etc/airlock/policy.toml".into());
            match r.text.as_deref() {
                Some(t) if t.contains("[network") && !t.contains("[network]") => json(
                    422,
                    &ErrorBody {
                        code: ErrorCode::InvalidPolicy,
                        message: format!(
                            "{origin}:3: unclosed table header; the policy in force stays"
                        ),
                    },
                ),
                Some(t) if t.contains("[git]") => json(
                    409,
                    &ErrorBody {
                        code: ErrorCode::RestartNeeded,
                        message: "a change to [git] needs a restart: airlock stop, airlock start"
                            .into(),
                    },
                ),
                Some(_) => json(
                    200,
                    &Response::Reloaded(Reloaded {
                        revision: 8,
                        hash: "0badc0de".repeat(8),
                        loaded_at_ms: 1_764_300_002_000,
                        changed: true,
                        closed: 1,
                    }),
                ),
                None => json(
                    200,
                    &Response::Reloaded(Reloaded {
                        revision: 7,
                        hash: "feedface0123456789".into(),
                        loaded_at_ms: 1_764_300_000_000,
                        changed: false,
                        closed: 0,
                    }),
                ),
            }
        }
        Request::Check(q) if q.url.contains("evil") => json(
            200,
            &Response::Checked(Checked {
                revision: 7,
                decision: "deny".into(),
                stage: "host".into(),
                reason: Some("blocked-by-policy".into()),
                rule: None,
                intercepted: true,
                message: format!(
                    "{} is not in [network] allow: to allow, add \"evil.example\"",
                    q.url
                ),
            }),
        ),
        Request::Check(q) => json(
            200,
            &Response::Checked(Checked {
                revision: 7,
                decision: "allow".into(),
                stage: if q.method.is_some() {
                    "request"
                } else {
                    "host"
                }
                .into(),
                reason: None,
                rule: Some("api.example".into()),
                intercepted: true,
                message: "allowed by [network] allow \"api.example\"".into(),
            }),
        ),
        Request::Approvals => json(
            200,
            &Response::Approvals(airlock_control::admin::Approvals {
                items: vec![airlock_control::admin::Approval {
                    id: "3f2a9c1d".into(),
                    session: "uid 1000".into(),
                    host: "asked.example".into(),
                    port: 443,
                    hits: 2,
                    first_ms: 1_764_300_000_000,
                    last_ms: 1_764_300_001_000,
                    state: "pending".into(),
                    scope: None,
                    by: None,
                    until_ms: None,
                    reason: None,
                    said: None,
                    rule: None,
                    notes: Vec::new(),
                    token: None,
                }],
            }),
        ),
        other => panic!("the CLI asked for {other:?}"),
    }
}

/// Serve the fake on `socket` from a thread of its own.
pub fn serve(socket: &Path, fake: Arc<Fake>) {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let fake = fake.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                        let fake = fake.clone();
                        async move {
                            let method = req.method().as_str().to_owned();
                            let target = req.uri().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let resp = match Request::from_http(&method, &target, &body) {
                                Ok(r) => answer(&fake, r),
                                Err(e) => json(e.code.http_status(), &e),
                            };
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
    });
}
