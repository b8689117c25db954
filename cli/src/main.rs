//! `airlock`: the host CLI (see the crate docs of `airlock_cli` and `airlock --help`).

mod commands;

use airlock_cli::cli::Cli;
use airlock_cli::exit;
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    let code = match commands::run(cli) {
        Ok(code) => code,
        Err(err) => {
            // One line: what is wrong and what to do (the context chain, outermost first).
            let text: Vec<String> = err.chain().map(|e| e.to_string()).collect();
            eprintln!("airlock: {}", dedup(&text).join(": "));
            exit::code_of(&err)
        }
    };
    std::process::exit(code);
}

/// Drop a cause whose text its wrapper already includes.
fn dedup(chain: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in chain {
        if !out.iter().any(|o| o.contains(t.as_str())) {
            out.push(t.clone());
        }
    }
    out
}
