//! The git service port's proof: a per-start [`ServiceKey`] and the [`Ticket`]s sealed with
//! it.
//!
//! The proxy's git service port is the one place the upstream git token is injected into
//! pushes. The firewall lets only the git API's group reach it; that is the outer fence, and
//! it is not enough: anything that runs with the git API's identity (a program git starts)
//! holds the same group. So the proxy trusts a proof, not a group:
//!
//! - The entrypoint mints a [`ServiceKey`] (32 random bytes) at every start and hands it to
//!   the proxy (in the hand-off file only the proxy user reads) and to the git API (on a
//!   pipe the git API reads once and closes). It stays in those two processes' memory; it is
//!   in no file the git API's children can open, in no argv and in no environment.
//! - For every network git operation the git API seals a [`Ticket`]: the operation (fetch or
//!   push), the repositories it may talk to, for a push the exact ref updates it judged
//!   (ref, old, new), when it was issued and when it expires (at most [`LIFETIME`] later),
//!   and a random nonce. git carries it as the HTTP header [`HEADER`] inside the TLS of the
//!   service port (`http.extraHeader`, set through git's environment, never its argv).
//! - The proxy [`open`]s it on every smart-HTTP request of the service port: a request
//!   without one, with a forged, expired or other-repository one, or a push whose ref
//!   updates the ticket did not sign, never goes upstream.
//!
//! A ticket seen by a process that should not have it (a child of the git command it was
//! given to) lets that process do exactly what the git API approved, for its repositories,
//! until it expires: the same fetches, or the same signed ref updates (the proxy takes a
//! push ticket's updates once, and the upstream applies an update only from its signed old
//! value). It never lets it delete, force, tag or push anywhere else.
//!
//! The sealed form is `v1.<payload>.<mac>`: the payload's bytes and the HMAC-SHA256 of them
//! under the key, both unpadded base64url. The payload is text, one field per line, in a
//! fixed order ([`Ticket::seal`] writes it; [`open`] verifies the MAC over the exact bytes
//! received, in constant time, before it reads a byte of them).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HTTP header a ticket travels in (lowercase: how HTTP/1.1 header maps name it). Every
/// `x-airlock-*` header is removed from a request before it goes upstream.
pub const HEADER: &str = "x-airlock-ticket";

/// Longest a ticket lives: long enough for git to compress a large push before its request
/// starts, short enough that a copy is soon worthless.
pub const LIFETIME: Duration = Duration::from_secs(15 * 60);

/// How far in the future a ticket's issue time may be (the git API and the proxy read the
/// same clock; this is slack for the milliseconds between them, not for skew).
pub const FUTURE_SLACK: Duration = Duration::from_secs(5);

/// Most ref updates one ticket signs (the git API refuses a bigger push).
pub const MAX_UPDATES: usize = 32;

/// Most repositories one ticket names (every URL of the remotes of one git command).
pub const MAX_REPOSITORIES: usize = 16;

/// Longest sealed ticket [`open`] reads.
pub const MAX_SEALED_LEN: usize = 16 * 1024;

/// Longest ref name a ticket carries.
pub const MAX_REF_LEN: usize = 1024;

/// Longest repository id a ticket carries.
const MAX_REPOSITORY_LEN: usize = 256;

/// The payload's first line: what it is and its version.
const MAGIC: &str = "airlock-git-ticket 1";

/// The sealed form's prefix.
const PREFIX: &str = "v1.";

type HmacSha256 = Hmac<Sha256>;

/// Minting or reading a key or a ticket failed (the git API's and the entrypoint's side).
#[derive(Debug, thiserror::Error)]
pub enum TicketError {
    /// The kernel's random source failed.
    #[error("reading random bytes: {0}")]
    Random(String),
    /// A key's text is not 64 hex digits (the text itself is never shown).
    #[error("the service key from {origin} {problem}")]
    ParseKey {
        /// Where the text came from.
        origin: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A ticket would carry something outside its shape.
    #[error("a ticket cannot carry {0}")]
    Shape(String),
}

/// Why [`open`] refused a ticket (the proxy's side): data, not an error of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a sealed ticket of this version, or one whose payload is out of shape.
    #[error("not a well-formed ticket ({0})")]
    Malformed(&'static str),
    /// The MAC does not verify: forged, altered, or sealed with another start's key.
    #[error("its seal does not verify (forged, altered, or from another start)")]
    Forged,
    /// Past its expiry.
    #[error("it expired")]
    Expired,
    /// Issued later than now (by more than [`FUTURE_SLACK`]).
    #[error("it was issued in the future")]
    Future,
}

/// The per-start key tickets are sealed with. Never printed.
#[derive(Clone)]
pub struct ServiceKey([u8; 32]);

impl fmt::Debug for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceKey(REDACTED)")
    }
}

impl ServiceKey {
    /// A key from raw bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> ServiceKey {
        ServiceKey(bytes)
    }

    /// A fresh key from the kernel's random source.
    ///
    /// # Errors
    /// [`TicketError::Random`].
    pub fn generate() -> Result<ServiceKey, TicketError> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|e| TicketError::Random(e.to_string()))?;
        Ok(ServiceKey(k))
    }

    /// 64 hex digits (surrounding whitespace ignored); `origin` names where the text came
    /// from in the error (never the text).
    ///
    /// # Errors
    /// [`TicketError::ParseKey`].
    pub fn from_hex(text: &str, origin: &str) -> Result<ServiceKey, TicketError> {
        let err = |problem| TicketError::ParseKey {
            origin: origin.to_owned(),
            problem,
        };
        let bytes = hex::decode(text.trim()).map_err(|_| err("is not hex"))?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|_| err("is not 64 hex digits (32 bytes)"))?;
        Ok(ServiceKey(arr))
    }

    /// The key as 64 lowercase hex digits (for the hand-off and the pipe).
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length: this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }
}

/// What a ticket lets git do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `git-upload-pack` (fetch, pull, ls-remote): reads.
    Fetch,
    /// `git-receive-pack` (push): the signed ref updates, nothing else.
    Push,
}

impl Op {
    /// The payload's word for it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Fetch => "fetch",
            Op::Push => "push",
        }
    }
}

/// One ref update as `git-receive-pack` receives it: object ids in lowercase hex (40 for
/// SHA-1, 64 for SHA-256), the zero id for "none" (a new ref's old, a deletion's new).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefUpdate {
    /// The full ref name (`refs/heads/...`).
    pub name: String,
    /// The value the ref must have upstream now (the zero id: it must not exist).
    pub old: String,
    /// The value it gets.
    pub new: String,
}

impl RefUpdate {
    /// The update of `name` from `old` (`None`: a new ref) to `new`.
    ///
    /// # Errors
    /// [`TicketError::Shape`] for a ref name or an object id out of shape.
    pub fn new(name: &str, old: Option<&str>, new: &str) -> Result<RefUpdate, TicketError> {
        let u = RefUpdate {
            name: name.to_owned(),
            old: old.map_or_else(|| zero_id(new.len()), str::to_owned),
            new: new.to_owned(),
        };
        u.check()
            .map_err(|what| TicketError::Shape(what.to_owned()))?;
        Ok(u)
    }

    /// Creates the ref (it must not exist upstream).
    #[must_use]
    pub fn is_creation(&self) -> bool {
        is_zero_id(&self.old)
    }

    /// Deletes the ref.
    #[must_use]
    pub fn is_deletion(&self) -> bool {
        is_zero_id(&self.new)
    }

    fn check(&self) -> Result<(), &'static str> {
        if !ref_name_ok(&self.name) {
            return Err("a ref name out of shape");
        }
        if !object_id_ok(&self.old) || !object_id_ok(&self.new) {
            return Err("an object id out of shape");
        }
        if self.old.len() != self.new.len() {
            return Err("object ids of two lengths in one update");
        }
        Ok(())
    }
}

/// The all-zero object id of `len` hex digits.
#[must_use]
pub fn zero_id(len: usize) -> String {
    "0".repeat(len)
}

/// Whether `id` is an all-zero object id.
#[must_use]
pub fn is_zero_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b == b'0')
}

/// 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
#[must_use]
pub fn object_id_ok(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `refs/...`, printable ASCII without spaces, at most [`MAX_REF_LEN`] bytes. (What git
/// accepts as a ref name is narrower; this is what a ticket can carry.)
#[must_use]
pub fn ref_name_ok(name: &str) -> bool {
    name.len() > "refs/".len()
        && name.len() <= MAX_REF_LEN
        && name.starts_with("refs/")
        && name.bytes().all(|b| b.is_ascii_graphic())
}

fn repository_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REPOSITORY_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// What the git API lets one git command do on the service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Fetch or push.
    pub op: Op,
    /// The repositories (`host/owner/repo`, as `airlock_policy::repo::repository_id`
    /// reads them) it may talk to.
    pub repositories: Vec<String>,
    /// For a push: the exact ref updates it may make (none for a fetch).
    pub updates: Vec<RefUpdate>,
    /// When it was sealed (milliseconds since the Unix epoch).
    pub issued_ms: u64,
    /// When it stops being valid (milliseconds since the Unix epoch).
    pub expires_ms: u64,
    /// Random: tells two tickets of the same operation apart (the proxy takes a push
    /// ticket's updates once).
    pub nonce: [u8; 16],
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Ticket {
    /// A ticket issued `now`, valid for [`LIFETIME`], with a fresh nonce.
    ///
    /// # Errors
    /// [`TicketError::Shape`] when it would carry something out of shape (no repository,
    /// too many, updates on a fetch, no update on a push), [`TicketError::Random`].
    pub fn new(
        op: Op,
        repositories: Vec<String>,
        updates: Vec<RefUpdate>,
        now: SystemTime,
    ) -> Result<Ticket, TicketError> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| TicketError::Random(e.to_string()))?;
        let issued_ms = millis(now);
        let lifetime = u64::try_from(LIFETIME.as_millis()).unwrap_or(u64::MAX);
        let t = Ticket {
            op,
            repositories,
            updates,
            issued_ms,
            expires_ms: issued_ms.saturating_add(lifetime),
            nonce,
        };
        t.check()
            .map_err(|what| TicketError::Shape(what.to_owned()))?;
        Ok(t)
    }

    /// The nonce as hex.
    #[must_use]
    pub fn nonce_hex(&self) -> String {
        hex::encode(self.nonce)
    }

    /// Whether it names `repository`.
    #[must_use]
    pub fn covers(&self, repository: &str) -> bool {
        self.repositories.iter().any(|r| r == repository)
    }

    /// Whether it signs exactly `update`.
    #[must_use]
    pub fn signs(&self, update: &RefUpdate) -> bool {
        self.updates.iter().any(|u| u == update)
    }

    /// The sealed form (`v1.<payload>.<mac>`), what git sends in [`HEADER`].
    #[must_use]
    pub fn seal(&self, key: &ServiceKey) -> String {
        let payload = self.payload();
        let mut mac = key.mac();
        mac.update(payload.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!(
            "{PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(payload.as_bytes()),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The canonical payload: one field per line, in this order.
    fn payload(&self) -> String {
        use fmt::Write as _;
        let mut p = String::with_capacity(160 + 120 * self.updates.len());
        let _ = writeln!(p, "{MAGIC}");
        let _ = writeln!(p, "op {}", self.op.as_str());
        let _ = writeln!(p, "issued {}", self.issued_ms);
        let _ = writeln!(p, "expires {}", self.expires_ms);
        let _ = writeln!(p, "nonce {}", self.nonce_hex());
        for r in &self.repositories {
            let _ = writeln!(p, "repository {r}");
        }
        for u in &self.updates {
            let _ = writeln!(p, "update {} {} {}", u.old, u.new, u.name);
        }
        p
    }

    /// Every field in shape (what [`Ticket::new`] promises and [`open`] re-checks).
    fn check(&self) -> Result<(), &'static str> {
        if self.repositories.is_empty() {
            return Err("no repository");
        }
        if self.repositories.len() > MAX_REPOSITORIES {
            return Err("more repositories than a ticket names");
        }
        if !self.repositories.iter().all(|r| repository_ok(r)) {
            return Err("a repository id out of shape");
        }
        match self.op {
            Op::Fetch if !self.updates.is_empty() => return Err("ref updates on a fetch"),
            Op::Push if self.updates.is_empty() => return Err("a push without ref updates"),
            _ => {}
        }
        if self.updates.len() > MAX_UPDATES {
            return Err("more ref updates than a ticket signs");
        }
        for u in &self.updates {
            u.check()?;
        }
        let lifetime = u64::try_from(LIFETIME.as_millis()).unwrap_or(u64::MAX);
        if self.expires_ms <= self.issued_ms || self.expires_ms - self.issued_ms > lifetime {
            return Err("a lifetime out of bounds");
        }
        Ok(())
    }
}

/// The ticket sealed in `sealed`, if the key's MAC verifies and it is valid at `now`.
///
/// # Errors
/// [`Refused`]: why it is not a valid ticket (the MAC is checked before anything else of
/// the payload is read).
pub fn open(sealed: &[u8], key: &ServiceKey, now: SystemTime) -> Result<Ticket, Refused> {
    if sealed.len() > MAX_SEALED_LEN {
        return Err(Refused::Malformed("too long"));
    }
    let rest = sealed
        .strip_prefix(PREFIX.as_bytes())
        .ok_or(Refused::Malformed("not a v1 ticket"))?;
    let mut parts = rest.split(|b| *b == b'.');
    let (Some(payload), Some(tag), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Refused::Malformed("not payload.mac"));
    };
    let payload = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| Refused::Malformed("payload is not base64url"))?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| Refused::Malformed("mac is not base64url"))?;
    let mut mac = key.mac();
    mac.update(&payload);
    // Constant time (`subtle` inside `hmac`).
    mac.verify_slice(&tag).map_err(|_| Refused::Forged)?;
    let text = std::str::from_utf8(&payload).map_err(|_| Refused::Malformed("not UTF-8"))?;
    let t = parse(text)?;
    t.check().map_err(Refused::Malformed)?;
    let now_ms = millis(now);
    let slack = u64::try_from(FUTURE_SLACK.as_millis()).unwrap_or(0);
    if t.issued_ms > now_ms.saturating_add(slack) {
        return Err(Refused::Future);
    }
    if now_ms >= t.expires_ms {
        return Err(Refused::Expired);
    }
    Ok(t)
}

/// The payload [`Ticket::payload`] writes, read back strictly.
fn parse(text: &str) -> Result<Ticket, Refused> {
    let body = text
        .strip_suffix('\n')
        .ok_or(Refused::Malformed("no final newline"))?;
    let mut lines = body.split('\n').peekable();
    let mut field = |name: &'static str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix(' '))
            .ok_or(Refused::Malformed(name))
    };
    if field("airlock-git-ticket")? != "1" {
        return Err(Refused::Malformed("version"));
    }
    let op = match field("op")? {
        "fetch" => Op::Fetch,
        "push" => Op::Push,
        _ => return Err(Refused::Malformed("op")),
    };
    let number = |s: &str, what| {
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refused::Malformed(what));
        }
        s.parse::<u64>().map_err(|_| Refused::Malformed(what))
    };
    let issued_ms = number(field("issued")?, "issued")?;
    let expires_ms = number(field("expires")?, "expires")?;
    let nonce_hex = field("nonce")?;
    let mut nonce = [0u8; 16];
    hex::decode_to_slice(nonce_hex, &mut nonce).map_err(|_| Refused::Malformed("nonce"))?;
    if nonce_hex.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(Refused::Malformed("nonce"));
    }
    let mut repositories = Vec::new();
    let mut updates = Vec::new();
    for line in lines {
        if let Some(r) = line.strip_prefix("repository ") {
            if !updates.is_empty() || repositories.len() >= MAX_REPOSITORIES {
                return Err(Refused::Malformed("repository"));
            }
            repositories.push(r.to_owned());
        } else if let Some(u) = line.strip_prefix("update ") {
            if updates.len() >= MAX_UPDATES {
                return Err(Refused::Malformed("update"));
            }
            let mut f = u.splitn(3, ' ');
            let (Some(old), Some(new), Some(name)) = (f.next(), f.next(), f.next()) else {
                return Err(Refused::Malformed("update"));
            };
            updates.push(RefUpdate {
                name: name.to_owned(),
                old: old.to_owned(),
                new: new.to_owned(),
            });
        } else {
            return Err(Refused::Malformed("unknown line"));
        }
    }
    Ok(Ticket {
        op,
        repositories,
        updates,
        issued_ms,
        expires_ms,
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: ServiceKey = ServiceKey::from_bytes([7; 32]);
    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn push_ticket(now: SystemTime) -> Ticket {
        Ticket::new(
            Op::Push,
            vec!["github.com/acme/app".into()],
            vec![RefUpdate::new("refs/heads/sandbox/t/x", Some(A), B).unwrap()],
            now,
        )
        .unwrap()
    }

    #[test]
    fn a_sealed_ticket_opens_to_itself() {
        let now = SystemTime::now();
        let t = push_ticket(now);
        let sealed = t.seal(&KEY);
        assert!(sealed.starts_with("v1."));
        assert!(sealed.bytes().all(|b| b.is_ascii_graphic()), "{sealed}");
        assert_eq!(open(sealed.as_bytes(), &KEY, now).unwrap(), t);
        let fetch = Ticket::new(Op::Fetch, vec!["github.com/a/b".into()], vec![], now).unwrap();
        assert_eq!(open(fetch.seal(&KEY).as_bytes(), &KEY, now).unwrap(), fetch);
    }

    #[test]
    fn another_key_or_any_changed_byte_is_forged() {
        let now = SystemTime::now();
        let sealed = push_ticket(now).seal(&KEY);
        let other = ServiceKey::from_bytes([8; 32]);
        assert_eq!(open(sealed.as_bytes(), &other, now), Err(Refused::Forged));
        // Flip every payload and mac character in turn (the prefix aside).
        let bytes = sealed.as_bytes();
        for i in PREFIX.len()..bytes.len() {
            if bytes[i] == b'.' {
                continue;
            }
            let mut b = bytes.to_vec();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            assert!(
                open(&b, &KEY, now).is_err(),
                "byte {i} changed and it opened"
            );
        }
        // A payload re-sealed by someone without the key: a changed update with the old mac.
        let (payload, mac) = sealed["v1.".len()..].split_once('.').unwrap();
        let text = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        let forged = text.replace("refs/heads/sandbox/t/x", "refs/heads/main");
        let forged = format!("v1.{}.{mac}", URL_SAFE_NO_PAD.encode(forged));
        assert_eq!(open(forged.as_bytes(), &KEY, now), Err(Refused::Forged));
    }

    #[test]
    fn time_bounds_hold() {
        let now = SystemTime::now();
        let sealed = push_ticket(now).seal(&KEY);
        let later = now + LIFETIME;
        assert_eq!(open(sealed.as_bytes(), &KEY, later), Err(Refused::Expired));
        let earlier = now - FUTURE_SLACK - Duration::from_secs(1);
        assert_eq!(open(sealed.as_bytes(), &KEY, earlier), Err(Refused::Future));
        assert!(
            open(
                sealed.as_bytes(),
                &KEY,
                now + LIFETIME - Duration::from_secs(1)
            )
            .is_ok()
        );
    }

    #[test]
    fn a_ticket_sealed_with_the_key_but_out_of_shape_is_refused() {
        let now = SystemTime::now();
        let mut t = push_ticket(now);
        t.expires_ms = t.issued_ms + 24 * 3600 * 1000;
        assert_eq!(
            open(t.seal(&KEY).as_bytes(), &KEY, now),
            Err(Refused::Malformed("a lifetime out of bounds"))
        );
        let mut t = push_ticket(now);
        t.op = Op::Fetch;
        assert!(matches!(
            open(t.seal(&KEY).as_bytes(), &KEY, now),
            Err(Refused::Malformed(_))
        ));
        let mut t = push_ticket(now);
        t.updates[0].name = "refs/heads/a b".into();
        assert!(matches!(
            open(t.seal(&KEY).as_bytes(), &KEY, now),
            Err(Refused::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_malformed_never_a_panic() {
        let now = SystemTime::now();
        for bad in [
            &b""[..],
            b"v1.",
            b"v1..",
            b"v2.aaaa.bbbb",
            b"v1.!!!!.bbbb",
            b"v1.aaaa.bbbb.cccc",
            &[0xff; 40][..],
        ] {
            assert!(open(bad, &KEY, now).is_err(), "{bad:?}");
        }
        assert_eq!(
            open(&vec![b'a'; MAX_SEALED_LEN + 1], &KEY, now),
            Err(Refused::Malformed("too long"))
        );
    }

    #[test]
    fn updates_and_keys_keep_their_shape() {
        assert!(
            RefUpdate::new("refs/heads/x", None, B)
                .unwrap()
                .is_creation()
        );
        assert_eq!(
            RefUpdate::new("refs/heads/x", None, B).unwrap().old,
            zero_id(40)
        );
        for (name, old, new) in [
            ("main", None, B),
            ("refs/heads/a b", None, B),
            ("refs/heads/x", Some("abc"), B),
            (
                "refs/heads/x",
                Some(A),
                "ABCDEF0000000000000000000000000000000000",
            ),
            ("refs/heads/x", Some(A), &"3".repeat(64)),
        ] {
            assert!(
                RefUpdate::new(name, old, new).is_err(),
                "{name} {old:?} {new}"
            );
        }
        let k = ServiceKey::generate().unwrap();
        assert_eq!(ServiceKey::from_hex(&k.to_hex(), "t").unwrap().0, k.0);
        let e = ServiceKey::from_hex("zz", "the pipe")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "the service key from the pipe is not hex");
        assert_eq!(format!("{k:?}"), "ServiceKey(REDACTED)");
        assert!(
            Ticket::new(Op::Push, vec!["a/b/c".into()], vec![], SystemTime::now()).is_err(),
            "a push ticket signs at least one update"
        );
    }
}
