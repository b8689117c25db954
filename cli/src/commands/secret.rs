//! `airlock secret set|ls|rm`: the host's secret store ([`airlock_cli::secrets`]). A value
//! comes from stdin (a pipe or a file) or, on a terminal, a prompt that does not echo; it is
//! never an argument, so it is never in a process's argv.

use airlock_cli::cli::{Cli, SecretArgs, SecretCmd};
use airlock_cli::paths::Paths;
use airlock_cli::term;
use anyhow::{Context, Result};
use serde_json::json;
use std::io::{Read, Write};

pub fn run(cli: &Cli, a: &SecretArgs) -> Result<i32> {
    let store = Paths::resolve(cli.data_dir.as_deref())?.secrets()?;
    match &a.command {
        SecretCmd::Set { name } => {
            airlock_cli::secrets::validate(name)?;
            let value = read_value(name)?;
            let path = store.set(name, &value)?;
            eprintln!(
                "secret {name} stored in {} (0600); every new sandbox whose policy reads /run/secrets/{name} gets it (or name it: --secret {name})",
                path.display()
            );
        }
        SecretCmd::Ls { json } => {
            let names = store.list()?;
            let mut out = std::io::stdout().lock();
            if *json {
                let v: Vec<_> = names
                    .iter()
                    .map(|n| json!({ "name": n, "file": store.dir.join(n) }))
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                for n in names {
                    writeln!(out, "{n}")?;
                }
            }
        }
        SecretCmd::Rm { name } => {
            store.remove(name)?;
            eprintln!("secret {name} removed");
        }
    }
    Ok(0)
}

/// The value: a hidden prompt on a terminal, else all of stdin.
fn read_value(name: &str) -> Result<Vec<u8>> {
    if term::stdin_is_terminal() {
        eprint!("value of secret {name} (not echoed): ");
        let _ = std::io::stderr().flush();
        let line = term::read_hidden_line().context("cannot read the value from the terminal")?;
        eprintln!();
        return Ok(line.into_bytes());
    }
    let mut v = Vec::new();
    std::io::stdin()
        .read_to_end(&mut v)
        .context("cannot read the value from stdin")?;
    Ok(v)
}
