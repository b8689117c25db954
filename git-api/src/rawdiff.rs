//! git's raw diff records (`--raw -z`), plain and combined, as the git API reads them: a
//! header of modes, object ids and a status, then the path, NUL-separated, so that no name
//! is quoted or cut (a name with a newline, a tab, a quote or a non-ASCII byte is read as it
//! is stored).

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The parents' modes, then the result's (one parent: old, new).
    pub modes: Vec<String>,
    /// The parents' object ids, then the result's.
    pub oids: Vec<String>,
    /// The status letters (`A`, `M`, `D`, `T`; one per parent when combined).
    pub status: String,
    /// The path.
    pub path: String,
}

impl Record {
    /// The result's mode (`000000`: the path is gone).
    #[must_use]
    pub fn mode(&self) -> &str {
        self.modes.last().map_or("", String::as_str)
    }

    /// The result's object id.
    #[must_use]
    pub fn oid(&self) -> &str {
        self.oids.last().map_or("", String::as_str)
    }
}

/// The records of `git ... --raw -z` output (anything else between them, such as the
/// empty commit headers of `--format=format:`, is skipped). Renames and copies are not
/// expected (callers pass `--no-renames`); a record cut short ends the list.
#[must_use]
pub fn records(out: &str) -> Vec<Record> {
    let mut found = Vec::new();
    let mut fields = out.split('\0');
    while let Some(head) = fields.next() {
        let head = head.trim_start_matches('\n');
        let parents = head.bytes().take_while(|b| *b == b':').count();
        if parents == 0 {
            continue;
        }
        let Some(path) = fields.next() else { break };
        let parts: Vec<&str> = head[parents..].split(' ').collect();
        if parts.len() != 2 * (parents + 1) + 1 {
            continue;
        }
        found.push(Record {
            modes: parts[..=parents].iter().map(|s| (*s).to_owned()).collect(),
            oids: parts[parents + 1..2 * (parents + 1)]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            status: parts[2 * (parents + 1)].to_owned(),
            path: path.to_owned(),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_combined_records_with_any_name() {
        let h = "1".repeat(40);
        let z = "0".repeat(40);
        let out = format!(
            "\0:000000 100644 {z} {h} A\0.github/workflows/ci-\u{e9}.yml\0\0\
             :000000 120000 {z} {h} A\0.vscode\0\
             ::100644 100644 160000 {h} {h} {h} MM\0a\nb\"c\0:100644 000000 {h} {z} D\0gone\0"
        );
        let r = records(&out);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].path, ".github/workflows/ci-\u{e9}.yml");
        assert_eq!((r[0].mode(), r[0].oid()), ("100644", h.as_str()));
        assert_eq!(r[1].mode(), "120000");
        assert_eq!(r[2].path, "a\nb\"c");
        assert_eq!(r[2].modes.len(), 3);
        assert_eq!((r[2].mode(), r[2].status.as_str()), ("160000", "MM"));
        assert_eq!((r[3].mode(), r[3].status.as_str()), ("000000", "D"));
        assert!(records("").is_empty());
        assert!(records(":100644 100644 x").is_empty(), "cut short");
    }
}
