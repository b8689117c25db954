//! Attacks on the git API from the agent's seat, over its real socket: the agent can read
//! the session key, so it signs whatever it likes, as fast as it likes, and it writes raw
//! frames in any order and of any length. Each test asserts the refusal by its reason code,
//! and that an honest request still works afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use airlock_git_api::log::{Capture, Log};
use airlock_git_api::push::PushRules;
use airlock_git_api::run::GitEnv;
use airlock_git_api::server::Server;
use airlock_git_api::visible::Visibility;
use airlock_wire::frame::{self, FrameKind, MAX_FRAME, write_frame};
use airlock_wire::{Auth, Denied, Exit, Invocation, SessionKey, Verifier, auth};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const KEY: [u8; 32] = [42; 32];
const GIT: &str = "/usr/bin/git";

struct Api {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    /// What the server logged (the library server; the binary's log is a file).
    log: Capture,
}

fn git(cwd: &Path, args: &[&str]) {
    let out = Command::new(GIT)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Seed")
        .env("GIT_AUTHOR_EMAIL", "seed@example.invalid")
        .env("GIT_COMMITTER_NAME", "Seed")
        .env("GIT_COMMITTER_EMAIL", "seed@example.invalid")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A workspace with one commit, its `.git` moved to a hidden place, and a git API serving
/// it on a temp socket with `verifier`.
fn start(verifier: Verifier) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("workspace");
    std::fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "hello\n").unwrap();
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "seed"]);
    let git_dir = root.join("hidden.git");
    std::fs::rename(ws.join(".git"), &git_dir).unwrap();
    let mut policy = airlock_policy::GitPolicy::defaults_for("demo");
    policy.repositories = vec!["github.com/acme/app".into()];
    let env = GitEnv {
        git: GIT.into(),
        git_dir,
        work_tree: ws,
        home: root.join("empty-home"),
        proxy_url: "http://127.0.0.1:9".into(),
        ca_file: None,
        ca_dir: None,
        test_upstreams: Vec::new(),
        system_config: None,
    };
    let socket = root.join("git.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let log = Capture::default();
    let server = Arc::new(
        Server::new(
            env,
            nix::unistd::getuid().as_raw(),
            PushRules::new(&policy, Some("main")).unwrap(),
            Visibility::new(&policy, "demo", Some("main")).unwrap(),
            verifier,
            16,
        )
        .with_log(Log::to(Some("sess-test".into()), Box::new(log.clone()))),
    );
    std::thread::spawn(move || server.serve(&listener));
    Api {
        _dir: dir,
        socket,
        log,
    }
}

fn body(argv: &[&str]) -> Vec<u8> {
    Invocation {
        version: 1,
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd: String::new(),
        env: BTreeMap::new(),
        stdin: None,
        term_width: None,
        stdout_tty: false,
    }
    .to_body()
    .unwrap()
}

fn frame_bytes(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame(&mut out, kind, payload).unwrap();
    out
}

fn auth_bytes(a: &Auth) -> Vec<u8> {
    frame_bytes(FrameKind::Auth, &serde_json::to_vec(a).unwrap())
}

/// A correctly signed request, as the shim would send it.
fn signed(argv: &[&str]) -> Vec<u8> {
    let b = body(argv);
    let a = auth::sign(&SessionKey::from_bytes(KEY), &b).unwrap();
    let mut raw = auth_bytes(&a);
    raw.extend(frame_bytes(FrameKind::Body, &b));
    raw
}

/// What the server answered last: `Ok(exit code)` or `Err(reason)`.
type Answer = Result<i32, String>;

/// Send `raw`, close our side, and read the server's frames to the end.
fn send(api: &Api, raw: &[u8]) -> Answer {
    let mut s = UnixStream::connect(&api.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may refuse and close before reading everything we send.
    let _ = s.write_all(raw);
    let _ = s.shutdown(Shutdown::Write);
    let mut last = None;
    while let Ok(Some(f)) = frame::read_frame(&mut s, MAX_FRAME) {
        last = Some(f);
    }
    let f = last.expect("the server closed without an answer");
    match f.kind {
        FrameKind::Exit => Ok(frame::decode::<Exit>(&f.payload, "exit").unwrap().code),
        FrameKind::Denied => Err(frame::decode::<Denied>(&f.payload, "denied")
            .unwrap()
            .reason),
        other => panic!("last frame was {other:?}"),
    }
}

fn honest(api: &Api) -> Answer {
    send(api, &signed(&["rev-parse", "--verify", "-q", "HEAD"]))
}

// --- issue 13: the nonce cache cannot be exhausted -------------------------------------

/// The agent signs 70,000 distinct requests dated as late as the window allows (their
/// nonces live longest) and sends them as fast as the socket takes them, from four
/// connections at a time. Before the fix the first 65,536 were accepted within a fraction
/// of a second and every request after them, honest ones included, got `nonce_cache_full`
/// for 61 s. Now the flood is cut at the rate limit, the cache never fills, and an honest
/// `git` a moment later works.
#[test]
fn a_flood_of_signed_requests_cannot_lock_the_agent_out() {
    let api = Arc::new(start(Verifier::new(SessionKey::from_bytes(KEY))));
    assert_eq!(honest(&api), Ok(0));
    const FLOOD: usize = 70_000;
    const THREADS: usize = 4;
    let key = SessionKey::from_bytes(KEY);
    // A request git would refuse by policy: cheap for the server, but it is verified (and,
    // before the fix, consumed a nonce) first.
    let b = body(&["-c", "core.pager=x", "status"]);
    let late = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 30;
    let requests: Vec<Vec<u8>> = (0..FLOOD)
        .map(|i| {
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&(i as u64).to_be_bytes());
            nonce[8] = 0xf1;
            let mut raw = auth_bytes(&auth::sign_with(&key, &b, late, nonce));
            raw.extend(frame_bytes(FrameKind::Body, &b));
            raw
        })
        .collect();
    let requests = Arc::new(requests);
    let started = Instant::now();
    let counts: Vec<HashMap<String, usize>> = (0..THREADS)
        .map(|t| {
            let (api, requests) = (Arc::clone(&api), Arc::clone(&requests));
            std::thread::spawn(move || {
                let mut counts = HashMap::new();
                for raw in requests.iter().skip(t).step_by(THREADS) {
                    let key = match send(&api, raw) {
                        Ok(code) => format!("exit {code}"),
                        Err(reason) => reason,
                    };
                    *counts.entry(key).or_insert(0) += 1;
                }
                counts
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let mut total: HashMap<String, usize> = HashMap::new();
    for c in counts {
        for (k, n) in c {
            *total.entry(k).or_insert(0) += n;
        }
    }
    let took = started.elapsed();
    eprintln!("flood of {FLOOD} in {took:?}: {total:?}");
    assert_eq!(total.values().sum::<usize>(), FLOOD);
    assert!(
        !total.contains_key("nonce_cache_full"),
        "the flood filled the nonce cache: {total:?}"
    );
    // The flood was cut at the rate limit, not merely absorbed.
    assert!(
        total.get("rate_limited").copied().unwrap_or(0) > FLOOD / 2,
        "{total:?}"
    );
    // The refused flood did not become a log flood: refusals before authentication are
    // logged at most 20 a second, and the next line says how many were left out.
    let log = api.log.text();
    let lines = log.lines().count();
    let admitted = total.get("global_option_refused").copied().unwrap_or(0);
    let most = admitted + 2 + 20 * (took.as_secs() as usize + 2);
    assert!(lines <= most, "{lines} log lines for {FLOOD} requests");
    assert!(log.contains(r#""suppressed":"#), "no suppressed count");
    // An honest git right after the flood gets in within moments (not 61 s).
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match honest(&api) {
            Ok(code) => {
                assert_eq!(code, 0);
                break;
            }
            Err(reason) if reason == "rate_limited" && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(reason) => panic!("honest request after the flood refused: {reason}"),
        }
    }
}

// --- frames cut short, out of order, replayed ------------------------------------------

/// A request's two frames, signed, apart.
fn signed_frames(argv: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let b = body(argv);
    let a = auth::sign(&SessionKey::from_bytes(KEY), &b).unwrap();
    (auth_bytes(&a), frame_bytes(FrameKind::Body, &b))
}

/// The agent sends a correct request cut short at every kind of place and closes its side:
/// each is refused as malformed, none runs git, and none consumed the request's nonce (the
/// whole request still runs, once).
#[test]
fn a_request_cut_short_is_refused() {
    let api = start(Verifier::new(SessionKey::from_bytes(KEY)));
    let (auth, body) = signed_frames(&["rev-parse", "--verify", "-q", "HEAD"]);
    let whole = [auth.clone(), body.clone()].concat();
    for (what, cut) in [
        ("inside the auth header", 3),
        ("inside the auth payload", auth.len() - 1),
        ("after the auth frame", auth.len()),
        ("inside the body header", auth.len() + 2),
        ("inside the body payload", whole.len() - 1),
    ] {
        assert_eq!(
            send(&api, &whole[..cut]),
            Err("malformed_request".into()),
            "cut {what}"
        );
    }
    // A body frame announcing more than it carries, then the connection closes.
    let mut short = auth.clone();
    short.extend(frame_bytes(FrameKind::Body, &[0; 100])[..5].iter());
    short.extend(b"{\"version\":1");
    assert_eq!(send(&api, &short), Err("malformed_request".into()));
    assert_eq!(send(&api, &whole), Ok(0));
    assert_eq!(send(&api, &whole), Err("replayed_nonce".into()));
}

/// Frames in the wrong order or of the wrong kind: the body first, two auth frames, a frame
/// only the server sends, and a body signed for one request under another's auth frame.
#[test]
fn frames_out_of_sequence_are_refused() {
    let api = start(Verifier::new(SessionKey::from_bytes(KEY)));
    let (auth, body) = signed_frames(&["rev-parse", "--verify", "-q", "HEAD"]);
    let (other_auth, other_body) = signed_frames(&["status", "--short"]);
    let stdout = frame_bytes(FrameKind::Stdout, b"x");
    let exit = frame_bytes(FrameKind::Exit, br#"{"code":0}"#);
    for (what, raw) in [
        ("body then auth", [body.clone(), auth.clone()].concat()),
        ("auth twice", [auth.clone(), other_auth.clone()].concat()),
        (
            "a stdout frame for a body",
            [auth.clone(), stdout.clone()].concat(),
        ),
        ("an exit frame for a body", [auth.clone(), exit].concat()),
        (
            "stdout first",
            [stdout, auth.clone(), body.clone()].concat(),
        ),
        (
            "an unknown kind",
            [vec![9, 0, 0, 0, 0], auth.clone(), body.clone()].concat(),
        ),
    ] {
        assert_eq!(send(&api, &raw), Err("malformed_request".into()), "{what}");
    }
    // Two requests' frames crossed: each body is refused under the other's signature.
    assert_eq!(
        send(&api, &[auth.clone(), other_body.clone()].concat()),
        Err("bad_signature".into())
    );
    assert_eq!(
        send(&api, &[other_auth.clone(), body.clone()].concat()),
        Err("bad_signature".into())
    );
    // None of that consumed a nonce: both requests, in order, run once.
    assert_eq!(send(&api, &[auth, body].concat()), Ok(0));
    assert_eq!(send(&api, &[other_auth, other_body].concat()), Ok(0));
}

/// The same signed request sent again, on a new connection and (the protocol carries one
/// request per connection) appended to the first on the same one: it runs once.
#[test]
fn a_replayed_request_runs_once() {
    let api = start(Verifier::new(SessionKey::from_bytes(KEY)));
    let whole = signed(&["rev-parse", "--verify", "-q", "HEAD"]);
    assert_eq!(
        send(&api, &[whole.clone(), whole.clone()].concat()),
        Ok(0),
        "the second copy on the same connection is never read"
    );
    assert_eq!(send(&api, &whole), Err("replayed_nonce".into()));
    assert_eq!(send(&api, &whole), Err("replayed_nonce".into()));
}

// --- issue 14: git-api.jsonl is bounded and JSON only ----------------------------------

/// The real binary, started as the entrypoint starts it: its stderr appended to
/// `git-api.jsonl`. Killed on drop.
struct Binary {
    api: Api,
    log: PathBuf,
    child: std::process::Child,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_binary() -> Binary {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("workspace");
    std::fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README.md"), "hello\n").unwrap();
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "seed"]);
    git(
        &ws,
        &["remote", "add", "origin", "https://github.com/acme/app.git"],
    );
    let git_dir = root.join("hidden.git");
    std::fs::rename(ws.join(".git"), &git_dir).unwrap();
    let policy = root.join("policy.toml");
    std::fs::write(
        &policy,
        "[sandbox]\nname = \"demo\"\n\n[git]\nrepositories = [\"github.com/acme/app\"]\n",
    )
    .unwrap();
    let key = root.join("session.key");
    std::fs::write(&key, SessionKey::from_bytes(KEY).to_hex()).unwrap();
    let socket = root.join("git.sock");
    let log = root.join("git-api.jsonl");
    let stderr = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_airlock-git-api"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .arg("--socket")
        .arg(&socket)
        .arg("--git-dir")
        .arg(&git_dir)
        .arg("--work-tree")
        .arg(&ws)
        .arg("--agent-uid")
        .arg(nix::unistd::getuid().as_raw().to_string())
        .arg("--key-file")
        .arg(&key)
        .arg("--policy")
        .arg(&policy)
        .arg("--git")
        .arg(GIT)
        .arg("--home")
        .arg(root.join("empty-home"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the git API did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Binary {
        api: Api {
            _dir: dir,
            socket,
            log: Capture::default(),
        },
        log,
        child,
    }
}

/// Every line of the log parses as one JSON object with `ts`.
fn json_lines(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .map(|l| {
            let shown = &l[..l.len().min(200)];
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("git-api.jsonl has a line that is not JSON ({e}): {shown}")
            });
            assert!(v["ts"].is_string(), "no ts: {shown}");
            v
        })
        .collect()
}

/// The attack of issue 14: a signed push with a 1 MB refspec wrote a 2 MB line (the argv,
/// then again in the message); four such requests added 60 MB in 1.9 s. And the git API's
/// start-up line was plain text in a file that claims to be JSON lines.
#[test]
fn a_megabyte_refspec_leaves_one_short_json_line_in_the_log() {
    let b = start_binary();
    let refspec = format!("HEAD:{}", "x y".repeat(350_000));
    let answer = send(&b.api, &signed(&["push", "origin", &refspec]));
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(honest(&b.api), Ok(0));
    let size = std::fs::metadata(&b.log).unwrap().len();
    assert!(size < 16 * 1024, "git-api.jsonl is {size} bytes");
    let lines = json_lines(&b.log);
    assert!(lines.iter().any(|l| l["event"] == "start"), "{lines:?}");
    let push = lines
        .iter()
        .find(|l| l["argv"][0] == "push")
        .expect("the push was not logged");
    assert_eq!(push["decision"], "deny");
    assert_eq!(push["truncated"], true);
    let cut = push["argv"][2].as_str().unwrap();
    assert!(cut.starts_with("HEAD:x yx y"), "{cut}");
    assert!(cut.contains("…[truncated "), "{cut}");
    for l in std::fs::read_to_string(&b.log).unwrap().lines() {
        assert!(l.len() < 8 * 1024, "a line of {} bytes", l.len());
    }
}

/// A usage error (a wrong flag from a future entrypoint) is a JSON record too, not clap's
/// plain text, and the process still exits non-zero.
#[test]
fn a_fatal_start_is_a_json_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("git-api.jsonl");
    let stderr = std::fs::File::create(&log).unwrap();
    for args in [
        &["--no-such-flag"][..],
        &[
            "--git-dir",
            "/nonexistent",
            "--agent-uid",
            "1",
            "--key-file",
            "/nonexistent/key",
        ][..],
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_airlock-git-api"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(stderr.try_clone().unwrap())
            .status()
            .unwrap();
        assert!(!status.success());
    }
    let lines = json_lines(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert_eq!(l["event"], "fatal");
        assert!(l["message"].as_str().is_some_and(|m| !m.is_empty()), "{l}");
    }
}
