//! Why the git API refused a request: a closed set of stable codes.
//!
//! The code is what tests, logs and the shim match on; the human message that travels with
//! it (in [`crate::Denied`]) names the rule and how an operator would allow the operation.
//! Declared with the workspace's one code generator ([`airlock_channels::stable_codes!`], as
//! the proxy's kebab-case reasons are).

airlock_channels::stable_codes! {
    /// A denial reason. `as_str` is stable: never change an existing string.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Reason {
        // --- transport and authentication ---
        /// The request's protocol version is not the server's.
        UnsupportedVersion => "unsupported_version",
        /// The frames did not form a well-formed request.
        MalformedRequest => "malformed_request",
        /// A frame or the request exceeded a size limit.
        RequestTooLarge => "request_too_large",
        /// The connecting process is not the agent's uid (`SO_PEERCRED`).
        PeerNotAgent => "peer_not_agent",
        /// The HMAC did not verify.
        BadSignature => "bad_signature",
        /// The timestamp is outside the replay window.
        StaleTimestamp => "stale_timestamp",
        /// The nonce was already used inside the window.
        ReplayedNonce => "replayed_nonce",
        /// Too many distinct nonces inside one window; the server refuses rather than forget one.
        NonceCacheFull => "nonce_cache_full",
        /// More signed requests than the rate limit admits (sustained per second, or in one
        /// burst); refused before the nonce cache, so a flood cannot fill it. Retry shortly.
        RateLimited => "rate_limited",
        /// The server is at its connection limit.
        Busy => "busy",
        // --- command policy ---
        /// A global option that would change where or how git runs (`-c`, `--git-dir`, ...).
        GlobalOptionRefused => "global_option_refused",
        /// The subcommand is not on the allowlist (aliases included).
        SubcommandNotAllowed => "subcommand_not_allowed",
        /// An option that runs a program or reads/writes outside the workspace.
        OptionRefused => "option_refused",
        /// An option that is not on the subcommand's allowlist.
        OptionNotAllowed => "option_not_allowed",
        /// An interactive mode (`-i`, `-p`, `--edit`, ...): there is no terminal on the server.
        InteractiveRefused => "interactive_refused",
        /// `git config` write to a key outside the writable allowlist, or to another scope.
        ConfigKeyNotWritable => "config_key_not_writable",
        /// The working directory or a path argument is outside the workspace.
        OutsideWorkspace => "outside_workspace",
        /// A command that would open an editor for its message.
        MessageRequired => "message_required",
        /// An environment variable the shim may not pass.
        EnvNotAllowed => "env_not_allowed",
        /// A nested git repository (a gitlink, mode 160000, or a path with a `.git`
        /// component) would enter the index, a commit or a patch: the git API never records
        /// or enters one.
        NestedRepository => "nested_repository",
        /// `git <name>` names no git command and no `git-<name>` is installed (`git lfs` where
        /// git-lfs is absent): not a policy decision.
        NotInstalled => "not_installed",
        // --- push and fetch policy ---
        /// The remote is not one of the policy's `git.repositories`.
        RepositoryNotAuthorized => "repository_not_authorized",
        /// The destination branch matches none of the sandbox's push patterns.
        BranchNotAllowed => "branch_not_allowed",
        /// The destination branch is protected.
        BranchProtected => "branch_protected",
        /// The update is not a fast-forward (a force push or a rewritten history).
        NotFastForward => "not_fast_forward",
        /// The push would delete a remote ref.
        Deletion => "deletion",
        /// The push would create or move a tag and tags are not allowed.
        TagPush => "tag_push",
        /// A pushed commit touches a restricted path.
        RestrictedPath => "restricted_path",
        /// A push form the API does not resolve (`--mirror`, `--all`, wildcards, ...).
        PushFormNotSupported => "push_form_not_supported",
        /// A fetch, pull or ls-remote names another sandbox's branch (hidden from this one).
        BranchHidden => "branch_hidden",
        /// A fetch or pull form the API does not resolve (`git pull` without an upstream, ...).
        FetchFormNotSupported => "fetch_form_not_supported",
        // --- server side ---
        /// The server failed to run the operation (not a policy decision).
        Internal => "internal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.as_str()), "duplicate code {r}");
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            assert!(
                r.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_')
            );
        }
        assert!("nope".parse::<Reason>().is_err());
    }

    #[test]
    fn codes_are_stable() {
        // Logs and tests outside this crate match these strings.
        assert_eq!(Reason::BadSignature.as_str(), "bad_signature");
        assert_eq!(Reason::ReplayedNonce.as_str(), "replayed_nonce");
        assert_eq!(Reason::NotFastForward.as_str(), "not_fast_forward");
        assert_eq!(Reason::RestrictedPath.as_str(), "restricted_path");
        assert_eq!(Reason::RateLimited.as_str(), "rate_limited");
        assert_eq!(Reason::NotInstalled.as_str(), "not_installed");
        assert_eq!(Reason::NestedRepository.as_str(), "nested_repository");
    }
}
