//! Who may use the admin API: the socket's peer as the kernel names it (`SO_PEERCRED`).
//!
//! The socket lives in a directory the agent cannot enter (docs/design.md §2), so the
//! filesystem is the first wall; this is the second, for a socket reached some other way.
//! Root in the container may (an operator's `docker exec` / `kubectl exec`); so may the
//! operator's host uid, the control directory's owner, from **outside** the container's pid
//! namespace only (the host CLI through the bind-mounted directory: the kernel names its pid
//! 0, as it is not in this namespace). The agent's processes are inside, whatever their uid,
//! so a host uid that happens to equal the agent's does not let the agent in.

use std::fmt;

/// The peer of one admin connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its pid in the proxy's pid namespace; `None` or `Some(0)` when it is not in it.
    pub pid: Option<i32>,
}

/// Why a peer was refused (one line, for the error body and the proxy's log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who may connect besides root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators {
    /// The operator's host uids (the control directory's owner), admitted from outside the
    /// container's pid namespace.
    pub uids: Vec<u32>,
}

impl Operators {
    /// Whether `peer` may use the API.
    ///
    /// # Errors
    /// [`Refused`] naming the peer and what would be admitted.
    pub fn admit(&self, peer: Peer) -> Result<(), Refused> {
        if peer.uid == 0 {
            return Ok(());
        }
        let outside = matches!(peer.pid, None | Some(0));
        if self.uids.contains(&peer.uid) && outside {
            return Ok(());
        }
        let place = match peer.pid {
            Some(p) if p > 0 => format!("pid {p} inside the sandbox"),
            _ => "outside the sandbox".to_owned(),
        };
        Err(Refused(format!(
            "uid {} ({place}) may not use the admin API: only root in the container and the operator's uid from the host may",
            peer.uid
        )))
    }
}

/// Whether `peer` (admitted to the API) may say that a second session begins: root only,
/// as root is admitted (the entrypoint's `airlock-session` in the container, as it starts
/// one). The operator's host uid may not: the host has no session to begin (`airlock exec`
/// begins one through the entrypoint in the container), and a begin drops the answers the
/// session's number had. Root is not asked where it runs: root of the host can `docker
/// exec` as root anyway, and a pid namespace beside the proxy's (the namespace tests')
/// names its peer's pid 0 as the host's does.
///
/// # Errors
/// [`Refused`] naming the peer and who may.
pub fn may_begin_sessions(peer: Peer) -> Result<(), Refused> {
    if peer.uid == 0 {
        return Ok(());
    }
    let place = match peer.pid {
        Some(p) if p > 0 => format!("pid {p} inside the sandbox"),
        _ => "outside the sandbox".to_owned(),
    };
    Err(Refused(format!(
        "uid {} ({place}) may not begin a session: only root does, as airlock-session starts one in the container (airlock exec NAME)",
        peer.uid
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_host_operator_are_admitted_and_nobody_inside_else() {
        let ops = Operators { uids: vec![1000] };
        assert!(
            ops.admit(Peer {
                uid: 0,
                pid: Some(42)
            })
            .is_ok()
        );
        assert!(
            ops.admit(Peer {
                uid: 1000,
                pid: Some(0)
            })
            .is_ok()
        );
        assert!(
            ops.admit(Peer {
                uid: 1000,
                pid: None
            })
            .is_ok()
        );
        // The agent, even with the operator's uid: it is inside the pid namespace.
        assert!(
            ops.admit(Peer {
                uid: 1000,
                pid: Some(77)
            })
            .is_err()
        );
        // Another host user.
        let e = ops
            .admit(Peer {
                uid: 1001,
                pid: Some(0),
            })
            .unwrap_err();
        assert!(e.0.contains("uid 1001"), "{e}");
    }

    #[test]
    fn only_root_begins_a_session() {
        for pid in [Some(42), Some(0), None] {
            assert!(may_begin_sessions(Peer { uid: 0, pid }).is_ok(), "{pid:?}");
        }
        // The operator from the host: admitted to the API, not to this.
        let ops = Operators { uids: vec![1000] };
        let operator = Peer {
            uid: 1000,
            pid: Some(0),
        };
        assert!(ops.admit(operator).is_ok());
        let e = may_begin_sessions(operator).unwrap_err();
        assert_eq!(
            e.0,
            "uid 1000 (outside the sandbox) may not begin a session: only root does, as airlock-session starts one in the container (airlock exec NAME)"
        );
        assert!(
            may_begin_sessions(Peer {
                uid: 1000,
                pid: None
            })
            .is_err()
        );
        // Anyone else inside (the agent: the API refuses it before this, whatever its uid).
        let e = may_begin_sessions(Peer {
            uid: 1000,
            pid: Some(77),
        })
        .unwrap_err();
        assert!(e.0.contains("uid 1000 (pid 77 inside the sandbox)"), "{e}");
    }
}
