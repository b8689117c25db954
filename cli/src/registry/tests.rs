use super::*;

fn sandbox(name: &str) -> Sandbox {
    Sandbox {
        name: name.into(),
        repository: "/src/repo".into(),
        branch: format!("sandbox/{name}"),
        base: "0".repeat(40),
        agent: "shell".into(),
        image: "airlock:latest".into(),
        image_digest: String::new(),
        policy_hash: String::new(),
        container_id: String::new(),
        created: 100,
        last_seen: 100,
        ttl_seconds: 50,
        state: State::Creating,
        oneshot: false,
    }
}

#[test]
fn a_version_1_file_gains_the_oneshot_mark_and_keeps_its_rows() -> Result<(), RegistryError> {
    let dir = tempfile::tempdir().map_err(|source| RegistryError::CreateDir {
        path: "tmp".into(),
        source,
    })?;
    let path = dir.path().join("registry.sqlite");
    {
        // A registry as the first release wrote it: schema 1, one row.
        let conn = rusqlite::Connection::open(&path).map_err(|source| RegistryError::Open {
            path: path.clone(),
            source,
        })?;
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute(
            "INSERT INTO sandboxes (name, repository, branch, base, agent, image, created, last_seen, ttl_seconds, state) \
             VALUES ('old', '/src/repo', 'sandbox/old', '', 'shell', 'airlock:latest', 1, 1, 50, 'stopped')",
            [],
        )
        .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    let reg = Registry::open(&path)?;
    assert_eq!(reg.version()?, MIGRATIONS.len() as i64);
    let old = reg.get("old")?.unwrap();
    assert_eq!((old.state, old.oneshot), (State::Stopped, false));
    let mut run = sandbox("run");
    run.oneshot = true;
    reg.claim(&run)?;
    assert!(reg.get("run")?.unwrap().oneshot);
    Ok(())
}

#[test]
fn a_new_file_is_migrated_and_reopening_keeps_it() -> Result<(), RegistryError> {
    let dir = tempfile::tempdir().map_err(|source| RegistryError::CreateDir {
        path: "tmp".into(),
        source,
    })?;
    let path = dir.path().join("sub/registry.sqlite");
    let reg = Registry::open(&path)?;
    assert_eq!(reg.version()?, MIGRATIONS.len() as i64);
    reg.claim(&sandbox("a"))?;
    drop(reg);
    let reg = Registry::open(&path)?;
    assert_eq!(reg.list()?.len(), 1);
    assert_eq!(reg.get("a")?, Some(sandbox("a")));
    assert_eq!(reg.get("b")?, None);
    Ok(())
}

#[test]
fn a_newer_schema_and_a_corrupt_file_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let e = Registry::open(&path).unwrap_err().to_string();
    assert!(
        e.contains("newer than this airlock") && e.contains("upgrade"),
        "{e}"
    );

    let bad = dir.path().join("bad.sqlite");
    std::fs::write(
        &bad,
        b"this is not a database, it is a plain text file of some length....",
    )
    .unwrap();
    let e = Registry::open(&bad).unwrap_err().to_string();
    assert!(
        e.contains("cannot be opened") && e.contains("move it aside"),
        "{e}"
    );
}

#[test]
fn a_taken_name_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open(&dir.path().join("r.sqlite")).unwrap();
    reg.claim(&sandbox("x")).unwrap();
    let e = reg.claim(&sandbox("x")).unwrap_err();
    assert!(matches!(e, RegistryError::Taken { .. }), "{e}");
    assert!(e.to_string().contains("exists already"), "{e}");
}

#[test]
fn concurrent_claims_of_one_name_let_exactly_one_win_and_distinct_names_all_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.sqlite");
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                // Each thread is its own invocation: its own connection (and migration race).
                let reg = Registry::open(&path).unwrap();
                let same = reg.claim(&sandbox("same")).is_ok();
                let own = reg.claim(&sandbox(&format!("own-{i}"))).is_ok();
                (same, own)
            })
        })
        .collect();
    let results: Vec<(bool, bool)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.0).count(), 1, "{results:?}");
    assert!(results.iter().all(|r| r.1), "{results:?}");
    assert_eq!(Registry::open(&path).unwrap().list().unwrap().len(), 9);
}

#[test]
fn sessions_are_recorded_once_per_start_and_go_with_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open(&dir.path().join("r.sqlite")).unwrap();
    reg.claim(&sandbox("s")).unwrap();
    assert!(reg.add_session("s", "2026-01-01T00:00:00Z", 10).unwrap());
    assert!(!reg.add_session("s", "2026-01-01T00:00:00Z", 11).unwrap());
    assert!(reg.add_session("s", "2026-01-01T00:05:00Z", 12).unwrap());
    let ids: Vec<_> = reg
        .sessions("s")
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"]);
    reg.set_container("s", "cid", "sha256:x").unwrap();
    reg.set_state("s", State::Running, 500).unwrap();
    let got = reg.get("s").unwrap().unwrap();
    assert_eq!(
        (got.state, got.last_seen, got.container_id.as_str()),
        (State::Running, 500, "cid")
    );
    reg.set_state("s", State::Stopped, 900).unwrap();
    assert_eq!(
        reg.get("s").unwrap().unwrap().last_seen,
        900,
        "stopping counts as seen"
    );
    reg.set_state("s", State::Missing, 2000).unwrap();
    assert_eq!(
        reg.get("s").unwrap().unwrap().last_seen,
        900,
        "missing is not seen"
    );
    assert!(reg.remove("s").unwrap());
    assert!(reg.sessions("s").unwrap().is_empty());
    assert!(!reg.remove("s").unwrap());
}

#[test]
fn only_a_stopped_sandbox_past_its_ttl_is_expired() {
    let mut sb = sandbox("t");
    sb.state = State::Stopped;
    assert!(!expired(&sb, 150));
    assert!(expired(&sb, 151));
    sb.state = State::Running;
    assert!(!expired(&sb, 10_000));
    sb.state = State::Missing;
    assert!(expired(&sb, 10_000));
}
