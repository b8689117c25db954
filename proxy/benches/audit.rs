//! What write-before-answer costs a request (issue 13 item 1's benchmark): the process's
//! CPU time (user + system, every thread: the helper thread's wakes and writes included)
//! per allowed request, whose `open` line is written before it goes upstream and whose
//! final line follows, against references that buffer the one line a writer that answers
//! first needs (the final one) and write 64 KiB at a time: with serde_json (the writer
//! before issue 13) and with the log's own line writer. Sequential requests, the worst case
//! for group commit: nothing to share a `write(2)` with. Prints a table (median of rounds),
//! then what the difference is made of: the same path into a log that writes nothing (the
//! user-space share), one record's JSON (the `open` line is one more per request) and one
//! bare append of a line (the kernel's share, which grows with the bytes); the same
//! requests under a cap they pass many times over (the stream rotates and the helper thread
//! sorts each aged-out file into the archives); the CPU of a denial written whole, folded
//! into its destination's count, and counted in the overflow of a full destination table;
//! then the audit bytes an allowed request and a denial write, and what a flood of denials
//! to one destination costs once the log folds it; last, what the hash chain costs per line
//! (issue 41 item 6: one record's JSON line before and after it is sealed into the chain,
//! in the same run, the target ≤ 1 µs a line) and what `airlock audit verify` takes a line.
//!
//! Run: `cargo bench -p airlock-proxy --bench audit` (`AUDIT_ECHO=1` turns the human echo
//! on, as `AIRLOCK_PROXY_LOG=info`, the default, does; send stderr to `/dev/null` then).
//! For instruction counts, the same under `perf stat -e instructions:u,instructions:k`.

#![allow(clippy::expect_used)] // a bench that cannot open its log has nothing to measure

use std::io::Write;
use std::time::{Instant, SystemTime};

use airlock_audit_schema::chain;
use airlock_proxy::audit::{self, Bounds, Kind, Record, Verdict, Who};

const ROUNDS: usize = 7;
const REQUESTS: u64 = 20_000;

/// CPU seconds (user + system) of the whole process so far.
fn cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a zeroed rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    let secs = |t: libc::timeval| {
        #[allow(clippy::cast_precision_loss)] // seconds of CPU: far below 2^52
        let s = t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        s
    };
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// A request's record as the proxy fills it for a plain allowed GET.
fn record(who: &Who, i: u64) -> Record {
    let mut r = Record::new(
        who,
        SystemTime::now(),
        Kind::Http,
        Some("127.0.0.1:40000".parse().expect("addr")),
    );
    r.uid = Some(1000);
    r.method = Some("GET".into());
    r.host = Some("api.example.com".into());
    r.port = Some(443);
    r.path = Some(format!("/v1/items/{i}"));
    r.decision = Verdict::Allow;
    r.rule = Some("api.example.com".into());
    r.upstream = Some("203.0.113.10:443".parse().expect("addr"));
    r.upstream_local_port = Some(51000);
    r
}

/// A refusal as the proxy records it: a plain GET to a host the policy does not name.
fn denial(who: &Who, i: u64) -> Record {
    let mut r = record(who, i);
    r.decision = Verdict::Deny;
    r.reason = Some(airlock_policy::reason::Reason::BlockedByPolicy);
    r.rule = None;
    r.upstream = None;
    r.upstream_local_port = None;
    r
}

/// The size of the file at `path`.
fn bytes(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).expect("the log is there").len()
}

/// A log that takes every line and writes nothing: the same path without the kernel.
struct Discard;

impl audit::LogFile for Discard {
    fn append(&mut self, buf: &[u8]) -> std::io::Result<()> {
        std::hint::black_box(buf);
        Ok(())
    }

    fn truncate(&mut self, _len: u64) -> std::io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sequential allowed requests on `log`: the `open` line written, then the final line
/// queued.
fn write_before_answer(log: &audit::Audit, who: &Who, round: u64) {
    for i in 0..REQUESTS {
        let mut r = record(who, round * REQUESTS + i);
        log.commit_open(&mut r).expect("written");
        r.status = Some(200);
        r.bytes_down = 512;
        log.emit_detached(r);
    }
}

/// Median (CPU µs, wall µs) per request of `ROUNDS` runs of `run`.
fn median(mut run: impl FnMut(u64)) -> (f64, f64) {
    let mut cpus = Vec::new();
    let mut walls = Vec::new();
    for round in 0..ROUNDS as u64 {
        let (c, t) = (cpu(), Instant::now());
        run(round);
        #[allow(clippy::cast_precision_loss)]
        let n = REQUESTS as f64;
        cpus.push((cpu() - c) / n * 1e6);
        walls.push(t.elapsed().as_secs_f64() / n * 1e6);
    }
    cpus.sort_by(f64::total_cmp);
    walls.sort_by(f64::total_cmp);
    (cpus[ROUNDS / 2], walls[ROUNDS / 2])
}

fn main() {
    if std::env::var_os("AUDIT_ECHO").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .init();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let who = Who::new("bench", "bench", Some("c0ffee"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // A cap the rounds never reach: no rotation inside a measurement.
    let unrotated = Bounds {
        cap: 1 << 40,
        ..Bounds::default()
    };
    let path = dir.path().join("audit.jsonl");
    let (log, writer) = audit::open(&path, who.clone(), unrotated).expect("open");
    let (wba_cpu, wba_wall) = median(|round| write_before_answer(&log, &who, round));
    rt.block_on(writer.finish()).expect("finish");
    let per_allowed = bytes(&path) / (ROUNDS as u64 * REQUESTS);

    // The same under a cap the rounds pass many times over: the stream rotates, and the
    // helper thread sorts each aged-out file into the archives (its CPU is in the figure).
    let rotating = Bounds {
        cap: 16 << 20,
        ..Bounds::default()
    };
    let sorted_dir = dir.path().join("sorted");
    std::fs::create_dir(&sorted_dir).expect("mkdir");
    let (log, writer) =
        audit::open(&sorted_dir.join("audit.jsonl"), who.clone(), rotating).expect("open");
    let (sorted_cpu, sorted_wall) = median(|round| write_before_answer(&log, &who, round));
    rt.block_on(writer.finish()).expect("finish");
    let rotated_away = std::fs::read_dir(&sorted_dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".allowed"))
        .count();

    // Denials: each to a new destination (its own line); a flood to one destination (folded
    // after its first lines into one counted line); a flood to ever new destinations past the
    // table (counted in its overflow). CPU per denial, the helper's reports included.
    let denied = dir.path().join("denied.jsonl");
    // A table that holds every destination of the rounds: each has its own line.
    let roomy = Bounds {
        destinations: ROUNDS * usize::try_from(REQUESTS).expect("fits"),
        ..unrotated
    };
    let (log, writer) = audit::open(&denied, who.clone(), roomy).expect("open");
    let (new_cpu, _) = median(|round| {
        for i in 0..REQUESTS {
            let mut d = denial(&who, i);
            d.host = Some(format!("h{round}-{i}.example"));
            log.commit(&d).expect("written");
        }
    });
    rt.block_on(writer.finish()).expect("finish");
    let per_denial = bytes(&denied) / (ROUNDS as u64 * REQUESTS);
    let flood_path = dir.path().join("flood.jsonl");
    let (log, writer) = audit::open(&flood_path, who.clone(), unrotated).expect("open");
    let (folded_cpu, _) = median(|_| {
        for i in 0..REQUESTS {
            log.commit(&denial(&who, i)).expect("written");
        }
    });
    rt.block_on(writer.finish()).expect("finish");
    const FLOOD: u64 = ROUNDS as u64 * REQUESTS;
    let flood_bytes = bytes(&flood_path);
    let over_path = dir.path().join("overflow.jsonl");
    let small_table = Bounds {
        destinations: 64,
        ..unrotated
    };
    let (log, writer) = audit::open(&over_path, who.clone(), small_table).expect("open");
    let (over_cpu, _) = median(|round| {
        for i in 0..REQUESTS {
            let mut d = denial(&who, i);
            d.host = Some(format!("o{round}-{i}.example"));
            log.commit(&d).expect("written");
        }
    });
    rt.block_on(writer.finish()).expect("finish");

    let (log, writer) =
        audit::start(&path, Box::new(Discard), 0, who.clone(), unrotated).expect("start");
    let (discard_cpu, discard_wall) = median(|round| write_before_answer(&log, &who, round));
    rt.block_on(writer.finish()).expect("finish");

    // The references: a writer that answers first and only buffers the final line, written
    // by serde_json (the writer before issue 13) or by the line writer the log now uses.
    let mut file = std::fs::File::create(dir.path().join("buffered.jsonl")).expect("create");
    let mut buffered = |hand_written: bool| {
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        median(|round| {
            for i in 0..REQUESTS {
                let mut r = record(&who, round * REQUESTS + i);
                r.status = Some(200);
                r.bytes_down = 512;
                if hand_written {
                    r.write_json(&mut buf).expect("json");
                } else {
                    serde_json::to_writer(&mut buf, &r).expect("json");
                }
                buf.push(b'\n');
                if buf.len() > 60 * 1024 {
                    file.write_all(&buf).expect("write");
                    buf.clear();
                }
            }
        })
    };
    let (serde_cpu, serde_wall) = buffered(false);
    let (buf_cpu, buf_wall) = buffered(true);

    // Where the difference goes: one record's JSON (the open line is one more of these per
    // request) and one bare append of such a line (the `write(2)` itself).
    let mut line: Vec<u8> = Vec::with_capacity(1024);
    let sample = record(&who, 7);
    let (json_cpu, json_wall) = median(|_| {
        for _ in 0..REQUESTS {
            line.clear();
            std::hint::black_box(&sample)
                .write_json(&mut line)
                .expect("json");
        }
    });
    // The hash chain: the same line sealed after the one before it (every line the log
    // writes is), then the chain of a log of such lines verified.
    let mut sealed: Vec<u8> = Vec::with_capacity(1024);
    let mut head = chain::GENESIS;
    let (chained_cpu, chained_wall) = median(|_| {
        for _ in 0..REQUESTS {
            sealed.clear();
            std::hint::black_box(&sample)
                .write_json(&mut sealed)
                .expect("json");
            head = chain::seal(&mut sealed, 0, &head).expect("sealed");
        }
    });
    let mut log_text: Vec<u8> = Vec::new();
    let mut head = chain::GENESIS;
    for i in 0..REQUESTS {
        let start = log_text.len();
        record(&who, i).write_json(&mut log_text).expect("json");
        head = chain::seal(&mut log_text, start, &head).expect("sealed");
        log_text.push(b'\n');
    }
    let names = ["audit.jsonl".to_owned()];
    let (verify_cpu, verify_wall) = median(|_| {
        let intact =
            chain::verify(&names, |_| Ok(std::io::Cursor::new(&log_text[..]))).expect("intact");
        assert_eq!(intact.head, head);
    });
    line.push(b'\n');
    let mut bare = std::fs::File::options()
        .append(true)
        .create(true)
        .open(dir.path().join("bare.jsonl"))
        .expect("create");
    let (write_cpu, write_wall) = median(|_| {
        for _ in 0..REQUESTS {
            bare.write_all(&line).expect("write");
        }
    });

    println!("per sequential allowed request          CPU µs   wall µs");
    println!("write-before-answer (open+final)      {wba_cpu:>8.2} {wba_wall:>9.2}");
    println!("buffered final line, serde_json       {serde_cpu:>8.2} {serde_wall:>9.2}");
    println!("buffered final line, same line writer {buf_cpu:>8.2} {buf_wall:>9.2}");
    println!(
        "difference to serde_json's             {:>8.2} {:>9.2}",
        wba_cpu - serde_cpu,
        wba_wall - serde_wall
    );
    println!(
        "difference to the same line writer's   {:>8.2} {:>9.2}",
        wba_cpu - buf_cpu,
        wba_wall - buf_wall
    );
    println!("of which, measured alone:");
    println!("  the same, no write(2) at all        {discard_cpu:>8.2} {discard_wall:>9.2}");
    println!("  one record's JSON line              {json_cpu:>8.2} {json_wall:>9.2}");
    println!(
        "  one {}-byte append (write(2))       {write_cpu:>8.2} {write_wall:>9.2}",
        line.len()
    );
    println!(
        "write-before-answer, log rotating (16 MiB cap, sorted into archives: {rotated_away} files)"
    );
    println!("                                      {sorted_cpu:>8.2} {sorted_wall:>9.2}");
    println!("per denial                              CPU µs");
    println!("  to a new destination (its own line) {new_cpu:>8.2}");
    println!("  to one destination, folded          {folded_cpu:>8.2}");
    println!("  to new destinations past the table  {over_cpu:>8.2}");
    println!("audit bytes (path /v1/items/N)");
    println!("  per allowed request (open + final)  {per_allowed:>8}");
    println!("  per denial (its own line)           {per_denial:>8}");
    println!(
        "  a flood of {FLOOD} denials to one destination (folded)  {flood_bytes:>8} ({:.2} per denial)",
        flood_bytes as f64 / FLOOD as f64
    );
    println!("hash chain, per line                    CPU µs   wall µs");
    println!("  one record's JSON line (before)     {json_cpu:>8.2} {json_wall:>9.2}");
    println!("  the same, sealed into the chain     {chained_cpu:>8.2} {chained_wall:>9.2}");
    println!(
        "  chaining alone (the difference)     {:>8.2} {:>9.2}",
        chained_cpu - json_cpu,
        chained_wall - json_wall
    );
    println!("  verified (airlock audit verify)     {verify_cpu:>8.2} {verify_wall:>9.2}");
}
