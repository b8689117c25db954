//! The sandbox's `/etc/passwd` and `/etc/group`: the host's entries plus airlock's three
//! users, each with a same-named group and gid == uid.

use airlock_channels::{AGENT_USER, GIT_USER, PROXY_USER};

use crate::topology::{AGENT_UID, GIT_UID, PROXY_UID};

/// Uids of the users that exist inside the sandbox; each user's primary group has gid == uid
/// and the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Users {
    /// `airlock`: runs the proxy.
    pub proxy: u32,
    /// `airlock-git`: runs the git API (its group is `airlock-git` too).
    pub git: u32,
    /// `agent`: runs the agent.
    pub agent: u32,
}

impl Users {
    /// The fixed uids 64101..64103.
    #[must_use]
    pub const fn fixed() -> Users {
        Users {
            proxy: PROXY_UID,
            git: GIT_UID,
            agent: AGENT_UID,
        }
    }

    fn entries(self) -> [(&'static str, u32); 3] {
        [
            (PROXY_USER, self.proxy),
            (GIT_USER, self.git),
            (AGENT_USER, self.agent),
        ]
    }
}

/// Keeps the host's lines except those that would collide (same name or id) with ours.
fn keep_host_lines(host: &str, users: Users) -> impl Iterator<Item = &str> {
    host.lines().filter(move |line| {
        let mut fields = line.split(':');
        let name = fields.next().unwrap_or("");
        let id = fields.nth(1).and_then(|f| f.parse::<u32>().ok());
        !users
            .entries()
            .iter()
            .any(|(n, i)| *n == name || Some(*i) == id)
    })
}

/// The sandbox's `/etc/passwd`.
#[must_use]
pub fn passwd(host: &str, users: Users, agent_home: &str) -> String {
    let mut out: String = keep_host_lines(host, users)
        .map(|l| format!("{l}\n"))
        .collect();
    for (name, id) in users.entries() {
        let (home, shell) = if name == AGENT_USER {
            (agent_home, "/bin/bash")
        } else {
            ("/nonexistent", "/usr/sbin/nologin")
        };
        out.push_str(&format!(
            "{name}:x:{id}:{id}:airlock test {name}:{home}:{shell}\n"
        ));
    }
    out
}

/// The sandbox's `/etc/group`.
#[must_use]
pub fn group(host: &str, users: Users) -> String {
    let mut out: String = keep_host_lines(host, users)
        .map(|l| format!("{l}\n"))
        .collect();
    for (name, id) in users.entries() {
        out.push_str(&format!("{name}:x:{id}:\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/sh\n\
                        squatter:x:64102:64102::/:/bin/sh\n";

    #[test]
    fn ours_replace_colliding_host_entries() {
        let p = passwd(HOST, Users::fixed(), "/tmp/alk-1-0/home/agent");
        assert!(p.starts_with("root:x:0:0:"));
        assert!(!p.contains("agent:x:1000") && !p.contains("squatter"));
        assert!(p.contains(
            "agent:x:64103:64103:airlock test agent:/tmp/alk-1-0/home/agent:/bin/bash\n"
        ));
        assert!(p.contains("airlock:x:64101:64101:"));
        assert!(p.contains("airlock-git:x:64102:64102:"));
        let g = group("root:x:0:\nairlock-git:x:999:\n", Users::fixed());
        assert_eq!(
            g,
            "root:x:0:\nairlock:x:64101:\nairlock-git:x:64102:\nagent:x:64103:\n"
        );
    }
}
