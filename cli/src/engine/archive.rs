//! Reading one file of a container (`GET /containers/{id}/archive`): the engine answers
//! with a tar stream holding that file, read with the `tar` crate (ustar, pax and GNU
//! headers alike); the first regular file of the stream is the one asked for.

use super::{Engine, EngineError, call, is_404};
use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;
use std::io::Read;

/// The largest file read this way (a policy file is a few kilobytes).
const LIMIT: usize = 1 << 20;

/// The content of the first regular file of the tar stream `tar`; `None` when it has none
/// or is cut short.
pub fn first_file(tar: &[u8]) -> Option<Vec<u8>> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.header().entry_type().is_file() {
            let mut body = Vec::new();
            entry.read_to_end(&mut body).ok()?;
            return Some(body);
        }
    }
    None
}

impl Engine {
    /// The file at `path` in the container `id` (created or running); `None` when there is
    /// none.
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, EngineError> {
        let opts = DownloadFromContainerOptions {
            path: path.to_string(),
        };
        let mut stream = self.docker.download_from_container(id, Some(opts));
        let mut tar = Vec::new();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => {
                    tar.extend_from_slice(&bytes);
                    if tar.len() > LIMIT + 4096 {
                        break;
                    }
                }
                Err(e) if is_404(&e) => return Ok(None),
                Err(e) => return Err(call("read a file of", id)(e)),
            }
        }
        Ok(first_file(&tar))
    }

    /// The environment the image sets (`NAME=value` entries).
    pub async fn image_env(&self, image: &str) -> Result<Vec<String>, EngineError> {
        let i = self
            .docker
            .inspect_image(image)
            .await
            .map_err(call("inspect the image", image))?;
        Ok(i.config.and_then(|c| c.env).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn with(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, body) in entries {
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(*kind);
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, *body).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn the_first_regular_file_is_read_past_a_directory_and_a_long_name() {
        let long = format!("etc/{}/policy.toml", "d".repeat(120));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o644);
        // A GNU long-name entry precedes this one.
        b.append_data(&mut h, &long, &b"[x]\ny"[..]).unwrap();
        let tar = b.into_inner().unwrap();
        assert_eq!(first_file(&tar).as_deref(), Some(&b"[x]\ny"[..]));
        let tar = with(&[
            ("etc/", tar::EntryType::Directory, b""),
            ("etc/p", tar::EntryType::Regular, b"text"),
        ]);
        assert_eq!(first_file(&tar).as_deref(), Some(&b"text"[..]));
        assert_eq!(first_file(&[0u8; 1024]), None);
        assert_eq!(first_file(&tar[..700]), None, "cut short");
    }
}
