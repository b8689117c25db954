//! `airlock doctor`: is this machine ready for sandboxes? One line per check (engine,
//! image, cgroup, iptables, IPv6, seccomp, disk), with the fix when something is wrong.
//!
//! The iptables and IPv6 lines come from a throwaway container of the image (root with
//! `NET_ADMIN` only, removed at once): the firewall's own tools on the engine's kernel, which
//! is what the entrypoint will meet, also when the engine is on another machine.

use airlock_cli::cli::Cli;
use airlock_cli::engine::{Engine, Facts};
use airlock_cli::paths::Paths;
use anyhow::Result;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Below this much free space a disk line is a warning.
const LOW_DISK: u64 = 2 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Level {
    Ok,
    Warn,
    Fail,
}

/// One line of the report (and one object of `--json`).
#[derive(Debug, Serialize)]
struct Check {
    check: &'static str,
    level: Level,
    detail: String,
    fix: Option<String>,
}

fn ok(check: &'static str, detail: String) -> Check {
    Check {
        check,
        level: Level::Ok,
        detail,
        fix: None,
    }
}

fn bad(check: &'static str, level: Level, detail: String, fix: &str) -> Check {
    Check {
        check,
        level,
        detail,
        fix: Some(fix.into()),
    }
}

pub async fn run(cli: &Cli, as_json: bool) -> Result<i32> {
    let mut checks = Vec::new();
    let engine = match Engine::connect().await {
        Ok(e) => Some(e),
        Err(e) => {
            let why = match &e {
                airlock_cli::engine::EngineError::Connect { host, source } => {
                    format!("unreachable at {host} ({source})")
                }
                other => other.to_string(),
            };
            checks.push(bad("engine", Level::Fail, why, "start Docker (systemctl start docker), or point DOCKER_HOST at a running engine (Podman: unix:///run/user/$UID/podman/podman.sock)"));
            None
        }
    };
    if let Some(engine) = &engine {
        checks.extend(engine_checks(engine, &cli.image).await);
    } else {
        checks.extend(local_checks());
    }
    let paths = Paths::resolve(cli.data_dir.as_deref())?;
    checks.push(disk("disk", &paths.data, "the sandboxes' checkouts"));
    print(&checks, as_json)?;
    Ok(if checks.iter().any(|c| c.level == Level::Fail) {
        1
    } else {
        0
    })
}

async fn engine_checks(engine: &Engine, image: &str) -> Vec<Check> {
    let mut out = Vec::new();
    match engine.version().await {
        Ok((v, api)) => out.push(ok("engine", format!("{v} (API {api}) at {}", engine.host))),
        Err(e) => out.push(bad(
            "engine",
            Level::Fail,
            e.to_string(),
            "check the engine's own logs (journalctl -u docker)",
        )),
    }
    let facts = engine.facts().await.ok();
    out.push(cgroup(facts.as_ref()));
    match engine.image_id(image).await {
        Ok(id) => {
            out.push(ok(
                "image",
                format!("{image} is present ({})", &id[..19.min(id.len())]),
            ));
            out.extend(firewall(engine, image).await);
        }
        Err(e) => {
            out.push(bad(
                "image",
                Level::Fail,
                format!("{image} is missing"),
                "airlock build (or scripts/build-image)",
            ));
            out.push(bad(
                "iptables",
                Level::Warn,
                format!("not probed: {e}"),
                "airlock build, then airlock doctor again",
            ));
        }
    }
    out.push(seccomp(facts.as_ref()));
    if let Some(f) = facts.as_ref().filter(|f| Path::new(&f.root_dir).is_dir()) {
        out.push(disk(
            "engine disk",
            Path::new(&f.root_dir),
            "images and containers",
        ));
    }
    out
}

/// Without an engine: what this machine itself says about cgroups and seccomp.
fn local_checks() -> Vec<Check> {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let facts = Facts {
        cgroup_version: if v2 { "2" } else { "1" }.into(),
        security_options: std::fs::read_to_string("/proc/self/status")
            .ok()
            .filter(|s| s.contains("Seccomp:"))
            .map(|_| vec!["name=seccomp".to_string()])
            .unwrap_or_default(),
        root_dir: String::new(),
        kernel: String::new(),
    };
    vec![cgroup(Some(&facts)), seccomp(Some(&facts))]
}

fn cgroup(facts: Option<&Facts>) -> Check {
    match facts.map(|f| f.cgroup_version.as_str()) {
        Some("2") => ok("cgroup", "v2 (memory, CPU and pids limits apply)".into()),
        Some("1") => bad(
            "cgroup",
            Level::Warn,
            "v1: the memory, CPU and pids limits still apply, but engines are dropping v1".into(),
            "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2)",
        ),
        _ => bad(
            "cgroup",
            Level::Warn,
            "the engine does not say which cgroup version it uses".into(),
            "check `docker info` (Cgroup Version: 2 is expected)",
        ),
    }
}

fn seccomp(facts: Option<&Facts>) -> Check {
    let opts = facts
        .map(|f| f.security_options.clone())
        .unwrap_or_default();
    match opts.iter().find(|o| o.contains("name=seccomp")) {
        Some(o) => ok(
            "seccomp",
            format!("{o} (airlock adds its own filter for the agent)"),
        ),
        None => bad(
            "seccomp",
            Level::Fail,
            "the engine runs containers without seccomp".into(),
            "use an engine built with seccomp (libseccomp) and without --security-opt seccomp=unconfined defaults",
        ),
    }
}

/// The probe: the image's iptables on the engine's kernel, IPv4 and (when the container has
/// it) IPv6.
const PROBE: &str = "iptables -V 2>&1 | head -n1; \
    iptables -w 5 -L -n >/dev/null 2>/tmp/e4 && echo v4=ok || echo \"v4=$(tail -n1 /tmp/e4)\"; \
    if [ \"$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null)\" = 0 ]; then echo ipv6=on; \
      ip6tables -w 5 -L -n >/dev/null 2>/tmp/e6 && echo v6=ok || echo \"v6=$(tail -n1 /tmp/e6)\"; \
    else echo ipv6=off; fi";

async fn firewall(engine: &Engine, image: &str) -> Vec<Check> {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    let name = format!("airlock-doctor-{}", hex::encode(b));
    let (code, out) = match engine.probe(image, &name, PROBE).await {
        Ok(r) => r,
        Err(e) => {
            return vec![bad(
                "iptables",
                Level::Fail,
                format!("the probe container did not run: {e}"),
                "run `docker run --rm --cap-add NET_ADMIN --entrypoint iptables IMAGE -L` to see why",
            )];
        }
    };
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::to_string)
    };
    let version = out.lines().next().unwrap_or("").trim().to_string();
    let mut checks = Vec::new();
    match field("v4=").as_deref() {
        Some("ok") => checks.push(ok("iptables", format!("{version}, usable by the firewall"))),
        other => checks.push(bad(
            "iptables",
            Level::Fail,
            format!("{version}: the kernel refused it ({}; exit {code})", other.unwrap_or("no answer")),
            "load nf_tables on the engine's machine (modprobe nf_tables), or use a kernel with CONFIG_NF_TABLES",
        )),
    }
    match (field("ipv6=").as_deref(), field("v6=").as_deref()) {
        (Some("off"), _) => checks.push(ok("ipv6", "off in containers (no IPv6 rules needed)".into())),
        (Some("on"), Some("ok")) => checks.push(ok("ipv6", "on in containers; ip6tables is usable, so IPv6 is firewalled too".into())),
        (Some("on"), other) => checks.push(bad(
            "ipv6",
            Level::Fail,
            format!("on in containers but ip6tables fails ({})", other.unwrap_or("no answer")),
            "load ip6_tables/nf_tables for IPv6 on the engine's machine, or turn IPv6 off for containers (sysctl net.ipv6.conf.all.disable_ipv6=1)",
        )),
        _ => checks.push(bad("ipv6", Level::Warn, "the probe did not say".into(), "run airlock doctor again")),
    }
    checks
}

/// Free space where `path` (or its nearest existing parent) lives.
fn disk(check: &'static str, path: &Path, what: &str) -> Check {
    let mut at: PathBuf = path.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(p) => at = p.to_path_buf(),
            None => break,
        }
    }
    match nix::sys::statvfs::statvfs(&at) {
        Ok(s) => {
            let free = s.blocks_available() * s.fragment_size();
            let detail = format!(
                "{:.1} GiB free at {} ({what})",
                free as f64 / f64::from(1u32 << 30),
                at.display()
            );
            if free < LOW_DISK {
                bad(
                    check,
                    Level::Warn,
                    detail,
                    "free some space: airlock gc; docker system prune",
                )
            } else {
                ok(check, detail)
            }
        }
        Err(e) => bad(
            check,
            Level::Warn,
            format!("cannot read the free space at {}: {e}", at.display()),
            "check the data directory (--data-dir)",
        ),
    }
}

fn print(checks: &[Check], as_json: bool) -> Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(checks)?);
        return Ok(());
    }
    for c in checks {
        let tag = match c.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        match &c.fix {
            Some(fix) => println!("{tag} {:<11} {}; fix: {fix}", c.check, c.detail),
            None => println!("{tag} {:<11} {}", c.check, c.detail),
        }
    }
    Ok(())
}
