//! Where things are, from the environment (with the appliance's defaults).

use airlock_wire::SessionKey;
use std::path::PathBuf;

/// The shim's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The workspace root (`AIRLOCK_WORKSPACE`, default `/workspace`).
    pub workspace: PathBuf,
    /// The git API socket (`AIRLOCK_GIT_SOCKET`, default [`airlock_channels::GIT_SOCKET`]).
    pub socket: PathBuf,
    /// The real git (`AIRLOCK_REAL_GIT`, default `/usr/bin/git`).
    pub real_git: PathBuf,
    /// `AIRLOCK_GIT_UNAVAILABLE`: set by the entrypoint when the workspace has no repository
    /// (no git API runs); the reason the shim gives for git in the workspace.
    pub unavailable: Option<String>,
}

impl Settings {
    /// From the process environment.
    #[must_use]
    pub fn from_env() -> Settings {
        let get = |k: &str, d: &str| PathBuf::from(std::env::var_os(k).unwrap_or_else(|| d.into()));
        Settings {
            workspace: get("AIRLOCK_WORKSPACE", "/workspace"),
            socket: get("AIRLOCK_GIT_SOCKET", airlock_channels::GIT_SOCKET),
            real_git: get("AIRLOCK_REAL_GIT", "/usr/bin/git"),
            unavailable: std::env::var("AIRLOCK_GIT_UNAVAILABLE")
                .ok()
                .filter(|w| !w.is_empty()),
        }
    }
}

/// The session key: `AIRLOCK_SESSION_KEY_FILE` (a file the agent can read) or
/// `AIRLOCK_SESSION_KEY` (64 hex digits).
pub fn session_key() -> Result<SessionKey, crate::ShimError> {
    if let Some(path) = std::env::var_os("AIRLOCK_SESSION_KEY_FILE") {
        return SessionKey::read_file(std::path::Path::new(&path))
            .map_err(|e| crate::ShimError::Key(e.to_string()));
    }
    match std::env::var("AIRLOCK_SESSION_KEY") {
        Ok(hex) => SessionKey::from_hex(&hex, "AIRLOCK_SESSION_KEY")
            .map_err(|e| crate::ShimError::Key(e.to_string())),
        Err(_) => Err(crate::ShimError::Key(
            "neither AIRLOCK_SESSION_KEY_FILE nor AIRLOCK_SESSION_KEY is set".into(),
        )),
    }
}
