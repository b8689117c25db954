//! What the container's exit status means (the entrypoint's, which is the container's).

/// The appliance refused to start (`EX_CONFIG` of sysexits.h): a check failed, and one
/// `airlock:` line on stderr (and the readiness record's `reason`) says which and how to
/// fix it. A child of PID 1 (the proxy, the git API) exits with it for the same reason.
pub const REFUSED: u8 = airlock_channels::EXIT_REFUSED;
/// A signal `N` ended the agent: the status is `SIGNALLED + N`, as a shell reports it.
pub const SIGNALLED: i32 = 128;

/// What `code` says about a container that stopped, for a message ("refused to start");
/// `None` when it is the agent's own status.
#[must_use]
pub fn describe(code: i64) -> Option<&'static str> {
    (code == i64::from(REFUSED)).then_some("refused to start")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refused_start_is_named_and_the_agent_s_own_status_is_not() {
        assert_eq!(super::describe(78), Some("refused to start"));
        assert_eq!(super::describe(1), None);
        assert_eq!(super::describe(0), None);
    }
}
