//! The host's secret store: one file per secret, `0600` in a `0700` directory under the XDG
//! config directory (`$XDG_CONFIG_HOME/airlock/secrets/<name>`, else
//! `~/.config/airlock/secrets/<name>`, or `AIRLOCK_CONFIG_DIR/secrets`).
//!
//! A value only ever travels from the operator's stdin (or a prompt) into that file, and from
//! the file into a sandbox as a read-only file at `/run/secrets/<name>`: never through
//! a host process's argv or environment, never into a container's configuration.
//!
//! What a sandbox mounts is never the operator's file itself but its value, written by the
//! engine into the sandbox's secrets volume as a root-owned 0400 file
//! ([`crate::engine::volumes`]), so inside the container it is root's and unreadable by the
//! agent whatever the original's owner and mode (a 0644 file, or one owned by the agent's
//! uid) and whichever user runs the CLI. Only a secret a credential of the sandbox's policy
//! reads is handed over at all ([`unbound`]): a `--secret` nothing reads is refused; a
//! stored secret a credential reads is handed over without `--secret` ([`read_by`]).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A failed secret-store operation, naming the secret or the file.
#[derive(Debug, Error)]
pub enum SecretError {
    /// The name is not one the store (and `/run/secrets/<name>`) accepts.
    #[error(
        "secret name {name:?} is not allowed: use 1 to 64 lowercase letters, digits and '_', starting with a letter (e.g. github_token)"
    )]
    BadName {
        /// The name given.
        name: String,
    },
    /// The value is empty (an empty stdin, or only a newline at the prompt).
    #[error("the value of secret {name} is empty: nothing stored")]
    Empty {
        /// The secret.
        name: String,
    },
    /// No such secret.
    #[error(
        "no secret named {name:?}: `airlock secret ls` lists them, `airlock secret set {name}` adds it"
    )]
    Missing {
        /// The secret.
        name: String,
    },
    /// The file is larger than a secret can be.
    #[error(
        "the secret file {path} is larger than {SECRET_LIMIT} bytes: give the file that holds only the secret"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A file step failed.
    #[error("cannot {step} {path}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SecretError {
    let path = path.to_path_buf();
    move |source| SecretError::Io { step, path, source }
}

/// The largest secret file handed to a sandbox.
pub const SECRET_LIMIT: u64 = 1 << 20;

/// Where a sandbox's secrets are mounted: `/run/secrets/<name>`.
pub fn mount_path(name: &str) -> String {
    format!("{}/{name}", crate::flags::SECRETS_DIR)
}

/// The value of the secret file `file` (at most [`SECRET_LIMIT`] bytes), to hand to a
/// sandbox.
pub fn read_value(file: &Path) -> Result<Vec<u8>, SecretError> {
    use std::io::Read;
    let src = std::fs::File::open(file).map_err(io("read", file))?;
    let mut value = Vec::new();
    src.take(SECRET_LIMIT + 1)
        .read_to_end(&mut value)
        .map_err(io("read", file))?;
    if value.len() as u64 > SECRET_LIMIT {
        return Err(SecretError::TooLarge {
            path: file.to_path_buf(),
        });
    }
    Ok(value)
}

/// The secret names the policy `text` reads: each credential's file source
/// `/run/secrets/<name>`, in order, once each.
pub fn read_by(text: &str, origin: &Path) -> Result<Vec<String>, airlock_policy::PolicyError> {
    let policy = airlock_policy::Policy::parse(text, origin)?;
    let mut names: Vec<String> = Vec::new();
    for c in &policy.credentials {
        let name = c
            .source
            .file()
            .and_then(|f| f.strip_prefix(crate::flags::SECRETS_DIR).ok())
            .and_then(Path::to_str)
            .filter(|n| validate(n).is_ok());
        if let Some(n) = name
            && !names.iter().any(|m| m == n)
        {
            names.push(n.to_string());
        }
    }
    Ok(names)
}

/// The names among `secrets` that no credential of the policy `text` reads from
/// `/run/secrets/<name>`: they would sit in the sandbox unused.
pub fn unbound(
    text: &str,
    origin: &Path,
    secrets: &[String],
) -> Result<Vec<String>, airlock_policy::PolicyError> {
    let policy = airlock_policy::Policy::parse(text, origin)?;
    let read: Vec<PathBuf> = policy
        .credentials
        .iter()
        .filter_map(|c| c.source.file().map(Path::to_path_buf))
        .collect();
    Ok(secrets
        .iter()
        .filter(|n| !read.contains(&PathBuf::from(mount_path(n))))
        .cloned()
        .collect())
}

/// Check a secret name: `[a-z][a-z0-9_]{0,63}`.
pub fn validate(name: &str) -> Result<(), SecretError> {
    let mut chars = name.chars();
    let first = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first && rest && name.len() <= 64 {
        Ok(())
    } else {
        Err(SecretError::BadName { name: name.into() })
    }
}

/// The store in one directory.
#[derive(Debug, Clone)]
pub struct Store {
    /// `<config>/secrets`.
    pub dir: PathBuf,
}

impl Store {
    /// The store under the config directory `config`.
    pub fn new(config: &Path) -> Store {
        Store {
            dir: config.join("secrets"),
        }
    }

    /// The file holding `name`.
    pub fn file(&self, name: &str) -> Result<PathBuf, SecretError> {
        validate(name)?;
        Ok(self.dir.join(name))
    }

    /// Store `value` as `name` (replacing it atomically): a `0600` file in a `0700`
    /// directory. One trailing newline (from `echo` or the prompt) is not part of the value.
    pub fn set(&self, name: &str, value: &[u8]) -> Result<PathBuf, SecretError> {
        let path = self.file(name)?;
        let value = value.strip_suffix(b"\n").unwrap_or(value);
        let value = value.strip_suffix(b"\r").unwrap_or(value);
        if value.is_empty() {
            return Err(SecretError::Empty { name: name.into() });
        }
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io("restrict", &self.dir))?;
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("create", &tmp))?;
        f.write_all(value).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("install", &path))?;
        Ok(path)
    }

    /// The stored names, sorted.
    pub fn list(&self) -> Result<Vec<String>, SecretError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read", &self.dir)(e)),
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| validate(n).is_ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The file of an existing secret, or [`SecretError::Missing`].
    pub fn existing(&self, name: &str) -> Result<PathBuf, SecretError> {
        let path = self.file(name)?;
        if path.is_file() {
            Ok(path)
        } else {
            Err(SecretError::Missing { name: name.into() })
        }
    }

    /// Remove `name`; [`SecretError::Missing`] if it is not stored.
    pub fn remove(&self, name: &str) -> Result<(), SecretError> {
        let path = self.file(name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(SecretError::Missing { name: name.into() })
            }
            Err(e) => Err(io("remove", &path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_secret_is_a_0600_file_in_a_0700_directory_without_its_newline() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path());
        let p = s.set("github_token", b"abc\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(&s.dir), 0o700);
        s.set("github_token", b"def").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"def");
        assert_eq!(s.list().unwrap(), vec!["github_token"]);
        s.remove("github_token").unwrap();
        assert!(s.list().unwrap().is_empty());
        assert!(matches!(
            s.remove("github_token"),
            Err(SecretError::Missing { .. })
        ));
    }

    #[test]
    fn a_value_is_read_whole_up_to_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let open = d.path().join("open");
        std::fs::write(&open, "v").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_value(&open).unwrap(), b"v");
        let big = d.path().join("big");
        std::fs::write(&big, vec![b'x'; SECRET_LIMIT as usize + 1]).unwrap();
        let e = read_value(&big);
        assert!(matches!(e, Err(SecretError::TooLarge { .. })), "{e:?}");
    }

    #[test]
    fn the_names_a_policy_reads_are_its_file_sources_under_run_secrets() {
        let text = "[sandbox]\nname = \"t\"\n[[credentials]]\npreset = \"github\"\nsource = { file = \"/run/secrets/github_token\" }\n[[credentials]]\npreset = \"anthropic\"\nsource = { env = \"ANTHROPIC_API_KEY\", file = \"/run/secrets/anthropic_api_key\" }\n[[credentials]]\npreset = \"openai\"\nsource = { file = \"/etc/other/key\" }\n";
        let got = read_by(text, Path::new("p.toml")).unwrap();
        assert_eq!(got, vec!["github_token", "anthropic_api_key"]);
    }

    #[test]
    fn a_secret_no_credential_reads_is_unbound() {
        let text = "[sandbox]\nname = \"t\"\n[[credentials]]\npreset = \"github\"\nsource = { file = \"/run/secrets/github_token\" }\n";
        let got = unbound(
            text,
            Path::new("p.toml"),
            &["github_token".into(), "claude_code_oauth_token".into()],
        )
        .unwrap();
        assert_eq!(got, vec!["claude_code_oauth_token"]);
    }

    #[test]
    fn names_and_empty_values_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path());
        for bad in ["", "Token", "../x", "a-b", "1abc", &"a".repeat(65)] {
            assert!(
                matches!(s.set(bad, b"v"), Err(SecretError::BadName { .. })),
                "{bad}"
            );
        }
        assert!(matches!(s.set("t", b"\n"), Err(SecretError::Empty { .. })));
        assert!(!s.dir.join("t").exists());
    }
}
