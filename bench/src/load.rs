//! The load generator: `conns` connections on one thread, each issuing requests back to
//! back until the deadline; per-request latency; proxy CPU over exactly the timed window.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::http::{self, Conn, within};
use crate::procfs;

/// What each request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Keep-alive: one connection (one `CONNECT`) per worker, small requests.
    Ka,
    /// A new connection (and `CONNECT`) per small request, `Connection: close`.
    New,
    /// Keep-alive, 1 MiB responses.
    Bulk,
    /// A new connection per request, each to a host (address) not seen before: for an
    /// intercepting proxy, a leaf certificate minted per request. Addresses
    /// 198.51.100.10-254 of the target's port, at most 245 requests.
    NewHost,
}

/// One cell of the table.
#[derive(Debug, Clone)]
pub struct Spec {
    pub route: http::Route,
    pub mode: Mode,
    pub secs: f64,
    pub conns: usize,
    pub pid: Option<u32>,
}

#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    /// Connections the proxy closed between requests (reopened; the time counts).
    reconnects: u64,
    bytes: u64,
    lat_ns: Vec<u64>,
    first_error: Option<String>,
}

impl Tally {
    fn error(&mut self, e: &anyhow::Error) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{e:#}"));
        }
    }
}

/// Request timeout: a stuck request fails the cell instead of hanging the run.
const REQ_TIMEOUT: u64 = 10;

async fn one(c: &mut Conn, req: &[u8]) -> anyhow::Result<http::Response> {
    c.send(req).await?;
    let r = c.response().await?;
    if r.status != 200 {
        bail!("status {}", r.status);
    }
    Ok(r)
}

async fn keep_alive(spec: Spec, mut c: Conn, deadline: Instant) -> Tally {
    let path = if spec.mode == Mode::Bulk { "/1m" } else { "/x" };
    let req = http::request(spec.route.via, &spec.route.target, path, false);
    let mut t = Tally::default();
    while Instant::now() < deadline {
        let t0 = Instant::now();
        match within(REQ_TIMEOUT, one(&mut c, &req)).await {
            Ok(r) => {
                t.requests += 1;
                t.bytes += r.body;
                t.lat_ns
                    .push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                if r.close {
                    t.reconnects += 1;
                    // A proxy that does not keep the connection: reopen (counted in time).
                    match within(REQ_TIMEOUT, http::open(&spec.route)).await {
                        Ok(n) => c = n,
                        Err(e) => {
                            t.error(&e);
                            return t;
                        }
                    }
                }
            }
            Err(e) => {
                if e.is::<http::PeerClosed>() {
                    t.reconnects += 1;
                } else {
                    t.error(&e);
                }
                match within(REQ_TIMEOUT, http::open(&spec.route)).await {
                    Ok(n) => c = n,
                    Err(e) => {
                        t.error(&e);
                        return t;
                    }
                }
            }
        }
    }
    t
}

async fn new_each(spec: Spec, deadline: Instant, next_host: Arc<AtomicU8>) -> Tally {
    let mut req = http::request(spec.route.via, &spec.route.target, "/x", true);
    let mut route = spec.route.clone();
    let port = spec
        .route
        .target
        .rsplit_once(':')
        .map_or("443", |(_, p)| p)
        .to_owned();
    let mut t = Tally::default();
    while Instant::now() < deadline {
        if spec.mode == Mode::NewHost {
            let k = next_host.fetch_add(1, Ordering::Relaxed);
            if k < 10 || k == 255 {
                break;
            }
            route.target = format!("198.51.100.{k}:{port}");
            req = http::request(route.via, &route.target, "/x", true);
        }
        let t0 = Instant::now();
        let r = within(REQ_TIMEOUT, async {
            let mut c = http::open(&route).await?;
            one(&mut c, &req).await
        })
        .await;
        match r {
            Ok(r) => {
                t.requests += 1;
                t.bytes += r.body;
                t.lat_ns
                    .push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            Err(e) => {
                t.error(&e);
                // Do not spin on a refusing proxy.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    t
}

/// The `p` quantile of `sorted` (ns), in µs; NaN when empty.
pub fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// Runs one cell and prints `key=value` pairs on one line.
pub async fn run(spec: Spec) -> anyhow::Result<()> {
    // Connections of keep-alive cells are opened (and warmed with one request) before the
    // timed window: the window measures requests, not set-up.
    let mut ready = Vec::new();
    if matches!(spec.mode, Mode::Ka | Mode::Bulk) {
        let path = if spec.mode == Mode::Bulk { "/1m" } else { "/x" };
        let req = http::request(spec.route.via, &spec.route.target, path, false);
        for _ in 0..spec.conns {
            let mut c = within(REQ_TIMEOUT, http::open(&spec.route)).await?;
            within(REQ_TIMEOUT, one(&mut c, &req)).await?;
            ready.push(c);
        }
    }
    let cpu0 = spec.pid.map(procfs::cpu_ticks);
    let steal0 = procfs::steal_ticks()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(spec.secs);
    let mut tasks = Vec::new();
    if matches!(spec.mode, Mode::New | Mode::NewHost) {
        let next_host = Arc::new(AtomicU8::new(10));
        for _ in 0..spec.conns {
            tasks.push(tokio::spawn(new_each(
                spec.clone(),
                deadline,
                Arc::clone(&next_host),
            )));
        }
    } else {
        for c in ready {
            tasks.push(tokio::spawn(keep_alive(spec.clone(), c, deadline)));
        }
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await?;
        all.requests += t.requests;
        all.errors += t.errors;
        all.reconnects += t.reconnects;
        all.bytes += t.bytes;
        all.lat_ns.extend(t.lat_ns);
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = spec.pid.map(procfs::cpu_ticks);
    let steal1 = procfs::steal_ticks()?;
    all.lat_ns.sort_unstable();
    let mut out = format!(
        "requests={} errors={} reconnects={} secs={secs:.3} rps={:.0} p50_us={:.1} p99_us={:.1} mib_s={:.1}",
        all.requests,
        all.errors,
        all.reconnects,
        all.requests as f64 / secs,
        pct(&all.lat_ns, 0.50),
        pct(&all.lat_ns, 0.99),
        all.bytes as f64 / secs / f64::from(1u32 << 20),
    );
    if let (Some(Ok(a)), Some(Ok(b))) = (cpu0, cpu1) {
        let us = (b.saturating_sub(a)) as f64 * 1e6 / procfs::clk_tck();
        let per = if all.requests > 0 {
            us / all.requests as f64
        } else {
            f64::NAN
        };
        out.push_str(&format!(" cpu_us={us:.0} cpu_us_per_req={per:.1}"));
    }
    let ticks = steal1.1.saturating_sub(steal0.1);
    if ticks > 0 {
        let stolen = steal1.0.saturating_sub(steal0.0) as f64 * 100.0 / ticks as f64;
        out.push_str(&format!(" steal_pct={stolen:.1}"));
    }
    if let Some(e) = all.first_error {
        out.push_str(&format!(" first_error={:?}", e.replace(' ', "_")));
    }
    println!("{out}");
    Ok(())
}
