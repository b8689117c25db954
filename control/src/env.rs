//! The environment variables that cross from the host to the container: the run command
//! (or the CLI's container-create body) sets them, the entrypoint reads them. Values are
//! never secrets: secrets are files ([`crate::paths::SECRETS_DIR`]).

/// The policy file inside the container (default [`crate::paths::POLICY`]); an image may
/// set it, and the CLI reads the image's value to find the policy it will run.
pub const POLICY: &str = "AIRLOCK_POLICY";
/// The sandbox's name for this start, over the policy's `[sandbox] name`.
pub const SANDBOX: &str = "AIRLOCK_SANDBOX";
/// Who started the container: [`LAUNCHER_CLI`] for the `airlock` CLI (its fixes then speak
/// of `airlock secret set` and `--secret`), unset for `docker run` and compose.
pub const LAUNCHER: &str = "AIRLOCK_LAUNCHER";
/// The value of [`LAUNCHER`] the CLI sets.
pub const LAUNCHER_CLI: &str = "cli";
/// The host path of the work tree: a label for the entrypoint's refusals, never read as a
/// file.
pub const HOST_REPO: &str = "AIRLOCK_HOST_REPO";
/// The host path of the policy file mounted over the image's (a label, as [`HOST_REPO`]).
pub const HOST_POLICY: &str = "AIRLOCK_HOST_POLICY";
/// The host path of the operator's extra CA (a label, as [`HOST_REPO`]).
pub const HOST_EXTRA_CA: &str = "AIRLOCK_HOST_EXTRA_CA";
/// The upstream roots for the proxy alone (a test CA), at [`crate::paths::UPSTREAM_CA`].
pub const UPSTREAM_CA: &str = "AIRLOCK_UPSTREAM_CA";
/// The operator's extra CA, at [`crate::paths::EXTRA_CA`].
pub const EXTRA_CA: &str = "AIRLOCK_EXTRA_CA";
/// The agent's default commit identity (the agent's own git config still wins).
pub const GIT_USER_NAME: &str = "AIRLOCK_GIT_USER_NAME";
/// See [`GIT_USER_NAME`].
pub const GIT_USER_EMAIL: &str = "AIRLOCK_GIT_USER_EMAIL";
/// Bytes the audit log may take on the audit volume.
pub const AUDIT_CAP: &str = "AIRLOCK_AUDIT_CAP";
/// Which preflight checks run: `container` (the image sets it), `off`, or unset
/// (capabilities only).
pub const PREFLIGHT: &str = "AIRLOCK_PREFLIGHT";
/// The runtime directory (default [`crate::paths::RUN_DIR`]).
pub const RUN_DIR: &str = "AIRLOCK_RUN_DIR";
/// The audit directory (default [`crate::paths::AUDIT_DIR`]).
pub const AUDIT_DIR: &str = "AIRLOCK_AUDIT_DIR";
/// The hidden git dir (default [`crate::paths::HIDDEN_GIT_DIR`]).
pub const GIT_DIR: &str = "AIRLOCK_GIT_DIR";
/// The user that runs the agent.
pub const AGENT_USER: &str = "AIRLOCK_AGENT_USER";
/// The uid (and gid) the agent runs as: `auto`, `image`, `UID` or `UID:GID`.
pub const AGENT_UID: &str = "AIRLOCK_AGENT_UID";
/// The agent's working directory (default [`crate::paths::WORKSPACE`]).
pub const WORKDIR: &str = "AIRLOCK_WORKDIR";
/// An operator CA certificate the proxy intercepts with.
pub const CA_CERT: &str = "AIRLOCK_CA_CERT";
/// The operator CA's private key.
pub const CA_KEY: &str = "AIRLOCK_CA_KEY";

/// A file whose non-empty content is the claim that makes this start a session: when set,
/// PID 1 mints nothing and starts nothing until the file says who claimed it (a warm pod
/// of a Kubernetes pool; docs/kubernetes.md, "Claim-time secrets").
pub const WAIT_FOR_CLAIM: &str = "AIRLOCK_WAIT_FOR_CLAIM";

/// The variable that labels the host file of the secret `name` for the entrypoint's
/// refusals: `AIRLOCK_HOST_<NAME>_FILE` (`github_token` → `AIRLOCK_HOST_GITHUB_TOKEN_FILE`).
#[must_use]
pub fn host_secret_file(name: &str) -> String {
    format!("AIRLOCK_HOST_{}_FILE", name.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_secret_s_host_label_is_named_after_it() {
        assert_eq!(
            super::host_secret_file("github_token"),
            "AIRLOCK_HOST_GITHUB_TOKEN_FILE"
        );
    }
}
