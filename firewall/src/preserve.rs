//! What of the container's existing nat table must survive our atomic replace.
//!
//! Docker gives containers on user-defined networks an embedded resolver at `127.0.0.11`,
//! listening on random ports, reached through its own nat rules: chains `DOCKER_OUTPUT` /
//! `DOCKER_POSTROUTING` and the `OUTPUT` / `POSTROUTING` rules that jump into them. We replace
//! the whole nat table (no `--noflush`, so the result is exactly what we render), so those
//! lines are read from `iptables-save -t nat` first and rendered back verbatim.
//!
//! The parser is a whitelist: chains whose names start with `DOCKER`, built-in-chain rules
//! that jump into them, and our own `AIRLOCK_*` lines (ignored, so that re-applying over a
//! previous run is idempotent). Anything else is refused with
//! [`FirewallError::UnexpectedNatRule`]; a preserved line that could change the meaning of
//! our `iptables-restore` input (a table switch, `COMMIT`, quotes, control bytes) is refused
//! with [`FirewallError::UnsafeNatLine`].

use std::collections::{BTreeMap, BTreeSet};

use crate::FirewallError;

/// The built-in chains of the nat table, in the order `iptables-save` lists them.
pub(crate) const BUILTIN_NAT_CHAINS: [&str; 4] = ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"];
/// Prefix of the chains we own; lines naming them are ours from a previous apply.
pub(crate) const OUR_PREFIX: &str = "AIRLOCK_";
/// Our chain in the nat table's OUTPUT: the redirects.
pub(crate) const OUR_NAT_CHAIN: &str = "AIRLOCK_OUTPUT";
/// Our chain in the nat table's POSTROUTING: each session's source address.
pub(crate) const OUR_SNAT_CHAIN: &str = "AIRLOCK_POSTROUTING";
/// Our jumps into them, exactly as `iptables-save` prints them: `(built-in chain, jump)`.
pub(crate) const OUR_NAT_JUMPS: [(&str, &str); 2] = [
    ("OUTPUT", "-A OUTPUT -j AIRLOCK_OUTPUT"),
    ("POSTROUTING", "-A POSTROUTING -j AIRLOCK_POSTROUTING"),
];
/// Prefix of the chains Docker creates in a container's nat table.
const DOCKER_PREFIX: &str = "DOCKER";

/// Docker's nat rules found in the container, to be rendered back after ours.
///
/// Only [`preserved_nat_from_save`] fills it, so every line in it passed validation;
/// [`PreservedNat::default`] is "nothing to preserve" (no Docker embedded DNS).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreservedNat {
    /// `DOCKER*` chain names (sorted, as `iptables-save` lists user chains).
    chains: BTreeSet<String>,
    /// Built-in-chain rules that jump into a `DOCKER*` chain, per built-in chain (index into
    /// [`BUILTIN_NAT_CHAINS`]), in their original order.
    jumps: [Vec<String>; 4],
    /// Rules of the `DOCKER*` chains, per chain, in their original order.
    rules: BTreeMap<String, Vec<String>>,
}

impl PreservedNat {
    /// Nothing to preserve.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty()
    }

    /// The preserved chain names, sorted.
    pub fn chains(&self) -> impl Iterator<Item = &str> {
        self.chains.iter().map(String::as_str)
    }

    /// Preserved rules of one built-in nat chain (they go after our jump), in order.
    pub(crate) fn jumps_from(&self, builtin: usize) -> impl Iterator<Item = &str> {
        self.jumps
            .get(builtin)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Rules of the preserved chains, chain by chain (sorted), each chain in order.
    pub(crate) fn chain_rules(&self) -> impl Iterator<Item = &str> {
        self.rules.values().flatten().map(String::as_str)
    }

    /// Every preserved `-A` line in the order we render them.
    pub fn rule_lines(&self) -> impl Iterator<Item = &str> {
        self.jumps
            .iter()
            .flatten()
            .map(String::as_str)
            .chain(self.chain_rules())
    }
}

/// Where we are in the save output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    BeforeTable,
    InNat,
    AfterCommit,
}

/// Extract what must survive from `iptables-save -t nat` output (Docker's embedded DNS:
/// chains `DOCKER_OUTPUT` / `DOCKER_POSTROUTING` and the `OUTPUT` / `POSTROUTING` jumps into
/// them). Empty output (a namespace whose nat table was never touched) preserves nothing.
///
/// # Errors
/// [`FirewallError::UnexpectedNatRule`] for anything that is neither Docker's nor ours,
/// [`FirewallError::UnsafeNatLine`] for a line that could inject into our restore input,
/// [`FirewallError::UnterminatedNatSave`] if the table has no `COMMIT`.
pub fn preserved_nat_from_save(save_output: &str) -> Result<PreservedNat, FirewallError> {
    let mut preserved = PreservedNat::default();
    let mut section = Section::BeforeTable;
    for line in save_output.split('\n') {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        section = match section {
            Section::BeforeTable if line == "*nat" => Section::InNat,
            Section::InNat if line == "COMMIT" => Section::AfterCommit,
            Section::InNat if line.starts_with(':') => {
                declaration(&mut preserved, line)?;
                Section::InNat
            }
            Section::InNat if line.starts_with("-A ") => {
                rule(&mut preserved, line)?;
                Section::InNat
            }
            Section::BeforeTable | Section::InNat | Section::AfterCommit => {
                return Err(unexpected(line));
            }
        };
    }
    if section == Section::InNat {
        return Err(FirewallError::UnterminatedNatSave);
    }
    Ok(preserved)
}

/// A chain declaration: `:NAME POLICY [packets:bytes]`.
fn declaration(preserved: &mut PreservedNat, line: &str) -> Result<(), FirewallError> {
    check_safe(line, true)?;
    let mut tokens = line.split(' ');
    let name = tokens.next().and_then(|t| t.strip_prefix(':'));
    let policy = tokens.next();
    let counters = tokens.next();
    let (Some(name), Some(policy), None) = (name, policy, tokens.next()) else {
        return Err(unexpected(line));
    };
    if counters.is_some_and(|c| !is_counters(c)) {
        return Err(unexpected(line));
    }
    if BUILTIN_NAT_CHAINS.contains(&name) {
        // A nat built-in chain with a policy other than ACCEPT is not Docker's doing, and
        // we would silently change it: refuse.
        return if policy == "ACCEPT" {
            Ok(())
        } else {
            Err(unexpected(line))
        };
    }
    if policy != "-" {
        return Err(unexpected(line));
    }
    if name.starts_with(OUR_PREFIX) {
        return Ok(());
    }
    if name.starts_with(DOCKER_PREFIX) && preserved.chains.insert(name.to_owned()) {
        preserved.rules.insert(name.to_owned(), Vec::new());
        return Ok(());
    }
    Err(unexpected(line))
}

/// An append line: `-A CHAIN matches... -j TARGET ...`.
fn rule(preserved: &mut PreservedNat, line: &str) -> Result<(), FirewallError> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let Some(&chain) = tokens.get(1) else {
        return Err(unexpected(line));
    };
    if chain.starts_with(OUR_PREFIX) || OUR_NAT_JUMPS.iter().any(|(_, jump)| line == *jump) {
        // Ours, from a previous apply: re-rendered from the plan, never preserved.
        return Ok(());
    }
    check_safe(line, false)?;
    let target = jump_target(&tokens).ok_or_else(|| unexpected(line))?;
    let is_declared_docker = |name: &str| preserved.chains.contains(name);

    if let Some(builtin) = BUILTIN_NAT_CHAINS.iter().position(|b| *b == chain) {
        // A built-in chain rule is kept only if it jumps into a preserved Docker chain.
        let Some(target) = target else {
            return Err(unexpected(line));
        };
        if !is_declared_docker(target) {
            return Err(unexpected(line));
        }
        if let Some(jumps) = preserved.jumps.get_mut(builtin) {
            jumps.push(line.to_owned());
        }
        return Ok(());
    }

    if !is_declared_docker(chain) {
        return Err(unexpected(line));
    }
    if let Some(target) = target {
        // Inside Docker's chains: built-in targets (DNAT, SNAT, RETURN, ...) or another
        // preserved Docker chain; never into ours or an unknown user chain.
        let allowed = if target.starts_with(DOCKER_PREFIX) {
            is_declared_docker(target)
        } else {
            target.bytes().all(|b| b.is_ascii_uppercase())
        };
        if !allowed {
            return Err(unexpected(line));
        }
    }
    if let Some(rules) = preserved.rules.get_mut(chain) {
        rules.push(line.to_owned());
    }
    Ok(())
}

/// The rule's target: `None` if the line is malformed (more than one `-j`/`-g`, or one
/// without a name), `Some(None)` if it has no target, `Some(Some(name))` otherwise.
fn jump_target<'a>(tokens: &[&'a str]) -> Option<Option<&'a str>> {
    let mut found = None;
    for (i, token) in tokens.iter().enumerate() {
        if matches!(*token, "-j" | "--jump" | "-g" | "--goto") {
            if found.is_some() {
                return None;
            }
            found = Some(*tokens.get(i + 1)?);
        }
    }
    Some(found)
}

/// `[packets:bytes]`.
fn is_counters(token: &str) -> bool {
    token
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.split_once(':'))
        .is_some_and(|(p, b)| {
            !p.is_empty()
                && !b.is_empty()
                && p.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        })
}

/// Refuse anything in a line we will copy that could change the meaning of the restore
/// input around it. `iptables-save` prints Docker's rules in a small alphabet; we accept
/// exactly that alphabet (plus the brackets of a declaration's counters).
pub(crate) fn check_safe(line: &str, declaration: bool) -> Result<(), FirewallError> {
    let unsafe_line = |reason| FirewallError::UnsafeNatLine {
        line: line.to_owned(),
        reason,
    };
    if line.bytes().any(|b| b.is_ascii_control()) {
        return Err(unsafe_line("control byte (newline, tab, NUL, ...)"));
    }
    let allowed = |c: char| {
        c.is_ascii_alphanumeric()
            || matches!(c, ' ' | '-' | '_' | '.' | '/' | ':' | '!' | ',' | '=')
            || (declaration && matches!(c, '[' | ']'))
    };
    if let Some(bad) = line.chars().find(|c| !allowed(*c)) {
        return Err(unsafe_line(match bad {
            '*' => "table switch marker '*'",
            '#' => "comment marker '#'",
            '"' | '\'' => "quoting",
            _ => "character outside the iptables-save alphabet",
        }));
    }
    if line
        .split(' ')
        .any(|t| t.eq_ignore_ascii_case("COMMIT") || t.starts_with('*'))
    {
        return Err(unsafe_line("COMMIT or table switch inside a rule"));
    }
    Ok(())
}

fn unexpected(line: &str) -> FirewallError {
    FirewallError::UnexpectedNatRule {
        line: line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n";

    fn save(body: &str) -> String {
        format!("{HEAD}{body}COMMIT\n")
    }

    #[test]
    fn empty_save_preserves_nothing() {
        let p = preserved_nat_from_save("").unwrap();
        assert!(p.is_empty());
        let p = preserved_nat_from_save(&save("")).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.rule_lines().count(), 0);
    }

    #[test]
    fn counters_in_declarations_are_not_carried() {
        let p = preserved_nat_from_save(
            "*nat\n:OUTPUT ACCEPT [12:720]\n:DOCKER_OUTPUT - [3:180]\n-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT\nCOMMIT\n",
        )
        .unwrap();
        assert_eq!(p.chains().collect::<Vec<_>>(), ["DOCKER_OUTPUT"]);
        assert_eq!(
            p.rule_lines().collect::<Vec<_>>(),
            ["-A OUTPUT -d 127.0.0.11/32 -j DOCKER_OUTPUT"]
        );
    }

    #[test]
    fn attack_newline_smuggled_commit_and_filter_table_is_refused() {
        // A "Docker" line followed by a table switch that would open *filter with ACCEPT.
        let text = save(
            ":DOCKER_OUTPUT - [0:0]\n-A DOCKER_OUTPUT -j RETURN\nCOMMIT\n*filter\n:OUTPUT ACCEPT [0:0]\n",
        );
        let err = preserved_nat_from_save(&text).unwrap_err();
        assert!(
            matches!(err, FirewallError::UnexpectedNatRule { ref line } if line == "*filter"),
            "{err}"
        );
    }

    #[test]
    fn attack_commit_inside_a_docker_line_is_refused() {
        let text = save(":DOCKER_OUTPUT - [0:0]\n-A DOCKER_OUTPUT -j RETURN COMMIT *filter\n");
        let err = preserved_nat_from_save(&text).unwrap_err();
        assert!(matches!(err, FirewallError::UnsafeNatLine { .. }), "{err}");
    }

    #[test]
    fn attack_line_validation_refuses_every_injection_shape() {
        for line in [
            "-A DOCKER_OUTPUT -j RETURN\nCOMMIT\n*filter",
            "-A DOCKER_OUTPUT -j RETURN\r",
            "-A DOCKER_OUTPUT -j RETURN\0",
            "-A DOCKER_OUTPUT\t-j RETURN",
            "-A DOCKER_OUTPUT -j RETURN COMMIT",
            "-A DOCKER_OUTPUT -j RETURN commit",
            "-A DOCKER_OUTPUT -j RETURN *filter",
            "-A DOCKER_OUTPUT -m comment --comment \"x\" -j RETURN",
            "-A DOCKER_OUTPUT -j RETURN # trailing",
            "-A DOCKER_OUTPUT -j RETURN [0:0]",
            "-A DOCKER_OUTPUT -d 127.0.0.11/32 -j DNAT --to-destination 127.0.0.11:53;",
        ] {
            assert!(
                matches!(
                    check_safe(line, false),
                    Err(FirewallError::UnsafeNatLine { .. })
                ),
                "{line:?} accepted"
            );
        }
        check_safe(
            "-A DOCKER_POSTROUTING -s 127.0.0.11/32 -p udp -m udp --sport 51443 -j SNAT --to-source :53",
            false,
        )
        .unwrap();
    }

    #[test]
    fn attack_foreign_rule_in_output_is_refused_not_dropped() {
        // Someone's own redirect of all traffic: keeping it could bypass us, dropping it
        // silently could break them. Refuse.
        for body in [
            "-A OUTPUT -p tcp -j REDIRECT --to-ports 8080\n",
            "-A POSTROUTING -j MASQUERADE\n",
            ":EVIL - [0:0]\n-A OUTPUT -j EVIL\n",
            ":DOCKER_OUTPUT - [0:0]\n-A OUTPUT -p tcp -j AIRLOCK_OUTPUT\n",
            "-A POSTROUTING -p tcp -j AIRLOCK_POSTROUTING\n",
            "-A OUTPUT -j AIRLOCK_POSTROUTING\n",
            "-A POSTROUTING -j AIRLOCK_OUTPUT\n",
            "-A POSTROUTING -j SNAT --to-source 127.77.0.1\n",
            ":DOCKER_POSTROUTING - [0:0]\n-A DOCKER_POSTROUTING -j AIRLOCK_POSTROUTING\n",
            ":DOCKER_OUTPUT - [0:0]\n-A DOCKER_OUTPUT -j AIRLOCK_OUTPUT\n",
            ":DOCKER_OUTPUT - [0:0]\n-A DOCKER_OUTPUT -j evil_chain\n",
            ":DOCKER_OUTPUT - [0:0]\n-A DOCKER_OUTPUT -j DOCKER\n",
            "-A OUTPUT -j DOCKER_OUTPUT\n",
            "-A DOCKER_UNDECLARED -j RETURN\n",
            "-I OUTPUT -j ACCEPT\n",
            ":OUTPUT DROP [0:0]\n",
            ":DOCKER_OUTPUT ACCEPT [0:0]\n",
            ":DOCKER_OUTPUT - [0:0]\n:DOCKER_OUTPUT - [0:0]\n",
            ":DOCKER_OUTPUT - [0:0]\n-A OUTPUT -j DOCKER_OUTPUT -j ACCEPT\n",
            ":DOCKER_OUTPUT - [0:0]\n-A OUTPUT -d 127.0.0.11/32 -j\n",
        ] {
            let err = preserved_nat_from_save(&save(body)).unwrap_err();
            assert!(
                matches!(err, FirewallError::UnexpectedNatRule { .. }),
                "{body:?}: {err}"
            );
        }
    }

    #[test]
    fn a_second_table_or_missing_commit_is_refused() {
        assert!(matches!(
            preserved_nat_from_save(&format!("{}*nat\nCOMMIT\n", save(""))),
            Err(FirewallError::UnexpectedNatRule { .. })
        ));
        assert!(matches!(
            preserved_nat_from_save(HEAD),
            Err(FirewallError::UnterminatedNatSave)
        ));
        assert!(matches!(
            preserved_nat_from_save("-A OUTPUT -j DOCKER_OUTPUT\n"),
            Err(FirewallError::UnexpectedNatRule { .. })
        ));
    }

    #[test]
    fn our_own_lines_are_ignored_not_preserved() {
        let p = preserved_nat_from_save(&save(
            ":AIRLOCK_OUTPUT - [0:0]\n:AIRLOCK_POSTROUTING - [0:0]\n-A OUTPUT -j AIRLOCK_OUTPUT\n-A POSTROUTING -j AIRLOCK_POSTROUTING\n-A AIRLOCK_OUTPUT -p tcp -j REDIRECT --to-ports 15001\n-A AIRLOCK_POSTROUTING -d 127.0.0.1/32 -p udp -m udp --dport 15353 -m owner --gid-owner 1000 -j SNAT --to-source 127.77.0.1\n",
        ))
        .unwrap();
        assert!(p.is_empty());
        assert_eq!(p.rule_lines().count(), 0);
    }

    #[test]
    fn docker_chain_rules_are_grouped_by_sorted_chain_in_original_order() {
        let p = preserved_nat_from_save(&save(
            ":DOCKER_B - [0:0]\n:DOCKER_A - [0:0]\n-A POSTROUTING -j DOCKER_B\n-A OUTPUT -j DOCKER_A\n-A DOCKER_B -j RETURN\n-A DOCKER_A -p udp -j RETURN\n-A DOCKER_A -p tcp -j RETURN\n",
        ))
        .unwrap();
        assert_eq!(p.chains().collect::<Vec<_>>(), ["DOCKER_A", "DOCKER_B"]);
        assert_eq!(
            p.rule_lines().collect::<Vec<_>>(),
            [
                "-A OUTPUT -j DOCKER_A",
                "-A POSTROUTING -j DOCKER_B",
                "-A DOCKER_A -p udp -j RETURN",
                "-A DOCKER_A -p tcp -j RETURN",
                "-A DOCKER_B -j RETURN",
            ]
        );
    }
}
