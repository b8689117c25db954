//! One run of a relay command as a connection: its standard output read, its standard input
//! written; its standard error kept (the last lines) to say why a connection failed. The
//! process is killed when the connection is dropped, so a relay never outlives its request
//! (an event stream's included).

use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

/// A connection the HTTP client drives.
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Conn for T {}

/// How much of the relay's standard error is kept.
const SAID_LIMIT: usize = 4096;
/// How long a failed connection waits for the relay to finish saying why.
const SAID_WAIT: Duration = Duration::from_secs(2);

/// The relay process as a connection.
#[derive(Debug)]
pub struct RelayIo {
    out: ChildStdout,
    /// `None` once shut down: dropping it closes the relay's standard input.
    input: Option<ChildStdin>,
    /// Held so that dropping the connection kills the process (`kill_on_drop`).
    _child: Child,
}

/// What the relay wrote on its standard error.
#[derive(Debug)]
pub struct Said {
    text: Arc<Mutex<String>>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl Said {
    /// Its last non-empty line, once it stopped writing (or after [`SAID_WAIT`]).
    pub async fn last_line(&self) -> Option<String> {
        let reader = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(r) = reader {
            let _ = tokio::time::timeout(SAID_WAIT, r).await;
        }
        let text = self
            .text
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    }
}

/// Starts `argv` with its standard streams piped.
///
/// # Errors
/// The command cannot be run (one line naming it).
pub fn spawn(argv: &[String]) -> Result<(RelayIo, Said), String> {
    let (program, args) = argv.split_first().ok_or("an empty relay command")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {program}: {e} (install it, or set {})",
                crate::kube::KUBECTL_ENV
            )
        })?;
    let (Some(out), Some(input), Some(err)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err(format!("{program}'s standard streams were not piped"));
    };
    let text = Arc::new(Mutex::new(String::new()));
    let kept = Arc::clone(&text);
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut t = kept
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            t.push_str(&line);
            t.push('\n');
            if t.len() > SAID_LIMIT {
                let cut = t.len() - SAID_LIMIT;
                let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                t.drain(..cut);
            }
        }
    });
    Ok((
        RelayIo {
            out,
            input: Some(input),
            _child: child,
        },
        Said {
            text,
            reader: Mutex::new(Some(reader)),
        },
    ))
}

impl AsyncRead for RelayIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.out).poll_read(cx, buf)
    }
}

impl RelayIo {
    fn input(&mut self) -> io::Result<Pin<&mut ChildStdin>> {
        self.input
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the relay's input is closed"))
    }
}

impl AsyncWrite for RelayIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.input() {
            Ok(i) => i.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.input() {
            Ok(i) => i.poll_flush(cx),
            Err(_) => Poll::Ready(Ok(())),
        }
    }

    /// Closes the relay's standard input (it half-closes the socket in turn).
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Ok(i) = self.input() {
            std::task::ready!(i.poll_flush(cx))?;
        }
        self.input = None;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_relay_is_a_connection_and_its_last_words_are_kept() {
        let argv: Vec<String> = [
            "sh",
            "-c",
            "echo starting >&2; cat; echo 'pods \"x\" not found' >&2",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let (mut io, said) = spawn(&argv).unwrap();
        io.write_all(b"ping").await.unwrap();
        io.shutdown().await.unwrap();
        let mut back = String::new();
        io.read_to_string(&mut back).await.unwrap();
        assert_eq!(back, "ping");
        assert_eq!(
            said.last_line().await.as_deref(),
            Some("pods \"x\" not found")
        );
        let e = spawn(&["/nonexistent/kubectl".to_owned()]).unwrap_err();
        assert!(
            e.contains("cannot run /nonexistent/kubectl") && e.contains("AIRLOCK_KUBECTL"),
            "{e}"
        );
    }
}
