//! Policy revisions: the policy in force as a numbered, hashed revision, and the reload that
//! replaces it while the proxy runs.
//!
//! A reload ([`Revisions::reload`]) validates the new text with the start-up code
//! (`Policy::parse`, `file:line` errors), refuses what only a restart applies
//! ([`restart_needed`]), builds the rules with the start's credential hand-off, writes the
//! `reload` audit line with the old and new hash, and only then swaps the rules
//! ([`crate::snapshot`]): no decision is made under a revision the log has not recorded. On
//! any error the revision in force stays and the error says why; a text whose hash is the
//! one in force loads nothing. One reload at a time.
//!
//! Open connections are re-judged under the new revision by the caller
//! ([`crate::conns`]); their count is on the reload line.
//!
//! The operator's grants ([`airlock_policy::overlay`]) are a layer over the policy text: a
//! reload keeps them over the new text, and a grant or its revocation
//! ([`Revisions::regrant`]) is a revision of its own: kept in the grants file
//! ([`crate::grants`]) and audited (`reload`, its origin naming the grant and who made it)
//! before it is in force. A revision's hash covers its text and its grants.
//!
//! It does not read files on the host (the admin client sends the text) and does not
//! change what other processes read at start: `[sandbox]`, `[git]` (the git API's),
//! `[[credentials]]` (the hand-off's secrets) and `[secrets]` (the entrypoint's workspace
//! scan) need a restart, and a change to them is refused saying so.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_audit_schema::PolicyReload;
use airlock_control::admin::{ErrorBody, ErrorCode, PolicyRevision, ReloadRequest, Reloaded};
use airlock_policy::Policy;
use airlock_policy::overlay::Overlay;

use crate::audit::Audit;
use crate::snapshot::{Rules, Snapshot};

/// Largest policy text a reload takes.
pub const MAX_TEXT: usize = 1 << 20;
/// The last loaded revision, in the proxy's state directory ([`Saved`]).
pub const SAVED_FILE: &str = "policy-revision.json";

/// The revision an operator made (a reload, or a grant over the text in force), kept (0600,
/// the proxy's state directory on the `/run` tmpfs: this start only) so that a restart of
/// the proxy by the supervisor resumes it, its number included, instead of falling back to
/// the start's policy. Its grants are read again from their own file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// Its number.
    pub revision: u64,
    /// Where its text came from (a grant's revision keeps its text's origin).
    pub origin: String,
    /// Its text, as the operator sent it.
    pub text: String,
}

impl Saved {
    /// The revision kept in `dir`, if any.
    #[must_use]
    pub fn load(dir: &Path) -> Option<Saved> {
        let bytes = std::fs::read(dir.join(SAVED_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Keeps this revision in `dir`, replacing the one kept (written whole, then renamed).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn store(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::replace::private(&dir.join(SAVED_FILE), &bytes)
    }

    /// Its policy, as a reload would load it over `start` (the start's policy), if it still
    /// loads and needs no restart.
    ///
    /// # Errors
    /// Why it does not.
    pub fn policy(&self, start: &Policy) -> Result<Policy, String> {
        let p = Policy::parse(&self.text, Path::new(&self.origin)).map_err(|e| e.to_string())?;
        let p = start_overrides(&self.text, p, start, &self.origin)?;
        match restart_needed(start, &p) {
            Some(why) => Err(why),
            None => Ok(p),
        }
    }
}

/// The hash a revision is named by: SHA-256 of its text, hex.
#[must_use]
pub fn hash(text: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text);
    digest.as_ref().iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The part of `new` that differs from `old` and that only a restart applies, as the line
/// that says so; `None` when the proxy alone can apply every change.
#[must_use]
pub fn restart_needed(old: &Policy, new: &Policy) -> Option<String> {
    let section = if old.sandbox != new.sandbox {
        "[sandbox] (the sandbox's name and mode are fixed for a start)"
    } else if old.git != new.git {
        "[git] (the git API reads its push rules at start)"
    } else if old.credentials != new.credentials {
        "[[credentials]] (their secrets are handed over at start)"
    } else if old.secrets != new.secrets {
        "[secrets] / [[detectors]] (the workspace scan reads them at start)"
    } else {
        return None;
    };
    Some(format!(
        "the new policy changes {section}: restart the sandbox to apply it (airlock stop NAME, then airlock start NAME); the revision in force stays"
    ))
}

/// `new` (parsed from `text`) with what the start put in its own policy
/// (`airlock_policy::effective`): the start's sandbox name, and its one authorized
/// repository when `text` lists none. So a reload of the operator's own file, which the
/// start overrode, is not read as a change of `[sandbox]` or `[git]`.
///
/// # Errors
/// The line to answer when the text cannot be rewritten.
pub fn start_overrides(
    text: &str,
    new: Policy,
    in_force: &Policy,
    origin: &str,
) -> Result<Policy, String> {
    let repository = match in_force.git.repositories.as_slice() {
        [one] => Some(one.as_str()),
        _ => None,
    };
    let overrides = airlock_policy::effective::Overrides {
        name: Some(in_force.sandbox.name.as_str()),
        origin: repository,
    };
    match airlock_policy::effective::render(
        text,
        &new.sandbox.name,
        &new.git.repositories,
        overrides,
        ("this start", "this start's"),
    ) {
        Ok(None) => Ok(new),
        Ok(Some(effective)) => {
            Policy::parse(&effective, Path::new(origin)).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The hash of a revision made of the text hashed `text_hash` and the grants `overlay`:
/// the text's own when there are none.
#[must_use]
pub fn layered_hash(text_hash: &str, overlay: &Overlay) -> String {
    if overlay.grants.is_empty() {
        return text_hash.to_owned();
    }
    let grants = serde_json::to_string(overlay).unwrap_or_default();
    hash(format!("{text_hash}\n{grants}").as_bytes())
}

/// What the revision in force is made of.
#[derive(Debug, Default)]
struct Layers {
    /// Where the grants are kept and what they lie over (`None`: this proxy keeps no
    /// grants, and refuses them).
    kept: Option<Kept>,
    /// Its text and where that came from.
    text: String,
    text_origin: String,
    /// The grants over it.
    overlay: Overlay,
}

/// A proxy that keeps grants: their file ([`crate::grants`]) and the policy of the text in
/// force, the start's overrides applied, before the grants.
#[derive(Debug)]
struct Kept {
    file: PathBuf,
    base: Policy,
}

/// The revision in force and how to make the next one.
#[derive(Debug)]
pub struct Revisions {
    current: Mutex<PolicyRevision>,
    layers: Mutex<Layers>,
    /// One reload at a time (validation, audit line and swap in order).
    turn: tokio::sync::Mutex<()>,
    /// The policy file the proxy runs from: what a reload without text reads again.
    path: PathBuf,
    /// The start's credential hand-off: the secrets of the policy's credentials.
    handoff: PathBuf,
    /// Where a loaded revision is kept for a restart of the proxy ([`Saved`]).
    keep: Option<PathBuf>,
}

/// A reload's outcome before the connections are re-judged.
#[derive(Debug)]
pub enum Outcome {
    /// The text's hash is the revision in force: nothing was loaded.
    Unchanged(Reloaded),
    /// The new revision is in force.
    Loaded(Reloaded),
}

impl Revisions {
    /// Revision 1: the policy the proxy started with, `text` read from `path`, with the
    /// credential hand-off at `handoff`.
    #[must_use]
    pub fn new(path: &Path, text: &str, handoff: &Path) -> Self {
        let hash = hash(text.as_bytes());
        Self {
            current: Mutex::new(PolicyRevision {
                revision: 1,
                hash: hash.clone(),
                loaded_at_ms: now_ms(),
                origin: path.display().to_string(),
                rules: Vec::new(),
            }),
            layers: Mutex::new(Layers {
                kept: None,
                text: text.to_owned(),
                text_origin: path.display().to_string(),
                overlay: Overlay::default(),
            }),
            turn: tokio::sync::Mutex::new(()),
            path: path.to_owned(),
            handoff: handoff.to_owned(),
            keep: None,
        }
    }

    /// Keeps each loaded revision in `dir` ([`Saved`]), and starts from `resumed` (a
    /// revision kept by an earlier run of the proxy in this start, which the caller loaded).
    #[must_use]
    pub fn kept_in(mut self, dir: &Path, resumed: Option<&Saved>) -> Self {
        self.keep = Some(dir.to_owned());
        if let Some(saved) = resumed {
            let current = self
                .current
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            current.revision = saved.revision;
            current.hash = hash(saved.text.as_bytes());
            current.origin.clone_from(&saved.origin);
            let layers = self
                .layers
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            layers.text.clone_from(&saved.text);
            layers.text_origin.clone_from(&saved.origin);
        }
        self
    }

    /// Keeps the operator's grants in `file`, starting from `overlay` (read from it) over
    /// `base` (the policy in force before them, after [`Revisions::kept_in`]).
    #[must_use]
    pub fn with_grants(mut self, file: &Path, base: Policy, overlay: Overlay) -> Self {
        let layers = self
            .layers
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self
            .current
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        current.hash = layered_hash(&hash(layers.text.as_bytes()), &overlay);
        layers.kept = Some(Kept {
            file: file.to_owned(),
            base,
        });
        layers.overlay = overlay;
        self
    }

    /// The grants in force.
    #[must_use]
    pub fn grants(&self) -> Overlay {
        lock(&self.layers).overlay.clone()
    }

    /// The grants as they stand now, what the next revision lays over its text: the grants
    /// file's (sandboxes sharing the file may have changed it since this proxy read it), or
    /// those in force where this proxy keeps no file.
    ///
    /// # Errors
    /// [`ErrorCode::Unavailable`]: the grants file does not load.
    pub fn stored_grants(&self) -> Result<Overlay, ErrorBody> {
        let file = lock(&self.layers).kept.as_ref().map(|k| k.file.clone());
        match file {
            Some(file) => {
                crate::grants::load(&file).map_err(|e| error(ErrorCode::Unavailable, e.to_string()))
            }
            None => Ok(self.grants()),
        }
    }

    /// The revision in force.
    #[must_use]
    pub fn current(&self) -> PolicyRevision {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Loads the policy `req` carries (or the file the proxy runs from again) as the next
    /// revision of `rules`, under the grants as they stand ([`Revisions::stored_grants`]):
    /// validated, audited, swapped. `closing` counts, under the new rules, the open
    /// connections they refuse (written on the reload line); the caller closes them once
    /// this returns.
    ///
    /// # Errors
    /// The [`ErrorBody`] to answer: [`ErrorCode::InvalidPolicy`] (the text does not load, or
    /// cannot be read; `file:line` in the message), [`ErrorCode::RestartNeeded`],
    /// [`ErrorCode::Unavailable`] (the grants file does not load, or the audit log cannot
    /// record the reload). The revision in
    /// force stays; every refusal but the last has its own `reload` line with `decision:
    /// deny`.
    pub async fn reload(
        &self,
        rules: &Snapshot<Rules>,
        audit: &Audit,
        req: ReloadRequest,
        closing: impl FnOnce(&Rules) -> u64,
    ) -> Result<Outcome, ErrorBody> {
        let _turn = self.turn.lock().await;
        let origin = req
            .origin
            .clone()
            .unwrap_or_else(|| self.path.display().to_string());
        let text = match req.text {
            Some(t) => t,
            None => std::fs::read_to_string(&self.path).map_err(|e| {
                error(
                    ErrorCode::InvalidPolicy,
                    format!("cannot read the policy {}: {e}", self.path.display()),
                )
            })?,
        };
        if text.len() > MAX_TEXT {
            return Err(error(
                ErrorCode::InvalidPolicy,
                format!("the policy text is over {MAX_TEXT} bytes"),
            ));
        }
        let before = self.current();
        let overlay = self.stored_grants()?;
        let new_hash = layered_hash(&hash(text.as_bytes()), &overlay);
        if new_hash == before.hash {
            return Ok(Outcome::Unchanged(reloaded(&before, false, 0)));
        }
        let in_force = rules.load();
        let line = |revision, hash: &str, closed| PolicyReload {
            revision,
            hash: hash.to_owned(),
            previous_hash: before.hash.clone(),
            origin: origin.clone(),
            closed,
        };
        let refuse = |code, message: String| {
            // The refusal is on the log too (a log that cannot be written says so itself).
            let _ = audit.policy_reload(
                &in_force.unchanged(),
                line(before.revision, &before.hash, 0),
                Some(format!("{new_hash}: {message}")),
            );
            error(code, message)
        };
        let policy = Policy::parse(&text, Path::new(&origin))
            .map_err(|e| refuse(ErrorCode::InvalidPolicy, e.to_string()))?;
        let policy = start_overrides(&text, policy, &in_force.policy, &origin)
            .map_err(|e| refuse(ErrorCode::InvalidPolicy, e))?;
        if let Some(why) = restart_needed(&in_force.policy, &policy) {
            return Err(refuse(ErrorCode::RestartNeeded, why));
        }
        let base = policy.clone();
        let policy = policy
            .with_overlay(&overlay)
            .map_err(|e| refuse(ErrorCode::InvalidPolicy, e.to_string()))?;
        let new = Rules::reload(&policy, &self.handoff)
            .map_err(|e| refuse(ErrorCode::InvalidPolicy, e.to_string()))?;
        let closed = closing(&new);
        let change = new.change(in_force.credentials.workspace_secrets());
        let revision = before.revision + 1;
        audit
            .policy_reload(&change, line(revision, &new_hash, closed), None)
            .map_err(|_| unwritable("reload"))?;
        rules.replace(new);
        {
            let mut layers = lock(&self.layers);
            if let Some(kept) = &mut layers.kept {
                kept.base = base;
            }
            layers.text.clone_from(&text);
            layers.text_origin.clone_from(&origin);
            layers.overlay = overlay;
        }
        self.keep(Saved {
            revision,
            origin: origin.clone(),
            text,
        });
        let now = self.advance(revision, new_hash, origin);
        Ok(Outcome::Loaded(reloaded(&now, true, closed)))
    }
}

impl Revisions {
    /// The next revision: the grants `change` makes of those the grants file holds (one
    /// added, one revoked) over the same text, kept in the grants file, audited as a
    /// `reload` from `origin` (who granted what), then swapped. `closing` is as for
    /// [`Revisions::reload`]. Grants are made one at a time, with reloads. The change is
    /// made to the file as it is now, not to the grants this proxy last read: where
    /// sandboxes share the file (a template's shared audit claim), a grant made in another
    /// is kept, and put in force here too.
    ///
    /// # Errors
    /// `change`'s own; [`ErrorCode::Unavailable`] when this proxy keeps no grants, or the
    /// grants file or the audit log cannot be written (the grants in force stay, in the file
    /// too); [`ErrorCode::InvalidPolicy`] when the grants make no rules.
    pub async fn regrant(
        &self,
        rules: &Snapshot<Rules>,
        audit: &Audit,
        change: impl FnOnce(&Overlay) -> Result<Overlay, ErrorBody>,
        origin: String,
        closing: impl FnOnce(&Rules) -> u64,
    ) -> Result<Reloaded, ErrorBody> {
        let _turn = self.turn.lock().await;
        let (kept, (text, text_origin)) = {
            let layers = lock(&self.layers);
            (
                layers
                    .kept
                    .as_ref()
                    .map(|k| (k.file.clone(), k.base.clone())),
                (layers.text.clone(), layers.text_origin.clone()),
            )
        };
        let Some((file, base)) = kept else {
            return Err(error(
                ErrorCode::Unavailable,
                "this proxy keeps no grants (it runs without an audit directory of its own): answer for the session instead".to_owned(),
            ));
        };
        let old = self
            .stored_grants()
            .map_err(|e| error(e.code, format!("{}: nothing was granted", e.message)))?;
        let overlay = change(&old)?;
        let policy = base
            .with_overlay(&overlay)
            .map_err(|e| error(ErrorCode::InvalidPolicy, e.to_string()))?;
        let new = Rules::reload(&policy, &self.handoff)
            .map_err(|e| error(ErrorCode::InvalidPolicy, e.to_string()))?;
        let closed = closing(&new);
        let in_force = rules.load();
        let change = new.change(in_force.credentials.workspace_secrets());
        let before = self.current();
        let revision = before.revision + 1;
        let new_hash = layered_hash(&hash(text.as_bytes()), &overlay);
        crate::grants::store(&file, &overlay)
            .map_err(|e| error(ErrorCode::Unavailable, format!("{e}: nothing was granted")))?;
        let line = PolicyReload {
            revision,
            hash: new_hash.clone(),
            previous_hash: before.hash.clone(),
            origin: origin.clone(),
            closed,
        };
        if audit.policy_reload(&change, line, None).is_err() {
            if let Err(e) = crate::grants::store(&file, &old) {
                tracing::error!(
                    "the grants file could not be put back after the audit failed: {e}"
                );
            }
            return Err(unwritable("grant"));
        }
        rules.replace(new);
        lock(&self.layers).overlay = overlay;
        self.keep(Saved {
            revision,
            origin: text_origin,
            text,
        });
        let now = self.advance(revision, new_hash, origin);
        Ok(reloaded(&now, true, closed))
    }

    /// Keeps `saved` for a restart of the proxy, when this proxy keeps revisions (a failure
    /// is said: the revision is in force, only a restart would lose it).
    fn keep(&self, saved: Saved) {
        let Some(dir) = &self.keep else {
            return;
        };
        if let Err(e) = saved.store(dir) {
            tracing::warn!(
                "policy revision {} is in force but not kept for a restart of the proxy: {e}",
                saved.revision
            );
        }
    }

    /// Makes `revision` (hashed `hash`, from `origin`) the one in force, loaded now.
    fn advance(&self, revision: u64, hash: String, origin: String) -> PolicyRevision {
        let now = PolicyRevision {
            revision,
            hash,
            loaded_at_ms: now_ms(),
            origin,
            rules: Vec::new(),
        };
        *lock(&self.current) = now.clone();
        now
    }
}

fn unwritable(what: &str) -> ErrorBody {
    error(
        ErrorCode::Unavailable,
        format!(
            "the audit log cannot be written, so the {what} was not applied: free the audit volume and try again"
        ),
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn reloaded(r: &PolicyRevision, changed: bool, closed: u64) -> Reloaded {
    Reloaded {
        revision: r.revision,
        hash: r.hash.clone(),
        loaded_at_ms: r.loaded_at_ms,
        changed,
        closed,
    }
}

fn error(code: ErrorCode, message: String) -> ErrorBody {
    ErrorBody { code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::parse(text, Path::new("p.toml")).unwrap()
    }

    const BASE: &str = "[sandbox]\nname = \"box\"\n\n[network]\nallow = [\"a.example\"]\n";

    #[test]
    fn network_changes_load_live_and_the_rest_needs_a_restart() {
        let old = policy(BASE);
        let more = policy(&BASE.replace("\"a.example\"", "\"a.example\", \"b.example\""));
        assert_eq!(restart_needed(&old, &more), None);
        let renamed = policy(&BASE.replace("\"box\"", "\"other\""));
        assert!(
            restart_needed(&old, &renamed)
                .unwrap()
                .contains("[sandbox]")
        );
        let git = policy(&format!(
            "{BASE}\n[git]\nprotected_branches = [\"main\", \"release/*\"]\n"
        ));
        assert!(restart_needed(&old, &git).unwrap().contains("[git]"));
    }

    #[test]
    fn the_starts_name_and_repository_are_not_a_change() {
        // The start runs as "box-7" (AIRLOCK_SANDBOX) with the workspace's origin authorized.
        let in_force = policy(
            "[sandbox]\nname = \"box-7\"\n\n[network]\nallow = [\"a.example\"]\n\n[git]\nrepositories = [\"github.com/acme/app\"]\n",
        );
        let text = BASE.replace("\"a.example\"", "\"a.example\", \"b.example\"");
        let new = start_overrides(&text, policy(&text), &in_force, "p.toml").unwrap();
        assert_eq!(new.sandbox.name, "box-7");
        assert_eq!(new.git.repositories, ["github.com/acme/app"]);
        assert_eq!(restart_needed(&in_force, &new), None);
    }

    #[test]
    fn a_kept_revision_reads_back_and_loads_over_the_start_policy() {
        let dir = tempfile::tempdir().unwrap();
        let text = BASE.replace("\"a.example\"", "\"a.example\", \"b.example\"");
        let saved = Saved {
            revision: 3,
            origin: "/host/p.toml".into(),
            text: text.clone(),
        };
        saved.store(dir.path()).unwrap();
        let back = Saved::load(dir.path()).unwrap();
        assert_eq!(back, saved);
        let start = policy(BASE);
        assert!(back.policy(&start).is_ok());
        let r = Revisions::new(Path::new("p.toml"), BASE, Path::new("h"))
            .kept_in(dir.path(), Some(&back));
        assert_eq!(r.current().revision, 3);
        assert_eq!(r.current().hash, hash(text.as_bytes()));
        // A kept text that now needs a restart is not resumed.
        let renamed = Saved {
            text: BASE
                .replace("mode", "x")
                .replace("[sandbox]", "[sandbox]\nmode = \"report\""),
            ..saved
        };
        assert!(renamed.policy(&start).is_err());
    }

    #[test]
    fn a_revisions_hash_is_its_texts_until_grants_lie_over_it() {
        let text = hash(BASE.as_bytes());
        assert_eq!(layered_hash(&text, &Overlay::default()), text);
        let one = Overlay::default().with(airlock_policy::overlay::Grant {
            id: "0a0b0c0d".into(),
            allow: true,
            host: "b.example".into(),
            port: 443,
            by: 0,
            at: "2026-11-29T04:00:00.000Z".into(),
            why: None,
        });
        let layered = layered_hash(&text, &one);
        assert_ne!(layered, text);
        assert_eq!(layered, layered_hash(&text, &one.clone()));
        assert_eq!(layered_hash(&text, &one.without("0a0b0c0d").unwrap()), text);
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        assert_eq!(
            hash(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
