//! HMAC-SHA256 request signing, verification, the replay window and the nonce cache.

use crate::reason::Reason;
use crate::{METHOD_RUN, PATH_GIT, PROTOCOL_VERSION, WireError};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// How far a request's timestamp may be from the server's clock, either way.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(30);
/// How many nonces the server remembers at most (one window's worth of requests).
pub const DEFAULT_NONCE_CAPACITY: usize = 65_536;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// First line of every canonical string: names the scheme and its version.
pub const SCHEME: &str = "AIRLOCK-HMAC-SHA256-V1";
/// How many signed requests the server admits: sustained per second, and in one burst.
/// An agent runs at most tens of git commands a second; a flood beyond this is refused with
/// [`Reason::RateLimited`] before it reaches the nonce cache.
pub const DEFAULT_RATE: RateLimit = RateLimit {
    per_second: 256,
    burst: 512,
};

// The rate limit is what keeps the nonce cache from filling: at the default rate the cache
// holds at most half its capacity, however the agent times and dates its requests.
const _: () =
    assert!(DEFAULT_RATE.max_live_nonces(DEFAULT_WINDOW) * 2 <= DEFAULT_NONCE_CAPACITY as u64);

/// The per-start session key (32 bytes). Its `Debug` prints `REDACTED`.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(REDACTED)")
    }
}

impl SessionKey {
    /// A key from raw bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> SessionKey {
        SessionKey(bytes)
    }

    /// A fresh key from the kernel's random source.
    pub fn generate() -> Result<SessionKey, WireError> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|e| WireError::Random(e.to_string()))?;
        Ok(SessionKey(k))
    }

    /// Parse 64 hex digits (surrounding whitespace ignored). `origin` names where the text
    /// came from for the error message (never the text itself).
    pub fn from_hex(text: &str, origin: &str) -> Result<SessionKey, WireError> {
        let err = |problem: &str| WireError::ParseKey {
            origin: origin.to_owned(),
            problem: problem.to_owned(),
        };
        let bytes = hex::decode(text.trim()).map_err(|_| err("not hex"))?;
        let arr: [u8; 32] = bytes
            .try_into()
            .map_err(|_| err("must be 64 hex digits (32 bytes)"))?;
        Ok(SessionKey(arr))
    }

    /// Read a key file written by [`SessionKey::to_hex`].
    pub fn read_file(path: &Path) -> Result<SessionKey, WireError> {
        let text = std::fs::read_to_string(path).map_err(|source| WireError::ReadKey {
            path: path.display().to_string(),
            source,
        })?;
        SessionKey::from_hex(&text, &path.display().to_string())
    }

    /// The key file format: 64 lowercase hex digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub(crate) fn mac(&self, data: &[u8]) -> [u8; 32] {
        // HMAC accepts keys of any length: new_from_slice cannot fail for 32 bytes.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable_key_length(),
        };
        mac.update(data);
        mac.finalize().into_bytes().into()
    }
}

#[cold]
fn unreachable_key_length() -> ! {
    // HMAC's InvalidLength is only returned by MACs with a fixed key size, never by HMAC.
    std::process::abort()
}

/// The signed header of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// [`METHOD_RUN`].
    pub method: String,
    /// [`PATH_GIT`].
    pub path: String,
    /// Seconds since the epoch when the shim signed.
    pub timestamp: i64,
    /// [`NONCE_LEN`] random bytes, hex.
    pub nonce: String,
    /// HMAC-SHA256 over [`canonical_string`], hex.
    pub mac: String,
}

/// The string the MAC covers, one field per line:
/// `SCHEME \n method \n path \n hex(sha256(body)) \n timestamp \n nonce`.
#[must_use]
pub fn canonical_string(
    method: &str,
    path: &str,
    body: &[u8],
    timestamp: i64,
    nonce: &str,
) -> String {
    let body_hash = hex::encode(Sha256::digest(body));
    format!("{SCHEME}\n{method}\n{path}\n{body_hash}\n{timestamp}\n{nonce}")
}

/// Sign `body` with an explicit time and nonce (tests and golden vectors use this).
#[must_use]
pub fn sign_with(key: &SessionKey, body: &[u8], timestamp: i64, nonce: [u8; NONCE_LEN]) -> Auth {
    let nonce = hex::encode(nonce);
    let text = canonical_string(METHOD_RUN, PATH_GIT, body, timestamp, &nonce);
    Auth {
        version: PROTOCOL_VERSION,
        method: METHOD_RUN.to_owned(),
        path: PATH_GIT.to_owned(),
        timestamp,
        mac: hex::encode(key.mac(text.as_bytes())),
        nonce,
    }
}

/// Sign `body` now with a fresh random nonce.
pub fn sign(key: &SessionKey, body: &[u8]) -> Result<Auth, WireError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| WireError::Random(e.to_string()))?;
    Ok(sign_with(key, body, unix_now(SystemTime::now())?, nonce))
}

fn unix_now(now: SystemTime) -> Result<i64, WireError> {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map_err(|_| WireError::Clock)?
        .as_secs();
    i64::try_from(secs).map_err(|_| WireError::Clock)
}

/// Remembers accepted nonces until their timestamp leaves the window. Bounded: when full of
/// live nonces it refuses new requests rather than forget one (forgetting would reopen a
/// replay).
#[derive(Debug)]
pub struct NonceCache {
    /// nonce -> the unix second after which it can no longer be replayed anyway.
    seen: HashMap<[u8; NONCE_LEN], i64>,
    capacity: usize,
}

impl NonceCache {
    /// An empty cache holding at most `capacity` live nonces.
    #[must_use]
    pub fn new(capacity: usize) -> NonceCache {
        NonceCache {
            seen: HashMap::new(),
            capacity,
        }
    }

    /// How many nonces are held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none are held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Whether `nonce` was recorded and is still live at `now` (unix seconds).
    #[must_use]
    pub fn is_live(&self, nonce: &[u8; NONCE_LEN], now: i64) -> bool {
        self.seen.get(nonce).is_some_and(|until| *until >= now)
    }

    /// Record `nonce`, live until `expires` (unix seconds); `now` prunes dead entries.
    pub fn insert(&mut self, nonce: [u8; NONCE_LEN], expires: i64, now: i64) -> Result<(), Reason> {
        if self.is_live(&nonce, now) {
            return Err(Reason::ReplayedNonce);
        }
        if self.seen.len() >= self.capacity {
            self.seen.retain(|_, until| *until >= now);
        }
        if self.seen.len() >= self.capacity {
            return Err(Reason::NonceCacheFull);
        }
        self.seen.insert(nonce, expires);
        Ok(())
    }
}

/// A bound on admitted requests: `per_second` sustained, `burst` at once (a token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second, sustained (at least 1 is assumed).
    pub per_second: u32,
    /// Requests admitted back to back after a quiet spell (at least 1 is assumed).
    pub burst: u32,
}

impl RateLimit {
    /// The most nonces this rate can leave live at once under `window`. A nonce lives until
    /// its timestamp plus the window, and a timestamp may be up to a window ahead, so a nonce
    /// stays in the cache up to `2 * window + 1` seconds after it was admitted; at most
    /// `burst + per_second * (2 * window + 1)` are admitted in that time.
    #[must_use]
    pub const fn max_live_nonces(self, window: Duration) -> u64 {
        let per_second = if self.per_second == 0 {
            1
        } else {
            self.per_second as u64
        };
        let burst = if self.burst == 0 {
            1
        } else {
            self.burst as u64
        };
        burst + per_second * (2 * window.as_secs() + 1)
    }
}

/// A token bucket in its GCRA form: one timestamp (the theoretical arrival time of the next
/// request) instead of a token count. Driven by the caller's clock, so tests control time.
#[derive(Debug)]
pub struct RateLimiter {
    limit: RateLimit,
    /// Nanoseconds between two requests at the sustained rate.
    interval: u128,
    /// How far ahead of now `tat` may be and still admit (the burst).
    tolerance: u128,
    /// Theoretical arrival time, nanoseconds since the epoch; `None` before the first.
    tat: Option<u128>,
}

impl RateLimiter {
    /// A full bucket.
    #[must_use]
    pub fn new(limit: RateLimit) -> RateLimiter {
        let interval = 1_000_000_000 / u128::from(limit.per_second.max(1));
        RateLimiter {
            limit,
            interval,
            tolerance: interval * u128::from(limit.burst.max(1) - 1),
            tat: None,
        }
    }

    /// The limit enforced.
    #[must_use]
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Take one request's token at `now`, or refuse with [`Reason::RateLimited`].
    pub fn admit(&mut self, now: SystemTime) -> Result<(), Reason> {
        let t = now
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Reason::Internal)?
            .as_nanos();
        let mut tat = self.tat.unwrap_or(t);
        // While the clock only moves forward, tat never runs further ahead of it than the
        // burst and one interval; if it does, the wall clock was set back. Start afresh
        // rather than refuse everything until the clock catches up.
        if tat > t + self.tolerance + self.interval {
            tat = t;
        }
        let start = tat.max(t);
        if start - t > self.tolerance {
            return Err(Reason::RateLimited);
        }
        self.tat = Some(start + self.interval);
        Ok(())
    }
}

/// A request whose version, shape, timestamp and MAC are good; its nonce is not consumed
/// yet ([`Verifier::admit`]).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an authentic request is admitted only by Verifier::admit"]
pub struct Authentic {
    nonce: [u8; NONCE_LEN],
    expires: i64,
}

/// Server side: verifies requests against one key, one window, one rate limit and one nonce
/// cache.
#[derive(Debug)]
pub struct Verifier {
    key: SessionKey,
    window: Duration,
    nonces: NonceCache,
    rate: RateLimiter,
}

impl Verifier {
    /// A verifier with the default window, rate limit and cache size.
    #[must_use]
    pub fn new(key: SessionKey) -> Verifier {
        Verifier::with_limits(key, DEFAULT_WINDOW, DEFAULT_NONCE_CAPACITY)
    }

    /// A verifier with an explicit window and nonce capacity, and the default rate limit.
    #[must_use]
    pub fn with_limits(key: SessionKey, window: Duration, capacity: usize) -> Verifier {
        Verifier {
            key,
            window,
            nonces: NonceCache::new(capacity),
            rate: RateLimiter::new(DEFAULT_RATE),
        }
    }

    /// The same verifier with another rate limit. Keep
    /// [`RateLimit::max_live_nonces`] of the window below the nonce capacity, or a flood can
    /// fill the cache and lock honest requests out until it drains.
    #[must_use]
    pub fn with_rate(mut self, limit: RateLimit) -> Verifier {
        self.rate = RateLimiter::new(limit);
        self
    }

    /// The rate limit enforced.
    #[must_use]
    pub fn rate(&self) -> RateLimit {
        self.rate.limit()
    }

    /// [`Verifier::check`], then [`Verifier::admit`].
    pub fn verify(&mut self, auth: &Auth, body: &[u8], now: SystemTime) -> Result<(), Reason> {
        let authentic = self.check(auth, body, now)?;
        self.admit(authentic, now)
    }

    /// Check version, shape, time window and MAC (constant time). Changes nothing: a
    /// request refused here, forged or not, costs no nonce and no rate.
    pub fn check(&self, auth: &Auth, body: &[u8], now: SystemTime) -> Result<Authentic, Reason> {
        if auth.version != PROTOCOL_VERSION {
            return Err(Reason::UnsupportedVersion);
        }
        if auth.method != METHOD_RUN || auth.path != PATH_GIT {
            return Err(Reason::MalformedRequest);
        }
        let nonce: [u8; NONCE_LEN] = hex::decode(&auth.nonce)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(Reason::MalformedRequest)?;
        let mac: [u8; 32] = hex::decode(&auth.mac)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(Reason::MalformedRequest)?;
        // Canonical nonce form only: the same bytes in upper case must not be a new nonce
        // in the text the MAC covers while being the same nonce in the cache.
        if auth.nonce != hex::encode(nonce) {
            return Err(Reason::MalformedRequest);
        }
        let now = unix_now(now).map_err(|_| Reason::Internal)?;
        let window = i64::try_from(self.window.as_secs()).unwrap_or(i64::MAX);
        if auth.timestamp.abs_diff(now) > window.unsigned_abs() {
            return Err(Reason::StaleTimestamp);
        }
        let text = canonical_string(&auth.method, &auth.path, body, auth.timestamp, &auth.nonce);
        let expected = self.key.mac(text.as_bytes());
        if !bool::from(expected.ct_eq(&mac)) {
            return Err(Reason::BadSignature);
        }
        Ok(Authentic {
            nonce,
            expires: auth.timestamp.saturating_add(window),
        })
    }

    /// Consume an authentic request's nonce, in this order: a replay is refused
    /// ([`Reason::ReplayedNonce`]); then the rate limit ([`Reason::RateLimited`]), so that
    /// a flood never reaches the nonce cache; then the nonce is recorded.
    pub fn admit(&mut self, authentic: Authentic, now: SystemTime) -> Result<(), Reason> {
        let secs = unix_now(now).map_err(|_| Reason::Internal)?;
        if self.nonces.is_live(&authentic.nonce, secs) {
            return Err(Reason::ReplayedNonce);
        }
        self.rate.admit(now)?;
        self.nonces.insert(authentic.nonce, authentic.expires, secs)
    }

    /// The nonce cache (for tests and metrics).
    #[must_use]
    pub fn nonces(&self) -> &NonceCache {
        &self.nonces
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const T0: i64 = 1_700_000_000;

    fn key() -> SessionKey {
        SessionKey::from_bytes(std::array::from_fn(|i| i as u8))
    }

    fn at(secs: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    }

    #[test]
    fn debug_never_prints_the_key() {
        let k = key();
        let shown = format!("{k:?} {:?}", Verifier::new(k.clone()));
        assert!(shown.contains("REDACTED"));
        assert!(!shown.contains("0001020304"), "{shown}");
        assert!(!shown.contains("[0, 1, 2"), "{shown}");
    }

    #[test]
    fn key_hex_round_trips_and_rejects_bad_lengths() {
        let k = key();
        assert_eq!(
            SessionKey::from_hex(&format!("{}\n", k.to_hex()), "t")
                .unwrap()
                .0,
            k.0
        );
        let err = SessionKey::from_hex("abcd", "file x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("file x") && err.contains("64 hex"), "{err}");
        assert!(SessionKey::from_hex(&"zz".repeat(32), "t").is_err());
    }

    #[test]
    fn a_fresh_signature_verifies_once() {
        let mut v = Verifier::new(key());
        let auth = sign_with(&key(), b"body", T0, [7; 16]);
        assert_eq!(v.verify(&auth, b"body", at(T0)), Ok(()));
        assert_eq!(
            v.verify(&auth, b"body", at(T0 + 1)),
            Err(Reason::ReplayedNonce)
        );
    }

    #[test]
    fn forgeries_are_refused() {
        let mut v = Verifier::new(key());
        let good = sign_with(&key(), b"body", T0, [1; 16]);
        // Another body under the same MAC.
        assert_eq!(v.verify(&good, b"bodz", at(T0)), Err(Reason::BadSignature));
        // Another key.
        let other = SessionKey::from_bytes([9; 32]);
        let forged = sign_with(&other, b"body", T0, [2; 16]);
        assert_eq!(
            v.verify(&forged, b"body", at(T0)),
            Err(Reason::BadSignature)
        );
        // A moved timestamp or a changed nonce under the old MAC.
        let mut moved = good.clone();
        moved.timestamp += 1;
        assert_eq!(v.verify(&moved, b"body", at(T0)), Err(Reason::BadSignature));
        let mut renonced = good.clone();
        renonced.nonce = hex::encode([3u8; 16]);
        assert_eq!(
            v.verify(&renonced, b"body", at(T0)),
            Err(Reason::BadSignature)
        );
        // Upper-case hex of a nonce is refused (one spelling per nonce).
        let mut shouting = sign_with(&key(), b"b2", T0, [0xab; 16]);
        shouting.nonce = shouting.nonce.to_uppercase();
        assert_eq!(
            v.verify(&shouting, b"b2", at(T0)),
            Err(Reason::MalformedRequest)
        );
        // Truncated MAC, wrong method, wrong version.
        let mut short = sign_with(&key(), b"body", T0, [4; 16]);
        short.mac.truncate(62);
        assert_eq!(
            v.verify(&short, b"body", at(T0)),
            Err(Reason::MalformedRequest)
        );
        let mut method = sign_with(&key(), b"body", T0, [5; 16]);
        method.method = "GET".into();
        assert_eq!(
            v.verify(&method, b"body", at(T0)),
            Err(Reason::MalformedRequest)
        );
        let mut version = sign_with(&key(), b"body", T0, [6; 16]);
        version.version = 2;
        assert_eq!(
            v.verify(&version, b"body", at(T0)),
            Err(Reason::UnsupportedVersion)
        );
        // Forgeries never consumed a nonce: the genuine request still goes through once.
        assert!(v.nonces().is_empty());
        assert_eq!(v.verify(&good, b"body", at(T0)), Ok(()));
        assert_eq!(v.nonces().len(), 1);
    }

    #[test]
    fn the_window_is_thirty_seconds_either_way() {
        let mut v = Verifier::new(key());
        for (i, skew) in [-30i64, 30].into_iter().enumerate() {
            let a = sign_with(&key(), b"", T0 + skew, [i as u8; 16]);
            assert_eq!(v.verify(&a, b"", at(T0)), Ok(()), "skew {skew}");
        }
        for (i, skew) in [-31i64, 31, -100_000].into_iter().enumerate() {
            let a = sign_with(&key(), b"", T0 + skew, [100 + i as u8; 16]);
            assert_eq!(
                v.verify(&a, b"", at(T0)),
                Err(Reason::StaleTimestamp),
                "skew {skew}"
            );
        }
    }

    #[test]
    fn a_replay_after_the_window_is_stale_not_fresh() {
        let mut v = Verifier::with_limits(key(), DEFAULT_WINDOW, 1);
        let a = sign_with(&key(), b"", T0, [1; 16]);
        assert_eq!(v.verify(&a, b"", at(T0)), Ok(()));
        // Once its nonce could be forgotten, its timestamp is outside the window.
        assert_eq!(v.verify(&a, b"", at(T0 + 31)), Err(Reason::StaleTimestamp));
    }

    #[test]
    fn the_nonce_cache_is_bounded_and_refuses_rather_than_forgets() {
        let mut c = NonceCache::new(3);
        for i in 0..3u8 {
            c.insert([i; 16], T0 + 30, T0).unwrap();
        }
        assert_eq!(c.insert([9; 16], T0 + 30, T0), Err(Reason::NonceCacheFull));
        assert_eq!(c.insert([0; 16], T0 + 30, T0), Err(Reason::ReplayedNonce));
        assert_eq!(c.len(), 3);
        // Once the old ones expire, space is reclaimed.
        c.insert([9; 16], T0 + 61, T0 + 31).unwrap();
        assert_eq!(c.len(), 1);
    }

    fn at_ms(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// Issue 13, the attack from the agent's seat: it reads the session key, signs 70,000
    /// distinct requests dated as late as the window allows (their nonces live longest) and
    /// sends them within 0.2 s. Before the rate limit the first 65,536 were admitted and
    /// every request after them, honest ones included, got `nonce_cache_full` for 61 s.
    #[test]
    fn a_flood_of_signed_requests_cannot_fill_the_nonce_cache() {
        let mut v = Verifier::new(key());
        let t0_ms = T0 as u64 * 1000;
        let mut counts = HashMap::new();
        const FLOOD: u64 = 70_000;
        for i in 0..FLOOD {
            let mut nonce = [0u8; NONCE_LEN];
            nonce[..8].copy_from_slice(&i.to_be_bytes());
            let a = sign_with(&key(), b"flood", T0 + 30, nonce);
            let verdict = v.verify(&a, b"flood", at_ms(t0_ms + i * 200 / FLOOD));
            *counts.entry(verdict).or_insert(0u64) += 1;
        }
        assert_eq!(counts.get(&Err(Reason::NonceCacheFull)), None, "{counts:?}");
        let admitted = counts[&Ok(())];
        // The burst and 0.2 s of the sustained rate, no more.
        let most = u64::from(DEFAULT_RATE.burst) + u64::from(DEFAULT_RATE.per_second) / 5 + 1;
        assert!(admitted <= most, "{counts:?}");
        assert_eq!(counts[&Err(Reason::RateLimited)], FLOOD - admitted);
        // An honest request a moment after the flood gets in.
        let honest = sign_with(&key(), b"status", T0, [0xee; NONCE_LEN]);
        assert_eq!(v.verify(&honest, b"status", at_ms(t0_ms + 250)), Ok(()));
        // The flood kept up for the whole lifetime of its nonces still leaves room.
        for (i, ms) in (FLOOD..).zip((250..62_000).step_by(2)) {
            let mut nonce = [0u8; NONCE_LEN];
            nonce[..8].copy_from_slice(&i.to_be_bytes());
            let a = sign_with(&key(), b"flood", T0 + 30 + ms as i64 / 1000, nonce);
            let verdict = v.verify(&a, b"flood", at_ms(t0_ms + ms));
            assert_ne!(verdict, Err(Reason::NonceCacheFull), "at +{ms} ms");
        }
        // (Dead entries are only pruned when the cache is full; count the live ones.)
        let now = T0 + 62;
        let live = v
            .nonces
            .seen
            .values()
            .filter(|until| **until >= now)
            .count();
        assert!(
            live as u64 <= DEFAULT_RATE.max_live_nonces(DEFAULT_WINDOW),
            "{live}"
        );
    }

    #[test]
    fn the_default_rate_cannot_fill_the_default_cache() {
        // burst + rate * (2 * window + 1): 512 + 256 * 61.
        assert_eq!(DEFAULT_RATE.max_live_nonces(DEFAULT_WINDOW), 16_128);
        assert!(DEFAULT_RATE.max_live_nonces(DEFAULT_WINDOW) * 2 <= DEFAULT_NONCE_CAPACITY as u64);
    }

    #[test]
    fn the_bucket_admits_a_burst_then_the_sustained_rate() {
        let mut r = RateLimiter::new(RateLimit {
            per_second: 10,
            burst: 3,
        });
        let t = 1_700_000_000_000u64;
        for _ in 0..3 {
            assert_eq!(r.admit(at_ms(t)), Ok(()));
        }
        assert_eq!(r.admit(at_ms(t)), Err(Reason::RateLimited));
        assert_eq!(r.admit(at_ms(t + 99)), Err(Reason::RateLimited));
        assert_eq!(r.admit(at_ms(t + 100)), Ok(()));
        assert_eq!(r.admit(at_ms(t + 100)), Err(Reason::RateLimited));
        // A quiet spell refills the burst, never more.
        for _ in 0..3 {
            assert_eq!(r.admit(at_ms(t + 10_000)), Ok(()));
        }
        assert_eq!(r.admit(at_ms(t + 10_000)), Err(Reason::RateLimited));
        // The wall clock set back an hour does not lock requests out for an hour.
        assert_eq!(r.admit(at_ms(t + 10_000 - 3_600_000)), Ok(()));
    }

    #[test]
    fn a_rate_limited_request_keeps_its_nonce_and_a_replay_is_still_a_replay() {
        let mut v = Verifier::new(key()).with_rate(RateLimit {
            per_second: 1,
            burst: 1,
        });
        let first = sign_with(&key(), b"a", T0, [1; NONCE_LEN]);
        let second = sign_with(&key(), b"b", T0, [2; NONCE_LEN]);
        assert_eq!(v.verify(&first, b"a", at(T0)), Ok(()));
        assert_eq!(v.verify(&second, b"b", at(T0)), Err(Reason::RateLimited));
        // The replay is named as one, limited or not.
        assert_eq!(v.verify(&first, b"a", at(T0)), Err(Reason::ReplayedNonce));
        // The limited request was not consumed: a second later it goes through, once.
        assert_eq!(v.verify(&second, b"b", at(T0 + 1)), Ok(()));
        assert_eq!(
            v.verify(&second, b"b", at(T0 + 2)),
            Err(Reason::ReplayedNonce)
        );
        // Forgeries cost no rate.
        let forged = sign_with(&SessionKey::from_bytes([9; 32]), b"c", T0 + 3, [3; 16]);
        assert_eq!(
            v.verify(&forged, b"c", at(T0 + 3)),
            Err(Reason::BadSignature)
        );
        let third = sign_with(&key(), b"c", T0 + 3, [3; NONCE_LEN]);
        assert_eq!(v.verify(&third, b"c", at(T0 + 3)), Ok(()));
    }

    #[test]
    fn check_alone_consumes_nothing() {
        let mut v = Verifier::new(key());
        let a = sign_with(&key(), b"x", T0, [5; NONCE_LEN]);
        let first = v.check(&a, b"x", at(T0)).unwrap();
        let again = v.check(&a, b"x", at(T0)).unwrap();
        assert!(v.nonces().is_empty());
        assert_eq!(v.admit(first, at(T0)), Ok(()));
        // Two connections raced the same request past `check`: only one is admitted.
        assert_eq!(v.admit(again, at(T0)), Err(Reason::ReplayedNonce));
    }
}
