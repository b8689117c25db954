//! Local paging: when stdout is a terminal, output goes through `$GIT_PAGER`, `$PAGER` or
//! `less -FRX` (the agent's own process, with the agent's own rights).

use std::process::{Child, Command, Stdio};

/// Start the pager, if one applies. `None`: write to stdout directly.
#[must_use]
pub fn start() -> Option<Child> {
    let configured = std::env::var("GIT_PAGER")
        .or_else(|_| std::env::var("PAGER"))
        .ok();
    let mut cmd = match configured.as_deref() {
        Some("" | "cat") => return None,
        Some(p) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(p);
            c
        }
        None => {
            let mut c = Command::new("less");
            c.arg("-FRX");
            c
        }
    };
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    cmd.stdin(Stdio::piped()).spawn().ok()
}
