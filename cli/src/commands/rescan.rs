//! `airlock rescan <name>`: ask a running sandbox to read its workspace's secret files again.
//!
//! One job: SIGHUP to the sandbox's container, whose PID 1 (the entrypoint) runs the
//! workspace-secrets rescan (the entrypoint's `rescan` module) and says what it found in
//! airlock's own log (`airlock.log` in the sandbox's audit directory, never the agent's
//! terminal). It does not wait for the result nor read it: the proxy's `reload` audit line
//! (`airlock logs NAME --audit`) counts the needles it holds, airlock.log and
//! `/run/airlock/workspace-secrets` in the sandbox say what each file gave.

use super::Ctx;
use airlock_cli::exit::{Code, Failure};
use anyhow::Result;

/// The signal the entrypoint takes for a rescan.
pub const SIGNAL: &str = "SIGHUP";

pub async fn run(ctx: &Ctx, name: &str) -> Result<i32> {
    let row = ctx.sandbox(name)?;
    let running = ctx
        .engine
        .inspect(&row.container_id)
        .await?
        .is_some_and(|o| o.running);
    if !running {
        return Err(Failure::new(
            Code::Failure,
            format!("sandbox {name} is not running: `airlock start {name}` first"),
        )
        .into());
    }
    ctx.engine.signal(&row.container_id, SIGNAL).await?;
    let log = ctx.checkout(name).audit().join("airlock.log");
    println!(
        "sent {SIGNAL} to sandbox {name}: its workspace secret files are read again; the proxy's reload line in `airlock logs {name} --audit` counts its needles, and {} (root's) says what each file gave",
        log.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use airlock_cli::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn rescan_takes_exactly_one_sandbox_name() {
        let cli = Cli::try_parse_from(["airlock", "rescan", "fix-login"]).unwrap();
        assert!(matches!(&cli.command, Command::Rescan(a) if a.name == "fix-login"));
        assert!(Cli::try_parse_from(["airlock", "rescan"]).is_err());
        assert!(Cli::try_parse_from(["airlock", "rescan", "a", "b"]).is_err());
    }
}
