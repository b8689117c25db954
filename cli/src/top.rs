//! `airlock top`'s screen: the model (every running sandbox's numbers, the latest denials
//! and the inbox of items waiting for the operator), the keys, and the frame drawn from
//! them, as plain text lines with a few ANSI
//! attributes (no terminal library: a frame is redrawn whole, line by line, which any
//! terminal and any SSH session shows). The command (`commands/top.rs`) feeds the model from
//! the admin APIs and draws it.

use crate::admin::live::{self, Live};
use airlock_control::admin::Approval;
use std::collections::VecDeque;

/// How many denials are kept (all sandboxes together).
pub const DENIALS_KEPT: usize = 500;

/// One denial, as `logs --audit` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The sandbox.
    pub sandbox: String,
    /// Its human line (first line) and how to allow it (the rest), without colour.
    pub text: String,
}

/// One sandbox on the screen.
#[derive(Debug, Clone)]
pub struct Row {
    /// Its name.
    pub name: String,
    /// What its admin API said last, or why it did not answer.
    pub live: Option<Result<Live, String>>,
}

/// What the screen shows.
#[derive(Debug, Default)]
pub struct Model {
    /// The sandboxes, by name.
    pub rows: Vec<Row>,
    /// The latest denials, newest first.
    pub denials: VecDeque<Denial>,
    /// The chosen row.
    pub selected: usize,
    /// Showing the chosen sandbox alone.
    pub detail: bool,
    /// Showing the inbox (every sandbox's pending items).
    pub inbox: bool,
    /// The chosen item of the inbox.
    pub picked: usize,
    /// How the last answer given from the inbox went (shown under it until the next).
    pub answered: Option<String>,
    /// A line for the bottom (an error of the registry, say).
    pub status: Option<String>,
}

/// What a key asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// Quit (`q`, ctrl-c).
    Quit,
    /// Up (`k`, up arrow).
    Up,
    /// Down (`j`, down arrow).
    Down,
    /// Show the chosen sandbox (Enter).
    Enter,
    /// Back to the list (Esc, backspace, `h`).
    Back,
    /// The inbox (`i`).
    Inbox,
    /// In the inbox: approve the chosen item once (`o`).
    Once,
    /// In the inbox: approve it for its session (`s`).
    Session,
    /// In the inbox: deny it (`d`).
    Deny,
}

/// What the command does after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Go on.
    Go,
    /// Quit.
    Quit,
    /// Send this answer to the item `id` of `sandbox`.
    Answer {
        sandbox: String,
        id: String,
        /// `Some("once" | "session")` to approve, `None` to deny.
        scope: Option<&'static str>,
    },
}

/// The reason a denial from `top` carries (the agent reads it).
pub const DENY_REASON: &str = "denied by the operator in airlock top";

/// The keys in bytes read from a raw terminal (one read: an escape sequence comes whole).
#[must_use]
pub fn keys(bytes: &[u8]) -> Vec<Key> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let (key, n) = match rest {
            [0x1b, b'[' | b'O', b'A', ..] => (Some(Key::Up), 3),
            [0x1b, b'[' | b'O', b'B', ..] => (Some(Key::Down), 3),
            [0x1b, b'[' | b'O', _, ..] => (None, 3),
            [0x1b, ..] => (Some(Key::Back), 1),
            [b'q' | b'Q' | 0x03 | 0x04, ..] => (Some(Key::Quit), 1),
            [b'k', ..] => (Some(Key::Up), 1),
            [b'j', ..] => (Some(Key::Down), 1),
            [b'\r' | b'\n' | b'l', ..] => (Some(Key::Enter), 1),
            [b'i', ..] => (Some(Key::Inbox), 1),
            [b'o', ..] => (Some(Key::Once), 1),
            [b's', ..] => (Some(Key::Session), 1),
            [b'd', ..] => (Some(Key::Deny), 1),
            [0x7f | 0x08 | b'h', ..] => (Some(Key::Back), 1),
            _ => (None, 1),
        };
        out.extend(key);
        i += n;
    }
    out
}

impl Model {
    /// Act on a key: what the command does next.
    pub fn key(&mut self, k: Key) -> Step {
        if self.inbox {
            return self.inbox_key(k);
        }
        match k {
            Key::Quit => return Step::Quit,
            Key::Up => self.selected = self.selected.saturating_sub(1),
            Key::Down => {
                if self.selected + 1 < self.rows.len() {
                    self.selected += 1;
                }
            }
            Key::Enter => self.detail = !self.rows.is_empty(),
            Key::Back => self.detail = false,
            Key::Inbox => {
                self.inbox = true;
                self.detail = false;
                self.picked = 0;
            }
            Key::Once | Key::Session | Key::Deny => {}
        }
        Step::Go
    }

    fn inbox_key(&mut self, k: Key) -> Step {
        let n = self.pending().len();
        match k {
            Key::Quit => return Step::Quit,
            Key::Up => self.picked = self.picked.saturating_sub(1),
            Key::Down => {
                if self.picked + 1 < n {
                    self.picked += 1;
                }
            }
            Key::Back | Key::Inbox => self.inbox = false,
            Key::Enter => {}
            Key::Once | Key::Session | Key::Deny => {
                let Some((sandbox, a)) = self.pending().get(self.picked).copied() else {
                    return Step::Go;
                };
                let scope = match k {
                    Key::Once => Some("once"),
                    Key::Session => Some("session"),
                    _ => None,
                };
                return Step::Answer {
                    sandbox: sandbox.to_owned(),
                    id: a.id.clone(),
                    scope,
                };
            }
        }
        Step::Go
    }

    /// Every sandbox's pending items, in the order of the sandboxes and their inboxes.
    #[must_use]
    pub fn pending(&self) -> Vec<(&str, &Approval)> {
        self.rows
            .iter()
            .filter_map(|r| Some((r.name.as_str(), r.live.as_ref()?.as_ref().ok()?)))
            .flat_map(|(name, l)| {
                l.approvals
                    .iter()
                    .filter(|a| a.state == "pending")
                    .map(move |a| (name, a))
            })
            .collect()
    }

    /// Set the sandboxes (names in order), keeping what is known of each.
    pub fn set_names(&mut self, names: &[String]) {
        let chosen = self.rows.get(self.selected).map(|r| r.name.clone());
        let mut rows = Vec::with_capacity(names.len());
        for n in names {
            let row = match self.rows.iter().position(|r| &r.name == n) {
                Some(i) => self.rows.swap_remove(i),
                None => Row {
                    name: n.clone(),
                    live: None,
                },
            };
            rows.push(row);
        }
        self.rows = rows;
        self.selected = chosen
            .and_then(|c| self.rows.iter().position(|r| r.name == c))
            .unwrap_or(0)
            .min(self.rows.len().saturating_sub(1));
        if self.rows.is_empty() {
            self.detail = false;
        }
    }

    /// Record what `name`'s admin API said.
    pub fn set_live(&mut self, name: &str, live: Result<Live, String>) {
        if let Some(r) = self.rows.iter_mut().find(|r| r.name == name) {
            r.live = Some(live);
        }
        self.picked = self.picked.min(self.pending().len().saturating_sub(1));
    }

    /// Add a denial (newest first).
    pub fn deny(&mut self, d: Denial) {
        self.denials.push_front(d);
        self.denials.truncate(DENIALS_KEPT);
    }

    /// The frame for a `cols` × `rows` terminal: at most `rows` lines, none wider than
    /// `cols` characters (the attributes aside).
    #[must_use]
    pub fn frame(&self, cols: usize, rows: usize, clock: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if self.inbox {
            self.inbox_frame(clock, cols, rows, &mut out);
            return out;
        }
        if self.detail
            && let Some(r) = self.rows.get(self.selected)
        {
            self.detail_frame(r, clock, cols, rows, &mut out);
            return out;
        }
        self.list_frame(clock, cols, rows, &mut out);
        out
    }

    fn list_frame(&self, clock: &str, cols: usize, rows: usize, out: &mut Vec<String>) {
        let n = self.rows.len();
        // Items waiting for the operator, in every sandbox: the inbox's badge.
        let pending = self.pending().len();
        let badge = if pending > 0 {
            format!("  [{pending} pending: i inbox]")
        } else {
            String::new()
        };
        out.push(bold(&fit(
            &format!(
                "airlock top  {n} sandbox{}{badge}  {clock}    q quit  up/down choose  Enter details  i inbox",
                if n == 1 { "" } else { "es" }
            ),
            cols,
        )));
        out.push(fit(
            &format!(
                "  {:<24} {:<8} {:>9} {:>9} {:>7} {:>5}  {:<8} POLICY",
                "NAME", "STATE", "REQUESTS", "ALLOWED", "DENIED", "OPEN", "AUDIT"
            ),
            cols,
        ));
        for (i, r) in self.rows.iter().enumerate() {
            let mark = if i == self.selected { ">" } else { " " };
            let text = match &r.live {
                None => format!("{mark} {:<24} ...", r.name),
                Some(Err(e)) => format!("{mark} {:<24} -        {e}", r.name),
                Some(Ok(l)) => {
                    let c = &l.counters;
                    let audit = match c.audit {
                        airlock_control::admin::AuditState::Writing => "writing",
                        airlock_control::admin::AuditState::Outage => "OUTAGE",
                        airlock_control::admin::AuditState::Unknown => "?",
                    };
                    let waiting = l.approvals.iter().filter(|a| a.state == "pending").count();
                    let waiting = if waiting > 0 {
                        format!("  {waiting} pending")
                    } else {
                        String::new()
                    };
                    format!(
                        "{mark} {:<24} {:<8} {:>9} {:>9} {:>7} {:>5}  {:<8} r{} {}{waiting}",
                        r.name,
                        state(l),
                        c.requests,
                        c.allowed,
                        c.denied,
                        c.open_connections,
                        audit,
                        l.policy.revision,
                        live::short_hash(&l.policy.hash)
                    )
                }
            };
            let line = fit(&text, cols);
            out.push(if i == self.selected {
                reverse(&line)
            } else {
                line
            });
        }
        if n == 0 {
            out.push(fit("  no sandbox runs (airlock list shows them all)", cols));
        }
        out.push(String::new());
        out.push(bold(&fit("Latest denials (newest first)", cols)));
        let room = rows.saturating_sub(out.len() + 1);
        for d in self.denials.iter().take(room) {
            let first = d.text.lines().next().unwrap_or("");
            out.push(red(&fit(&format!("{:<16} {first}", d.sandbox), cols)));
        }
        if self.denials.is_empty() {
            out.push(fit("  none yet", cols));
        }
        if let Some(s) = &self.status {
            out.truncate(rows.saturating_sub(1));
            out.push(fit(s, cols));
        }
        out.truncate(rows);
    }

    fn inbox_frame(&self, clock: &str, cols: usize, rows: usize, out: &mut Vec<String>) {
        let items = self.pending();
        out.push(bold(&fit(
            &format!(
                "airlock top > inbox  {} pending  {clock}    o approve once  s approve for the session  d deny  Esc back",
                items.len()
            ),
            cols,
        )));
        if items.is_empty() {
            out.push(fit("  nothing waits for you", cols));
        }
        for (i, (sandbox, a)) in items.iter().enumerate() {
            let mark = if i == self.picked { ">" } else { " " };
            let line = fit(&format!("{mark} {}", live::item_line(sandbox, a)), cols);
            out.push(if i == self.picked {
                reverse(&line)
            } else {
                line
            });
            for d in live::item_details(a) {
                out.push(fit(&format!("    {d}"), cols));
            }
        }
        let bottom: Vec<&String> = self.answered.iter().chain(&self.status).collect();
        if !bottom.is_empty() {
            out.truncate(rows.saturating_sub(bottom.len()));
            out.extend(bottom.into_iter().map(|s| fit(s, cols)));
        }
        out.truncate(rows);
    }

    fn detail_frame(&self, r: &Row, clock: &str, cols: usize, rows: usize, out: &mut Vec<String>) {
        out.push(bold(&fit(
            &format!("airlock top > {}  {clock}    Esc back  q quit", r.name),
            cols,
        )));
        match &r.live {
            None => out.push(fit("  asking its admin API...", cols)),
            Some(Err(e)) => out.push(fit(&format!("  {e}"), cols)),
            Some(Ok(l)) => {
                for line in live::lines(l) {
                    out.push(fit(&line, cols));
                }
                let mut hosts: Vec<(&String, &u64)> = l.counters.bytes_out_by_host.iter().collect();
                hosts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                if !hosts.is_empty() {
                    let text: Vec<String> = hosts
                        .iter()
                        .take(5)
                        .map(|(h, b)| format!("{h} {b}"))
                        .collect();
                    out.push(fit(&format!("bytes out   {}", text.join(", ")), cols));
                }
            }
        }
        out.push(String::new());
        out.push(bold(&fit(
            &format!("Latest denials of {} (newest first)", r.name),
            cols,
        )));
        let mine: Vec<&Denial> = self
            .denials
            .iter()
            .filter(|d| d.sandbox == r.name)
            .collect();
        if mine.is_empty() {
            out.push(fit("  none yet", cols));
        }
        for d in mine {
            let mut lines = d.text.lines();
            if let Some(first) = lines.next() {
                if out.len() >= rows {
                    break;
                }
                out.push(red(&fit(first, cols)));
            }
            for more in lines {
                if out.len() >= rows {
                    break;
                }
                out.push(fit(more, cols));
            }
        }
        out.truncate(rows);
    }
}

fn state(l: &Live) -> &'static str {
    match l.status.state {
        airlock_control::status::State::Starting => "starting",
        airlock_control::status::State::Ready => "ready",
        airlock_control::status::State::Refused => "refused",
        airlock_control::status::State::Unknown => "?",
    }
}

/// `text` cut to `cols` characters.
fn fit(text: &str, cols: usize) -> String {
    text.chars().take(cols).collect()
}

fn bold(s: &str) -> String {
    format!("\x1b[1m{s}\x1b[0m")
}

fn reverse(s: &str) -> String {
    format!("\x1b[7m{s}\x1b[0m")
}

fn red(s: &str) -> String {
    format!("\x1b[31m{s}\x1b[0m")
}

/// The frame as bytes for the terminal: home, each line with the rest of it cleared, the
/// rest of the screen cleared (raw mode: `\r\n`).
#[must_use]
pub fn paint(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::from(&b"\x1b[H"[..]);
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(l.as_bytes());
        out.extend_from_slice(b"\x1b[K");
    }
    out.extend_from_slice(b"\x1b[J");
    out
}

/// Enter the alternate screen with the cursor hidden.
pub const ENTER: &[u8] = b"\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
/// Leave it, cursor shown again.
pub const LEAVE: &[u8] = b"\x1b[?25h\x1b[?1049l";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_from_a_raw_terminal() {
        assert_eq!(keys(b"q"), [Key::Quit]);
        assert_eq!(keys(b"\x03"), [Key::Quit]);
        assert_eq!(
            keys(b"\x1b[A\x1b[Bjk"),
            [Key::Up, Key::Down, Key::Down, Key::Up]
        );
        assert_eq!(keys(b"\r"), [Key::Enter]);
        assert_eq!(keys(b"\x1b"), [Key::Back]);
        assert_eq!(keys(b"\x1b[C"), []);
        assert_eq!(keys(b"x"), []);
        assert_eq!(
            keys(b"iosd"),
            [Key::Inbox, Key::Once, Key::Session, Key::Deny]
        );
    }

    #[test]
    fn the_list_keeps_the_choice_and_shows_denials_newest_first() {
        let mut m = Model::default();
        m.set_names(&["a".into(), "b".into()]);
        assert_eq!(m.key(Key::Down), Step::Go);
        assert_eq!(m.selected, 1);
        m.set_live("b", Err("the sandbox b is not running".into()));
        m.set_names(&["b".into(), "c".into()]);
        assert_eq!(m.rows[m.selected].name, "b", "the choice follows the name");
        m.deny(Denial {
            sandbox: "b".into(),
            text: "first denial\n    to allow: x".into(),
        });
        m.deny(Denial {
            sandbox: "c".into(),
            text: "second denial".into(),
        });
        let f = m.frame(100, 20, "14:00:00").join("\n");
        let second = f.find("second denial").unwrap_or(usize::MAX);
        let first = f.find("first denial").unwrap_or(usize::MAX);
        assert!(second < first && first != usize::MAX, "{f}");
        assert!(!f.contains("to allow"), "the list shows first lines: {f}");
        assert!(f.contains("not running"), "{f}");
        for l in m.frame(20, 5, "t") {
            let plain = l
                .replace("\x1b[1m", "")
                .replace("\x1b[0m", "")
                .replace("\x1b[7m", "")
                .replace("\x1b[31m", "");
            assert!(plain.chars().count() <= 20, "{plain:?}");
        }
        assert_eq!(m.frame(20, 5, "t").len(), 5);
        // Enter: this sandbox's denials with how to allow them.
        assert_eq!(m.key(Key::Enter), Step::Go);
        let f = m.frame(60, 20, "t").join("\n");
        assert!(f.contains("airlock top > b"), "{f}");
        assert!(f.contains("to allow: x"), "{f}");
        assert!(!f.contains("second denial"), "{f}");
        assert_eq!(m.key(Key::Back), Step::Go);
        assert!(!m.detail);
        assert_eq!(m.key(Key::Quit), Step::Quit);
    }

    #[test]
    fn pending_approvals_show_as_a_badge_and_on_their_sandbox_row() {
        use airlock_control::admin::{Approval, AuditState, Counters, PolicyRevision};
        use airlock_control::status::Status;
        let item = |state: &str| Approval {
            id: "3f2a9c1d".into(),
            session: "uid 1000".into(),
            host: "asked.example".into(),
            port: 443,
            hits: 1,
            first_ms: 0,
            last_ms: 0,
            state: state.into(),
            scope: None,
            by: None,
            until_ms: None,
            reason: None,
            said: None,
            rule: None,
            notes: Vec::new(),
            token: None,
        };
        let live = Live {
            status: Status::starting("0.1.0", 0).ready(1, Default::default()),
            policy: PolicyRevision {
                revision: 2,
                hash: "0123456789abcdef".into(),
                loaded_at_ms: 0,
                origin: "/etc/airlock/policy.toml".into(),
                rules: Vec::new(),
            },
            sessions: Vec::new(),
            counters: Counters {
                requests: 3,
                allowed: 1,
                denied: 2,
                denied_by_reason: Default::default(),
                bytes_out_by_host: Default::default(),
                open_connections: 0,
                open_circuits: Vec::new(),
                budgets: Vec::new(),
                audit: AuditState::Writing,
            },
            approvals: vec![item("pending"), item("pending"), item("denied")],
        };
        let mut m = Model::default();
        m.set_names(&["a".into(), "b".into()]);
        let mut second = item("pending");
        second.id = "77aa00bb".into();
        second.said = Some("pip needs\x1b[2J it".into());
        second.notes = vec!["the host carries a credential".into()];
        let mut live = live;
        live.approvals[1] = second;
        m.set_live("a", Ok(live));
        let f = m.frame(200, 20, "t").join("\n");
        assert!(f.contains("[2 pending: i inbox]"), "{f}");
        assert!(f.contains("r2 0123456789ab  2 pending"), "{f}");
        // Answer keys do nothing outside the inbox.
        assert_eq!(m.key(Key::Deny), Step::Go);
        // The inbox: both pending items, the agent's words escaped and marked, the notes.
        assert_eq!(m.key(Key::Inbox), Step::Go);
        let f = m.frame(200, 20, "t").join("\n");
        assert!(f.contains("airlock top > inbox  2 pending"), "{f}");
        assert!(
            f.contains("> a/3f2a9c1d  uid 1000  asked.example:443  1 hit"),
            "{f}"
        );
        assert!(
            f.contains("the agent says (untrusted): \"pip needs\\x1b[2J it\""),
            "{f}"
        );
        assert!(f.contains("note: the host carries a credential"), "{f}");
        assert_eq!(
            m.key(Key::Session),
            Step::Answer {
                sandbox: "a".into(),
                id: "3f2a9c1d".into(),
                scope: Some("session")
            }
        );
        assert_eq!(m.key(Key::Down), Step::Go);
        assert_eq!(m.key(Key::Down), Step::Go, "stays on the last");
        assert_eq!(
            m.key(Key::Deny),
            Step::Answer {
                sandbox: "a".into(),
                id: "77aa00bb".into(),
                scope: None
            }
        );
        assert_eq!(m.key(Key::Back), Step::Go);
        assert!(!m.inbox);
    }
}
