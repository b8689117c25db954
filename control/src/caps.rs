//! The capabilities PID 1 needs as root, each for one job. The run command adds exactly
//! these after `--cap-drop ALL`; the preflight refuses a container that lacks one (naming
//! the job) or holds any other.

/// One capability PID 1 keeps from the engine's set, and the job it does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// As `docker run --cap-add` spells it: `NET_ADMIN`.
    pub name: &'static str,
    /// What PID 1 needs it for, completing "needed to ...".
    pub why: &'static str,
}

impl Capability {
    /// As the kernel and libcap spell it: `CAP_NET_ADMIN`.
    #[must_use]
    pub fn kernel_name(&self) -> String {
        format!("CAP_{}", self.name)
    }
}

/// Every capability the run command adds, in its order.
pub const CAPABILITIES: [Capability; 8] = [
    Capability {
        name: "NET_ADMIN",
        why: "apply the firewall",
    },
    Capability {
        name: "SETUID",
        why: "run the proxy and the agent as their users",
    },
    Capability {
        name: "SETGID",
        why: "set their groups",
    },
    Capability {
        name: "SETPCAP",
        why: "clear their bounding sets",
    },
    Capability {
        name: "KILL",
        why: "signal the proxy and the agent",
    },
    Capability {
        name: "CHOWN",
        why: "hand the audit log to the proxy user",
    },
    Capability {
        name: "FOWNER",
        why: "set the audit directory's mode after the chown",
    },
    Capability {
        name: "DAC_OVERRIDE",
        why: "write the credential hand-off and reach the audit log inside the proxy's 0700 directories",
    },
];

/// The names of [`CAPABILITIES`], as `--cap-add` takes them.
#[must_use]
pub fn names() -> Vec<&'static str> {
    CAPABILITIES.iter().map(|c| c.name).collect()
}

/// The capability named `name` (`NET_ADMIN` or `CAP_NET_ADMIN`, any case), if PID 1 needs it.
#[must_use]
pub fn find(name: &str) -> Option<&'static Capability> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    CAPABILITIES.iter().find(|c| c.name == bare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_capability_is_named_once_with_its_job() {
        let mut seen = names();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), CAPABILITIES.len());
        assert!(CAPABILITIES.iter().all(|c| !c.why.is_empty()));
        assert_eq!(
            find("cap_net_admin").map(Capability::kernel_name),
            Some("CAP_NET_ADMIN".to_owned())
        );
        assert_eq!(find("SYS_ADMIN"), None);
    }
}
