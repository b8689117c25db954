//! Idle upstream connections kept for the next client connection to the same target.
//!
//! An intercepted request (and a plain-HTTP or base-URL one) is forwarded on an HTTP/1.1
//! connection the proxy opened itself, so nothing of the agent's own connection rides on it:
//! when the agent's connection ends, the upstream one can serve the next agent connection
//! to the same place, and that connection then costs one TLS handshake (the agent's) instead
//! of two. This is what makes a new intercepted connection cheap.
//!
//! What may be reused, and what never is:
//! - the key is the checked target (canonical host and port), whether the connection is TLS
//!   (verified for that host name), and the lane (the git service port never shares with the
//!   agent's listeners, so a connection the git credential rode on is never handed to the
//!   agent's traffic, even though credentials are per request);
//! - a connection is handed out only when its address is one the route admits (for a
//!   transparent connection: the pinned original destination), so pooling never widens
//!   where a name may go;
//! - a connection that is not idle and ready (a response still streaming, an upgrade, a
//!   closed or failed connection) is never pooled; one idle for longer than [`IDLE`] is
//!   dropped, closing it;
//! - the pool is bounded: [`PER_KEY`] connections per key and [`TOTAL`] in all.
//!
//! It does not open connections (the caller does, after the usual checks) and does not
//! retry requests.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::decide::Target;

/// How long an idle upstream connection is kept (upstreams commonly close keep-alive
/// connections after 5–60 s; a connection they closed is noticed and dropped anyway).
pub const IDLE: Duration = Duration::from_secs(30);
/// Idle connections kept per key.
pub const PER_KEY: usize = 8;
/// Idle connections kept in all.
pub const TOTAL: usize = 64;

/// Which listeners may share a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The agent's listeners (explicit, transparent, base-URL).
    Agent,
    /// The git service port (the git API's credential).
    GitService,
}

/// What a pooled connection is kept under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub target: Target,
    pub tls: bool,
    pub lane: Lane,
}

/// A connection the pool can hold.
pub trait Pooled {
    /// The checked address it is connected to.
    fn addr(&self) -> SocketAddr;
    /// Idle and able to take a request now.
    fn ready(&self) -> bool;
}

struct Idle<C> {
    conn: C,
    since: Instant,
}

/// The idle connections, most recently returned last.
pub struct Pool<C> {
    idle: Mutex<HashMap<Key, Vec<Idle<C>>>>,
    max_idle: Duration,
    per_key: usize,
    total: usize,
}

impl<C> std::fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.len())
            .finish_non_exhaustive()
    }
}

impl<C: Pooled> Default for Pool<C> {
    fn default() -> Self {
        Self::new(IDLE, PER_KEY, TOTAL)
    }
}

impl<C> Pool<C> {
    /// A pool keeping connections idle for at most `max_idle`, `per_key` per key and
    /// `total` in all.
    #[must_use]
    pub fn new(max_idle: Duration, per_key: usize, total: usize) -> Self {
        Self {
            idle: Mutex::new(HashMap::new()),
            max_idle,
            per_key,
            total,
        }
    }

    /// Idle connections held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.idle
            .lock()
            .map_or(0, |m| m.values().map(Vec::len).sum())
    }

    /// Whether nothing is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: Pooled> Pool<C> {
    /// The most recently returned ready connection under `key` to one of `addrs`. Stale
    /// and closed connections met on the way are dropped.
    pub fn take(&self, key: &Key, addrs: &[IpAddr], now: Instant) -> Option<C> {
        let mut map = self.idle.lock().ok()?;
        let list = map.get_mut(key)?;
        self.purge(list, now);
        let found = list
            .iter()
            .rposition(|i| addrs.contains(&i.conn.addr().ip()))
            .map(|at| list.remove(at).conn);
        if list.is_empty() {
            map.remove(key);
        }
        found
    }

    /// Whether [`take`](Self::take) would find a connection now.
    #[must_use]
    pub fn has(&self, key: &Key, addrs: &[IpAddr], now: Instant) -> bool {
        let Ok(map) = self.idle.lock() else {
            return false;
        };
        map.get(key).is_some_and(|list| {
            list.iter()
                .any(|i| self.fresh(i, now) && addrs.contains(&i.conn.addr().ip()))
        })
    }

    /// Keeps `conn` when it is ready (a connection that is not is dropped, closing it). A
    /// full key gives up its oldest connection; a full pool first drops what went stale,
    /// then the connection returned longest ago under any key, so the host an agent keeps
    /// coming back to keeps its connection however many one-off hosts came in between.
    pub fn put(&self, key: Key, conn: C, now: Instant) {
        if !conn.ready() {
            return;
        }
        let Ok(mut map) = self.idle.lock() else {
            return;
        };
        let fresh = |i: &Idle<C>| self.fresh(i, now);
        let held = |m: &HashMap<Key, Vec<Idle<C>>>| m.values().map(Vec::len).sum::<usize>();
        if let Some(list) = map.get_mut(&key) {
            list.retain(fresh);
        }
        let key_full = map.get(&key).is_some_and(|l| l.len() >= self.per_key);
        if !key_full && held(&map) >= self.total {
            for list in map.values_mut() {
                list.retain(fresh);
            }
            map.retain(|_, l| !l.is_empty());
            if held(&map) >= self.total {
                evict_oldest(&mut map);
            }
        }
        let list = map.entry(key).or_default();
        if list.len() >= self.per_key {
            list.remove(0);
        }
        list.push(Idle { conn, since: now });
    }

    fn purge(&self, list: &mut Vec<Idle<C>>, now: Instant) {
        list.retain(|i| self.fresh(i, now));
    }

    /// Not idle too long, and still ready (the upstream has not closed it).
    fn fresh(&self, i: &Idle<C>, now: Instant) -> bool {
        now.duration_since(i.since) < self.max_idle && i.conn.ready()
    }
}

/// Drops the connection returned longest ago under any key (each key's list is oldest
/// first): a look at the first entry of each key held (at most the pool's `total`), only
/// when a full pool takes a new connection.
fn evict_oldest<C>(map: &mut HashMap<Key, Vec<Idle<C>>>) {
    let oldest = map
        .iter()
        .filter_map(|(k, l)| l.first().map(|i| (i.since, k)))
        .min_by_key(|(since, _)| *since)
        .map(|(_, k)| k.clone());
    if let Some(key) = oldest
        && let Some(list) = map.get_mut(&key)
    {
        list.remove(0);
        if list.is_empty() {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::Host;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Fake {
        addr: SocketAddr,
        ready: Arc<AtomicBool>,
        id: u32,
    }

    impl Pooled for Fake {
        fn addr(&self) -> SocketAddr {
            self.addr
        }
        fn ready(&self) -> bool {
            self.ready.load(Ordering::Relaxed)
        }
    }

    fn fake(ip: &str, id: u32) -> Fake {
        Fake {
            addr: SocketAddr::new(ip.parse().unwrap(), 443),
            ready: Arc::new(AtomicBool::new(true)),
            id,
        }
    }

    fn key(host: &str, lane: Lane) -> Key {
        Key {
            target: Target {
                host: Host::parse(host).unwrap(),
                port: 443,
            },
            tls: true,
            lane,
        }
    }

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn a_connection_is_handed_out_once_and_only_under_its_own_key() {
        let pool = Pool::default();
        let now = Instant::now();
        pool.put(key("api.test", Lane::Agent), fake("192.0.2.1", 1), now);
        let addrs = ips(&["192.0.2.1"]);
        assert!(
            pool.take(&key("other.test", Lane::Agent), &addrs, now)
                .is_none()
        );
        assert!(
            pool.take(&key("api.test", Lane::GitService), &addrs, now)
                .is_none(),
            "the git service never gets the agent's connection"
        );
        let mut plain = key("api.test", Lane::Agent);
        plain.tls = false;
        assert!(pool.take(&plain, &addrs, now).is_none());
        assert_eq!(
            pool.take(&key("api.test", Lane::Agent), &addrs, now)
                .map(|c| c.id),
            Some(1)
        );
        assert!(
            pool.take(&key("api.test", Lane::Agent), &addrs, now)
                .is_none()
        );
    }

    #[test]
    fn a_connection_to_an_address_the_route_does_not_admit_is_not_handed_out() {
        let pool = Pool::default();
        let now = Instant::now();
        let k = key("api.test", Lane::Agent);
        pool.put(k.clone(), fake("192.0.2.1", 1), now);
        // A transparent connection pinned to another address of the same name.
        assert!(pool.take(&k, &ips(&["192.0.2.2"]), now).is_none());
        assert!(!pool.has(&k, &ips(&["192.0.2.2"]), now));
        assert!(pool.has(&k, &ips(&["192.0.2.1"]), now));
        assert_eq!(
            pool.take(&k, &ips(&["192.0.2.1"]), now).map(|c| c.id),
            Some(1)
        );
    }

    #[test]
    fn stale_closed_and_busy_connections_are_never_handed_out() {
        let pool = Pool::default();
        let now = Instant::now();
        let k = key("api.test", Lane::Agent);
        let addrs = ips(&["192.0.2.1"]);
        let busy = fake("192.0.2.1", 1);
        busy.ready.store(false, Ordering::Relaxed);
        pool.put(k.clone(), busy, now);
        assert!(pool.is_empty(), "a busy connection is not pooled");

        let closing = fake("192.0.2.1", 2);
        let flag = Arc::clone(&closing.ready);
        pool.put(k.clone(), closing, now);
        flag.store(false, Ordering::Relaxed); // the upstream closed it while idle
        assert!(pool.take(&k, &addrs, now).is_none());
        assert!(pool.is_empty());

        pool.put(k.clone(), fake("192.0.2.1", 3), now);
        assert!(pool.take(&k, &addrs, now + IDLE).is_none(), "stale");
        assert!(pool.is_empty());
    }

    #[test]
    fn the_pool_is_bounded_per_key_and_in_all() {
        let pool = Pool::new(IDLE, 2, 3);
        let now = Instant::now();
        let a = key("a.test", Lane::Agent);
        for id in 0..5 {
            pool.put(a.clone(), fake("192.0.2.1", id), now);
        }
        assert_eq!(pool.len(), 2);
        // The newest are kept, newest first out.
        let addrs = ips(&["192.0.2.1"]);
        assert_eq!(pool.take(&a, &addrs, now).map(|c| c.id), Some(4));
        pool.put(a.clone(), fake("192.0.2.1", 5), now);
        pool.put(key("b.test", Lane::Agent), fake("192.0.2.1", 6), now);
        assert_eq!(pool.len(), 3);
        pool.put(key("c.test", Lane::Agent), fake("192.0.2.1", 7), now);
        assert_eq!(pool.len(), 3, "full: one out for each one in");
        // When room is needed, what went stale goes first, and only it.
        let later = now + IDLE;
        pool.put(key("c.test", Lane::Agent), fake("192.0.2.1", 8), later);
        pool.put(key("d.test", Lane::Agent), fake("192.0.2.1", 9), later);
        assert_eq!(pool.len(), 2);
        assert_eq!(
            pool.take(&key("c.test", Lane::Agent), &addrs, later)
                .map(|c| c.id),
            Some(8)
        );
    }

    #[test]
    fn a_full_pool_gives_up_its_least_recently_returned_connection() {
        // The agent's API host is in use (its connection taken) while one-off hosts fill
        // the pool; when its request ends, its connection must still be kept.
        let pool = Pool::new(IDLE, 8, 3);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let api = key("api.test", Lane::Agent);
        let addrs = ips(&["192.0.2.1"]);
        pool.put(api.clone(), fake("192.0.2.1", 1), at(0));
        let in_use = pool.take(&api, &addrs, at(1)).expect("pooled");
        for (ms, host) in [(2, "one.test"), (3, "two.test"), (4, "three.test")] {
            pool.put(key(host, Lane::Agent), fake("192.0.2.1", 10), at(ms));
        }
        assert_eq!(pool.len(), 3);
        pool.put(api.clone(), in_use, at(5));
        assert_eq!(pool.len(), 3, "still bounded");
        assert_eq!(pool.take(&api, &addrs, at(6)).map(|c| c.id), Some(1));
        assert!(
            pool.take(&key("one.test", Lane::Agent), &addrs, at(6))
                .is_none(),
            "the one returned longest ago made room"
        );
        for host in ["two.test", "three.test"] {
            assert!(pool.take(&key(host, Lane::Agent), &addrs, at(6)).is_some());
        }
    }
}
