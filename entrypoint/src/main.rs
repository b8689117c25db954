//! `airlock-entrypoint`: PID 1 of the airlock appliance (see the library's docs). This file
//! only picks the invocation, calls the library and turns its result into the one line and
//! the exit status.

use airlock_entrypoint::config::Cli;
use airlock_entrypoint::{
    EXIT_REFUSED, Invocation, admin_relay, console, problems, rescan, second, selftest, start,
};
use anyhow::anyhow;
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    match Invocation::of(&args) {
        Invocation::SelfTest(mode) => selftest::main(mode.as_deref()),
        Invocation::RescanScan(args) => rescan::scan_main(&args),
        Invocation::RescanHandoff(args) => rescan::handoff_main(&args),
        Invocation::Session(args) => {
            let err = second::main(&args).err();
            eprintln!(
                "airlock: {:#}",
                err.unwrap_or_else(|| anyhow!("the session did not start"))
            );
            ExitCode::from(EXIT_REFUSED)
        }
        Invocation::AdminRelay => {
            let run_dir = std::env::var_os(airlock_control::env::RUN_DIR).map_or_else(
                || airlock_control::paths::RUN_DIR.into(),
                std::path::PathBuf::from,
            );
            match admin_relay::main(&run_dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("airlock: {err:#}");
                    ExitCode::from(EXIT_REFUSED)
                }
            }
        }
        Invocation::Start => match start::run(Cli::parse()) {
            Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(err) => {
                match err.downcast_ref::<problems::Refused>() {
                    Some(problems::Refused(lines)) => lines.iter().for_each(|l| console::fatal(l)),
                    None => console::fatal(&format!("{err:#}")),
                }
                ExitCode::from(EXIT_REFUSED)
            }
        },
    }
}
