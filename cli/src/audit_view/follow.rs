//! Following one audit file by name, as `tail -F` does: what is appended is read as it
//! comes, a partial last line (being written) waits for its end, and when the name comes to
//! name another file (the log rotated: `audit.jsonl` renamed to `audit.jsonl.1`, a new one
//! created) the old file is read to its end and the new one from its start. A file cut
//! shorter than what was read (the git API's log truncated in place) is read again from its
//! start. The caller polls ([`Follower::poll`]); nothing here blocks.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One file followed by name.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    /// (device, inode) of the open file.
    id: Option<(u64, u64)>,
    /// Bytes of the open file read.
    pos: u64,
    /// The last line's bytes read so far (no newline yet).
    partial: Vec<u8>,
    /// Lines of the open file handed out.
    line: u64,
}

/// One whole line read, with its number in its file (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    pub n: u64,
    pub text: String,
}

impl Follower {
    /// Follow `path` (it may not exist yet), from its start.
    #[must_use]
    pub fn new(path: &Path) -> Follower {
        Follower {
            path: path.to_path_buf(),
            file: None,
            id: None,
            pos: 0,
            partial: Vec::new(),
            line: 0,
        }
    }

    /// The file followed.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole lines appended since the last poll, in order.
    ///
    /// # Errors
    /// The file cannot be opened (other than absent) or read: a permission error is the
    /// caller's to explain.
    pub fn poll(&mut self) -> io::Result<Vec<Got>> {
        let mut out = Vec::new();
        if self.file.is_none() {
            self.open()?;
        }
        self.read_new(&mut out)?;
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => Some((m.dev(), m.ino(), m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match now {
            Some((dev, ino, _)) if self.id.is_some() && self.id != Some((dev, ino)) => {
                // Rotated: what was written to the old file before it was renamed, then the
                // new file from its start. A cut last line of the old file ends there.
                self.read_new(&mut out)?;
                if !self.partial.is_empty() {
                    let text =
                        String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned();
                    self.line += 1;
                    out.push(Got { n: self.line, text });
                }
                self.file = None;
                self.open()?;
                self.read_new(&mut out)?;
            }
            Some((_, _, len)) if self.id.is_some() && len < self.pos => {
                // Truncated in place: read it again from its start.
                self.pos = 0;
                self.line = 0;
                self.partial.clear();
                self.read_new(&mut out)?;
            }
            _ => {}
        }
        Ok(out)
    }

    /// Open the file by name; absent is not an error (it is tried again at the next poll).
    fn open(&mut self) -> io::Result<()> {
        match File::open(&self.path) {
            Ok(f) => {
                let m = f.metadata()?;
                self.id = Some((m.dev(), m.ino()));
                self.file = Some(f);
                self.pos = 0;
                self.line = 0;
                self.partial.clear();
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.id = None;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Read the open file from `pos` to its end; hand out the whole lines.
    fn read_new(&mut self, out: &mut Vec<Got>) -> io::Result<()> {
        let Some(f) = &mut self.file else {
            return Ok(());
        };
        f.seek(SeekFrom::Start(self.pos))?;
        let mut buf = Vec::new();
        let n = f.read_to_end(&mut buf)?;
        self.pos += n as u64;
        self.partial.extend_from_slice(&buf);
        let mut start = 0;
        while let Some(i) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let end = start + i;
            self.line += 1;
            out.push(Got {
                n: self.line,
                text: String::from_utf8_lossy(&self.partial[start..end]).into_owned(),
            });
            start = end + 1;
        }
        self.partial.drain(..start);
        Ok(())
    }
}
