//! Egress proxy escape attempts at the namespace tier (issue 3): tools that ignore the proxy
//! variables, fronting, DNS tunnels and rebinding, big and streaming bodies, and an audit log
//! that loses nothing — with the fake internet's log and tcpdump as the evidence.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;

/// Unset every proxy variable, as a tool that ignores them would behave.
const NO_PROXY_ENV: &str = "env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy";

#[test]
fn tools_that_ignore_the_proxy_reach_allowed_hosts_and_only_those() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY);
    let ca = world.ca_pem_path().display().to_string();
    world.start_capture().unwrap();
    let script = [
        format!("echo curl-https=$({NO_PROXY_ENV} {})", curl(&world, "--noproxy '*' -o /dev/null -w '%{http_code}' https://allowed.test/")),
        format!("echo curl-http=$({NO_PROXY_ENV} {})", curl(&world, "--noproxy '*' -o /dev/null -w '%{http_code}' http://allowed.test/")),
        format!("echo curl-blocked=$({NO_PROXY_ENV} {} 2>/dev/null)", curl(&world, "--noproxy '*' -o /dev/null -w '%{http_code}' https://blocked.test/")),
        // Node's fetch ignores HTTP(S)_PROXY (Node 20): it goes direct and is captured.
        format!(
            "NODE_EXTRA_CA_CERTS={ca} node -e \"fetch('https://allowed.test/').then(r => console.log('node=' + r.status)).catch(e => console.log('node-error=' + e.cause?.code))\""
        ),
        format!(
            "NODE_EXTRA_CA_CERTS={ca} node -e \"fetch('https://blocked.test/').then(r => console.log('node-blocked=' + r.status)).catch(e => console.log('node-blocked=error'))\""
        ),
        // A raw socket speaking HTTP/1.1 by hand.
        "python3 -c \"import socket; s = socket.create_connection(('allowed.test', 80), timeout=5); s.sendall(b'GET /raw HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n'); print('raw=' + s.recv(64).split(b' ')[1].decode())\"".to_owned(),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    for ok in ["curl-https=200", "curl-http=200", "node=200", "raw=200"] {
        assert!(text.contains(ok), "{ok} missing:\n{text}\n{}", stderr(&out));
    }
    assert!(
        !text.contains("curl-blocked=200") && !text.contains("node-blocked=200"),
        "blocked host reached:\n{text}"
    );
    let audit = airlock.audit();
    assert!(
        audit.iter().any(|l| l["kind"] == "transparent"
            && l["host"] == "allowed.test"
            && l["decision"] == "allow"),
        "the transparent path decided by host name: {audit:?}"
    );
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream
            .iter()
            .all(|l| l["sni"] != "blocked.test" && l["host"] != "blocked.test"),
        "{upstream:?}"
    );
    assert!(assert_only_proxy_traffic(&world, &capture, &audit, &["allowed.test"]) > 0);
}

#[test]
fn sni_of_a_blocked_host_inside_an_allowed_connect_never_reaches_upstream() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY);
    world.start_capture().unwrap();
    // CONNECT allowed.test:443, then a TLS ClientHello naming blocked.test (domain fronting).
    let fronting = "import socket, ssl\n\
s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n\
s.sendall(b'CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test:443\\r\\n\\r\\n')\n\
print('connect=' + s.recv(256).split(b' ')[1].decode())\n\
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n\
try:\n    t = ctx.wrap_socket(s, server_hostname='blocked.test'); print('fronted=ok')\n\
except Exception as e:\n    print('fronted=refused')\n";
    // Plain HTTP to allowed.test's address on port 80, but asking for blocked.test.
    let host_mismatch = "import socket\n\
s = socket.create_connection(('allowed.test', 80), timeout=5)\n\
s.sendall(b'GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\nConnection: close\\r\\n\\r\\n')\n\
print('mismatch=' + (s.recv(256).split(b' ')[1].decode() or 'closed'))\n";
    let script = format!(
        "python3 -c \"{}\"\n{NO_PROXY_ENV} python3 -c \"{}\"",
        fronting.replace('"', "\\\""),
        host_mismatch.replace('"', "\\\"")
    );
    let out = airlock.run(&world, &script);
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("fronted=refused"),
        "TLS to blocked.test inside CONNECT allowed.test:\n{text}\n{}",
        stderr(&out)
    );
    assert!(
        !text.contains("mismatch=200"),
        "Host: blocked.test on allowed.test's address:\n{text}"
    );
    let upstream = world.upstream_log().unwrap();
    assert!(
        upstream
            .iter()
            .all(|l| l["sni"] != "blocked.test" && l["host"] != "blocked.test"),
        "fronted request reached upstream: {upstream:?}"
    );
    let audit = airlock.audit();
    assert!(
        audit.iter().any(|l| l["reason"] == "sni-mismatch"),
        "fronting is audited with its reason: {audit:?}"
    );
    assert_only_proxy_traffic(&world, &capture, &audit, &["allowed.test"]);
}

#[test]
fn a_dns_tunnel_and_rebinding_answers_never_leave_the_sandbox() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY);
    world.start_capture().unwrap();
    let label = "a".repeat(60);
    let script = [
        format!("dig +tries=1 +time=2 TXT {label}.x1.blocked.test | grep -E 'status:|EDE|airlock'"),
        format!(
            "dig +tries=1 +time=2 @203.0.113.54 TXT {label}.x2.blocked.test | grep -E 'status:'"
        ),
        format!("dig +tcp +tries=1 +time=2 NULL {label}.x3.allowed.test | grep -E 'status:'"),
        "echo rebind=$(dig +short +tries=1 +time=2 rebind.test)".to_owned(),
        "echo meta=$(dig +short +tries=1 +time=2 meta.test)".to_owned(),
        "echo allowed=$(dig +short +tries=1 +time=2 allowed.test)".to_owned(),
        format!(
            "echo http-rebind=$({})",
            curl(&world, "-o /dev/null -w '%{http_code}' http://rebind.test/")
        ),
        format!(
            "echo http-meta=$({})",
            curl(&world, "-o /dev/null -w '%{http_code}' http://meta.test/")
        ),
    ]
    .join("\n");
    let out = airlock.run(&world, &script);
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.matches("status: ").count() == 3 && !text.contains("status: NOERROR"),
        "TXT under a blocked name, via a foreign resolver, and NULL under an allowed one are all refused:\n{text}"
    );
    assert!(
        text.contains("allowed=203.0.113.10"),
        "allowed names are answered:\n{text}\n{}",
        stderr(&out)
    );
    assert!(
        !text.contains("127.0.0.1") && !text.contains("169.254.169.254"),
        "a rebinding answer reached the agent:\n{text}"
    );
    assert!(
        text.contains("http-rebind=403") && text.contains("http-meta=403"),
        "{text}"
    );
    for (_, qname, qtype) in capture.dns_queries() {
        assert!(
            !qname.contains(&label),
            "the tunnel query left the sandbox ({qtype} {qname})"
        );
    }
    let dns: Vec<_> = world
        .upstream_log()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "dns")
        .collect();
    assert!(
        dns.iter()
            .all(|q| !q["qname"].as_str().unwrap_or_default().contains(&label)),
        "{dns:?}"
    );
    let audit = airlock.audit();
    assert!(
        audit
            .iter()
            .any(|l| l["kind"] == "dns" && l["decision"] == "deny"),
        "DNS denials are audited: {audit:?}"
    );
    assert_only_proxy_traffic(
        &world,
        &capture,
        &audit,
        &["allowed.test", "rebind.test", "meta.test"],
    );
}

#[test]
fn a_64_mib_upload_arrives_byte_identical_and_sse_streams_event_by_event() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let file = airlock.workdir.join("upload.bin");
    let script = format!(
        "head -c 67108864 /dev/urandom > {f}; echo local=$(sha256sum {f} | cut -d' ' -f1)\n\
         {upload}\n\
         {sse} | python3 -c \"import sys, time\nfor line in sys.stdin:\n    line.startswith('data:') and print('event', round(time.monotonic(), 3))\"",
        f = file.display(),
        upload = curl(
            &world,
            &format!(
                "--max-time 120 -T {} https://allowed.test/upload",
                file.display()
            )
        ),
        sse = curl(&world, "-N 'https://allowed.test/sse?n=5&ms=300'"),
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    let local = text
        .lines()
        .find_map(|l| l.strip_prefix("local="))
        .unwrap_or("none");
    assert!(
        text.contains(&format!("\"sha256\":\"{local}\"")),
        "the upload arrived changed:\n{text}\n{}",
        stderr(&out)
    );
    assert!(text.contains("\"len\":67108864"), "{text}");
    let times: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event ")?.parse().ok())
        .collect();
    assert_eq!(times.len(), 5, "five SSE events:\n{text}");
    // Buffered delivery would hand all five over at once; streamed ones arrive ~300 ms apart.
    assert!(
        times[4] - times[0] >= 0.9,
        "SSE events arrived together (buffered): {times:?}"
    );
}

#[test]
fn the_audit_log_accounts_for_every_request_after_a_burst() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    // curl's URL globbing: 10,000 requests on kept-alive connections through the explicit proxy.
    let script = format!(
        "{} | sort | uniq -c",
        curl(
            &world,
            "-o /dev/null -w '%{http_code}\\n' 'http://blocked.test/burst/[1-8000]' 'http://allowed.test/burst/[1-2000]'"
        )
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("8000 403") && text.contains("2000 200"),
        "{text}\n{}",
        stderr(&out)
    );
    let audit = airlock.audit();
    let burst = |host: &str| {
        audit
            .iter()
            .filter(|l| {
                l["host"] == host && l["path"].as_str().is_some_and(|p| p.starts_with("/burst/"))
            })
            .count()
    };
    // Denials of one kind beyond the first few are folded (counted, not written one by
    // one): each is a line or part of a `suppressed` line's count, never lost.
    let folded: u64 = audit
        .iter()
        .filter(|l| {
            l["event"] == "suppressed" && l["reason"] == "blocked-by-policy" && l["kind"] == "http"
        })
        .map(|l| l["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        burst("blocked.test") as u64 + folded,
        8000,
        "every denied request written or counted"
    );
    assert!(folded > 0, "8,000 denials of one kind were not folded");
    assert_eq!(
        burst("allowed.test"),
        2000,
        "one audit line per allowed request"
    );
}
