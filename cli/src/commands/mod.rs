//! One function per subcommand; each returns the process exit code.

mod render;

use airlock_cli::cli::{Cli, Command};
use airlock_cli::exit::{Code, Failure};
use anyhow::Result;

/// Run the parsed command line.
pub fn run(cli: Cli) -> Result<i32> {
    match &cli.command {
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "airlock", &mut std::io::stdout());
            return Ok(0);
        }
        Command::Render(a) => return render::run(&cli, a),
        _ => {}
    }
    Err(Failure::new(Code::Failure, "this command is not implemented yet").into())
}
