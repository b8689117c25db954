//! The proxy's private state directory (`<run dir>/proxy`): created 0700 and owned by the
//! proxy user; every file the entrypoint puts there (credential hand-off, operator CA,
//! extra upstream roots) is written under a temporary name, handed to the proxy user and
//! renamed into place, so a reader never sees half a file and the agent never sees any.

use crate::identity::Identity;
use anyhow::{Context, Result};
use nix::unistd::{Gid, Uid, chown};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Create `dir` (if needed), owned by the proxy user, mode 0700.
pub fn ensure_dir(dir: &Path, proxy: &Identity) -> Result<()> {
    ensure_dir_mode(dir, proxy, 0o700)
}

/// Create `dir` (if needed), owned by the proxy user, with `mode`.
pub fn ensure_dir_mode(dir: &Path, proxy: &Identity, mode: u32) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create the proxy's state directory {}",
            dir.display()
        )
    })?;
    chown(
        dir,
        Some(Uid::from_raw(proxy.uid)),
        Some(Gid::from_raw(proxy.gid)),
    )
    .with_context(|| format!("cannot hand {} to the proxy user", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", dir.display()))
}

/// Write `bytes` to `dir/name` with `mode`, owned by the proxy user. Returns the path.
pub fn install(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    proxy: &Identity,
) -> Result<PathBuf> {
    ensure_dir(dir, proxy)?;
    write_atomic(dir, name, bytes, mode, Some(proxy))
}

/// Write `dir/name` under a temporary name (created with `mode`, handed to `owner` when
/// given, root's otherwise), then rename it into place: a reader never sees half a file.
pub fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    owner: Option<&Identity>,
) -> Result<PathBuf> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    if let Some(owner) = owner {
        chown(
            &tmp,
            Some(Uid::from_raw(owner.uid)),
            Some(Gid::from_raw(owner.gid)),
        )
        .with_context(|| format!("cannot hand {} to {}", tmp.display(), owner.name))?;
    }
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot install {}", path.display()))?;
    Ok(path)
}
