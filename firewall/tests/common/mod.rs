//! Shared by the integration tests: the plan they render, the Docker fixture, and a way to
//! pick rules out of rendered or saved text.

#![allow(dead_code)]

use airlock_channels::{MAX_SESSIONS, session_gid};
use airlock_firewall::{Plan, PreservedNat, preserved_nat_from_save};

/// A real container's `iptables-save -t nat` (Docker's embedded DNS).
pub const DOCKER_NAT_SAVE: &str = include_str!("../fixtures/docker_nat.save");

pub const PROXY_UID: u32 = 999;
pub const GIT_GID: u32 = 998;
pub const AGENT_GID: u32 = 1000;

/// Every session's gid, as the entrypoint fills them: index `i` is session `i + 1`.
pub fn session_gids(agent_gid: u32) -> Vec<u32> {
    (1..=MAX_SESSIONS)
        .map(|k| session_gid(k, agent_gid))
        .collect()
}

pub fn plan(preserved_nat: PreservedNat) -> Plan {
    Plan::with_channel_ports(PROXY_UID, GIT_GID, session_gids(AGENT_GID), preserved_nat)
}

pub fn docker() -> PreservedNat {
    preserved_nat_from_save(DOCKER_NAT_SAVE).unwrap()
}

/// The lines of one table (`*name` .. `COMMIT`, both included), comments dropped.
pub fn table<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let start = format!("*{name}");
    let mut lines = text.lines().skip_while(|l| *l != start);
    let mut out: Vec<&str> = Vec::new();
    for line in lines.by_ref() {
        if !line.starts_with('#') {
            out.push(line);
        }
        if line == "COMMIT" {
            break;
        }
    }
    assert!(
        out.first() == Some(&start.as_str()),
        "no table {name} in:\n{text}"
    );
    assert!(out.last() == Some(&"COMMIT"), "table {name} not committed");
    out
}

/// The `-A <chain>` lines of one table, in order.
pub fn chain<'a>(text: &'a str, table_name: &str, chain: &str) -> Vec<&'a str> {
    let prefix = format!("-A {chain} ");
    table(text, table_name)
        .into_iter()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

/// Index of the one line of `lines` containing every needle.
pub fn position(lines: &[&str], needles: &[&str]) -> usize {
    let hits: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| needles.iter().all(|n| l.contains(n)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "{needles:?} in {lines:#?}");
    hits[0]
}

/// Text without comments and blank lines, for comparing with `iptables-save` output.
pub fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}
