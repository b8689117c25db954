//! The results file (`row|cell|key=value …` lines, written by run.sh) as one markdown table.
//!
//! Cells: `ka`, `new` (concurrent), `lat` (keep-alive, one connection: latency and the
//! unbatched CPU figure), `bulk` (1 MiB), `startup`, `idle`, `peak` (memory), `absent`
//! (a competitor that is not installed: the rest of the line says why the row has no numbers).
//! The admin rows (issue 41, `<row> + admin`) add `follower` (the event-stream follower's
//! tally), `rN-lat` / `rN-ka` / `rN-new` (further windows, alternated with their base row's),
//! `admin-load` and `admin-<call>` (the admin API's latency under a keep-alive load).

use std::collections::HashMap;
use std::fmt::Write;

type Cells = HashMap<String, HashMap<String, String>>;

fn parse(text: &str) -> (Vec<String>, HashMap<String, Cells>) {
    let mut order = Vec::new();
    let mut rows: HashMap<String, Cells> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, '|');
        let (Some(row), Some(cell), rest) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rest = rest.unwrap_or("");
        if !rows.contains_key(row) {
            order.push(row.to_owned());
        }
        let kv = rows
            .entry(row.to_owned())
            .or_default()
            .entry(cell.to_owned())
            .or_default();
        if cell == "absent" {
            kv.insert("why".into(), rest.to_owned());
            continue;
        }
        for pair in rest.split_whitespace() {
            if let Some((k, v)) = pair.split_once('=') {
                kv.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    (order, rows)
}

fn num(cells: &Cells, cell: &str, key: &str) -> Option<f64> {
    cells
        .get(cell)?
        .get(key)?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// `" (N err)"` when the cell saw failures; `" (no keep-alive)"` when the proxy closed
/// most connections after one response.
fn errs(cells: &Cells, cell: &str) -> String {
    let mut s = String::new();
    if let Some(e) = num(cells, cell, "errors").filter(|e| *e > 0.0) {
        s.push_str(&format!(" ({e:.0} err)"));
    }
    let req = num(cells, cell, "requests").unwrap_or(0.0);
    if num(cells, cell, "reconnects").is_some_and(|r| r > 0.0 && r * 2.0 >= req) {
        s.push_str(" (no keep-alive)");
    }
    s
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "—".into())
}

fn is_tls(row: &str) -> bool {
    row.contains("TLS") || row.contains("intercept")
}

/// Renders the table (and a line of notes under it).
pub fn render(text: &str) -> String {
    let (order, rows) = parse(text);
    let mut out = String::new();
    out.push_str(
        "| target | req/s keep-alive | req/s new conn | proxy CPU µs/req keep-alive (1 conn / concurrent) | proxy CPU µs/req new conn | added latency p50 / p99 ms | 1 MiB throughput MiB/s (% of direct), proxy CPU per MiB (share of its core) | RSS idle / peak MiB | start-up ms |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for name in &order {
        let c = &rows[name];
        // TLS rows compare with direct TLS, the others with direct plain TCP.
        let base_name = if is_tls(name) { "direct TLS" } else { "direct" };
        let direct = rows.get(base_name);
        let base_p50 = direct.and_then(|c| num(c, "lat", "p50_us"));
        let base_p99 = direct.and_then(|c| num(c, "lat", "p99_us"));
        let base_bulk = direct.and_then(|c| num(c, "bulk", "mib_s"));
        if let Some(why) = c.get("absent").and_then(|s| s.get("why")) {
            let _ = writeln!(out, "| {name} | {why} | | | | | | | |");
            continue;
        }
        let rps = |cell: &str| num(c, cell, "rps").map(|v| format!("{v:.0}{}", errs(c, cell)));
        let cpu = |cell: &str| num(c, cell, "cpu_us_per_req").map(|v| format!("{v:.1}"));
        let cpu_ka = match (cpu("lat"), cpu("ka")) {
            (None, None) => None,
            (a, b) => Some(format!("{} / {}", or_dash(a), or_dash(b))),
        };
        let lat = if name == base_name {
            match (base_p50, base_p99) {
                (Some(a), Some(b)) => Some(format!("(base {:.3} / {:.3})", a / 1000.0, b / 1000.0)),
                _ => None,
            }
        } else {
            match (
                num(c, "lat", "p50_us"),
                num(c, "lat", "p99_us"),
                base_p50,
                base_p99,
            ) {
                (Some(a), Some(b), Some(x), Some(y)) => Some(format!(
                    "{:.3} / {:.3}{}",
                    (a - x) / 1000.0,
                    (b - y) / 1000.0,
                    errs(c, "lat")
                )),
                _ => None,
            }
        };
        let bulk = num(c, "bulk", "mib_s").map(|v| {
            let mut s = match base_bulk {
                Some(b) if b > 0.0 => format!("{v:.0} ({:.0}%)", v * 100.0 / b),
                _ => format!("{v:.0}"),
            };
            // One request is one MiB: the proxy's CPU per MiB, and how busy that kept its
            // core (near 100%: the proxy's own work bounds the row, not waiting on peers).
            if let Some(us) = num(c, "bulk", "cpu_us_per_req") {
                let _ = write!(s, ", {us:.0} µs/MiB ({:.0}% of a core)", us * v / 1e4);
            }
            s.push_str(&errs(c, "bulk"));
            s
        });
        let mib = |cell: &str, key: &str| num(c, cell, key).map(|k| format!("{:.1}", k / 1024.0));
        let rss = match (mib("idle", "rss_kib"), mib("peak", "hwm_kib")) {
            (None, None) => None,
            (a, b) => Some(format!("{} / {}", or_dash(a), or_dash(b))),
        };
        let startup = num(c, "startup", "startup_ms").map(|v| format!("{v:.0}"));
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            or_dash(rps("ka")),
            or_dash(rps("new")),
            or_dash(cpu_ka),
            or_dash(match (cpu("new"), cpu("newhost")) {
                (n, Some(h)) => Some(format!("{} (new host: {h})", or_dash(n))),
                (n, None) => n,
            }),
            or_dash(lat),
            or_dash(bulk),
            or_dash(rss),
            or_dash(startup),
        );
    }
    let mut firsts = Vec::new();
    for name in &order {
        for (cell, kv) in &rows[name] {
            if let Some(e) = kv.get("first_error") {
                firsts.push(format!("{name}/{cell}: {e}"));
            }
        }
    }
    out.push_str(&steal_note(&order, &rows));
    if !firsts.is_empty() {
        out.push_str("\nfirst errors: ");
        out.push_str(&firsts.join("; "));
        out.push('\n');
    }
    out
}

/// Share of CPU time above which a cell's figures say more about the host than the proxy.
const STEAL_NOISY: f64 = 5.0;

/// One line on the hypervisor's steal over the timed windows (cells report `steal_pct`):
/// its median and worst, and which cells a busy host inflated.
fn steal_note(order: &[String], rows: &HashMap<String, Cells>) -> String {
    let mut all: Vec<(f64, String)> = Vec::new();
    for name in order {
        let mut cells: Vec<_> = rows[name].iter().collect();
        cells.sort_by(|a, b| a.0.cmp(b.0));
        for (cell, kv) in cells {
            if let Some(v) = kv.get("steal_pct").and_then(|v| v.parse::<f64>().ok()) {
                all.push((v, format!("{name}/{cell}")));
            }
        }
    }
    if all.is_empty() {
        return String::new();
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (median, (top, worst)) = (all[all.len() / 2].0, &all[all.len() - 1]);
    let (noisy, quiet): (Vec<_>, Vec<_>) = all.iter().partition(|(v, _)| *v > STEAL_NOISY);
    let names = |cells: &[&(f64, String)]| {
        let v: Vec<&str> = cells.iter().map(|(_, c)| c.as_str()).collect();
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(", ")
        }
    };
    let mut s = format!(
        "\nsteal (CPU time the hypervisor gave to other guests) over the timed windows: median {median:.1}%, worst {top:.1}% ({worst})"
    );
    if noisy.is_empty() {
        s.push_str(": a quiet host.\n");
        return s;
    }
    let _ = write!(
        s,
        "; {} of {} cells above {STEAL_NOISY}%, their CPU and latency figures inflated by the host",
        noisy.len(),
        all.len(),
    );
    // Name the smaller set: the inflated cells, or when most are, the clean ones.
    if noisy.len() <= quiet.len() {
        let _ = writeln!(s, ": {}", names(&noisy));
    } else {
        let _ = writeln!(s, "; clean: {}", names(&quiet));
    }
    s
}

/// The scale curve rows (`scale-N` cells, written by `airlock-bench scale`) as a second
/// table: per row and step, CPU per request, RSS and descriptors; then whether every
/// descriptor was closed after the last step.
pub fn render_scale(text: &str) -> String {
    let (order, rows) = parse(text);
    let mut out = String::new();
    for name in &order {
        let c = &rows[name];
        let mut steps: Vec<(usize, &HashMap<String, String>)> = c
            .iter()
            .filter_map(|(cell, kv)| Some((cell.strip_prefix("scale-")?.parse().ok()?, kv)))
            .collect();
        if steps.is_empty() {
            continue;
        }
        steps.sort_by_key(|(n, _)| *n);
        if out.is_empty() {
            out.push_str(
                "| target | open connections | req/s | proxy CPU µs/req | RSS MiB | proxy fds |\n",
            );
            out.push_str("|---|---:|---:|---:|---:|---:|\n");
        }
        for (n, kv) in steps {
            let get = |k: &str| kv.get(k).map_or("—", String::as_str);
            let rss = kv
                .get("rss_kib")
                .and_then(|v| v.parse::<f64>().ok())
                .map_or_else(|| "—".into(), |k| format!("{:.1}", k / 1024.0));
            let _ = writeln!(
                out,
                "| {name} | {n} | {} | {} | {rss} | {} |",
                get("rps"),
                get("cpu_us_per_req"),
                get("fds")
            );
        }
        if let Some(kv) = c.get("scale-close") {
            let get = |k: &str| kv.get(k).map_or("—", String::as_str);
            let _ = writeln!(
                out,
                "| {name} | 0 (all closed) | | | | {} (before: {}) |",
                get("fds_after"),
                get("fds_before")
            );
        }
    }
    out
}

/// The fairness cells (`beside`: one keep-alive connection while `beside-bulk`, a 1 MiB
/// download, runs on another): per row, the keep-alive rate and its share of the row's
/// one-connection rate alone (`lat`), its latency, and the download's throughput meanwhile.
pub fn render_beside(text: &str) -> String {
    let (order, rows) = parse(text);
    let mut out = String::new();
    for name in &order {
        let c = &rows[name];
        let Some(rps) = num(c, "beside", "rps") else {
            continue;
        };
        if out.is_empty() {
            out.push_str("| target | req/s keep-alive beside the download (% of alone) | latency p50 / p99 ms | 1 MiB download MiB/s meanwhile |\n");
            out.push_str("|---|---:|---:|---:|\n");
        }
        let share = num(c, "lat", "rps")
            .filter(|a| *a > 0.0)
            .map_or_else(String::new, |a| format!(" ({:.0}%)", rps * 100.0 / a));
        let ms = |k: &str| {
            num(c, "beside", k).map_or_else(|| "—".into(), |v| format!("{:.3}", v / 1000.0))
        };
        let bulk = num(c, "beside-bulk", "mib_s").map_or_else(|| "—".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            out,
            "| {name} | {rps:.0}{share}{} | {} / {} | {bulk}{} |",
            errs(c, "beside"),
            ms("p50_us"),
            ms("p99_us"),
            errs(c, "beside-bulk"),
        );
    }
    out
}

/// The mode word of a row name ("airlock connect" → "connect"; "mitmproxy intercept
/// (credential injected)" → "intercept").
fn mode_of(row: &str) -> Option<&str> {
    row.split_whitespace().nth(1)
}

/// Our rows against each peer's row of the same mode: ratios of keep-alive throughput,
/// CPU per request (lower is better: peer ÷ ours, so > 1 means ours is cheaper) and 1 MiB
/// throughput.
pub fn render_peers(text: &str) -> String {
    let (order, rows) = parse(text);
    let mut out = String::new();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "—".into(),
    };
    for ours in order.iter().filter(|r| r.starts_with("airlock ")) {
        let o = &rows[ours];
        if ours.ends_with(ADMIN) || ours.ends_with(ASK) {
            continue; // read against its base row, in its own table
        }
        for peer in order
            .iter()
            .filter(|r| !r.starts_with("airlock ") && !r.starts_with("direct"))
        {
            let p = &rows[peer];
            if mode_of(peer) != mode_of(ours) || p.contains_key("absent") {
                continue;
            }
            if out.is_empty() {
                out.push_str("| ours | peer | req/s keep-alive (ours ÷ peer) | CPU µs/req keep-alive (peer ÷ ours) | CPU µs/req new conn (peer ÷ ours) | 1 MiB MiB/s (ours ÷ peer) |\n");
                out.push_str("|---|---|---:|---:|---:|---:|\n");
            }
            let _ = writeln!(
                out,
                "| {ours} | {peer} | {} | {} | {} | {} |",
                ratio(num(o, "ka", "rps"), num(p, "ka", "rps")),
                ratio(
                    num(p, "ka", "cpu_us_per_req"),
                    num(o, "ka", "cpu_us_per_req")
                ),
                ratio(
                    num(p, "new", "cpu_us_per_req"),
                    num(o, "new", "cpu_us_per_req")
                ),
                ratio(num(o, "bulk", "mib_s"), num(p, "bulk", "mib_s")),
            );
        }
    }
    out
}

/// The suffix of a row that is its base row's proxy serving the admin API with an
/// event-stream follower attached.
pub const ADMIN: &str = " + admin";

/// `key` of `cell` and of every further window of it (`rN-cell`), in no particular order.
fn windows(c: &Cells, cell: &str, key: &str) -> Vec<f64> {
    c.iter()
        .filter(|(name, _)| {
            *name == cell
                || name.split_once('-').is_some_and(|(r, rest)| {
                    rest == cell
                        && r.len() > 1
                        && r.starts_with('r')
                        && r[1..].bytes().all(|b| b.is_ascii_digit())
                })
        })
        .filter_map(|(name, _)| num(c, name, key))
        .collect()
}

/// The median of `v` and its range.
fn median(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    Some((m, v[0], v[n - 1]))
}

/// Each row of `order` whose name is another row's plus `suffix`, with that base row.
fn variants<'a>(order: &'a [String], suffix: &str) -> Vec<(&'a String, &'a String)> {
    order
        .iter()
        .filter_map(|name| {
            let base = order
                .iter()
                .find(|b| Some(b.as_str()) == name.strip_suffix(suffix))?;
            Some((base, name))
        })
        .collect()
}

/// The proxy CPU per request of each variant row beside its base row's (medians over the
/// alternated windows, and the change), under `columns` (base, variant); and the most
/// windows a row had.
fn cpu_change(
    rows: &HashMap<String, Cells>,
    pairs: &[(&String, &String)],
    columns: (&str, &str),
) -> (String, usize) {
    let mut out = String::new();
    let mut runs = 0;
    for (base, ours) in pairs {
        let (b, o) = (&rows[*base], &rows[*ours]);
        for (cell, what) in [
            ("lat", "keep-alive, 1 conn"),
            ("ka", "keep-alive, concurrent"),
            ("new", "new conn"),
        ] {
            let (Some(x), Some(y)) = (
                median(windows(b, cell, "cpu_us_per_req")),
                median(windows(o, cell, "cpu_us_per_req")),
            ) else {
                continue;
            };
            if out.is_empty() {
                let _ = writeln!(
                    out,
                    "| proxy CPU µs/req, median (min–max) | {} | {} | change |",
                    columns.0, columns.1
                );
                out.push_str("|---|---:|---:|---:|\n");
            }
            runs = runs.max(windows(b, cell, "cpu_us_per_req").len());
            let _ = writeln!(
                out,
                "| {base}, {what} | {:.1} ({:.1}–{:.1}) | {:.1} ({:.1}–{:.1}) | {:+.1}% |",
                x.0,
                x.1,
                x.2,
                y.0,
                y.1,
                y.2,
                (y.0 / x.0 - 1.0) * 100.0
            );
        }
    }
    (out, runs)
}

/// The suffix of a row that is its base row's proxy with `[network] unlisted = "ask"`
/// (approvals on, nothing pending: every measured request is to a listed host).
pub const ASK: &str = " + ask";

/// Approvals (issue 42): per `<row> + ask` row, the proxy CPU per request beside its base
/// row's, and the operator's approve round trip (`approve` cells).
pub fn render_ask(text: &str) -> String {
    let (order, rows) = parse(text);
    let pairs = variants(&order, ASK);
    let (mut out, runs) = cpu_change(&rows, &pairs, ("approvals off", "approvals on"));
    if !out.is_empty() {
        out.insert_str(
            0,
            &format!(
                "approvals (issue 42): each proxy with [network] unlisted = \"ask\" and nothing pending, against itself without; {runs} windows each, alternated:\n\n"
            ),
        );
    }
    let mut rtt = String::new();
    for (_, ours) in &pairs {
        let c = &rows[*ours];
        for (cell, answer) in [("approve", "--once"), ("grant", "--always")] {
            if !c.contains_key(cell) {
                continue;
            }
            let ms = |k: &str| {
                num(c, cell, k).map_or_else(|| "—".into(), |v| format!("{:.3}", v / 1000.0))
            };
            let _ = writeln!(
                rtt,
                "| {ours} | {answer} | {:.0}{} | {} | {} | {} |",
                num(c, cell, "answers").unwrap_or(0.0),
                errs(c, cell),
                ms("p50_us"),
                ms("p99_us"),
                ms("max_us"),
            );
        }
    }
    if !rtt.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("the operator's approve round trip (the agent asked through the proxy and was refused approval-required; `approve` on the admin socket, a new connection, connect to last byte: the answer returns once it is in force; `--always` is a policy revision each, over the grants before it, its grants file written and synced):\n\n| proxy | answer | answers | p50 ms | p99 ms | max ms |\n|---|---|---:|---:|---:|---:|\n");
        out.push_str(&rtt);
    }
    out
}

/// The admin API's cost and latency (issue 41): per `<row> + admin` row, the proxy CPU per
/// request beside its base row's (medians over the alternated windows, and the change), the
/// follower's tally, and the admin calls' latency under a keep-alive load.
pub fn render_admin(text: &str) -> String {
    let (order, rows) = parse(text);
    let pairs = variants(&order, ADMIN);
    let (mut out, runs) = cpu_change(
        &rows,
        &pairs,
        ("without admin", "admin socket served, follower attached"),
    );
    if !out.is_empty() {
        out.insert_str(
            0,
            &format!(
                "admin API (issue 41): each proxy also serving its admin socket with an event-stream follower attached for every window, against itself without; {runs} windows each, alternated:\n\n"
            ),
        );
        let mut followers = Vec::new();
        for (_, ours) in &pairs {
            let c = &rows[*ours];
            let tallies: Vec<&HashMap<String, String>> = c
                .iter()
                .filter(|(k, _)| *k == "follower" || k.ends_with("-follower"))
                .map(|(_, kv)| kv)
                .collect();
            if tallies.is_empty() {
                continue;
            }
            let lines: f64 = tallies
                .iter()
                .filter_map(|kv| kv.get("lines")?.parse::<f64>().ok())
                .sum();
            let early = tallies
                .iter()
                .filter(|kv| kv.get("end").map(String::as_str) != Some("term"))
                .count();
            let mut s = format!("{ours}: {lines:.0} lines over {} starts", tallies.len());
            if early > 0 {
                let _ = write!(s, ", {early} ended before the windows did");
            }
            followers.push(s);
        }
        if !followers.is_empty() {
            let _ = writeln!(out, "\nthe followers read: {}.", followers.join("; "));
        }
    }
    let mut lat = String::new();
    for (_, ours) in &pairs {
        let c = &rows[*ours];
        let mut calls: Vec<&String> = c
            .keys()
            .filter(|k| k.starts_with("admin-") && *k != "admin-load")
            .collect();
        calls.sort();
        for call in calls {
            if lat.is_empty() {
                lat.push_str("| proxy under a keep-alive load | call | calls | p50 ms | p99 ms | max ms | the load meanwhile: req/s, proxy CPU µs/req |\n");
                lat.push_str("|---|---|---:|---:|---:|---:|---:|\n");
            }
            let ms = |k: &str| {
                num(c, call, k).map_or_else(|| "—".into(), |v| format!("{:.3}", v / 1000.0))
            };
            let load = match (
                num(c, "admin-load", "rps"),
                num(c, "admin-load", "cpu_us_per_req"),
            ) {
                (Some(r), Some(u)) => format!("{r:.0}{}, {u:.1}", errs(c, "admin-load")),
                (Some(r), None) => format!("{r:.0}{}", errs(c, "admin-load")),
                _ => "—".into(),
            };
            // A call is a `GET` of its path, or says what it times (`what`, `_` for spaces).
            let what = match (c[call].get("what"), c[call].get("path")) {
                (Some(w), _) => w.replace('_', " "),
                (None, Some(path)) => format!("GET {path}"),
                (None, None) => call.trim_start_matches("admin-").to_owned(),
            };
            let _ = writeln!(
                lat,
                "| {ours} | {what} | {:.0}{} | {} | {} | {} | {load} |",
                num(c, call, "requests").unwrap_or(0.0),
                errs(c, call),
                ms("p50_us"),
                ms("p99_us"),
                ms("max_us"),
            );
        }
    }
    if !lat.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("admin API latency while the proxy serves a keep-alive load (sequential calls, a new connection each as the CLI makes, connect to last byte; the caller not pinned, the load's client on core 0, the event-stream follower still attached; `a denial to logs -f`: from the last byte of the agent's refusal to a second follower, of denials, reading its line, the target 100 ms):\n\n");
        out.push_str(&lat);
    }
    out
}

/// Every row, cell and value as JSON (`{"rows": {row: {cell: {key: value}}}}`, numbers as
/// numbers), in run order, for tools.
pub fn to_json(text: &str) -> serde_json::Value {
    let (order, rows) = parse(text);
    let mut out = serde_json::Map::new();
    for name in &order {
        let mut cells = serde_json::Map::new();
        let mut names: Vec<&String> = rows[name].keys().collect();
        names.sort();
        for cell in names {
            let kv = &rows[name][cell];
            let mut obj = serde_json::Map::new();
            let mut keys: Vec<&String> = kv.keys().collect();
            keys.sort();
            for k in keys {
                let v = &kv[k];
                let val = v
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .and_then(serde_json::Number::from_f64)
                    .map_or_else(
                        || serde_json::Value::String(v.clone()),
                        serde_json::Value::Number,
                    );
                obj.insert(k.clone(), val);
            }
            cells.insert(cell.clone(), serde_json::Value::Object(obj));
        }
        out.insert(name.clone(), serde_json::Value::Object(cells));
    }
    serde_json::json!({ "rows": out })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn renders_rows_relative_to_direct() {
        let t = render(
            "direct|lat|p50_us=30 p99_us=50 errors=0\n\
             direct|bulk|mib_s=1000\n\
             p|lat|p50_us=80 p99_us=150 cpu_us_per_req=20.0 errors=0\n\
             p|ka|rps=20000 cpu_us_per_req=12.5 errors=2\n\
             p|bulk|mib_s=950 cpu_us_per_req=400.0\n\
             p|idle|rss_kib=5120 hwm_kib=5120\n\
             p|peak|rss_kib=6000 hwm_kib=7168\n\
             p|startup|pid=1 startup_ms=12.3\n\
             q|absent|not installed: no squid\n\
             direct TLS|lat|p50_us=100 p99_us=200\n\
             direct TLS|bulk|mib_s=500\n\
             i intercept|lat|p50_us=150 p99_us=300\n\
             i intercept|bulk|mib_s=400\n\
             i intercept|new|cpu_us_per_req=250.0\n\
             i intercept|newhost|cpu_us_per_req=900.0\n",
        );
        assert!(t.contains("| p | 20000 (2 err) | — | 20.0 / 12.5 | — | 0.050 / 0.100 | 950 (95%), 400 µs/MiB (38% of a core) | 5.0 / 7.0 | 12 |"), "{t}");
        assert!(t.contains("| q | not installed: no squid |"), "{t}");
        assert!(!t.contains("steal"), "no cell reported steal: {t}");
        assert!(t.contains("(base 0.030 / 0.050)"), "{t}");
        assert!(
            t.contains(
                "| i intercept | — | — | — | 250.0 (new host: 900.0) | 0.050 / 0.100 | 400 (80%) |"
            ),
            "{t}"
        );
    }

    #[test]
    fn cells_taken_under_steal_are_named() {
        let t = render(
            "direct|lat|p50_us=30 p99_us=50 steal_pct=0.5\n\
             p|lat|p50_us=80 p99_us=150 steal_pct=1.0\n\
             p|ka|rps=100 steal_pct=12.5\n",
        );
        assert!(
            t.contains("median 1.0%, worst 12.5% (p/ka); 1 of 3 cells above 5%"),
            "{t}"
        );
        assert!(t.trim_end().ends_with("by the host: p/ka"), "{t}");
        let busy = render("direct|lat|steal_pct=40\np|lat|steal_pct=30\np|ka|steal_pct=1\n");
        assert!(busy.contains("2 of 3 cells above 5%"), "{busy}");
        assert!(
            busy.trim_end().ends_with("by the host; clean: p/ka"),
            "{busy}"
        );
        let quiet = render("direct|lat|p50_us=30 steal_pct=0.2\n");
        assert!(
            quiet.contains("worst 0.2% (direct/lat): a quiet host."),
            "{quiet}"
        );
    }

    #[test]
    fn fairness_rows_show_the_share_of_the_rate_alone() {
        let t = render_beside(
            "direct|lat|rps=10000 p50_us=90\n\
             direct|beside|rps=8000 p50_us=120 p99_us=300 errors=0\n\
             direct|beside-bulk|mib_s=4000.5\n\
             p|lat|rps=5000\n\
             p|beside|rps=2500 p50_us=400 p99_us=900 errors=1\n\
             q|lat|rps=100\n",
        );
        assert!(
            t.contains("| direct | 8000 (80%) | 0.120 / 0.300 | 4000 |"),
            "{t}"
        );
        assert!(
            t.contains("| p | 2500 (50%) (1 err) | 0.400 / 0.900 | — |"),
            "{t}"
        );
        assert!(!t.contains("| q |"), "{t}");
    }

    #[test]
    fn admin_rows_read_against_their_base_over_every_window() {
        let text = "airlock plain|ka|rps=100 cpu_us_per_req=10.0\n\
                    airlock plain|lat|cpu_us_per_req=20.0\n\
                    airlock plain + admin|ka|rps=90 cpu_us_per_req=10.4\n\
                    airlock plain + admin|lat|cpu_us_per_req=21.0\n\
                    airlock plain + admin|follower|lines=1000 bytes=500000 secs=9.0 end=term\n\
                    airlock plain + admin|admin-counters|path=/v1/counters requests=2000 errors=0 p50_us=250.0 p99_us=900.0 max_us=1500.0\n\
                    airlock plain + admin|admin-lag|what=a_denial_to_logs_-f requests=300 errors=0 p50_us=150.0 p99_us=600.0 max_us=900.0\n\
                    airlock plain + admin|admin-load|rps=9000 cpu_us_per_req=11.0 errors=0\n\
                    airlock plain|r2-ka|cpu_us_per_req=12.0\n\
                    airlock plain|r3-ka|cpu_us_per_req=11.0\n\
                    airlock plain + admin|r2-ka|cpu_us_per_req=11.6\n\
                    airlock plain + admin|r3-ka|cpu_us_per_req=11.3\n\
                    airlock plain + admin|r2-follower|lines=500 end=eof\n\
                    squid plain|ka|rps=50 cpu_us_per_req=30.0\n";
        let a = render_admin(text);
        assert!(a.contains("3 windows each"), "{a}");
        assert!(
            a.contains("| airlock plain, keep-alive, concurrent | 11.0 (10.0–12.0) | 11.3 (10.4–11.6) | +2.7% |"),
            "{a}"
        );
        assert!(
            a.contains("| airlock plain, keep-alive, 1 conn | 20.0 (20.0–20.0) | 21.0 (21.0–21.0) | +5.0% |"),
            "{a}"
        );
        assert!(
            a.contains(
                "airlock plain + admin: 1500 lines over 2 starts, 1 ended before the windows did"
            ),
            "{a}"
        );
        assert!(
            a.contains("| airlock plain + admin | GET /v1/counters | 2000 | 0.250 | 0.900 | 1.500 | 9000, 11.0 |"),
            "{a}"
        );
        assert!(
            a.contains("| airlock plain + admin | a denial to logs -f | 300 | 0.150 | 0.600 | 0.900 | 9000, 11.0 |"),
            "{a}"
        );
        // The admin row is read against its base, not against the peers.
        assert!(!render_peers(text).contains("+ admin"));
        assert!(render_admin("airlock plain|ka|cpu_us_per_req=1\n").is_empty());
    }

    #[test]
    fn ask_rows_read_against_their_base_with_the_approve_round_trip() {
        let text = "airlock connect|ka|rps=100 cpu_us_per_req=10.0\n\
                    airlock connect + ask|ka|rps=99 cpu_us_per_req=10.2\n\
                    airlock connect|r2-ka|cpu_us_per_req=10.4\n\
                    airlock connect + ask|r2-ka|cpu_us_per_req=10.3\n\
                    airlock connect + ask|approve|answers=200 errors=0 p50_us=180.0 p99_us=450.0 max_us=900.0\n\
                    airlock connect + ask|grant|answers=100 errors=0 p50_us=900.0 p99_us=2500.0 max_us=3000.0\n\
                    squid connect|ka|rps=50 cpu_us_per_req=30.0\n";
        let a = render_ask(text);
        assert!(a.contains("2 windows each"), "{a}");
        assert!(
            a.contains("| airlock connect, keep-alive, concurrent | 10.2 (10.0–10.4) | 10.2 (10.2–10.3) | +0.5% |"),
            "{a}"
        );
        assert!(
            a.contains("| airlock connect + ask | --once | 200 | 0.180 | 0.450 | 0.900 |"),
            "{a}"
        );
        assert!(
            a.contains("| airlock connect + ask | --always | 100 | 0.900 | 2.500 | 3.000 |"),
            "{a}"
        );
        assert!(!render_peers(text).contains("+ ask"));
        assert!(render_ask("airlock plain|ka|cpu_us_per_req=1\n").is_empty());
    }

    #[test]
    fn scale_peers_and_json() {
        let text = "airlock connect|ka|rps=100 cpu_us_per_req=10.0\n\
                    airlock connect|bulk|mib_s=900\n\
                    airlock connect|scale-10|conns=10 rps=5000 cpu_us_per_req=12.0 rss_kib=10240 fds=40\n\
                    airlock connect|scale-1|conns=1 rps=900 cpu_us_per_req=20.0 rss_kib=9216 fds=22\n\
                    airlock connect|scale-close|fds_before=20 fds_after=20 rss_kib=9000\n\
                    squid connect|ka|rps=50 cpu_us_per_req=30.0\n\
                    squid connect|bulk|mib_s=300\n\
                    squid plain|ka|rps=60\n\
                    tinyproxy connect|absent|not installed\n";
        let s = render_scale(text);
        let one = s
            .find("| airlock connect | 1 | 900 | 20.0 | 9.0 | 22 |")
            .unwrap();
        let ten = s
            .find("| airlock connect | 10 | 5000 | 12.0 | 10.0 | 40 |")
            .unwrap();
        assert!(one < ten, "{s}");
        assert!(
            s.contains("| 0 (all closed) | | | | 20 (before: 20) |"),
            "{s}"
        );
        let p = render_peers(text);
        assert!(
            p.contains("| airlock connect | squid connect | 2.00× | 3.00× | — | 3.00× |"),
            "{p}"
        );
        assert!(
            !p.contains("squid plain") && !p.contains("tinyproxy"),
            "{p}"
        );
        let j = to_json(text);
        assert_eq!(j["rows"]["airlock connect"]["scale-10"]["fds"], 40.0);
        assert_eq!(
            j["rows"]["tinyproxy connect"]["absent"]["why"],
            "not installed"
        );
    }
}
