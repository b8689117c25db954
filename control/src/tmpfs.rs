//! The tmpfs mounts of the run command: where, and with which options, sizes included.
//!
//! `/tmp` and the agent's home run programs (`exec`: an agent builds and runs its tools
//! there) but honour no setuid bit and no device node (`nosuid,nodev`); `/run` runs nothing.
//! The home is a tmpfs only when the host gives no volume for it ([`crate::paths::AGENT_HOME`]).

/// One tmpfs mount: where, and its options as `docker run --tmpfs` spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmpfs {
    /// Mount point in the container.
    pub target: &'static str,
    /// `rw,exec,nosuid,nodev,size=512m`-style options.
    pub options: &'static str,
}

impl Tmpfs {
    /// The `size=` option as written (`512m`), if any.
    #[must_use]
    pub fn size(&self) -> Option<&'static str> {
        self.options
            .split(',')
            .find_map(|o| o.strip_prefix("size="))
    }

    /// The `size=` option in bytes, if any.
    #[must_use]
    pub fn size_bytes(&self) -> Option<u64> {
        self.size().and_then(parse_size)
    }

    /// Whether anyone can write into it.
    #[must_use]
    pub fn writable(&self) -> bool {
        !self.options.split(',').any(|o| o == "ro")
    }

    /// `TARGET:OPTIONS`, the value of `--tmpfs` and of a compose `tmpfs:` item.
    #[must_use]
    pub fn spec(&self) -> String {
        format!("{}:{}", self.target, self.options)
    }

    /// The options with `uid=` and `gid=` (if any) set to `uid`: the agent's home for an
    /// agent user whose uid is not the image's 1000.
    #[must_use]
    pub fn options_for_uid(&self, uid: u32) -> String {
        let options: Vec<String> = self
            .options
            .split(',')
            .map(|o| match o.split_once('=') {
                Some((key @ ("uid" | "gid"), _)) => format!("{key}={uid}"),
                _ => o.to_owned(),
            })
            .collect();
        options.join(",")
    }
}

/// The agent's scratch space.
pub const TMP: Tmpfs = Tmpfs {
    target: "/tmp",
    options: "rw,exec,nosuid,nodev,size=512m",
};
/// The runtime directory's filesystem (sockets, per-start state, the control directory's
/// parent, mount points for secrets).
pub const RUN: Tmpfs = Tmpfs {
    target: "/run",
    options: "rw,nosuid,nodev,noexec,size=64m",
};
/// The agent's home when the host gives no volume for it: a fresh home per start.
pub const HOME: Tmpfs = Tmpfs {
    target: crate::paths::AGENT_HOME,
    options: "rw,exec,nosuid,nodev,uid=1000,gid=1000,mode=0700,size=1g",
};
/// The empty read-only cover over the work tree's `.git` (only for a git checkout, whose
/// git dir is handed to the git service at [`crate::paths::HIDDEN_GIT_DIR`]).
pub const GIT_COVER: Tmpfs = Tmpfs {
    target: "/workspace/.git",
    options: "ro,nosuid,nodev,noexec,mode=0555",
};

/// The writable scratch mounts, in the run command's order. Together with the engine's
/// `/dev` and `/dev/shm` and [`crate::limits::PROCESS_RESERVE`] they fit
/// [`crate::limits::MEMORY`].
pub const TMPFS: [Tmpfs; 3] = [TMP, RUN, HOME];

/// `512m`, `1g`, `64k`, `4096` (bytes), as tmpfs options and `docker run` spell sizes.
#[must_use]
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "ki" => 10,
        "m" | "mb" | "mi" => 20,
        "g" | "gb" | "gi" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("4g"), Some(4 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("1t"), None);
        assert_eq!(TMP.size(), Some("512m"));
        assert_eq!(GIT_COVER.size_bytes(), None);
    }

    #[test]
    fn every_writable_mount_is_sized_and_only_the_cover_is_read_only() {
        assert!(
            TMPFS
                .iter()
                .all(|t| t.writable() && t.size_bytes().is_some())
        );
        assert!(!GIT_COVER.writable());
    }

    #[test]
    fn tmp_and_the_home_run_programs_but_honour_no_setuid_or_devices() {
        for t in [TMP, HOME] {
            let opts: Vec<&str> = t.options.split(',').collect();
            for o in ["exec", "nosuid", "nodev"] {
                assert!(opts.contains(&o), "{} lacks {o}", t.target);
            }
        }
        assert!(RUN.options.split(',').any(|o| o == "noexec"));
    }

    #[test]
    fn the_home_options_follow_the_agent_uid() {
        assert_eq!(HOME.options_for_uid(1000), HOME.options);
        assert_eq!(
            HOME.options_for_uid(1234),
            "rw,exec,nosuid,nodev,uid=1234,gid=1234,mode=0700,size=1g"
        );
        assert_eq!(TMP.options_for_uid(1234), TMP.options);
    }
}
