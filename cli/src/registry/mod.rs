//! The registry: one SQLite file (WAL) with one row per sandbox and one per session (each
//! container start), so a restart is seen and `gc` knows what it may remove.
//!
//! Concurrent CLI invocations are safe: every write is one transaction, a busy database is
//! waited for (busy timeout), and a name is claimed by an `INSERT` on the primary key, so of
//! two `airlock new x` at the same moment exactly one gets the row. The schema carries its
//! version in `PRAGMA user_version`; [`MIGRATIONS`] are applied in order, each in the same
//! transaction as the version bump.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Schema migrations; index + 1 is the `user_version` after applying it. Never edit one
/// that has shipped: add the next.
pub const MIGRATIONS: &[&str] = &[
    "CREATE TABLE sandboxes (
        name TEXT PRIMARY KEY,
        repository TEXT NOT NULL,
        branch TEXT NOT NULL,
        base TEXT NOT NULL,
        agent TEXT NOT NULL,
        image TEXT NOT NULL,
        image_digest TEXT NOT NULL DEFAULT '',
        policy_hash TEXT NOT NULL DEFAULT '',
        container_id TEXT NOT NULL DEFAULT '',
        created INTEGER NOT NULL,
        last_seen INTEGER NOT NULL,
        ttl_seconds INTEGER NOT NULL,
        state TEXT NOT NULL
    );
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        sandbox TEXT NOT NULL REFERENCES sandboxes(name) ON DELETE CASCADE,
        started INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_sandbox ON sessions(sandbox, started);",
    // 2: `run`'s one-shot sandboxes are marked, so `gc` can finish a `run` that was killed.
    "ALTER TABLE sandboxes ADD COLUMN oneshot INTEGER NOT NULL DEFAULT 0;",
];

/// How long a write waits for another invocation's transaction.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed registry operation, naming the file or the sandbox.
#[derive(Debug, Error)]
pub enum RegistryError {
    /// The file could not be opened or is not a database.
    #[error(
        "the registry {path} cannot be opened ({source}); move it aside (the sandboxes' checkouts stay) and run the command again"
    )]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// Its directory could not be created.
    #[error("cannot create the registry directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Migrating the schema failed.
    #[error("cannot migrate the registry {path} to version {version}: {source}")]
    Migrate {
        /// The file.
        path: PathBuf,
        /// The version being applied.
        version: usize,
        /// Why.
        source: rusqlite::Error,
    },
    /// The file is newer than this CLI.
    #[error(
        "the registry {path} has schema version {found}, newer than this airlock ({known}): upgrade airlock"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// Ours.
        known: usize,
    },
    /// `claim` of a name that is registered already.
    #[error(
        "a sandbox named {name:?} exists already: pick another name or `airlock destroy {name}`"
    )]
    Taken {
        /// The name.
        name: String,
    },
    /// Any other query.
    #[error("registry: cannot {op} {name:?}: {source}")]
    Query {
        /// What was being done.
        op: &'static str,
        /// The sandbox.
        name: String,
        /// Why.
        source: rusqlite::Error,
    },
}

/// A sandbox's state as last known (the engine's, reconciled by the commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Claimed by `new`, not yet started (or `new` was killed: `gc` cleans it).
    Creating,
    /// Its container runs.
    Running,
    /// Its container exists and is stopped.
    Stopped,
    /// Its container is gone although the registry has it.
    Missing,
}

impl State {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Creating => "creating",
            State::Running => "running",
            State::Stopped => "stopped",
            State::Missing => "missing",
        }
    }

    fn parse(s: &str) -> State {
        match s {
            "running" => State::Running,
            "stopped" => State::Stopped,
            "creating" => State::Creating,
            _ => State::Missing,
        }
    }
}

/// One sandbox row; the JSON field names are the documented ones (`airlock list --help`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sandbox {
    /// The sandbox name.
    pub name: String,
    /// The operator's repository (absolute path).
    pub repository: String,
    /// The sandbox's branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The agent label.
    pub agent: String,
    /// The image reference.
    pub image: String,
    /// The image's id (`sha256:...`) when created.
    pub image_digest: String,
    /// SHA-256 of the policy file given, empty for the image's default.
    pub policy_hash: String,
    /// The container id, empty before it exists.
    pub container_id: String,
    /// Unix seconds.
    pub created: i64,
    /// Unix seconds of the last time the CLI saw it running.
    pub last_seen: i64,
    /// Seconds a stopped sandbox is kept after `last_seen`.
    pub ttl_seconds: i64,
    /// The state.
    pub state: State,
    /// Made by `run` (one session, then fetched back and removed): when its container has
    /// stopped or gone and no `run` holds it, `gc` finishes what the `run` would have.
    pub oneshot: bool,
}

/// One container start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    /// The engine's `State.StartedAt` of that start (unique per start).
    pub id: String,
    /// Unix seconds when the CLI recorded it.
    pub started: i64,
}

/// An open registry.
#[derive(Debug)]
pub struct Registry {
    conn: rusqlite::Connection,
    path: PathBuf,
}

const COLUMNS: &str = "name, repository, branch, base, agent, image, image_digest, policy_hash, \
    container_id, created, last_seen, ttl_seconds, state, oneshot";

fn row_to_sandbox(r: &rusqlite::Row<'_>) -> rusqlite::Result<Sandbox> {
    Ok(Sandbox {
        name: r.get(0)?,
        repository: r.get(1)?,
        branch: r.get(2)?,
        base: r.get(3)?,
        agent: r.get(4)?,
        image: r.get(5)?,
        image_digest: r.get(6)?,
        policy_hash: r.get(7)?,
        container_id: r.get(8)?,
        created: r.get(9)?,
        last_seen: r.get(10)?,
        ttl_seconds: r.get(11)?,
        state: State::parse(&r.get::<_, String>(12)?),
        oneshot: r.get(13)?,
    })
}

/// Runs `op` again while the database is busy or locked, for at most [`BUSY_TIMEOUT`].
fn retry_busy<T>(mut op: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match op() {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

impl Registry {
    /// Open (creating the file and its directory) and migrate to the current schema.
    pub fn open(path: &Path) -> Result<Registry, RegistryError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| RegistryError::CreateDir {
                path: dir.into(),
                source,
            })?;
        }
        let open_err = |source| RegistryError::Open {
            path: path.into(),
            source,
        };
        let conn = rusqlite::Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        // Switching a new file to WAL takes an exclusive lock that SQLite does not wait
        // for (the busy handler is not called there): two invocations creating the registry
        // at once must retry, within the same patience as any other write.
        retry_busy(|| conn.pragma_update(None, "journal_mode", "WAL")).map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        let mut reg = Registry {
            conn,
            path: path.into(),
        };
        reg.migrate()?;
        Ok(reg)
    }

    fn migrate(&mut self) -> Result<(), RegistryError> {
        let path = self.path.clone();
        let found: i64 = retry_busy(|| {
            self.conn
                .pragma_query_value(None, "user_version", |r| r.get(0))
        })
        .map_err(|source| RegistryError::Open {
            path: path.clone(),
            source,
        })?;
        if found > MIGRATIONS.len() as i64 {
            return Err(RegistryError::TooNew {
                path,
                found,
                known: MIGRATIONS.len(),
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
            let version = i + 1;
            let err = |source| RegistryError::Migrate {
                path: path.clone(),
                version,
                source,
            };
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(err)?;
            // Another invocation may have migrated while we waited for the lock.
            let now: i64 = tx
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(err)?;
            if now >= version as i64 {
                continue;
            }
            tx.execute_batch(sql).map_err(err)?;
            tx.pragma_update(None, "user_version", version as i64)
                .map_err(err)?;
            tx.commit().map_err(err)?;
        }
        Ok(())
    }

    /// The schema version of the open file.
    pub fn version(&self) -> Result<i64, RegistryError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|source| RegistryError::Open {
                path: self.path.clone(),
                source,
            })
    }

    fn query_err(op: &'static str, name: &str) -> impl FnOnce(rusqlite::Error) -> RegistryError {
        let name = name.to_string();
        move |source| RegistryError::Query { op, name, source }
    }

    /// Register `sb` (state as given, normally `creating`); [`RegistryError::Taken`] if the
    /// name exists, also when another invocation claims it at the same moment.
    pub fn claim(&self, sb: &Sandbox) -> Result<(), RegistryError> {
        let sql = format!(
            "INSERT INTO sandboxes ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        );
        let res = self.conn.execute(
            &sql,
            rusqlite::params![
                sb.name,
                sb.repository,
                sb.branch,
                sb.base,
                sb.agent,
                sb.image,
                sb.image_digest,
                sb.policy_hash,
                sb.container_id,
                sb.created,
                sb.last_seen,
                sb.ttl_seconds,
                sb.state.as_str(),
                sb.oneshot
            ],
        );
        match res {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(RegistryError::Taken {
                    name: sb.name.clone(),
                })
            }
            Err(source) => Err(Self::query_err("register", &sb.name)(source)),
        }
    }

    /// One sandbox, if registered.
    pub fn get(&self, name: &str) -> Result<Option<Sandbox>, RegistryError> {
        let sql = format!("SELECT {COLUMNS} FROM sandboxes WHERE name = ?1");
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(Self::query_err("read", name))?;
        let mut rows = stmt
            .query_map([name], row_to_sandbox)
            .map_err(Self::query_err("read", name))?;
        rows.next()
            .transpose()
            .map_err(Self::query_err("read", name))
    }

    /// Every sandbox, by name.
    pub fn list(&self) -> Result<Vec<Sandbox>, RegistryError> {
        let sql = format!("SELECT {COLUMNS} FROM sandboxes ORDER BY name");
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(Self::query_err("list", ""))?;
        let rows = stmt
            .query_map([], row_to_sandbox)
            .map_err(Self::query_err("list", ""))?;
        rows.collect::<Result<_, _>>()
            .map_err(Self::query_err("list", ""))
    }

    /// Record the state (and `last_seen` = `now` when running).
    pub fn set_state(&self, name: &str, state: State, now: i64) -> Result<(), RegistryError> {
        let sql = "UPDATE sandboxes SET state = ?2, \
                   last_seen = CASE WHEN ?2 = 'running' OR state = 'running' THEN ?3 ELSE last_seen END \
                   WHERE name = ?1";
        self.conn
            .execute(sql, rusqlite::params![name, state.as_str(), now])
            .map(|_| ())
            .map_err(Self::query_err("update the state of", name))
    }

    /// Record the container id and the image's digest.
    pub fn set_container(&self, name: &str, id: &str, digest: &str) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE sandboxes SET container_id = ?2, image_digest = ?3 WHERE name = ?1",
                rusqlite::params![name, id, digest],
            )
            .map(|_| ())
            .map_err(Self::query_err("record the container of", name))
    }

    /// Mark or unmark a sandbox as a `run`'s one-shot one (a kept one becomes an ordinary
    /// sandbox: its TTL and unfetched work decide, as for any other).
    pub fn set_oneshot(&self, name: &str, oneshot: bool) -> Result<(), RegistryError> {
        self.conn
            .execute(
                "UPDATE sandboxes SET oneshot = ?2 WHERE name = ?1",
                rusqlite::params![name, oneshot],
            )
            .map(|_| ())
            .map_err(Self::query_err("mark", name))
    }

    /// Record a container start once (`id` is unique per start); `true` if it was new.
    pub fn add_session(&self, name: &str, id: &str, now: i64) -> Result<bool, RegistryError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO sessions (id, sandbox, started) VALUES (?1, ?2, ?3)",
                rusqlite::params![id, name, now],
            )
            .map(|n| n > 0)
            .map_err(Self::query_err("record a session of", name))
    }

    /// The sessions of one sandbox, oldest first.
    pub fn sessions(&self, name: &str) -> Result<Vec<Session>, RegistryError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, started FROM sessions WHERE sandbox = ?1 ORDER BY started, rowid")
            .map_err(Self::query_err("read the sessions of", name))?;
        let rows = stmt
            .query_map([name], |r| {
                Ok(Session {
                    id: r.get(0)?,
                    started: r.get(1)?,
                })
            })
            .map_err(Self::query_err("read the sessions of", name))?;
        rows.collect::<Result<_, _>>()
            .map_err(Self::query_err("read the sessions of", name))
    }

    /// Forget a sandbox and its sessions.
    pub fn remove(&self, name: &str) -> Result<bool, RegistryError> {
        self.conn
            .execute("DELETE FROM sandboxes WHERE name = ?1", [name])
            .map(|n| n > 0)
            .map_err(Self::query_err("remove", name))
    }
}

/// Whether `sb` is past its TTL at `now`: never while running.
pub fn expired(sb: &Sandbox, now: i64) -> bool {
    sb.state != State::Running && sb.last_seen.saturating_add(sb.ttl_seconds) < now
}

#[cfg(test)]
mod tests;
