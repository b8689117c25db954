//! Verification of a dropped process's credentials from `/proc/self/status`.
//!
//! The drop is only trusted once the kernel's own report says it happened: every capability
//! set empty, `NoNewPrivs: 1`, all four uids and gids the target's (the real uid may be
//! another one: the git API's split identity), exactly the expected supplementary groups and,
//! when a filter was installed, seccomp in filter mode.

use std::fmt;

/// What the status must show.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    /// Effective and filesystem uid.
    pub uid: u32,
    /// Real uid (equal to `uid` except for the git API: `airlock-git`, see docs/design.md §5).
    pub real_uid: u32,
    /// Saved uid (equal to `uid` except for the running git API, which makes it its real
    /// uid so that the agent cannot signal it).
    pub saved_uid: u32,
    pub gid: u32,
    pub groups: &'a [u32],
    pub seccomp: bool,
}

/// A field of `/proc/self/status` that does not say what it must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub field: &'static str,
    pub expected: String,
    pub found: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/proc/self/status {}: expected {}, found {:?}",
            self.field, self.expected, self.found
        )
    }
}

fn field<'s>(status: &'s str, name: &str) -> Option<&'s str> {
    status.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

fn mismatch(field: &'static str, expected: impl Into<String>, found: Option<&str>) -> Mismatch {
    Mismatch {
        field,
        expected: expected.into(),
        found: found.unwrap_or("<missing>").to_owned(),
    }
}

/// Check the text of `/proc/self/status` against `want`. Pure, so the rules are unit-tested.
pub fn verify(status: &str, want: &Expected<'_>) -> Result<(), Mismatch> {
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let found = field(status, cap);
        let empty = found.is_some_and(|v| u64::from_str_radix(v, 16) == Ok(0));
        if !empty {
            return Err(mismatch(static_name(cap), "0000000000000000", found));
        }
    }
    let nnp = field(status, "NoNewPrivs");
    if nnp != Some("1") {
        return Err(mismatch("NoNewPrivs", "1", nnp));
    }
    for (name, real, id, saved) in [
        ("Uid", want.real_uid, want.uid, want.saved_uid),
        ("Gid", want.gid, want.gid, want.gid),
    ] {
        let found = field(status, name);
        let want_ids = [real, id, saved, id];
        let all = found.is_some_and(|v| {
            let ids: Vec<&str> = v.split_whitespace().collect();
            ids.len() == 4 && ids.iter().zip(want_ids).all(|(x, w)| x.parse() == Ok(w))
        });
        if !all {
            return Err(mismatch(
                static_name(name),
                format!("{real} {id} {saved} {id} (real, effective, saved, fs)"),
                found,
            ));
        }
    }
    let groups = field(status, "Groups");
    let mut found_groups: Vec<u32> = groups
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    // Compared as sets: `setgroups` sorts but keeps a duplicate, and a duplicate grants
    // nothing more (the session identities pass theirs sorted and deduplicated anyway).
    found_groups.sort_unstable();
    found_groups.dedup();
    let mut want_groups = want.groups.to_vec();
    want_groups.sort_unstable();
    want_groups.dedup();
    if groups.is_none() || found_groups != want_groups {
        return Err(mismatch("Groups", format!("{want_groups:?}"), groups));
    }
    if want.seccomp {
        let mode = field(status, "Seccomp");
        if mode != Some("2") {
            return Err(mismatch("Seccomp", "2 (filter)", mode));
        }
    }
    Ok(())
}

/// The four gids (real, effective, saved, filesystem) of a `/proc/<pid>/status` text, or
/// `None` without a well-formed `Gid:` line. Pure.
pub fn gids(status: &str) -> Option<[u32; 4]> {
    let mut ids = field(status, "Gid")?.split_whitespace().map(str::parse);
    let gids = [
        ids.next()?.ok()?,
        ids.next()?.ok()?,
        ids.next()?.ok()?,
        ids.next()?.ok()?,
    ];
    ids.next().is_none().then_some(gids)
}

fn static_name(name: &str) -> &'static str {
    match name {
        "CapInh" => "CapInh",
        "CapPrm" => "CapPrm",
        "CapEff" => "CapEff",
        "CapBnd" => "CapBnd",
        "CapAmb" => "CapAmb",
        "Uid" => "Uid",
        _ => "Gid",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DROPPED: &str = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000 \nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";

    fn want() -> Expected<'static> {
        Expected {
            uid: 1000,
            real_uid: 1000,
            saved_uid: 1000,
            gid: 1000,
            groups: &[1000],
            seccomp: true,
        }
    }

    #[test]
    fn a_clean_drop_verifies() {
        verify(DROPPED, &want()).unwrap();
    }

    #[test]
    fn a_leftover_bounding_capability_is_caught() {
        let s = DROPPED.replace("CapBnd:\t0000000000000000", "CapBnd:\t0000000000001000");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "CapBnd");
    }

    #[test]
    fn an_ambient_capability_is_caught() {
        let s = DROPPED.replace("CapAmb:\t0000000000000000", "CapAmb:\t0000000000000400");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "CapAmb");
    }

    #[test]
    fn a_saved_root_uid_is_caught() {
        let s = DROPPED.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t1000\t1000\t0\t1000");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "Uid");
    }

    #[test]
    fn a_split_identity_verifies_only_with_its_real_uid() {
        let s = DROPPED.replace(
            "Uid:\t1000\t1000\t1000\t1000",
            "Uid:\t999\t1000\t1000\t1000",
        );
        assert_eq!(verify(&s, &want()).unwrap_err().field, "Uid");
        let split = Expected {
            real_uid: 999,
            ..want()
        };
        verify(&s, &split).unwrap();
        // The real uid is not a wildcard: the effective one must still be the target's.
        let s = DROPPED.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t999\t999\t1000\t1000");
        assert_eq!(verify(&s, &split).unwrap_err().field, "Uid");
        assert_eq!(verify(DROPPED, &split).unwrap_err().field, "Uid");
    }

    #[test]
    fn the_running_git_api_verifies_only_with_its_saved_uid_pinned() {
        // Real and saved airlock-git (999), effective and fs the owner's (1000).
        let s = DROPPED.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t999\t1000\t999\t1000");
        let running = Expected {
            real_uid: 999,
            saved_uid: 999,
            ..want()
        };
        verify(&s, &running).unwrap();
        // A saved uid still the agent's: the agent could signal it.
        let split = DROPPED.replace(
            "Uid:\t1000\t1000\t1000\t1000",
            "Uid:\t999\t1000\t1000\t1000",
        );
        assert_eq!(verify(&split, &running).unwrap_err().field, "Uid");
    }

    #[test]
    fn missing_no_new_privs_is_caught() {
        let s = DROPPED.replace("NoNewPrivs:\t1", "NoNewPrivs:\t0");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "NoNewPrivs");
    }

    #[test]
    fn an_inherited_supplementary_group_is_caught() {
        let s = DROPPED.replace("Groups:\t1000 ", "Groups:\t0 1000 ");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "Groups");
    }

    #[test]
    fn a_second_sessions_drop_verifies_only_with_its_own_gid_and_both_groups() {
        // Session 2 of agent 1000:1000: gid 61002 everywhere, groups 1000 and 61002 (the
        // kernel lists them sorted).
        let session = DROPPED
            .replace(
                "Gid:\t1000\t1000\t1000\t1000",
                "Gid:\t61002\t61002\t61002\t61002",
            )
            .replace("Groups:\t1000 ", "Groups:\t1000 61002 ");
        let want = Expected {
            gid: 61_002,
            groups: &[61_002, 1000],
            ..want()
        };
        verify(&session, &want).unwrap();
        // The agent's own gid left as the saved one: it could take it back.
        let saved = session.replace(
            "Gid:\t61002\t61002\t61002\t61002",
            "Gid:\t61002\t61002\t1000\t61002",
        );
        assert_eq!(verify(&saved, &want).unwrap_err().field, "Gid");
        // Session 1's status is not session 2's.
        assert_eq!(verify(DROPPED, &want).unwrap_err().field, "Gid");
        // The agent's group missing, or another session's group added.
        let without = session.replace("Groups:\t1000 61002 ", "Groups:\t61002 ");
        assert_eq!(verify(&without, &want).unwrap_err().field, "Groups");
        let other = session.replace("Groups:\t1000 61002 ", "Groups:\t1000 61002 61003 ");
        assert_eq!(verify(&other, &want).unwrap_err().field, "Groups");
        // A duplicate is the same set of groups.
        let twice = session.replace("Groups:\t1000 61002 ", "Groups:\t1000 61002 61002 ");
        verify(&twice, &want).unwrap();
    }

    #[test]
    fn the_gids_of_a_status_are_its_four_gid_fields() {
        assert_eq!(gids(DROPPED), Some([1000; 4]));
        let split = DROPPED.replace(
            "Gid:\t1000\t1000\t1000\t1000",
            "Gid:\t0\t61002\t61003\t61004",
        );
        assert_eq!(gids(&split), Some([0, 61_002, 61_003, 61_004]));
        assert_eq!(gids(&DROPPED.replace("Gid:", "Gidx:")), None);
        assert_eq!(
            gids(&DROPPED.replace("\t1000\t1000\t1000\t1000\nGroups", "\t1000\t1000\nGroups")),
            None
        );
    }

    #[test]
    fn seccomp_off_is_caught_when_required() {
        let s = DROPPED.replace("Seccomp:\t2", "Seccomp:\t0");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "Seccomp");
        let no_filter = Expected {
            seccomp: false,
            ..want()
        };
        verify(&s, &no_filter).unwrap();
    }

    #[test]
    fn a_missing_field_is_a_mismatch_not_a_pass() {
        let s = DROPPED.replace("CapEff:\t0000000000000000\n", "");
        assert_eq!(verify(&s, &want()).unwrap_err().field, "CapEff");
    }
}
