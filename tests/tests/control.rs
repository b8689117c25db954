//! The control directory (`<run dir>/operator/control`): where PID 1 writes the start's
//! readiness record for the host (and where the admin API's socket will be). The agent can
//! neither list it, read what is in it, nor put anything there; the record it holds is the
//! start's own.

use crate::common::*;

#[test]
fn the_agent_cannot_list_read_or_forge_the_control_directory() {
    let world = world();
    let airlock = Airlock::new(&world, POLICY);
    let run = airlock.run_dir.display().to_string();
    let gate = format!("{run}/operator");
    let control = format!("{gate}/control");
    let forged = r#"{"api":1,"state":"refused","version":"0","started_at_ms":1,"reason":"forged"}"#;
    let script = format!(
        "ls {run} >/dev/null; echo runlist=$?; \
         ls {gate} 2>&1; echo list=$?; \
         ls {control} 2>&1; echo listcontrol=$?; \
         cat {control}/status.json 2>&1; echo read=$?; \
         printf '%s' '{forged}' > {control}/status.json 2>&1; echo forge=$?; \
         mkdir {gate}/x 2>&1; echo mkdir=$?; \
         echo 'airlock: session fake ready in 1 ms'"
    );
    let out = airlock.run(&world, &script);
    assert_ok(&out);
    let text = stdout(&out);
    // The agent reaches the runtime directory (the git socket is there): what stops it
    // below is the root-only parent, not a path it cannot reach at all.
    assert!(text.contains("runlist=0"), "{text}");
    for step in ["list", "listcontrol", "read", "forge", "mkdir"] {
        assert_attempt_failed(&text, step);
    }
    assert!(
        !text.contains("\"state\""),
        "the agent read the record:\n{text}"
    );

    // The record is PID 1's: ready, with this start's session and its step times.
    let record = std::fs::read_to_string(airlock.run_dir.join("operator/control/status.json"))
        .expect("the readiness record");
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["state"], "ready", "{record}");
    assert!(record["steps"]["total_ms"].as_u64().is_some(), "{record}");
    // The start's session is the one its ready line names (the entrypoint's stderr line;
    // the agent's copy on stdout names another).
    let session = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("airlock: session "))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no session line:\n{}", stderr(&out)));
    assert_eq!(record["session"], session.as_str(), "{record}");
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(&gate).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "{gate}");
}
