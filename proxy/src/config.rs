//! Command line of the `airlock-proxy` binary.
//!
//! Only what the entrypoint passes. Test seams (resolver, connector, listen addresses) are
//! library API and deliberately absent here.

use std::path::PathBuf;

use clap::Parser;

/// `airlock-proxy --policy <file> --audit <file> --session <id> [--resolv-conf <file>]
/// [--state-dir <dir>] [--ca-export <file>] [--upstream-ca <file>]...`
#[derive(Debug, Clone, Parser)]
#[command(name = "airlock-proxy", version, about = "airlock's egress proxy")]
pub struct Args {
    /// Policy file (TOML).
    #[arg(long)]
    pub policy: PathBuf,
    /// Audit log, opened for append (created 0600).
    #[arg(long)]
    pub audit: PathBuf,
    /// Session id, written on every audit line and reported by the health check.
    #[arg(long)]
    pub session: String,
    /// Where the upstream nameservers are read from, once, at start.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub resolv_conf: PathBuf,
    /// The proxy's private state directory (0700, this user): the credential hand-off
    /// (`credentials.json`) and the appliance CA (`ca.pem`, `ca-key.pem`).
    #[arg(long, default_value_os_t = default_state_dir())]
    pub state_dir: PathBuf,
    /// Where the CA's public certificate is exported (0644) for the agent's trust bundle.
    #[arg(long, default_value = airlock_channels::CA_PROXY_EXPORT_PATH)]
    pub ca_export: PathBuf,
    /// Extra trusted roots for verifying upstreams (test or corporate CAs), PEM; repeatable.
    #[arg(long)]
    pub upstream_ca: Vec<PathBuf>,
    /// The container's id, written on every audit line (the entrypoint finds it).
    #[arg(long)]
    pub container: Option<String>,
    /// Bytes the audit log's files may take together (the current one and the rotated
    /// ones); keep it well under the audit volume's free space.
    #[arg(long, default_value_t = crate::audit::Bounds::default().cap)]
    pub audit_cap: u64,
    /// An inherited descriptor of a bound, listening Unix socket to serve the admin API on
    /// (PID 1 binds it in the control directory and hands it over).
    #[arg(long)]
    pub admin_fd: Option<i32>,
    /// A Unix socket path to bind and serve the admin API on (tests; the appliance uses
    /// `--admin-fd`). Created 0600.
    #[arg(long, conflicts_with = "admin_fd")]
    pub admin_socket: Option<PathBuf>,
    /// A host uid that may use the admin API from outside the container (the control
    /// directory's owner); repeatable. Root in the container always may.
    #[arg(long)]
    pub admin_operator_uid: Vec<u32>,
    /// The directory holding PID 1's readiness record (`status.json`), for the admin API's
    /// status.
    #[arg(long)]
    pub status_dir: Option<PathBuf>,
    /// The agent session's uid (the admin API's sessions).
    #[arg(long)]
    pub agent_uid: Option<u32>,
}

impl Args {
    /// The audit log's bounds from the command line.
    #[must_use]
    pub fn audit_bounds(&self) -> crate::audit::Bounds {
        crate::audit::Bounds {
            cap: self.audit_cap,
            ..crate::audit::Bounds::default()
        }
    }
}

fn default_state_dir() -> PathBuf {
    PathBuf::from(airlock_channels::RUN_DIR).join(airlock_channels::PROXY_STATE_SUBDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entrypoint_command_line_parses() {
        let a = Args::try_parse_from([
            "airlock-proxy",
            "--policy",
            "/p.toml",
            "--audit",
            "/a.jsonl",
            "--session",
            "s-1",
        ])
        .unwrap();
        assert_eq!(a.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        assert_eq!(a.session, "s-1");
        assert_eq!(a.state_dir, PathBuf::from("/run/airlock/proxy"));
        assert_eq!(
            a.ca_export,
            PathBuf::from("/run/airlock/proxy-public/ca.pem")
        );
        assert!(a.upstream_ca.is_empty());
    }

    #[test]
    fn upstream_roots_repeat() {
        let a = Args::try_parse_from([
            "airlock-proxy",
            "--policy",
            "p",
            "--audit",
            "a",
            "--session",
            "s",
            "--state-dir",
            "/st",
            "--upstream-ca",
            "/a.pem",
            "--upstream-ca",
            "/b.pem",
        ])
        .unwrap();
        assert_eq!(a.upstream_ca.len(), 2);
        assert_eq!(a.state_dir, PathBuf::from("/st"));
    }

    #[test]
    fn missing_session_is_an_error() {
        assert!(Args::try_parse_from(["airlock-proxy", "--policy", "p", "--audit", "a"]).is_err());
    }
}
