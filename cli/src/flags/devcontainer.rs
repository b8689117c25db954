//! `devcontainer.json` for a [`RunSpec`] (seed 004): the work tree is the `workspaceMount`,
//! every other flag is in `runArgs` exactly as [`RunSpec::docker_args`] renders it (after
//! `--interactive --tty` when the spec has a terminal), and the image's entrypoint stays
//! PID 1 with the image's command (`overrideCommand: false`): an agent's image runs the
//! agent.

use super::{RunSpec, WORKSPACE};
use serde_json::{Value, json};

/// The `devcontainer.json` document named `name`.
pub fn render(spec: &RunSpec, name: &str) -> Value {
    let work = spec.mounts.iter().find(|m| m.target == WORKSPACE);
    let mut run_args = spec.docker_args();
    // A terminal for the image's command (a shell, or the agent): without one it reads
    // end-of-file and the container stops at once.
    if spec.tty {
        run_args.splice(0..0, ["--interactive".to_string(), "--tty".to_string()]);
    }
    // The workspace bind is `workspaceMount`: drop its `-v SRC:/workspace` pair.
    if let Some(w) = work {
        let spelled = w.bind_spec();
        if let Some(i) = run_args
            .windows(2)
            .position(|p| p[0] == "-v" && p[1] == spelled)
        {
            run_args.drain(i..i + 2);
        }
    }
    let workspace_mount = work.map(|w| {
        format!(
            "source={},target={},type=bind",
            w.source.spelled(),
            w.target
        )
    });
    json!({
        "name": name,
        "image": spec.image,
        "runArgs": run_args,
        "workspaceMount": workspace_mount,
        "workspaceFolder": WORKSPACE,
        "overrideCommand": false,
        "containerUser": "root",
        "remoteUser": "agent",
    })
}
