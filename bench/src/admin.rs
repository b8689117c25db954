//! The admin API's clients for the benchmark (issue 41): a follower of the event stream
//! that reads every line to nowhere, sequential `GET`s whose latency is reported, and the
//! time a denial takes to reach a follower (`airlock logs -f`).
//!
//! Raw HTTP/1.1 over [`tokio::net::UnixStream`], no client library: each call opens a new
//! connection, sends one request and reads its whole response, as the CLI does (one
//! connection per request); the latency is connect to last byte.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::signal::unix::{SignalKind, signal};

use crate::http::{Conn, within};
use crate::load::pct;
use crate::procfs;

/// A call that takes longer fails (and the cell shows it) instead of hanging the run.
const CALL_TIMEOUT: u64 = 10;

/// `n` sequential `GET path` calls, each on a new connection; prints `key=value` pairs:
/// calls, errors, latency p50 / p99 / max in µs, bytes of the last answer.
pub async fn get(socket: &Path, path: &str, n: usize) -> anyhow::Result<()> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: airlock\r\nUser-Agent: airlock-bench\r\n\r\n")
        .into_bytes();
    let steal0 = procfs::steal_ticks()?;
    let start = Instant::now();
    let (mut timed, mut body) = (Timed::default(), 0u64);
    for _ in 0..n {
        let t0 = Instant::now();
        let r = within(CALL_TIMEOUT, async {
            let s = UnixStream::connect(socket)
                .await
                .with_context(|| format!("connecting to {}", socket.display()))?;
            let mut c = Conn::new(s);
            c.send(&req).await?;
            let r = c.response().await?;
            if r.status != 200 {
                bail!("GET {path}: status {}", r.status);
            }
            Ok(r)
        })
        .await;
        let failed = r.is_err();
        timed.add(r.map(|r| {
            body = r.body;
            u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }));
        if failed {
            // Do not spin on a refusing socket.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let steal1 = procfs::steal_ticks()?;
    let mut out = format!(
        "path={path} secs={secs:.3} body={body} {}",
        timed.line("requests")
    );
    let ticks = steal1.1.saturating_sub(steal0.1);
    if ticks > 0 {
        let stolen = steal1.0.saturating_sub(steal0.0) as f64 * 100.0 / ticks as f64;
        out.push_str(&format!(" steal_pct={stolen:.1}"));
    }
    println!("{out}");
    Ok(())
}

/// Follows the event stream (`/v1/events?follow=true`) and throws every line away. Prints
/// `attached` once the proxy answered 200, then, when the stream ends or on `SIGTERM`,
/// `lines=… bytes=… secs=… end=eof|term` (`end=term`: it was still attached when told to
/// stop).
pub async fn follow(socket: &Path) -> anyhow::Result<()> {
    // Registered before attaching: a TERM right after `attached` is not lost.
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut s = UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    s.write_all(b"GET /v1/events?follow=true HTTP/1.1\r\nHost: airlock\r\nUser-Agent: airlock-bench\r\n\r\n")
        .await?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::new();
    let body_start = loop {
        let n = within(CALL_TIMEOUT, async { Ok(s.read(&mut buf).await?) }).await?;
        if n == 0 {
            bail!(
                "the proxy closed the event stream before answering: {:?}",
                String::from_utf8_lossy(&head)
            );
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > 64 * 1024 {
            bail!("event stream: response head too large");
        }
    };
    let status = String::from_utf8_lossy(&head[..body_start]).into_owned();
    if status.split(' ').nth(1) != Some("200") {
        bail!(
            "event stream refused: {}",
            status.lines().next().unwrap_or("")
        );
    }
    println!("attached");
    let t0 = Instant::now();
    let (mut lines, mut bytes, mut prev) = (0u64, 0u64, 0u8);
    // An NDJSON line ends in `\n`; the chunked framing's line ends are `\r\n`, and a
    // record (JSON) has no raw newline inside.
    let mut count = |data: &[u8], prev: &mut u8| {
        bytes += data.len() as u64;
        for &b in data {
            if b == b'\n' && *prev != b'\r' {
                lines += 1;
            }
            *prev = b;
        }
    };
    count(&head[body_start..], &mut prev);
    let end = loop {
        tokio::select! {
            r = s.read(&mut buf) => match r {
                Ok(0) => break "eof",
                Ok(n) => count(&buf[..n], &mut prev),
                Err(_) => break "error",
            },
            _ = term.recv() => break "term",
        }
    };
    println!(
        "lines={lines} bytes={bytes} secs={:.3} end={end}",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Reads everything `s` sends until it closes (at most 64 KiB).
async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 || out.len() > 64 * 1024 {
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The value of `"key":"…"` in `text`.
fn json_str<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(&format!("\"{key}\":\""))? + key.len() + 4;
    text[at..].split('"').next()
}

/// One plain-HTTP request through the proxy at `proxy` for `host` (closed after): its
/// whole answer.
async fn through(proxy: std::net::SocketAddr, host: &str) -> anyhow::Result<String> {
    within(CALL_TIMEOUT, async {
        let mut s = tokio::net::TcpStream::connect(proxy).await?;
        s.write_all(
            format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        read_to_close(&mut s).await
    })
    .await
}

/// How long a denial takes to reach the operator's `airlock logs -f` (issue 41: within 100
/// ms), `n` times: a follower of the denials (`/v1/events?follow=true&decision=deny`) is
/// attached, then the agent's plain-HTTP request for a host no rule lists goes through the
/// proxy at `proxy`; each is timed from the last byte of the agent's refusal to the
/// follower reading the denial's line (a denial's line is written before its answer, so
/// this is how long the operator sees it after the agent does). Prints `key=value` pairs:
/// denials, errors, latency p50 / p99 / max in µs.
pub async fn denial_lag(
    socket: &Path,
    proxy: std::net::SocketAddr,
    n: usize,
) -> anyhow::Result<()> {
    let s = UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    let mut follower = tokio::io::BufReader::new(s);
    follower
        .get_mut()
        .write_all(b"GET /v1/events?follow=true&decision=deny HTTP/1.1\r\nHost: airlock\r\nUser-Agent: airlock-bench\r\n\r\n")
        .await?;
    let status = next_line(&mut follower).await?;
    if status.split(' ').nth(1) != Some("200") {
        bail!("event stream refused: {status}");
    }
    let mut timed = Timed::default();
    for i in 0..n {
        let host = format!("lag{i}.denied.bench");
        let r: anyhow::Result<u64> = async {
            let refused = through(proxy, &host).await?;
            let seen_by_agent = Instant::now();
            if !refused.contains("blocked-by-policy") {
                bail!("not refused blocked-by-policy: {refused:?}");
            }
            let quoted = format!("\"host\":\"{host}\"");
            within(CALL_TIMEOUT, async {
                loop {
                    let line = next_line(&mut follower).await?;
                    if line.contains(&quoted) {
                        return Ok(());
                    }
                }
            })
            .await?;
            Ok(u64::try_from(seen_by_agent.elapsed().as_nanos()).unwrap_or(u64::MAX))
        }
        .await;
        timed.add(r);
    }
    println!("{}", timed.line("what=a_denial_to_logs_-f requests"));
    Ok(())
}

/// Timed attempts: each one's nanoseconds, or its error.
#[derive(Default)]
struct Timed {
    lat_ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Timed {
    fn add(&mut self, attempt: anyhow::Result<u64>) {
        match attempt {
            Ok(ns) => self.lat_ns.push(ns),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }

    /// `key=value` pairs: `count` (the attempts timed), errors, latency p50 / p99 / max
    /// in µs, and the first error.
    fn line(mut self, count: &str) -> String {
        let lat = &mut self.lat_ns;
        lat.sort_unstable();
        let max = lat.last().map_or(f64::NAN, |v| *v as f64 / 1000.0);
        let mut out = format!(
            "{count}={} errors={} p50_us={:.1} p99_us={:.1} max_us={max:.1}",
            lat.len(),
            self.errors,
            pct(lat, 0.50),
            pct(lat, 0.99),
        );
        if let Some(e) = self.first_error {
            out.push_str(&format!(" first_error={:?}", e.replace(' ', "_")));
        }
        out
    }
}

/// The next line `r` sends (its end cut off): an error at the stream's end.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> anyhow::Result<String> {
    use tokio::io::AsyncBufReadExt;
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        bail!("the event stream ended");
    }
    Ok(line.trim_end().to_owned())
}

/// The operator's approve round trip (issue 42), `n` times: the agent asks through the
/// proxy at `proxy` for a host no rule lists (refused `approval-required`, its item named),
/// then the operator's `approve` with `scope` (`once`, or `always`: a grant, a policy
/// revision with its grants file written and synced) goes to the admin socket, timed from
/// connect to last byte (the answer returns once it is in force: the tests show the next
/// request passing). Prints `key=value` pairs: answers, errors, latency p50 / p99 / max in
/// µs.
pub async fn approve_rtt(
    socket: &Path,
    proxy: std::net::SocketAddr,
    n: usize,
    scope: &str,
) -> anyhow::Result<()> {
    let mut timed = Timed::default();
    for i in 0..n {
        let host = format!("{scope}{i}.approvals.bench");
        let r: anyhow::Result<u64> = async {
            let refused = through(proxy, &host).await?;
            let id = json_str(&refused, "approval_id")
                .with_context(|| format!("no approval_id in the refusal: {refused:?}"))?
                .to_owned();
            let body = format!(r#"{{"id":"{id}","approve":true,"scope":"{scope}"}}"#);
            let req = format!(
                "POST /v1/approval/answer HTTP/1.1\r\nHost: airlock\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let t0 = Instant::now();
            let r = within(CALL_TIMEOUT, async {
                let s = UnixStream::connect(socket)
                    .await
                    .with_context(|| format!("connecting to {}", socket.display()))?;
                let mut c = Conn::new(s);
                c.send(req.as_bytes()).await?;
                c.response().await
            })
            .await?;
            let took = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if r.status != 200 {
                bail!("the answer got status {}", r.status);
            }
            Ok(took)
        }
        .await;
        timed.add(r);
    }
    println!("{}", timed.line("answers"));
    Ok(())
}
