//! Properties of the rendered rules that the security argument rests on, asserted on the
//! structure rather than the text.

// Test helpers outside #[test] fns may panic too: a failed helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{
    AGENT_GID, DOCKER_NAT_SAVE, GIT_GID, PROXY_UID, chain, docker, plan, position, table,
};
use airlock_channels::{
    DNS_PORT, EXPLICIT_PORT, GIT_SERVICE_PORT, MAX_SESSIONS, TRANSPARENT_PORT, session_addr,
    session_gid,
};
use airlock_firewall::{
    FirewallError, Plan, PreservedNat, preserved_nat_from_save, render_v4, render_v6,
};

fn v4() -> String {
    render_v4(&plan(docker()))
}

fn v6() -> String {
    render_v6(&plan(PreservedNat::default()))
}

#[test]
fn output_input_and_forward_default_to_drop_in_both_families() {
    for text in [v4(), v6()] {
        let filter = table(&text, "filter");
        for policy in [
            ":INPUT DROP [0:0]",
            ":FORWARD DROP [0:0]",
            ":OUTPUT DROP [0:0]",
        ] {
            assert!(filter.contains(&policy), "{policy} missing:\n{text}");
        }
    }
}

#[test]
fn v6_has_no_nat_table_and_v4_has_both() {
    assert!(!v6().lines().any(|l| l == "*nat"));
    let v4 = v4();
    let tables: Vec<&str> = v4.lines().filter(|l| l.starts_with('*')).collect();
    // filter first: if nat then fails to commit, the container is closed, not open.
    assert_eq!(tables, ["*filter", "*nat"]);
}

#[test]
fn attack_only_the_proxy_loopback_replies_and_nd_are_ever_accepted_out() {
    let proxy = format!("-m owner --uid-owner {PROXY_UID} -j ACCEPT");
    for (text, v6) in [(v4(), false), (v6(), true)] {
        for rule in chain(&text, "filter", "OUTPUT") {
            if !rule.contains("-j ACCEPT") {
                assert!(rule.contains("-j REJECT"), "{rule}");
                continue;
            }
            let allowed = rule == "-A OUTPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
                || rule == "-A OUTPUT -o lo -j ACCEPT"
                || (!v6 && rule == "-A OUTPUT -d 127.0.0.0/8 -j ACCEPT")
                || rule == format!("-A OUTPUT {proxy}")
                || is_docker_forwarder(rule, "ACCEPT", v6)
                || (v6
                    && ["133", "134", "135", "136"].iter().any(|t| {
                        rule == format!(
                            "-A OUTPUT -p ipv6-icmp -m icmp6 --icmpv6-type {t} -j ACCEPT"
                        )
                    }));
            assert!(allowed, "unexpected accept: {rule}");
        }
    }
}

/// Docker's embedded resolver forwarding a name it does not know: dockerd's own sockets
/// (uid 0) to port 53 of a non-loopback address, and nothing wider.
fn is_docker_forwarder(rule: &str, target: &str, v6: bool) -> bool {
    let lo = if v6 { "::1/128" } else { "127.0.0.0/8" };
    ["udp", "tcp"].iter().any(|p| {
        let chain = rule.split(' ').nth(1).unwrap_or_default();
        rule == format!(
            "-A {chain} ! -d {lo} -p {p} -m owner --uid-owner 0 -m {p} --dport 53 -j {target}"
        )
    })
}

#[test]
fn attack_only_uid_0_port_53_is_exempt_for_dockers_forwarder_and_the_agent_is_still_redirected() {
    // filter: exactly the two forwarder accepts per family, uid 0 only, after the proxy.
    for (text, v6) in [(v4(), false), (v6(), true)] {
        let out = chain(&text, "filter", "OUTPUT");
        let fwd: Vec<usize> = (0..out.len())
            .filter(|i| out[*i].contains("--uid-owner 0 "))
            .collect();
        assert_eq!(fwd.len(), 2, "{out:?}");
        let reject = position(&out, &["-p udp -j REJECT"]);
        for i in fwd {
            assert!(is_docker_forwarder(out[i], "ACCEPT", v6), "{}", out[i]);
            assert!(
                i < reject,
                "the forwarder accept must precede the final rejects"
            );
        }
    }
    // nat: the exemption RETURNs uid 0 only, and the catch-all port-53 redirects that the
    // agent hits come right after it, unconditioned on any uid.
    let text = v4();
    let nat = chain(&text, "nat", "AIRLOCK_OUTPUT");
    let exempt: Vec<usize> = nat
        .iter()
        .enumerate()
        .filter(|(_, r)| r.contains("--dport 53") && r.contains("-j RETURN"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(exempt.len(), 2, "{nat:?}");
    for i in &exempt {
        assert!(is_docker_forwarder(nat[*i], "RETURN", false), "{}", nat[*i]);
    }
    for proto in ["udp", "tcp"] {
        let redirect = position(
            &nat,
            &[&format!(
                "-p {proto} -m {proto} --dport 53 -j REDIRECT --to-ports {DNS_PORT}"
            )],
        );
        assert!(!nat[redirect].contains("owner"), "{}", nat[redirect]);
        assert!(exempt.iter().all(|i| *i < redirect));
    }
}

#[test]
fn the_git_service_port_is_guarded_before_loopback_is_accepted() {
    for text in [v4(), v6()] {
        let out = chain(&text, "filter", "OUTPUT");
        let guard = position(
            &out,
            &[
                &format!("--dport {GIT_SERVICE_PORT}"),
                &format!("! --gid-owner {GIT_GID} --suppl-groups"),
                "-j REJECT --reject-with tcp-reset",
            ],
        );
        assert_eq!(guard, 0, "the service-port guard must come first");
        assert!(out[guard].contains("-m addrtype --dst-type LOCAL"));
        assert!(
            !out[guard].contains("-o lo"),
            "-o is the pre-nat route in OUTPUT"
        );
        assert!(guard < position(&out, &["-o lo -j ACCEPT"]));
        assert!(guard < position(&out, &["--ctstate"]));
    }
}

#[test]
fn attack_agent_cannot_talk_to_dockers_resolver_on_its_real_port() {
    let text = v4();
    let out = chain(&text, "filter", "OUTPUT");
    let guard = position(
        &out,
        &[
            "-d 127.0.0.11/32",
            &format!("! --uid-owner {PROXY_UID}"),
            "-j REJECT",
        ],
    );
    assert!(guard < position(&out, &["-o lo -j ACCEPT"]));
    // 127.0.0.11 is inside 127.0.0.0/8: the guard must precede the redirect accept.
    assert!(guard < position(&out, &["-d 127.0.0.0/8 -j ACCEPT"]));
    assert!(guard < position(&out, &["--ctstate"]));
}

#[test]
fn redirected_traffic_is_accepted_by_destination_not_interface() {
    // After nat REDIRECT the OUTPUT hooks still see the pre-nat output device, so the
    // redirected flow must be accepted by its (rewritten) loopback destination.
    let text = v4();
    let out = chain(&text, "filter", "OUTPUT");
    let accept = position(&out, &["-d 127.0.0.0/8 -j ACCEPT"]);
    assert!(accept < position(&out, &["-p tcp -j REJECT"]));
    assert!(accept < position(&out, &["-p udp -j REJECT"]));
}

#[test]
fn rejects_come_last_and_fail_fast() {
    for (text, icmp) in [
        (v4(), "icmp-admin-prohibited"),
        (v6(), "icmp6-adm-prohibited"),
    ] {
        let out = chain(&text, "filter", "OUTPUT");
        let n = out.len();
        assert_eq!(
            out[n - 3],
            "-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset"
        );
        assert!(out[n - 2].starts_with("-A OUTPUT -p udp -j REJECT --reject-with icmp"));
        assert_eq!(
            out[n - 1],
            format!("-A OUTPUT -j REJECT --reject-with {icmp}")
        );
        assert!(
            !text.contains("-j DROP"),
            "a silent drop would hang, not fail fast"
        );
    }
}

#[test]
fn proxy_return_comes_first_and_dns_redirect_before_loopback_return() {
    let text = v4();
    let ours = chain(&text, "nat", "AIRLOCK_OUTPUT");
    assert_eq!(
        ours[0],
        format!("-A AIRLOCK_OUTPUT -m owner --uid-owner {PROXY_UID} -j RETURN")
    );
    let dns = format!("--dport 53 -j REDIRECT --to-ports {DNS_PORT}");
    let udp = position(&ours, &["-p udp", &dns]);
    let tcp = position(&ours, &["-p tcp", &dns]);
    let lo = position(&ours, &["-o lo -j RETURN"]);
    let loopback = position(&ours, &["-d 127.0.0.0/8 -j RETURN"]);
    let transparent = position(
        &ours,
        &[&format!("-p tcp -j REDIRECT --to-ports {TRANSPARENT_PORT}")],
    );
    assert!(udp < lo && tcp < lo && udp < loopback && tcp < loopback);
    assert!(lo < transparent && loopback < transparent);
    assert_eq!(transparent, ours.len() - 1);
}

#[test]
fn our_jump_comes_before_dockers() {
    let text = v4();
    let output = chain(&text, "nat", "OUTPUT");
    assert_eq!(
        output,
        [
            "-A OUTPUT -j AIRLOCK_OUTPUT",
            "-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT"
        ]
    );
    assert_eq!(
        chain(&text, "nat", "POSTROUTING"),
        [
            "-A POSTROUTING -j AIRLOCK_POSTROUTING",
            "-A POSTROUTING -d 127.0.0.11/32 -j DOCKER_POSTROUTING"
        ]
    );
    // Without Docker, our jumps alone; no other chain has rules of ours.
    let bare = render_v4(&plan(PreservedNat::default()));
    assert_eq!(
        chain(&bare, "nat", "OUTPUT"),
        ["-A OUTPUT -j AIRLOCK_OUTPUT"]
    );
    assert_eq!(
        chain(&bare, "nat", "POSTROUTING"),
        ["-A POSTROUTING -j AIRLOCK_POSTROUTING"]
    );
    for builtin in ["PREROUTING", "INPUT"] {
        assert!(chain(&bare, "nat", builtin).is_empty());
    }
}

/// The two rules that give session `k` (gid `gid`) its address, as `iptables-save` prints them.
fn session_rules(k: u16, gid: u32) -> [String; 2] {
    let addr = session_addr(k);
    [
        format!(
            "-A AIRLOCK_POSTROUTING -d 127.0.0.1/32 -p tcp -m multiport --dports {EXPLICIT_PORT},{TRANSPARENT_PORT},{DNS_PORT} -m owner --gid-owner {gid} -j SNAT --to-source {addr}"
        ),
        format!(
            "-A AIRLOCK_POSTROUTING -d 127.0.0.1/32 -p udp -m udp --dport {DNS_PORT} -m owner --gid-owner {gid} -j SNAT --to-source {addr}"
        ),
    ]
}

/// What no session claimed: a hand-bound session address becomes loopback.
fn unclaimed_rules() -> [String; 2] {
    [
        format!(
            "-A AIRLOCK_POSTROUTING -s 127.77.0.0/24 -d 127.0.0.1/32 -p tcp -m multiport --dports {EXPLICIT_PORT},{TRANSPARENT_PORT},{DNS_PORT} -j SNAT --to-source 127.0.0.1"
        ),
        format!(
            "-A AIRLOCK_POSTROUTING -s 127.77.0.0/24 -d 127.0.0.1/32 -p udp -m udp --dport {DNS_PORT} -j SNAT --to-source 127.0.0.1"
        ),
    ]
}

#[test]
fn every_session_gets_its_own_address_by_its_gid_and_nothing_else_is_rewritten() {
    let text = v4();
    let ours = chain(&text, "nat", "AIRLOCK_POSTROUTING");
    let mut expected: Vec<String> = (1..=MAX_SESSIONS)
        .flat_map(|k| session_rules(k, session_gid(k, AGENT_GID)))
        .collect();
    expected.extend(unclaimed_rules());
    assert_eq!(ours, expected);
    assert_eq!(ours[0], session_rules(1, AGENT_GID)[0]);
    assert!(ours[2].ends_with("--gid-owner 61002 -j SNAT --to-source 127.77.0.2"));
    assert!(ours[127].ends_with("--gid-owner 61064 -j SNAT --to-source 127.77.0.64"));
}

#[test]
fn attack_a_supplementary_group_never_gives_a_session_address() {
    // A second session also holds the agent's gid as a supplementary group: with
    // --suppl-groups it would match session 1's rule first and pass for session 1.
    let text = v4();
    let nat = table(&text, "nat");
    assert!(
        nat.iter()
            .filter(|l| l.contains("--gid-owner"))
            .all(|l| !l.contains("--suppl-groups") && !l.contains("! --gid-owner")),
        "{nat:#?}"
    );
}

#[test]
fn attack_session_addresses_are_only_ever_given_to_the_proxys_agent_facing_listeners() {
    // Only the explicit, transparent and DNS ports on 127.0.0.1: the agent's own loopback
    // servers keep seeing 127.0.0.1, and the git service port is no session's.
    let text = v4();
    for rule in table(&text, "nat").iter().filter(|l| l.contains("SNAT")) {
        if rule.starts_with("-A DOCKER_POSTROUTING ") {
            continue;
        }
        assert!(rule.starts_with("-A AIRLOCK_POSTROUTING "), "{rule}");
        assert!(rule.contains(" -d 127.0.0.1/32 "), "{rule}");
        let ports = rule
            .split_once("--dports ")
            .or_else(|| rule.split_once("--dport "))
            .map(|(_, rest)| rest.split(' ').next().unwrap_or_default())
            .unwrap_or_default();
        let allowed = if rule.contains("-p tcp") {
            format!("{EXPLICIT_PORT},{TRANSPARENT_PORT},{DNS_PORT}")
        } else {
            assert!(rule.contains("-p udp -m udp"), "{rule}");
            DNS_PORT.to_string()
        };
        assert_eq!(ports, allowed, "{rule}");
        assert!(!rule.contains(&GIT_SERVICE_PORT.to_string()), "{rule}");
    }
}

#[test]
fn attack_an_unclaimed_session_address_comes_after_every_session_and_becomes_loopback() {
    let text = v4();
    let ours = chain(&text, "nat", "AIRLOCK_POSTROUTING");
    let n = ours.len();
    assert_eq!(ours[n - 2..], unclaimed_rules());
    assert!(ours[..n - 2].iter().all(|l| l.contains("--gid-owner")));
    // No sessions at all: nothing gets a session address, a hand-bound one included.
    let none = Plan {
        session_gids: Vec::new(),
        ..plan(PreservedNat::default())
    };
    let bare = render_v4(&none);
    assert_eq!(
        chain(&bare, "nat", "AIRLOCK_POSTROUTING"),
        unclaimed_rules()
    );
}

#[test]
fn attack_an_over_long_session_list_renders_no_wrapped_around_address() {
    // check() refuses it; the renderer still never hands out 127.77.0.0 or a second .1.
    let long = Plan {
        session_gids: (70_000..70_300).collect(),
        ..plan(PreservedNat::default())
    };
    assert!(long.check().is_err());
    let text = render_v4(&long);
    let ours = chain(&text, "nat", "AIRLOCK_POSTROUTING");
    assert_eq!(ours.len(), 2 * usize::from(MAX_SESSIONS) + 2);
    assert!(!text.contains("127.77.0.0 ") && !text.contains("--gid-owner 70064 "));
}

#[test]
fn dockers_lines_are_carried_verbatim() {
    let text = v4();
    let nat = table(&text, "nat");
    for line in DOCKER_NAT_SAVE
        .lines()
        .filter(|l| l.starts_with("-A ") || l.starts_with(":DOCKER"))
    {
        assert!(nat.contains(&line), "{line} lost");
    }
}

#[test]
fn reapplying_over_our_own_save_preserves_exactly_dockers_lines() {
    // What `iptables-save -t nat` shows after we applied: our table.
    let first = v4();
    let saved: String = table(&first, "nat")
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    let again = preserved_nat_from_save(&saved).unwrap();
    assert_eq!(again, docker());
    assert_eq!(render_v4(&plan(again)), first);
    // Without Docker, nothing at all is preserved from our own output.
    let bare = render_v4(&plan(PreservedNat::default()));
    let saved: String = table(&bare, "nat")
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(preserved_nat_from_save(&saved).unwrap().is_empty());
}

#[test]
fn attack_unexpected_nat_rule_is_refused() {
    let hostile = DOCKER_NAT_SAVE.replace(
        "COMMIT",
        "-A OUTPUT -d 10.0.0.0/8 -j DNAT --to-destination 10.0.0.1\nCOMMIT",
    );
    let err = preserved_nat_from_save(&hostile).unwrap_err();
    assert!(
        matches!(err, FirewallError::UnexpectedNatRule { ref line } if line.contains("10.0.0.1")),
        "{err}"
    );
}

#[test]
fn attack_commit_and_filter_injected_in_a_docker_line_is_refused() {
    let hostile = DOCKER_NAT_SAVE.replace(
        "--to-source :53\n",
        "--to-source :53\nCOMMIT\n*filter\n:OUTPUT ACCEPT [0:0]\n",
    );
    assert!(hostile.contains("*filter"));
    let err = preserved_nat_from_save(&hostile).unwrap_err();
    assert!(
        matches!(err, FirewallError::UnexpectedNatRule { .. }),
        "{err}"
    );

    let inline = DOCKER_NAT_SAVE.replace("--to-source :53", "--to-source :53 COMMIT *filter");
    let err = preserved_nat_from_save(&inline).unwrap_err();
    assert!(matches!(err, FirewallError::UnsafeNatLine { .. }), "{err}");
}
