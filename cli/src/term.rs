//! The operator's terminal: whether there is one, its size, and raw mode for the time a
//! sandbox's terminal is attached (restored when the guard drops, also on an error path).

use nix::sys::termios::{self, SetArg, Termios};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use thiserror::Error;

/// A terminal operation that failed.
#[derive(Debug, Error)]
pub enum TermError {
    /// Reading or setting the terminal's modes failed.
    #[error("cannot switch the terminal to raw mode: {0}")]
    Raw(nix::Error),
}

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// Whether both stdin and stdout are terminals (what `docker run -it` needs).
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Whether stdin is a terminal.
pub fn stdin_is_terminal() -> bool {
    std::io::stdin().is_terminal()
}

/// The size of the terminal on stdout, if it is one.
pub fn size() -> Option<Size> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass, which lives for the
    // whole call; fd 1 is ours (a bad fd or a non-terminal only makes it return -1).
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some(Size {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// Raw mode on stdin until dropped.
#[derive(Debug)]
pub struct RawGuard {
    saved: Termios,
}

impl RawGuard {
    /// Switch stdin to raw mode (no echo, no line editing, no signals from ^C: they go to
    /// the sandbox's terminal as bytes, as with `docker run -it`).
    pub fn enter() -> Result<RawGuard, TermError> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).map_err(TermError::Raw)?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).map_err(TermError::Raw)?;
        Ok(RawGuard { saved })
    }
}

impl Drop for RawGuard {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Read a line from the terminal with echo off (a secret typed at a prompt).
pub fn read_hidden_line() -> std::io::Result<String> {
    let stdin = std::io::stdin();
    let saved = termios::tcgetattr(stdin.as_fd()).map_err(std::io::Error::from)?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(termios::LocalFlags::ECHO);
    termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &quiet).map_err(std::io::Error::from)?;
    let mut line = String::new();
    let read = stdin.read_line(&mut line);
    let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &saved);
    read?;
    Ok(line)
}
