//! The audit log as an attack surface (issue 13): the agent tries to fill the audit volume
//! so that traffic passes unaudited, or so that the operator loses the record. The audit
//! directory is a small tmpfs of the test's own; the real entrypoint, proxy and firewall run
//! in the namespace world.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A tmpfs of `size` on `dir`, unmounted when dropped (before the world's directory is
/// removed: declare it after the world).
struct Volume(PathBuf);

impl Volume {
    fn mount(dir: &Path, size: &str) -> Volume {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount a tmpfs on {}", dir.display());
        Volume(dir.to_owned())
    }

    /// Bytes the audit log's files take.
    fn audit_bytes(&self) -> u64 {
        std::fs::read_dir(&self.0)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("audit.jsonl"))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    }

    /// Every line of the current and rotated audit files, oldest first.
    fn all_lines(&self) -> Vec<serde_json::Value> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("audit.jsonl"))
            .collect();
        // audit.jsonl.N (oldest = highest N) ... audit.jsonl.1, then audit.jsonl.
        names.sort_by_key(|n| {
            std::cmp::Reverse(
                n.strip_prefix("audit.jsonl.")
                    .and_then(|s| s.parse::<u32>().ok())
                    .unwrap_or(0),
            )
        });
        names
            .iter()
            .flat_map(|n| {
                let text = std::fs::read_to_string(self.0.join(n)).unwrap();
                assert!(
                    text.is_empty() || text.ends_with('\n'),
                    "{n} ends in a cut line"
                );
                text.lines()
                    .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{n}: {l:?}: {e}")))
                    .collect::<Vec<serde_json::Value>>()
            })
            .collect()
    }

    /// The stream's hash chain verified as `airlock audit verify` does (every file of the
    /// volume given, the archives set aside).
    fn verified(&self) -> airlock_audit_schema::chain::Intact {
        use airlock_audit_schema::chain;
        let files: Vec<PathBuf> = std::fs::read_dir(&self.0)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().contains("audit.jsonl"))
            .collect();
        let (stream, _archives) = chain::order(&files);
        chain::verify_paths(&stream).unwrap_or_else(|e| panic!("the audit chain: {e}"))
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or("<missing>")
}

/// A Python agent: `n` requests through the explicit proxy to `url_base` + a path of
/// `path_len` bytes, keep-alive, printing `<name>=<count of each status>`.
fn flood(name: &str, url_base: &str, n: usize, path_len: usize) -> String {
    format!(
        r#"python3 - <<'PY'
import http.client, collections, time
t0 = time.time()
counts = collections.Counter()
conn = None
for i in range({n}):
    path = "/{name}-%d-" % i + "x" * {path_len}
    for attempt in range(3):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
            conn.request("GET", "{url_base}" + path, headers={{"Host": "{url_base}".split("/")[2]}})
            r = conn.getresponse()
            r.read()
            counts[r.status] += 1
            if r.getheader("connection", "").lower() == "close":
                conn.close(); conn = None
            break
        except (http.client.HTTPException, OSError):
            conn = None
print("{name}=" + ",".join("%d:%d" % kv for kv in sorted(counts.items())))
print("{name}-secs=%.2f" % (time.time() - t0))
PY
"#
    )
}

/// The flood that once filled a 1 MiB audit volume so that every later request passed
/// unaudited: 3,000 denials with 3 KB paths, then 250 allowed requests with 3 KB paths,
/// against an audit log capped at 1 MB on a 2 MiB volume. The denials fold into counted
/// lines, the allowed lines rotate within the cap, the volume never fills, and the
/// requests after the flood (explicit, tunnelled, transparent) are served and audited.
/// Nor can the flood erase what came before it: the agent's first attempts on ten other
/// hosts are still in the log after the stream rotated, a `rotated` line says what left,
/// and every denial and every allowed request is a line or a count.
#[test]
fn the_agent_cannot_fill_the_audit_volume_and_what_follows_is_audited() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let volume = Volume::mount(&airlock.audit_dir, "2m");
    let early: String = (0..10)
        .map(|i| {
            format!(
                "echo early{i}=$({} -o /dev/null -w '%{{http_code}}' http://early{i}.test/first)\n",
                curl(&world, "")
            )
        })
        .collect();
    let script = format!(
        "{early}{}\n{}\necho explicit=$({} -o /dev/null -w '%{{http_code}}' http://allowed.test/after-explicit)\n\
         echo tunnel=$({} -o /dev/null -w '%{{http_code}}' https://allowed.test/after-tunnel)\n\
         echo transparent=$({} --noproxy '*' -o /dev/null -w '%{{http_code}}' http://allowed.test/after-transparent)\n",
        flood("denied", "http://blocked.test", 3000, 3000),
        flood("allowed", "http://allowed.test", 250, 3000),
        curl(&world, ""),
        curl(&world, ""),
        curl(&world, ""),
    );
    let out = airlock
        .command(&world, &["sh", "-c", &script])
        .env("AIRLOCK_AUDIT_CAP", "1000000")
        .output()
        .unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert_eq!(
        line(&text, "denied"),
        "403:3000",
        "{text}\n{}",
        stderr(&out)
    );
    assert_eq!(
        line(&text, "allowed"),
        "200:250",
        "{text}\n{}",
        stderr(&out)
    );
    for name in ["explicit", "tunnel", "transparent"] {
        assert_eq!(line(&text, name), "200", "{name}: {text}\n{}", stderr(&out));
    }
    assert!(
        volume.audit_bytes() <= 1_000_000 + 16 * 1024,
        "the log passed its cap: {} bytes",
        volume.audit_bytes()
    );
    let lines = volume.all_lines();
    assert!(
        !lines.iter().any(|l| l["event"] == "outage"),
        "the agent pushed the log into its outage"
    );
    let written = lines
        .iter()
        .filter(|l| {
            l["reason"] == "blocked-by-policy"
                && l["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/denied-"))
        })
        .count() as u64;
    assert!(
        written < 200,
        "the flood was written line by line: {written}"
    );
    for i in 0..10 {
        assert_eq!(line(&text, &format!("early{i}")), "403", "{text}");
        let host = format!("early{i}.test");
        assert!(
            lines
                .iter()
                .any(|l| l["host"] == host.as_str() && l["decision"] == "deny"),
            "the flood rotated the first attempt on {host} out of the log"
        );
    }
    // The stream rotated: what it dropped is said, and it is all the agent's own flood.
    let rotated = lines
        .iter()
        .filter(|l| l["event"] == "rotated")
        .max_by_key(|l| l["total"]["lines"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("the stream never rotated, or said nothing of it"));
    let dropped = rotated["total"]["dropped"].as_array().unwrap();
    let dropped_of = |pred: &dyn Fn(&serde_json::Value) -> bool, host: &str, field: &str| -> u64 {
        dropped
            .iter()
            .filter(|e| pred(e))
            .flat_map(|e| e["hosts"].as_array().unwrap())
            .filter(|h| h["host"] == host)
            .map(|h| h[field].as_u64().unwrap())
            .sum()
    };
    let blocked_whole_dropped = dropped_of(
        &|e| e["decision"] == "deny" && e["event"].is_null(),
        "blocked.test",
        "lines",
    );
    let blocked_folded_dropped =
        dropped_of(&|e| e["event"] == "suppressed", "blocked.test", "folded");
    let blocked_whole = lines
        .iter()
        .filter(|l| l["decision"] == "deny" && l["event"].is_null() && l["host"] == "blocked.test")
        .count() as u64;
    let blocked_folded: u64 = lines
        .iter()
        .filter(|l| l["event"] == "suppressed" && l["host"] == "blocked.test")
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        blocked_whole + blocked_folded + blocked_whole_dropped + blocked_folded_dropped,
        3000,
        "every denial to blocked.test: a line, a count, or dropped and counted ({rotated})"
    );
    // Allowed lines leave only for newer allowed lines, counted (the ones the stream moved
    // are counted unread when the allowed archive drops them: kind `*`).
    let allowed_final = lines
        .iter()
        .filter(|l| {
            l["kind"] == "http"
                && l["decision"] == "allow"
                && l["event"].is_null()
                && l["host"] == "allowed.test"
        })
        .count() as u64;
    let allowed_dropped: u64 = dropped
        .iter()
        .filter(|e| e["kind"] == "*" || e["decision"] == "allow")
        .map(|e| e["lines"].as_u64().unwrap())
        .sum();
    assert!(allowed_final <= 251, "{allowed_final}");
    assert!(
        allowed_final + allowed_dropped >= 251,
        "allowed requests neither in the log nor counted: {allowed_final} there, {allowed_dropped} dropped"
    );
    let after = |kind: &str, host_path: Option<&str>| {
        lines.iter().any(|l| {
            l["kind"] == kind
                && l["decision"] == "allow"
                && host_path.is_none_or(|p| l["path"] == p)
        })
    };
    assert!(
        after("http", Some("/after-explicit")),
        "explicit request not audited"
    );
    assert!(after("connect", None), "tunnel not audited");
    assert!(
        after("transparent", Some("/after-transparent")),
        "transparent request not audited"
    );
    // The stream is one hash chain whose beginning a rotated line accounts for.
    let intact = volume.verified();
    assert!(
        intact.after.is_some(),
        "the stream aged out: its first line follows a line a rotated line names"
    );
}

/// When the audit volume is full, nothing is served unaudited: every request is refused
/// `503 audit-unavailable` and never reaches the upstream; no cut line stays in the file;
/// once there is room again requests are served, and the log says how many were refused.
#[test]
fn a_full_audit_volume_refuses_every_request_until_it_has_room() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let volume = Volume::mount(&airlock.audit_dir, "512k");
    // Leave about 96 KiB: the start-up's lines fit, the agent's requests soon do not.
    let filler = airlock.audit_dir.join("filler");
    let st = Command::new("dd")
        .args(["if=/dev/zero", "bs=1k", "count=416", "status=none"])
        .arg(format!("of={}", filler.display()))
        .status()
        .unwrap();
    assert!(st.success());
    let script = format!(
        "{}\necho health-down=$({health})\n: > ready\nwhile [ ! -e go ]; do sleep 0.05; done\n\
         echo after=$({} -o /dev/null -w '%{{http_code}}' http://allowed.test/after-room)\n\
         echo health-up=$({health})\n",
        flood("fill", "http://allowed.test", 200, 1500),
        curl(&world, ""),
        health = "curl -s --noproxy '*' -w ':%{http_code}' http://127.0.0.1:3128/__airlock/health",
    );
    // stderr to a file: a pipe nobody reads while the test waits would fill up.
    let err_path = world.dir().join("entrypoint.stderr");
    let child = airlock
        .command(&world, &["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    airlock.wait_for_agent_file("ready");
    std::fs::remove_file(&filler).unwrap();
    std::fs::write(airlock.workdir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(out.status.success(), "{}\n{err}", stdout(&out));
    let text = stdout(&out);
    let fill = line(&text, "fill");
    let refused: u64 = fill
        .split(',')
        .filter_map(|kv| kv.strip_prefix("503:"))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert!(refused > 0, "the volume never filled: {fill}\n{err}");
    assert!(!fill.contains("500") && !fill.contains("502"), "{fill}");
    assert_eq!(line(&text, "after"), "200", "{text}\n{err}");
    // The health answer says so while the log cannot be written, and stops saying so.
    let down = line(&text, "health-down");
    assert!(
        down.ends_with(":503") && down.contains("\"audit\":\"unavailable\""),
        "{down}"
    );
    let up = line(&text, "health-up");
    assert!(
        up.ends_with(":200") && up.contains("\"audit\":\"ok\""),
        "{up}"
    );

    // What was refused never crossed the wire; what was served was audited first.
    let lines = volume.all_lines();
    let upstream = world.upstream_log().unwrap();
    let served: Vec<&str> = upstream
        .iter()
        .filter_map(|l| l["path"].as_str())
        .filter(|p| p.starts_with("/fill-"))
        .collect();
    assert_eq!(
        served.len() as u64 + refused,
        200,
        "every request was either served or refused"
    );
    for path in &served {
        let cut: String = path.chars().take(1024).collect();
        assert!(
            lines
                .iter()
                .any(|l| l["event"] == "open" && l["path"] == cut.as_str()),
            "{path} reached the upstream with no audit line"
        );
    }
    // One outage line per outage (a short write can fit in the volume's last free bytes
    // and end one, the next write start another): together they count every refusal.
    let outages: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["event"] == "outage").collect();
    assert!(!outages.is_empty(), "no outage line");
    assert!(
        outages.iter().all(|o| o["reason"] == "audit-unavailable"),
        "{outages:?}"
    );
    let counted: u64 = outages.iter().filter_map(|o| o["refused"].as_u64()).sum();
    assert!(counted >= refused, "{counted} < {refused}: {outages:?}");
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/after-room" && l["decision"] == "allow"),
        "the request after recovery is audited"
    );
    // The outage line and what waited for it are chained in the order they were written.
    assert_eq!(volume.verified().lines, lines.len() as u64);
    // The proxy's own account goes to airlock.log in the audit directory once it can be
    // written again (its line at the start of the outage may not fit), never to the agent's
    // terminal.
    let log = std::fs::read_to_string(airlock.audit_dir.join("airlock.log")).unwrap_or_default();
    assert!(
        log.contains("is written again"),
        "the proxy said so in airlock.log:\n{log}"
    );
    assert!(
        !err.contains("refusing every request") && !err.contains("is written again"),
        "the proxy's lines stay off the agent's terminal:\n{err}"
    );
}
