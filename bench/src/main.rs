//! `airlock-bench`: the pieces of the side-by-side proxy benchmark (`bench/run.sh` drives
//! them; it owns the namespace, the pinning and the proxies' configuration).
//!
//! - `serve`: the upstream, a fast HTTP/1.1 server (so the upstream is never what is measured).
//! - `launch`: starts a proxy and times it until the first request through it succeeds.
//! - `load`: one cell (keep-alive, new connection per request, or 1 MiB bulk) with the
//!   proxy's CPU over exactly the timed window.
//! - `rss`: a proxy's resident memory now and at its peak.
//! - `scale`: the scale curve (RSS, CPU per request and descriptors at 1…1,000 open
//!   connections, and no descriptor left after they close).
//! - `relay`: the least a `CONNECT` tunnel can be (copy, or splice through the proxy's own
//!   pipe), the bare rows the airlock tunnel is read against.
//! - `relay-tls`: the least an intercepting `CONNECT` relay can be (decrypt and encrypt,
//!   nothing else), the bare row the airlock interception rows are read against.
//! - `approve-rtt`: the operator's approve round trip (issue 42), asked through the proxy
//!   and answered on the admin socket.
//! - `admin-get`, `admin-follow`: the admin API's clients (issue 41): sequential calls
//!   whose latency is reported, and an event-stream follower that reads to nowhere.
//! - `table`: the collected cells as markdown tables (and JSON for tools).
//! - `usage`: what reading an LLM API's answer for its token usage adds to each frame
//!   (issue 43), without and with the reading in one run.
//!
//! It does not install, configure or pin anything, and it never talks to a non-loopback
//! address the caller did not give it (nor a Unix socket it did not name); the bare relays connect wherever their client's
//! `CONNECT` names (in `bench/run.sh`, the upstream in its private network namespace), so
//! they are not to be left listening anywhere else.

mod admin;
mod http;
mod load;
mod procfs;
mod relay;
mod relay_tls;
mod scale;
mod server;
mod table;
mod tls;
mod usage;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

use http::{Via, within};

#[derive(Debug, Parser)]
#[command(name = "airlock-bench", about = "side-by-side proxy benchmark pieces")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve HTTP/1.1 on every `--listen` address until killed.
    Serve {
        #[arg(long, required = true)]
        listen: Vec<String>,
        /// HTTPS listeners (certificate from `--tls-dir`).
        #[arg(long)]
        tls_listen: Vec<String>,
        #[arg(long)]
        tls_dir: Option<PathBuf>,
    },
    /// Write a test CA and an upstream certificate (every 198.51.100.0/24 address) to `dir`.
    GenTls { dir: PathBuf },
    /// Start a proxy command and print its pid and the time to its first good request.
    Launch {
        #[arg(long, value_enum)]
        via: Via,
        #[arg(long)]
        proxy: String,
        #[arg(long)]
        target: String,
        /// The proxy's stdout and stderr.
        #[arg(long)]
        log: PathBuf,
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// CA the client trusts for the TLS vias (read at every attempt: a proxy may write
        /// it while starting).
        #[arg(long)]
        ca: Option<PathBuf>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run one cell and print `key=value` pairs.
    Load {
        #[arg(long, value_enum)]
        via: Via,
        #[arg(long, default_value = "")]
        proxy: String,
        #[arg(long)]
        target: String,
        #[arg(long, value_enum)]
        mode: load::Mode,
        #[arg(long, default_value_t = 3.0)]
        secs: f64,
        #[arg(long, default_value_t = 1)]
        conns: usize,
        /// The proxy's pid: its CPU (and its children's) over the window is reported.
        #[arg(long)]
        pid: Option<u32>,
        /// CA the client trusts for the TLS vias.
        #[arg(long)]
        ca: Option<PathBuf>,
    },
    /// Print `rss_kib=… hwm_kib=…` of a process tree.
    Rss { pid: u32 },
    /// Hold more and more connections open through the proxy; print one line per step.
    Scale {
        #[arg(long, value_enum)]
        via: Via,
        #[arg(long)]
        proxy: String,
        #[arg(long)]
        target: String,
        /// Connection counts, ascending.
        #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000")]
        steps: Vec<usize>,
        /// Rounds per step, at least.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Seconds per step, at least.
        #[arg(long, default_value_t = 1.0)]
        secs: f64,
        /// The proxy's pid.
        #[arg(long)]
        pid: u32,
        /// Row name for the results file.
        #[arg(long)]
        row: String,
        /// CA the client trusts for the TLS vias.
        #[arg(long)]
        ca: Option<PathBuf>,
    },
    /// Serve `CONNECT` tunnels with nothing but the relay (a bare row), until killed.
    Relay {
        #[arg(long)]
        listen: String,
        #[arg(long, value_enum)]
        mode: relay::Mode,
    },
    /// Serve intercepted `CONNECT` tunnels with nothing but TLS both sides and a copy
    /// between them (a bare row), until killed.
    RelayTls {
        #[arg(long)]
        listen: String,
        /// The upstream's certificate, key and test CA (written by `gen-tls`).
        #[arg(long)]
        tls_dir: PathBuf,
    },
    /// Call `GET --path` on the admin socket `-n` times, one after another, each on a new
    /// connection; print `key=value` pairs (latency p50 / p99 / max).
    AdminGet {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        path: String,
        #[arg(short, long, default_value_t = 2000)]
        n: usize,
    },
    /// The operator's approve round trip: `-n` times, ask through `--proxy` for a host no
    /// rule lists, answer it `approve --once` on the admin socket (timed); print
    /// `key=value` pairs (latency p50 / p99 / max).
    ApproveRtt {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        proxy: std::net::SocketAddr,
        #[arg(short, long, default_value_t = 500)]
        n: usize,
        /// The answer's scope: `once`, or `always` (a grant: a policy revision each).
        #[arg(long, default_value = "once")]
        scope: String,
    },
    /// How long a denial takes to reach an event-stream follower (`logs -f`): `-n` times,
    /// a request through `--proxy` for a host no rule lists, timed from its refusal to the
    /// follower reading its line; print `key=value` pairs (latency p50 / p99 / max).
    AdminLag {
        #[arg(long)]
        socket: PathBuf,
        #[arg(long)]
        proxy: std::net::SocketAddr,
        #[arg(short, long, default_value_t = 300)]
        n: usize,
    },
    /// Follow the admin socket's event stream, reading every line to nowhere; print
    /// `attached`, then on `SIGTERM` or the stream's end the lines read.
    AdminFollow {
        #[arg(long)]
        socket: PathBuf,
    },
    /// Print what reading an LLM answer for its token usage adds per frame.
    Usage {
        /// Passes of the whole answer per measurement.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Print the results file as markdown tables; `--json FILE` also writes it as JSON.
    Table {
        results: PathBuf,
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the runtime")?;
    match cli.cmd {
        Cmd::Serve {
            listen,
            tls_listen,
            tls_dir,
        } => {
            let tls = match tls_dir {
                Some(d) => Some(tls::server(&d)?),
                None => None,
            };
            rt.block_on(server::serve(listen, tls_listen, tls))
        }
        Cmd::GenTls { dir } => tls::generate(&dir),
        Cmd::Launch {
            via,
            proxy,
            target,
            log,
            timeout,
            ca,
            command,
        } => rt.block_on(launch(
            via,
            &proxy,
            &target,
            ca.as_deref(),
            &log,
            timeout,
            &command,
        )),
        Cmd::Load {
            via,
            proxy,
            target,
            mode,
            secs,
            conns,
            pid,
            ca,
        } => rt.block_on(load::run(load::Spec {
            route: http::Route {
                via,
                proxy,
                target,
                tls: match ca {
                    Some(ca) => Some(tls::client(&ca)?),
                    None => None,
                },
            },
            mode,
            secs,
            conns,
            pid,
        })),
        Cmd::Rss { pid } => {
            let (rss, hwm) = procfs::rss_kib(pid);
            println!("rss_kib={rss} hwm_kib={hwm}");
            Ok(())
        }
        Cmd::Scale {
            via,
            proxy,
            target,
            steps,
            rounds,
            secs,
            pid,
            row,
            ca,
        } => rt.block_on(scale::run(scale::Spec {
            route: http::Route {
                via,
                proxy,
                target,
                tls: match ca {
                    Some(ca) => Some(tls::client(&ca)?),
                    None => None,
                },
            },
            steps,
            rounds,
            secs,
            pid,
            row,
        })),
        Cmd::Relay { listen, mode } => relay::run(&listen, mode),
        Cmd::RelayTls { listen, tls_dir } => rt.block_on(relay_tls::run(&listen, &tls_dir)),
        Cmd::AdminGet { socket, path, n } => rt.block_on(admin::get(&socket, &path, n)),
        Cmd::AdminFollow { socket } => rt.block_on(admin::follow(&socket)),
        Cmd::AdminLag { socket, proxy, n } => rt.block_on(admin::denial_lag(&socket, proxy, n)),
        Cmd::ApproveRtt {
            socket,
            proxy,
            n,
            scope,
        } => rt.block_on(admin::approve_rtt(&socket, proxy, n, &scope)),
        Cmd::Table { results, json } => tables(&results, json.as_deref()),
        Cmd::Usage { rounds } => {
            usage::run(rounds);
            Ok(())
        }
    }
}

/// The results file as the main table, the peers' ratios and the scale curve; and as JSON.
fn tables(results: &std::path::Path, json: Option<&std::path::Path>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("reading {}", results.display()))?;
    print!("{}", table::render(&text));
    let peers = table::render_peers(&text);
    if !peers.is_empty() {
        println!("\nagainst each peer (same mode, same run):\n\n{peers}");
    }
    let beside = table::render_beside(&text);
    if !beside.is_empty() {
        println!(
            "\nfairness (one keep-alive connection while a 1 MiB download runs on another through the same proxy):\n\n{beside}"
        );
    }
    let admin = table::render_admin(&text);
    if !admin.is_empty() {
        println!("\n{admin}");
    }
    let ask = table::render_ask(&text);
    if !ask.is_empty() {
        println!("\n{ask}");
    }
    let scale = table::render_scale(&text);
    if !scale.is_empty() {
        println!(
            "\nscale curve (connections held open at once, several rounds of one request on every one):\n\n{scale}"
        );
    }
    if let Some(path) = json {
        let body = serde_json::to_string_pretty(&table::to_json(&text))?;
        std::fs::write(path, body + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Spawns `command` (detached: it outlives us; the caller kills it by pid) and polls with
/// a real request every millisecond until one succeeds.
async fn launch(
    via: Via,
    proxy: &str,
    target: &str,
    ca: Option<&std::path::Path>,
    log: &PathBuf,
    timeout: u64,
    command: &[String],
) -> anyhow::Result<()> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let t0 = Instant::now();
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", command[0]))?;
    let pid = child.id();
    let req = http::request(via, target, "/x", false);
    let deadline = t0 + Duration::from_secs(timeout);
    loop {
        let attempt = within(2, async {
            let route = http::Route {
                via,
                proxy: proxy.to_owned(),
                target: target.to_owned(),
                tls: match ca {
                    Some(ca) => Some(tls::client(ca)?),
                    None => None,
                },
            };
            let mut c = http::open(&route).await?;
            c.send(&req).await?;
            let r = c.response().await?;
            if r.status != 200 {
                bail!("status {}", r.status);
            }
            Ok(())
        })
        .await;
        match attempt {
            Ok(()) => break,
            Err(e) => {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("{} exited ({status}) before serving: {e:#}", command[0]);
                }
                if Instant::now() > deadline {
                    bail!("{} not serving after {timeout} s: {e:#}", command[0]);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    println!("pid={pid} startup_ms={ms:.1}");
    Ok(())
}
