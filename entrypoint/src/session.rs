//! Per-start identity: the session id (the container start time plus a random part), fresh on
//! every start. The shims' signing key joins it with the git API (issue 5).

use anyhow::{Context, Result};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
}

impl Session {
    pub fn new() -> Result<Session> {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_secs();
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce)
            .map_err(|e| anyhow::anyhow!("cannot read the kernel's random source: {e}"))?;
        Ok(Session {
            id: format!("{started}-{}", hex::encode(nonce)),
        })
    }
}

/// 8 random bytes as hex, for placeholders.
pub fn nonce() -> Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot read the kernel's random source: {e}"))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_unique_and_carry_the_start_time() {
        let (a, b) = (Session::new().unwrap(), Session::new().unwrap());
        assert_ne!(a.id, b.id);
        let started: u64 = a.id.split('-').next().unwrap().parse().unwrap();
        assert!(started > 1_700_000_000);
    }
}
