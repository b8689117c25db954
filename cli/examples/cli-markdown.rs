//! Prints `docs/cli.md`, the command-line reference rendered from the CLI's own definitions:
//! `cargo run -q -p airlock-cli --example cli-markdown > docs/cli.md`.

fn main() {
    print!("{}", airlock_cli::cli_doc::markdown());
}
