//! Who runs what: the three users of the appliance, looked up once and checked against each other.

use anyhow::{Context, Result, bail};
use nix::unistd::{Group, Uid, User};
use std::path::PathBuf;

/// A user a child process is dropped to.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups after the drop (always exactly these, nothing inherited).
    pub groups: Vec<u32>,
    pub home: PathBuf,
    pub shell: PathBuf,
}

#[cfg(test)]
impl Identity {
    /// The agent as the unit tests see it: `agent`, uid and gid 1000, home `/home/agent`.
    pub(crate) fn test_agent() -> Identity {
        Identity {
            name: "agent".into(),
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
            home: "/home/agent".into(),
            shell: "/bin/bash".into(),
        }
    }
}

impl Identity {
    /// The identity of session `k` of this agent (see `airlock_channels::session_gid`):
    /// session 1 is the agent itself; session `k >= 2` keeps its uid (every session's files
    /// are the workspace owner's and usable by all of them) but runs with its own gid as real,
    /// effective and saved gid, and with that gid and the agent's groups (its primary gid
    /// among them) as supplementary groups, so it keeps the agent's group access to files.
    /// The groups are sorted and without duplicates, as `setgroups` gets them and the
    /// kernel's `/proc/<pid>/status` then reports them. Pure.
    #[must_use]
    pub fn for_session(&self, k: u16) -> Identity {
        if k <= 1 {
            return self.clone();
        }
        let gid = airlock_channels::session_gid(k, self.gid);
        let mut groups = vec![gid, self.gid];
        groups.extend(&self.groups);
        groups.sort_unstable();
        groups.dedup();
        Identity {
            gid,
            groups,
            ..self.clone()
        }
    }

    /// Whether this identity could read a file with this owner and mode (its uid, its
    /// primary or any supplementary group, or everyone). Root's overrides are not counted:
    /// the identities this is asked about never hold capabilities.
    pub fn can_read(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        let mode = meta.mode();
        (meta.uid() == self.uid && mode & 0o400 != 0)
            || ((meta.gid() == self.gid || self.groups.contains(&meta.gid())) && mode & 0o040 != 0)
            || mode & 0o004 != 0
    }

    fn lookup(name: &str, role: &str) -> Result<Identity> {
        let user = User::from_name(name)
            .with_context(|| format!("cannot read the user database looking up {role} user {name:?}"))?
            .with_context(|| {
                format!("{role} user {name:?} does not exist: create it in the image (see the Dockerfile) or set the matching --*-user option")
            })?;
        Ok(Identity {
            name: name.to_owned(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups: vec![user.gid.as_raw()],
            home: user.dir,
            shell: user.shell,
        })
    }
}

/// Which ids the agent runs as (`--agent-uid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentIds {
    /// The workspace owner's uid and gid.
    Auto,
    /// The agent user's own ids from the user database.
    Image,
    /// These ids (the gid defaults to the uid).
    Fixed(u32, Option<u32>),
}

impl std::str::FromStr for AgentIds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not auto, image, UID or UID:GID");
        match s.trim() {
            "auto" | "" => Ok(AgentIds::Auto),
            "image" => Ok(AgentIds::Image),
            other => {
                let (uid, gid) = match other.split_once(':') {
                    Some((u, g)) => (u, Some(g)),
                    None => (other, None),
                };
                let uid = uid.parse().map_err(|_| bad())?;
                let gid = gid.map(str::parse).transpose().map_err(|_| bad())?;
                Ok(AgentIds::Fixed(uid, gid))
            }
        }
    }
}

impl AgentIds {
    /// The agent's (uid, gid): `image` is the user database's, `owner` the workspace's
    /// (`None` when there is none). A root-owned workspace keeps the image's ids: the agent
    /// is never root. Pure.
    pub fn resolve(self, image: (u32, u32), owner: Option<(u32, u32)>) -> (u32, u32) {
        match self {
            AgentIds::Image => image,
            AgentIds::Fixed(uid, gid) => (uid, gid.unwrap_or(uid)),
            AgentIds::Auto => match owner {
                Some((uid, gid)) if uid != 0 => (uid, if gid == 0 { uid } else { gid }),
                _ => image,
            },
        }
    }
}

/// The users of docs/design.md §2, resolved.
#[derive(Debug, Clone)]
pub struct Users {
    pub proxy: Identity,
    pub agent: Identity,
    /// Group of the git API: the only group that may reach the proxy's service port.
    pub git_gid: u32,
}

impl Users {
    pub fn lookup(proxy: &str, git: &str, agent: &str) -> Result<Users> {
        let proxy = Identity::lookup(proxy, "proxy")?;
        let agent = Identity::lookup(agent, "agent")?;
        let git_group = Group::from_name(git)
            .with_context(|| {
                format!("cannot read the group database looking up git group {git:?}")
            })?
            .with_context(|| {
                format!(
                    "git group {git:?} does not exist: create it in the image (see the Dockerfile)"
                )
            })?;
        let users = Users {
            proxy,
            agent,
            git_gid: git_group.gid.as_raw(),
        };
        users.check()?;
        Ok(users)
    }

    /// The same users with the agent running as `uid:gid` (its name, home and shell stay
    /// the agent user's), checked again.
    pub fn with_agent_ids(mut self, uid: u32, gid: u32) -> Result<Users> {
        self.agent.uid = uid;
        self.agent.gid = gid;
        self.agent.groups = vec![gid];
        self.check()?;
        Ok(self)
    }

    /// Fail closed on identities that would collapse the separation the firewall relies on.
    pub fn check(&self) -> Result<()> {
        let (proxy, agent) = (&self.proxy, &self.agent);
        if agent.uid == 0 {
            bail!(
                "agent user {:?} is root (uid {} gid {}): the agent must be an unprivileged user",
                agent.name,
                agent.uid,
                agent.gid
            );
        }
        if proxy.uid == 0 {
            bail!(
                "proxy user {:?} is root: the proxy must run as its own system user",
                proxy.name
            );
        }
        if agent.uid == proxy.uid {
            bail!(
                "agent and proxy share uid {}: the firewall lets the proxy's uid out, so they must differ",
                agent.uid
            );
        }
        if let Some(problem) = agent_gid_problem(agent.gid, proxy.gid, self.git_gid) {
            bail!("{problem}");
        }
        Ok(())
    }
}

/// Why the agent cannot run with primary gid `gid`, or `None`: root's group; the proxy's or
/// the git API's group (the firewall tells their traffic apart by it); or one of the second
/// sessions' gids (`SESSION_GID_BASE + 2 ..= SESSION_GID_BASE + MAX_SESSIONS`: the firewall
/// and the proxy would take the agent for that session, and the session allocator would
/// never hand that number out). One line with the way out. Pure.
pub fn agent_gid_problem(gid: u32, proxy_gid: u32, git_gid: u32) -> Option<String> {
    use airlock_channels::{MAX_SESSIONS, SESSION_GID_BASE};
    let (first, last) = (
        SESSION_GID_BASE + 2,
        SESSION_GID_BASE + u32::from(MAX_SESSIONS),
    );
    let why = if gid == 0 {
        "root's group".to_owned()
    } else if gid == proxy_gid {
        "the proxy's group (the firewall lets the proxy's traffic out by it)".to_owned()
    } else if gid == git_gid {
        "the git API's group (the only group that may reach the proxy's service port)".to_owned()
    } else if (first..=last).contains(&gid) {
        format!(
            "one of the second sessions' gids ({first}-{last}: the proxy would take the agent for session {})",
            gid - SESSION_GID_BASE
        )
    } else {
        return None;
    };
    Some(format!(
        "the agent's gid {gid} is {why}: run the agent with a group of its own, --agent-uid UID:GID (AIRLOCK_AGENT_UID=UID:GID, -e in AIRLOCK_DOCKER_ARGS)"
    ))
}

/// Refuse to run unless we are root: every setup step needs it.
pub fn require_root() -> Result<()> {
    if !Uid::effective().is_root() {
        bail!(
            "airlock-entrypoint must start as root inside the container (it drops privileges itself); do not pass --user to docker run"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn id(name: &str, uid: u32, gid: u32) -> Identity {
        Identity {
            name: name.into(),
            uid,
            gid,
            groups: vec![gid],
            home: "/".into(),
            shell: "/bin/sh".into(),
        }
    }

    #[test]
    fn the_agent_runs_as_the_workspace_owner_unless_told_otherwise() {
        let image = (1000, 1000);
        let auto: AgentIds = "auto".parse().unwrap();
        assert_eq!(auto.resolve(image, Some((1001, 1002))), (1001, 1002));
        assert_eq!(auto.resolve(image, None), image);
        // Root's workspace: never a root agent.
        assert_eq!(auto.resolve(image, Some((0, 0))), image);
        assert_eq!(auto.resolve(image, Some((1001, 0))), (1001, 1001));
        let image_ids: AgentIds = "image".parse().unwrap();
        assert_eq!(image_ids.resolve(image, Some((1001, 1001))), image);
        assert_eq!(
            "2000".parse::<AgentIds>().unwrap().resolve(image, None),
            (2000, 2000)
        );
        assert_eq!(
            "2000:3000"
                .parse::<AgentIds>()
                .unwrap()
                .resolve(image, Some((5, 5))),
            (2000, 3000)
        );
        assert!("root".parse::<AgentIds>().is_err());
        assert!("1:x".parse::<AgentIds>().is_err());
    }

    #[test]
    fn overridden_ids_are_checked_again() {
        let u = Users {
            proxy: id("airlock", 101, 101),
            agent: id("agent", 1000, 1000),
            git_gid: 102,
        };
        let moved = u.clone().with_agent_ids(1001, 1001).unwrap();
        assert_eq!(
            (moved.agent.uid, moved.agent.groups.clone()),
            (1001, vec![1001])
        );
        assert!(u.clone().with_agent_ids(101, 1001).is_err());
        assert!(u.with_agent_ids(1001, 102).is_err());
    }

    #[test]
    fn distinct_users_pass() {
        let u = Users {
            proxy: id("airlock", 101, 101),
            agent: id("agent", 1000, 1000),
            git_gid: 102,
        };
        u.check().unwrap();
    }

    #[test]
    fn root_agent_is_refused() {
        let u = Users {
            proxy: id("airlock", 101, 101),
            agent: id("agent", 0, 0),
            git_gid: 102,
        };
        assert!(u.check().unwrap_err().to_string().contains("root"));
    }

    #[test]
    fn agent_sharing_the_proxy_uid_is_refused() {
        let u = Users {
            proxy: id("airlock", 1000, 101),
            agent: id("agent", 1000, 1000),
            git_gid: 102,
        };
        assert!(u.check().unwrap_err().to_string().contains("share uid"));
    }

    #[test]
    fn a_file_readable_through_a_supplementary_group_counts_as_readable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("secret");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        let mut agent = id("agent", 64103, 64103);
        agent.groups = vec![64103];
        assert!(
            !agent.can_read(&meta),
            "owner and group are not the agent's"
        );
        // The file's group (root's here) among the agent's supplementary groups: readable.
        agent.groups.push(meta.gid());
        assert!(agent.can_read(&meta));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!agent.can_read(&std::fs::metadata(&f).unwrap()));
    }

    #[test]
    fn session_k_keeps_the_agents_uid_and_group_and_gets_its_own_gid() {
        use airlock_channels::{MAX_SESSIONS, SESSION_GID_BASE};
        let agent = id("agent", 1000, 1000);
        let first = agent.for_session(1);
        assert_eq!(
            (first.uid, first.gid, first.groups),
            (1000, 1000, vec![1000])
        );
        let second = agent.for_session(2);
        assert_eq!(
            (second.uid, second.gid, second.groups.clone()),
            (1000, SESSION_GID_BASE + 2, vec![1000, SESSION_GID_BASE + 2])
        );
        assert_eq!(
            (second.name, second.home),
            (agent.name.clone(), agent.home.clone())
        );
        let last = agent.for_session(MAX_SESSIONS);
        assert_eq!(last.gid, SESSION_GID_BASE + u32::from(MAX_SESSIONS));
        // Sorted and without duplicates, as the kernel reports them, whatever the agent's
        // groups held.
        let mut odd = id("agent", 1000, 62_000);
        odd.groups = vec![62_000, 50, 62_000];
        assert_eq!(
            odd.for_session(3).groups,
            vec![50, SESSION_GID_BASE + 3, 62_000]
        );
    }

    #[test]
    fn an_agent_gid_of_a_session_root_or_a_service_is_refused_with_the_way_out() {
        use airlock_channels::{MAX_SESSIONS, SESSION_GID_BASE};
        let users = |gid| Users {
            proxy: id("airlock", 101, 101),
            agent: id("agent", 1000, gid),
            git_gid: 102,
        };
        for gid in [
            0,
            101,
            102,
            SESSION_GID_BASE + 2,
            SESSION_GID_BASE + u32::from(MAX_SESSIONS),
        ] {
            let err = users(gid).check().unwrap_err().to_string();
            assert!(err.contains(&format!("gid {gid} ")), "{err}");
            assert!(err.contains("--agent-uid UID:GID"), "{err}");
            assert!(err.contains("AIRLOCK_AGENT_UID"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(
            users(SESSION_GID_BASE + 5)
                .check()
                .unwrap_err()
                .to_string()
                .contains("session 5")
        );
        // Just outside the sessions' range (session 1's would-be slot and past the last).
        for gid in [
            SESSION_GID_BASE,
            SESSION_GID_BASE + 1,
            SESSION_GID_BASE + u32::from(MAX_SESSIONS) + 1,
        ] {
            users(gid).check().unwrap();
        }
    }

    #[test]
    fn agent_in_the_git_group_is_refused() {
        let u = Users {
            proxy: id("airlock", 101, 101),
            agent: id("agent", 1000, 102),
            git_gid: 102,
        };
        assert!(u.check().is_err());
    }
}
