//! The agent's `git`. See the `airlock_git_shim` crate docs.

use airlock_git_shim::client::{self, Outcome};
use airlock_git_shim::env::{Settings, session_key};
use airlock_git_shim::prepare::{self, Paging};
use airlock_git_shim::{bisect, native, pager, patches};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};

fn main() {
    let code = run();
    std::process::exit(code);
}

fn fail(msg: &dyn std::fmt::Display) -> i32 {
    let _ = writeln!(std::io::stderr(), "git: airlock: {msg}");
    128
}

fn run() -> i32 {
    let settings = Settings::from_env();
    let raw: Vec<OsString> = std::env::args_os().skip(1).collect();
    let here = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fail(&format!("cannot read the working directory: {e}")),
    };
    let strings: Option<Vec<String>> = raw.iter().map(|a| a.to_str().map(str::to_owned)).collect();
    let prepared = strings.as_ref().map(|s| prepare::globals(&here, s));
    let cwd = prepared.as_ref().map_or(here.clone(), |p| p.cwd.clone());
    let Some(rel) = prepare::relative_to(&settings.workspace, &cwd) else {
        let err = native::exec(&settings.real_git, &raw);
        return fail(&format!(
            "cannot run {}: {err}",
            settings.real_git.display()
        ));
    };
    if let Some(why) = &settings.unavailable {
        // Not native either: a repository the agent creates in the checkout would be the
        // host's to run (hooks, config).
        return fail(&format!(
            "git is not available in the workspace: {why}; outside {} git runs natively",
            settings.workspace.display()
        ));
    }
    let Some(mut p) = prepared else {
        return fail(&"arguments that are not UTF-8 are not sent to the git API");
    };
    if prepare::runs_natively(&p.argv) {
        let args: Vec<OsString> = p.argv.iter().map(OsString::from).collect();
        let err = native::exec_in(&settings.real_git, &args, Some(&p.cwd));
        return fail(&format!(
            "cannot run {}: {err}",
            settings.real_git.display()
        ));
    }
    prepare::editor_from_env(&mut p.argv, prepare::editor_env().as_deref());
    let archive_to = prepare::archive_output(&mut p.argv, &p.cwd);
    let sub_index = prepare::subcommand_index(&p.argv);
    let format_patch = sub_index.and_then(|i| patches::format_patch_plan(&mut p.argv, i, &p.cwd));
    let patch = match sub_index.map(|i| patches::patch_input(&mut p.argv, i, &p.cwd)) {
        Some(Err(e)) => return fail(&e),
        Some(Ok(d)) => d,
        None => None,
    };
    let stdin = match prepare::message_files(&mut p.argv, &p.cwd) {
        Ok(s) => s.or(patch),
        Err(e) => return fail(&e),
    };
    let key = match session_key() {
        Ok(k) => k,
        Err(e) => return fail(&e),
    };
    let stdout = std::io::stdout();
    let tty = stdout.is_terminal();
    let width = if tty { term_width() } else { None };
    let page = tty
        && match p.paging {
            Paging::Never => false,
            Paging::Always => true,
            Paging::Default => prepare::pages_by_default(&p.argv),
        };
    let inv = prepare::invocation(p.argv, rel, stdin, tty, width);
    let mut err = std::io::stderr();
    if let Some(cmd) = sub_index.and_then(|i| bisect::run_command(&inv.argv, i)) {
        return bisect_run(&settings, &key, &inv, (sub_index.unwrap_or(0), cmd), &p.cwd);
    }
    if let Some(plan) = format_patch {
        let mut mbox = Vec::new();
        let result = client::run(&settings.socket, &key, &inv, &mut mbox, &mut err);
        if matches!(result, Ok(Outcome::Exited(0))) {
            match plan.write(&mbox) {
                Ok(listing) => {
                    let _ = stdout.lock().write_all(listing.as_bytes());
                }
                Err(e) => return fail(&e),
            }
        }
        return finish(result, &mut err);
    }
    if let Some(path) = archive_to {
        // Written by the agent's own process, with its own permissions.
        let mut file = match std::fs::File::create(&path) {
            Ok(f) => f,
            Err(e) => return fail(&format!("cannot write {}: {e}", path.display())),
        };
        return finish(
            client::run(&settings.socket, &key, &inv, &mut file, &mut err),
            &mut err,
        );
    }
    let mut pager = if page { pager::start() } else { None };
    let result = match pager.as_mut().and_then(|c| c.stdin.take()) {
        Some(mut pin) => {
            let r = client::run(&settings.socket, &key, &inv, &mut pin, &mut err);
            drop(pin);
            r
        }
        None => client::run(&settings.socket, &key, &inv, &mut stdout.lock(), &mut err),
    };
    if let Some(mut c) = pager {
        let _ = c.wait();
    }
    finish(result, &mut err)
}

/// `git bisect run <command>`: the agent's command runs here, as the agent; each verdict
/// goes to the git API as `git bisect good|bad|skip` until git names the first bad commit.
fn bisect_run(
    settings: &Settings,
    key: &airlock_wire::SessionKey,
    inv: &airlock_wire::Invocation,
    (at, cmd): (usize, &[String]),
    cwd: &std::path::Path,
) -> i32 {
    let mut err = std::io::stderr();
    loop {
        let verdict = bisect::run_once(cmd, cwd);
        let Some(step) = verdict.step() else {
            let _ = writeln!(
                err,
                "bisect run failed: {} did not exit 0-127",
                cmd.join(" ")
            );
            return 1;
        };
        let mut next = inv.clone();
        next.argv.truncate(at + 1);
        next.argv.push(step.to_owned());
        let mut out = Vec::new();
        let result = client::run(&settings.socket, key, &next, &mut out, &mut err);
        let _ = std::io::stdout().write_all(&out);
        match result {
            Ok(Outcome::Exited(0)) if bisect::finished(&String::from_utf8_lossy(&out)) => {
                return 0;
            }
            Ok(Outcome::Exited(0)) => {}
            other => return finish(other, &mut err),
        }
    }
}

/// The exit status of a request, with a refusal or an error on stderr.
fn finish(result: Result<Outcome, airlock_git_shim::ShimError>, err: &mut std::io::Stderr) -> i32 {
    match result {
        Ok(Outcome::Exited(code)) => code,
        Ok(Outcome::Denied(d)) => {
            let _ = writeln!(
                err,
                "git: airlock refused this ({}): {}",
                d.reason, d.message
            );
            1
        }
        Err(e) => fail(&e),
    }
}

fn term_width() -> Option<u16> {
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; fd 1 is our stdout.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        (libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_col > 0).then_some(ws.ws_col)
    }
}
