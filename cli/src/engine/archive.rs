//! Reading one file of a container (`GET /containers/{id}/archive`): the engine answers
//! with a tar stream holding that file. Only the first regular file of the stream is taken
//! (ustar headers; a pax or GNU long-name header before it is skipped by its size): the
//! engine makes the stream for one path, so nothing else is there to read. A general tar
//! reader would be a new workspace dependency for these few lines.

use super::{Engine, EngineError, call, is_404};
use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::StreamExt;

/// The largest file read this way (a policy file is a few kilobytes).
const LIMIT: usize = 1 << 20;

/// The content of the first regular file of the tar stream `tar`.
pub fn first_file(tar: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while at + 512 <= tar.len() {
        let header = &tar[at..at + 512];
        if header.iter().all(|b| *b == 0) {
            return None;
        }
        let size_field = String::from_utf8_lossy(&header[124..136]);
        let size =
            usize::from_str_radix(size_field.trim_matches(|c: char| c == '\0' || c == ' '), 8)
                .ok()?;
        let body = at + 512;
        let end = body.checked_add(size)?;
        match header[156] {
            b'0' | 0 => return tar.get(body..end).map(<[u8]>::to_vec),
            _ => at = body + size.div_ceil(512) * 512,
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
    use super::*;

    fn header(name: &str, size: usize, kind: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let s = format!("{size:011o}\0");
        h[124..136].copy_from_slice(s.as_bytes());
        h[156] = kind;
        h
    }

    fn padded(body: &[u8]) -> Vec<u8> {
        let mut b = body.to_vec();
        b.resize(body.len().div_ceil(512) * 512, 0);
        b
    }

    #[test]
    fn the_first_regular_file_is_read_past_a_pax_header() {
        let mut tar = header("PaxHeader", 30, b'x');
        tar.extend(padded(&[b'a'; 30]));
        tar.extend(header("policy.toml", 5, b'0'));
        tar.extend(padded(b"[x]\ny"));
        tar.extend(vec![0u8; 1024]);
        assert_eq!(first_file(&tar).as_deref(), Some(&b"[x]\ny"[..]));
        assert_eq!(first_file(&[0u8; 1024]), None);
        assert_eq!(first_file(&header("f", 99, b'0')), None, "cut short");
    }
}
