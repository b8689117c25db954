//! A private file written whole: under a temporary name beside it (mode 0600, never
//! following a link), synced, then renamed over the old one, and the directory synced, so
//! a reader (or a restart) sees the old file or the new one, never half of either.
//!
//! What the proxy keeps for later in its own directories: the kept policy revision
//! ([`crate::revision::Saved`]) and the operator's grants ([`crate::grants`]).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Replaces `path` with `bytes` (see the module docs); on an error the old file stays.
///
/// # Errors
/// The temporary file cannot be created, written or synced, or the rename fails.
pub(crate) fn private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kept.json");
        std::fs::write(&path, "old").unwrap();
        private(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
    }

    #[test]
    fn attack_a_link_at_the_temporary_or_the_final_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.path().join("kept.json");
        std::os::unix::fs::symlink(&victim, dir.path().join(".kept.json.tmp")).unwrap();
        private(&path, b"new").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("linked.json")).unwrap();
        private(&dir.path().join("linked.json"), b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let linked = std::fs::symlink_metadata(dir.path().join("linked.json")).unwrap();
        assert!(linked.is_file(), "the link itself was replaced");
    }
}
