//! The scale curve: how the proxy's memory and CPU per request grow with the number of
//! connections it holds open at once.
//!
//! At each step the client opens connections up to that count (every one through the
//! proxy, warmed with one request), then runs `rounds` rounds of one request on every open
//! connection. Per step it prints the proxy's RSS and open file descriptors with all of
//! them open, and the proxy's CPU per request over the rounds. After the last step every
//! connection is closed and the proxy's descriptor count must come back to where it was
//! before the first (within a few seconds): a leak fails the run.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::http::{self, Conn, Route, within};
use crate::procfs;

/// Request timeout: a stuck request fails the step instead of hanging the run.
const REQ_TIMEOUT: u64 = 10;
/// How long the proxy gets to close its side once the client closed every connection.
const SETTLE: Duration = Duration::from_secs(10);

/// One scale run.
#[derive(Debug, Clone)]
pub struct Spec {
    pub route: Route,
    /// Connection counts, ascending.
    pub steps: Vec<usize>,
    /// Rounds (one request on every connection) per step, at least.
    pub rounds: usize,
    /// Seconds of rounds per step, at least (CPU time is counted in 10 ms ticks: a short
    /// step would read as zero).
    pub secs: f64,
    pub pid: u32,
    /// Row name printed with each step.
    pub row: String,
}

async fn request(c: &mut Conn, req: &[u8]) -> anyhow::Result<()> {
    c.send(req).await?;
    let r = c.response().await?;
    if r.status != 200 {
        bail!("status {}", r.status);
    }
    Ok(())
}

/// Opens and warms one connection.
async fn open(route: &Route, req: &[u8]) -> anyhow::Result<Conn> {
    within(REQ_TIMEOUT, async {
        let mut c = http::open(route).await?;
        request(&mut c, req).await?;
        Ok(c)
    })
    .await
}

/// One request on every connection, all in flight at once; the connections come back.
async fn round(conns: Vec<Conn>, req: &[u8]) -> anyhow::Result<Vec<Conn>> {
    let mut tasks = Vec::with_capacity(conns.len());
    for mut c in conns {
        let req = req.to_vec();
        tasks.push(tokio::spawn(async move {
            within(REQ_TIMEOUT, request(&mut c, &req)).await.map(|()| c)
        }));
    }
    let mut back = Vec::with_capacity(tasks.len());
    for t in tasks {
        back.push(t.await??);
    }
    Ok(back)
}

/// Runs the curve and prints one `row|scale-N|key=value…` line per step, then
/// `row|scale-close|…` with the descriptor counts before and after.
pub async fn run(spec: Spec) -> anyhow::Result<()> {
    let req = http::request(spec.route.via, &spec.route.target, "/x", false);
    let fds_before = procfs::fds(spec.pid)?;
    let mut conns: Vec<Conn> = Vec::new();
    for &n in &spec.steps {
        while conns.len() < n {
            let c = open(&spec.route, &req)
                .await
                .with_context(|| format!("opening connection {} of {n}", conns.len() + 1))?;
            conns.push(c);
        }
        let cpu0 = procfs::cpu_ticks(spec.pid)?;
        let t0 = Instant::now();
        let mut rounds = 0;
        while rounds < spec.rounds || t0.elapsed().as_secs_f64() < spec.secs {
            conns = round(conns, &req)
                .await
                .with_context(|| format!("a round with {n} connections open"))?;
            rounds += 1;
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu_us =
            procfs::cpu_ticks(spec.pid)?.saturating_sub(cpu0) as f64 * 1e6 / procfs::clk_tck();
        let requests = (n * rounds) as f64;
        let (rss, _) = procfs::rss_kib(spec.pid);
        let fds = procfs::fds(spec.pid)?;
        println!(
            "{}|scale-{n}|conns={n} requests={requests:.0} rps={:.0} cpu_us_per_req={:.1} rss_kib={rss} fds={fds}",
            spec.row,
            requests / secs,
            cpu_us / requests,
        );
    }
    drop(conns);
    let deadline = Instant::now() + SETTLE;
    let mut fds_after = procfs::fds(spec.pid)?;
    while fds_after > fds_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fds_after = procfs::fds(spec.pid)?;
    }
    let (rss, _) = procfs::rss_kib(spec.pid);
    println!(
        "{}|scale-close|fds_before={fds_before} fds_after={fds_after} rss_kib={rss}",
        spec.row
    );
    if fds_after > fds_before {
        bail!(
            "{}: {} descriptors still open {} s after every connection closed (fd leak)",
            spec.row,
            fds_after - fds_before,
            SETTLE.as_secs()
        );
    }
    Ok(())
}
