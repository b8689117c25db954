//! The policy a start runs under: the operator's text with what the start knows better.
//!
//! A start knows two things better than the file: the sandbox's name (`--sandbox` /
//! `AIRLOCK_SANDBOX`: N sandboxes from one policy file) and, when the file lists no `[git]
//! repositories`, the authorized repository (the workspace's `origin`). The entrypoint
//! writes the effective policy with them at start; the proxy applies the same to a policy an
//! operator reloads, so that a reload of the operator's own file is not read as a change of
//! `[sandbox]` or `[git]`. One function for both: [`render`]. Pure.

/// Why the effective text could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EffectiveError {
    /// The text is not TOML (the policy's own validation says where).
    #[error("cannot re-read the policy: {0}")]
    Read(#[from] toml::de::Error),
    /// `[sandbox]` or `[git]` is not a table.
    #[error("the policy's {0} is not a table")]
    NotTable(&'static str),
    /// The start's name is not a sandbox name.
    #[error(
        "{0:?} is not a sandbox name: 1-40 characters of a-z, 0-9 and -, not starting or ending with -"
    )]
    BadName(String),
    /// The result cannot be written as TOML.
    #[error("cannot write the effective policy: {0}")]
    Write(#[from] toml::ser::Error),
}

/// What the start puts in the effective policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides<'a> {
    /// The sandbox's name for this start.
    pub name: Option<&'a str>,
    /// The repository id authorized when the text lists none.
    pub origin: Option<&'a str>,
}

/// The documented rule for a sandbox name: 1-40 of `[a-z0-9-]`, no `-` at either end.
#[must_use]
pub fn valid_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// The effective text of `text` (whose policy, as loaded, is named `name_now` and lists
/// `repositories_now`) under `o`, with a first comment line saying what was put in
/// (`because`, one phrase per override given, names where it came from); `None` when the
/// text applies as it is.
///
/// # Errors
/// [`EffectiveError`].
pub fn render(
    text: &str,
    name_now: &str,
    repositories_now: &[String],
    o: Overrides<'_>,
    because: (&str, &str),
) -> Result<Option<String>, EffectiveError> {
    let name = o.name.filter(|n| *n != name_now);
    let origin = o.origin.filter(|_| repositories_now.is_empty());
    if name.is_none() && origin.is_none() {
        return Ok(None);
    }
    let mut doc: toml::Table = toml::from_str(text)?;
    if let Some(name) = name {
        if !valid_name(name) {
            return Err(EffectiveError::BadName(name.to_owned()));
        }
        table(&mut doc, "sandbox")?.insert("name".into(), toml::Value::String(name.into()));
    }
    if let Some(origin) = origin {
        table(&mut doc, "git")?.insert(
            "repositories".into(),
            toml::Value::Array(vec![toml::Value::String(origin.into())]),
        );
    }
    let body = toml::to_string(&doc)?;
    let mut why = Vec::new();
    if let Some(n) = name {
        why.push(format!("sandbox name {n:?} from {}", because.0));
    }
    if let Some(r) = origin {
        why.push(format!("authorized repository {r:?}: {}", because.1));
    }
    Ok(Some(format!(
        "# Written by airlock: the operator's policy with {}.\n{body}",
        why.join(", ")
    )))
}

fn table<'a>(
    doc: &'a mut toml::Table,
    key: &'static str,
) -> Result<&'a mut toml::Table, EffectiveError> {
    doc.entry(key)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or(EffectiveError::NotTable(key))
}
