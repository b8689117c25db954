//! `audit.jsonl`: the proxy's lines.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::chain::ChainHash;
use crate::time::Timestamp;

/// Which listener produced the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `CONNECT host:port` on the explicit proxy.
    Connect,
    /// Absolute-form plain HTTP on the explicit proxy.
    Http,
    /// A redirected connection on the transparent listener.
    Transparent,
    /// A query on the DNS filter.
    Dns,
    /// A request on the git service port (the git API's only way out).
    #[serde(rename = "git-service")]
    GitService,
}

impl Kind {
    /// The stable string written to the log.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Http => "http",
            Self::Transparent => "transparent",
            Self::Dns => "dns",
            Self::GitService => "git-service",
        }
    }
}

/// The outcome recorded for a decision (both logs; the git API's are `allow` and `deny`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Allowed by a rule.
    Allow,
    /// Refused.
    Deny,
    /// Would have been refused, but it passed and is only reported: the sandbox is in
    /// report mode, or the refusal's own rule says `log` (a secret detector with
    /// `action = "log"`, such as the built-in `jwt`).
    Report,
    /// Allowed (or reported), but its client hung up before anything of it went upstream
    /// (while the proxy resolved, connected or waited for the audit): never forwarded.
    Abandoned,
}

impl Verdict {
    /// The stable string written to the log.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Report => "report",
            Self::Abandoned => "abandoned",
        }
    }
}

macro_rules! events {
    ($($(#[$doc:meta])* $v:ident = $s:literal,)*) => {
        /// What an audit line records beyond its decision (its `event` field): a closed set
        /// whose strings are an interface like the reason codes (never rename one).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Event {
            $($(#[$doc])* #[serde(rename = $s)] $v,)*
        }

        impl Event {
            /// Every event, in declaration order.
            pub const ALL: [Event; [$($s),*].len()] = [$(Event::$v),*];

            /// The stable string written to the log.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$v => $s,)*
                }
            }
        }
    };
}

events! {
    /// Written before anything of a request or connection went upstream; its final line
    /// follows.
    Open = "open",
    /// A connection or request ended normally.
    Close = "close",
    /// It ended on an error.
    CloseError = "close-error",
    /// It ended after the idle timeout.
    CloseIdle = "close-idle",
    /// It was cut at shutdown.
    CloseShutdown = "close-shutdown",
    /// The request was abandoned before its outcome was logged: the client hung up while
    /// the proxy was still working on it (resolving, connecting, waiting for the response
    /// head), so hyper dropped the request.
    ClientGone = "client-gone",
    /// A foreign secret in a body to an LLM API host was overwritten in place.
    SecretRedacted = "secret-redacted",
    /// A streamed body was cut at a secret.
    LeakInBody = "leak-in-body",
    /// A DNS lookup failed (the line's reason is kept for a report-mode signal).
    ResolveFailed = "resolve-failed",
    /// A UDP DNS query over the in-flight cap was dropped.
    DroppedOverload = "dropped-overload",
    /// A request head could not be parsed.
    ParseError = "parse-error",
    /// A request head did not arrive in time.
    HeaderTimeout = "header-timeout",
    /// A transparent connection without an original destination.
    NoOriginalDestination = "no-original-destination",
    /// The proxy's own upstream connection came back through the redirect.
    RedirectLoop = "redirect-loop",
    /// Denials held back by the rate limit, counted on one line.
    Suppressed = "suppressed",
    /// It was closed because a policy reload refuses its destination (the `reload` line
    /// before it counts it).
    CloseRevoked = "close-revoked",
    /// A connection or request body was cut because it spent an upload budget of
    /// `[limits]` (the next request is refused `budget-exhausted`).
    CloseBudget = "close-budget",
    /// An LLM API's answer took the session past its token warning threshold (`[limits]
    /// llm_tokens_warn_per_hour`; the line's `rule` says how many were used).
    LlmTokensWarning = "llm-tokens-warning",
    /// An LLM API's answer spent a token budget (it finished; the line's `rule` says by how
    /// much it went over, and the next request to an LLM API is refused).
    LlmTokensSpent = "llm-tokens-spent",
    /// The operator answered an item of the inbox (`[network] unlisted = "ask"`): the
    /// line's `decision` is the answer, `approval` the item, `uid` the session that asked,
    /// `rule` who answered (the operator's uid), the scope and the time or reason.
    ApprovalAnswered = "approval-answered",
}

/// The alphabet of an encoded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Alphabet {
    Base64,
    Hex,
}

/// One signal, as the audit line carries it (`signals`): what a request body looked like
/// where no detector named a secret in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "kebab-case")]
pub enum Signal {
    /// A run of `run` encoded characters.
    EncodedBlob { alphabet: Alphabet, run: usize },
    /// Entropy per byte over `bytes` bytes, in hundredths of a bit (written as `bits`).
    HighEntropy {
        #[serde(rename = "bits", with = "hundredths")]
        centibits: u16,
        bytes: u64,
    },
}

impl Signal {
    /// Short text for the audit `rule` of a refusal and the human line.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Signal::EncodedBlob { alphabet, run } => {
                let a = match alphabet {
                    Alphabet::Base64 => "base64",
                    Alphabet::Hex => "hex",
                };
                format!("signal encoded-blob: {a} run of {run} bytes")
            }
            Signal::HighEntropy { centibits, bytes } => format!(
                "signal high-entropy: {}.{:02} bits/byte over {bytes} bytes",
                centibits / 100,
                centibits % 100
            ),
        }
    }
}

/// Hundredths of a bit, written as a decimal number of bits (`7.93`).
mod hundredths {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(f64::from(*v) / 100.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
        let bits = f64::deserialize(d)?;
        if !(0.0..=8.0).contains(&bits) {
            return Err(serde::de::Error::custom(format_args!(
                "bits per byte out of 0..=8: {bits}"
            )));
        }
        // In range by the check above: at most 800.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok((bits * 100.0).round() as u16)
    }
}

/// `ip:port` written digit by digit for IPv4 (two on every request line; the standard
/// `Display` goes through the formatting machinery), as `Display` writes it otherwise.
pub(crate) mod addr {
    use std::net::{SocketAddr, SocketAddrV4};

    use serde::{Serialize, Serializer};

    /// `a.b.c.d:port` in a buffer (at most `255.255.255.255:65535`), and its length.
    pub(crate) fn v4(v4: &SocketAddrV4) -> ([u8; 21], usize) {
        let mut buf = [0_u8; 21];
        let mut n = 0;
        let mut put = |v: u16, end: Option<u8>| {
            let mut digits = [0_u8; 5];
            let mut k = digits.len();
            let mut v = v;
            loop {
                k -= 1;
                // A decimal digit: below 10.
                #[allow(clippy::cast_possible_truncation)]
                let digit = (v % 10) as u8;
                digits[k] = b'0' + digit;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            let len = digits.len() - k;
            buf[n..n + len].copy_from_slice(&digits[k..]);
            n += len;
            if let Some(end) = end {
                buf[n] = end;
                n += 1;
            }
        };
        let [a, b, c, d] = v4.ip().octets();
        put(a.into(), Some(b'.'));
        put(b.into(), Some(b'.'));
        put(c.into(), Some(b'.'));
        put(d.into(), Some(b':'));
        put(v4.port(), None);
        (buf, n)
    }

    struct Fast<'a>(&'a SocketAddr);

    impl Serialize for Fast<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let SocketAddr::V4(a) = self.0 else {
                return self.0.serialize(s);
            };
            let (buf, n) = v4(a);
            s.serialize_str(std::str::from_utf8(&buf[..n]).map_err(serde::ser::Error::custom)?)
        }
    }

    // serde's `serialize_with` hands the field by reference.
    #[allow(clippy::ref_option)]
    pub(crate) fn serialize<S: Serializer>(
        a: &Option<SocketAddr>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.serialize_some(&Fast(a)),
            None => s.serialize_none(),
        }
    }
}

/// Who every line of one proxy speaks for: the session, the sandbox and the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// The per-start session id.
    pub session: Arc<str>,
    /// `[sandbox] name`.
    pub sandbox: Arc<str>,
    /// The container's id, when known.
    pub container: Option<Arc<str>>,
}

impl Who {
    /// `session` of `sandbox`, in `container` if known.
    #[must_use]
    pub fn new(session: &str, sandbox: &str, container: Option<&str>) -> Self {
        Self {
            session: Arc::from(session),
            sandbox: Arc::from(sandbox),
            container: container.map(Arc::from),
        }
    }
}

/// One decision's line (every field always present; unknown values are `null`). `R` is the
/// refusal code: `airlock_policy::Reason` in the proxy, its string for readers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record<R = String> {
    /// When the request arrived.
    pub ts: Timestamp,
    pub session: Arc<str>,
    /// The sandbox's name (`[sandbox] name`).
    pub sandbox: Arc<str>,
    /// The container's id, when the entrypoint found it.
    pub container: Option<Arc<str>>,
    pub uid: Option<u32>,
    /// Which of the agent's sessions made the request: 1 is its first process, 2 and up
    /// each second session (`airlock exec`), as the firewall names them by their gid.
    /// Absent for a client that is no session (the git API, a lookup that failed), and
    /// from lines written before sessions existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<u16>,
    #[serde(serialize_with = "addr::serialize")]
    pub client: Option<SocketAddr>,
    pub kind: Kind,
    pub event: Option<Event>,
    pub method: Option<String>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub path: Option<String>,
    pub decision: Verdict,
    pub rule: Option<String>,
    pub reason: Option<R>,
    #[serde(serialize_with = "addr::serialize")]
    pub upstream: Option<SocketAddr>,
    pub upstream_local_port: Option<u16>,
    pub intercepted: bool,
    pub credential: Option<String>,
    pub status: Option<u16>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// What the request body looked like where no detector named a secret in it (an
    /// encoded blob, high entropy): audited, refused only where the policy says so.
    pub signals: Vec<Signal>,
    /// The operator's inbox item the decision is about (`[network] unlisted = "ask"`): the
    /// item a refusal filed or counted a hit on, or the approval that admitted it. Absent
    /// from every other line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// The line's link in the log's hash chain (see [`crate::chain`]): written by the log's
    /// writer as the line's last field, absent from lines written before the chain existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainHash>,
}

impl<R> Record<R> {
    /// A record stamped with `started` (when the request arrived), everything else empty
    /// (the decision `deny` until one is made).
    #[must_use]
    pub fn new(who: &Who, started: SystemTime, kind: Kind, client: Option<SocketAddr>) -> Self {
        Self {
            ts: Timestamp::from(started),
            session: Arc::clone(&who.session),
            sandbox: Arc::clone(&who.sandbox),
            container: who.container.clone(),
            uid: None,
            agent_session: None,
            client,
            kind,
            event: None,
            method: None,
            host: None,
            port: None,
            path: None,
            decision: Verdict::Deny,
            rule: None,
            reason: None,
            upstream: None,
            upstream_local_port: None,
            intercepted: false,
            credential: None,
            status: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            signals: Vec::new(),
            approval: None,
            chain: None,
        }
    }
}

/// Denials folded into a count instead of a line each (`event: suppressed`, `decision:
/// deny`): those to one destination (`host`, `port`) after its first lines, or, with
/// `overflow`, those to destinations past the bounded table of destinations.
///
/// Version 2 lines counted one kind (listener and reason) and named only the last host;
/// they read with `port`, `until` and `first_host` `null` and `overflow` false.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suppressed<R = String> {
    /// When the line was written.
    pub ts: Timestamp,
    pub session: Arc<str>,
    pub sandbox: Arc<str>,
    pub container: Option<Arc<str>>,
    pub kind: Kind,
    /// Always [`Event::Suppressed`].
    pub event: Event,
    /// Always [`Verdict::Deny`].
    pub decision: Verdict,
    pub reason: R,
    /// The first folded denial's time (when its request arrived).
    pub since: Timestamp,
    /// Denials folded: not written one by one, counted here and nowhere else.
    pub count: u64,
    /// The destination the denials went to (`null`: none was known, as for a dropped DNS
    /// datagram); on an `overflow` line, the last of them.
    pub host: Option<String>,
    /// The destination's port (`null` when none was known, or on an `overflow` line).
    #[serde(default)]
    pub port: Option<u16>,
    /// The last folded denial's time (`null` only on version-2 lines).
    #[serde(default)]
    pub until: Option<Timestamp>,
    /// The denials went to destinations past the table of destinations (full at the time):
    /// `host` is the last of them and `first_host` the first; the others are only counted.
    #[serde(default)]
    pub overflow: bool,
    /// On an `overflow` line, the first destination folded into it.
    #[serde(default)]
    pub first_host: Option<String>,
    /// The line's link in the log's hash chain (see [`crate::chain`]): written by the log's
    /// writer as the line's last field, absent from lines written before the chain existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainHash>,
}

/// `kind` of the log's own lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuditKind {
    #[serde(rename = "audit")]
    Audit,
}

/// `event` of an [`Outage`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutageEvent {
    #[serde(rename = "outage")]
    Outage,
}

/// A window in which the log could not be written, recorded once writing works again
/// (`kind: audit`, `event: outage`, `decision: deny`, `reason: audit-unavailable`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outage<R = String> {
    /// When writing worked again.
    pub ts: Timestamp,
    pub session: Arc<str>,
    pub sandbox: Arc<str>,
    pub container: Option<Arc<str>>,
    pub kind: AuditKind,
    pub event: OutageEvent,
    pub decision: Verdict,
    pub reason: R,
    /// The first failed write.
    pub since: Timestamp,
    pub error: String,
    /// Requests refused meanwhile.
    pub refused: u64,
    /// Final lines dropped.
    pub lost: u64,
    /// The line's link in the log's hash chain (see [`crate::chain`]): written by the log's
    /// writer as the line's last field, absent from lines written before the chain existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainHash>,
}

/// `event` of a [`Reload`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReloadEvent {
    #[serde(rename = "reload")]
    Reload,
}

/// The rules in force were replaced while the proxy ran, or a replacement was refused and
/// the rules in force stay (`kind: audit`, `event: reload`). Today the one cause is the
/// operator's rescan of the workspace (SIGHUP): its workspace needles, in counts, never
/// values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reload {
    /// When the new rules took effect (or were refused).
    pub ts: Timestamp,
    pub session: Arc<str>,
    pub sandbox: Arc<str>,
    pub container: Option<Arc<str>>,
    pub kind: AuditKind,
    pub event: ReloadEvent,
    /// [`Verdict::Allow`]: the new rules are in force; [`Verdict::Deny`]: they could not be
    /// loaded and the rules before stay.
    pub decision: Verdict,
    /// Workspace secrets the rules in force protect (needles) afterwards.
    pub needles: u64,
    /// Files those needles were found in.
    pub files: u64,
    /// Needles the reload added.
    pub added: u64,
    /// Needles it dropped (a rescan only adds: 0 unless that changes).
    pub dropped: u64,
    /// Why the new rules were refused (`null` when they took effect).
    pub error: Option<String>,
    /// A policy reload (the operator's, through the admin API): the revision in force
    /// afterwards, its hash and the one before, where the new text came from, and the open
    /// connections the new revision refused and closed. Absent from a rescan's line.
    #[serde(flatten)]
    pub policy: Option<PolicyReload>,
    /// The line's link in the log's hash chain (see [`crate::chain`]): written by the log's
    /// writer as the line's last field, absent from lines written before the chain existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainHash>,
}

/// What a policy reload's `reload` line adds (see [`Reload::policy`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyReload {
    /// The revision in force after the line (the one before when refused).
    pub revision: u64,
    /// The hash (SHA-256, hex) of the policy text of `revision` (and of the operator's
    /// grants over it, when it has some).
    pub hash: String,
    /// The hash of the revision before.
    pub previous_hash: String,
    /// Where the new text came from (a path on the host or in the container), or the grant
    /// that made the revision (`approve --always ID (HOST:PORT) by uid N`, its `revoke`).
    pub origin: String,
    /// Open connections the new revision refused, closed right after this line.
    pub closed: u64,
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    /// The digit-by-digit IPv4 form is `Display`'s, at the edges of every octet and the port;
    /// IPv6 and `None` are written as serde writes them.
    #[test]
    fn addresses_are_written_as_display_writes_them() {
        #[derive(serde::Serialize)]
        struct Line {
            #[serde(serialize_with = "super::addr::serialize")]
            a: Option<SocketAddr>,
        }
        let mut cases: Vec<SocketAddr> = Vec::new();
        for octet in [0_u8, 1, 9, 10, 99, 100, 199, 200, 255] {
            for port in [0_u16, 1, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 65_535] {
                cases.push(SocketAddr::from(([octet, 255 - octet, octet / 2, 7], port)));
            }
        }
        cases.push("[::1]:5000".parse().unwrap());
        cases.push("[2001:db8::7]:443".parse().unwrap());
        for a in cases {
            let fast = serde_json::to_string(&Line { a: Some(a) }).unwrap();
            assert_eq!(fast, format!(r#"{{"a":"{a}"}}"#));
        }
        assert_eq!(
            serde_json::to_string(&Line { a: None }).unwrap(),
            r#"{"a":null}"#
        );
    }
}
