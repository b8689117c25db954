//! Resource limits and the connection slots that enforce the concurrency caps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::identity::Caller;
use airlock_policy::reason::Reason;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Every bound the proxy puts on its clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request head (request line + headers) hyper buffers, in bytes.
    pub max_header_bytes: usize,
    /// Longest request target (URI) accepted, in bytes.
    pub max_request_line: usize,
    /// Time a client has to send a complete request head (slowloris).
    pub header_read_timeout: Duration,
    /// A tunnel or connection with no byte in either direction for this long is closed;
    /// a stream that keeps moving is never cut.
    pub idle_timeout: Duration,
    /// Per attempt, to one upstream address.
    pub connect_timeout: Duration,
    /// Client connections open at once, all listeners together.
    pub max_connections: usize,
    /// Client connections open at once from one client.
    pub max_per_client: usize,
    /// How long in-flight work may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// Connections the git service port holds at once: its own slots, which nothing on the
    /// agent's listeners can take.
    pub max_service_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_header_bytes: 64 * 1024,
            max_request_line: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_per_client: 1024,
            shutdown_grace: Duration::from_secs(2),
            max_service_connections: 64,
        }
    }
}

/// Who a per-client cap counts against: the agent's session when the firewall named it,
/// else the client's uid when the kernel told us (every client is on loopback, so the
/// address alone cannot tell agents apart). A connection whose uid cannot be found counts
/// against one shared budget, whatever its address: an agent varying its source across
/// 127.0.0.0/8 must not multiply its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    /// One of the agent's sessions (and the agent's uid).
    Session {
        /// The agent's uid, when configured.
        uid: Option<u32>,
        /// The session's number.
        session: u16,
    },
    /// The uid owning the client socket.
    Uid(u32),
    /// A peer address (callers that key by address on purpose).
    Addr(IpAddr),
    /// Every connection whose uid is unknown.
    Unknown,
}

impl Client {
    /// The key for a client connection: its session, else its uid, else the shared unknown
    /// budget.
    #[must_use]
    pub const fn of(caller: Caller) -> Self {
        match (caller.session, caller.uid) {
            (Some(session), uid) => Self::Session { uid, session },
            (None, Some(uid)) => Self::Uid(uid),
            (None, None) => Self::Unknown,
        }
    }

    /// Who this is, as an audit line names it (an address-keyed client: nobody known).
    #[must_use]
    pub const fn caller(self) -> Caller {
        match self {
            Self::Session { uid, session } => Caller {
                uid,
                session: Some(session),
            },
            Self::Uid(uid) => Caller::uid(Some(uid)),
            Self::Addr(_) | Self::Unknown => Caller::uid(None),
        }
    }
}

impl std::fmt::Display for Client {
    /// How the operator's tools name it: `session 2`, `uid 1000`, `address 127.0.0.1`,
    /// `unknown uid`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Session { session, .. } => write!(f, "session {session}"),
            Self::Uid(uid) => write!(f, "uid {uid}"),
            Self::Addr(ip) => write!(f, "address {ip}"),
            Self::Unknown => f.write_str("unknown uid"),
        }
    }
}

impl From<IpAddr> for Client {
    fn from(ip: IpAddr) -> Self {
        Self::Addr(ip)
    }
}

/// Connection slots: a total cap and a per-client cap.
#[derive(Debug)]
pub struct Slots {
    total: Arc<Semaphore>,
    max_total: usize,
    per_client: Mutex<HashMap<Client, usize>>,
    max_per_client: usize,
}

/// A held slot; released on drop. Tunnels spawned from a connection share it via `Arc`.
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    slots: Arc<Slots>,
    client: Client,
}

impl Slots {
    /// Slots for `limits`.
    #[must_use]
    pub fn new(limits: &Limits) -> Arc<Self> {
        Self::with_caps(limits.max_connections, limits.max_per_client)
    }

    /// The git service port's own slots (one client: the git API).
    #[must_use]
    pub fn service(limits: &Limits) -> Arc<Self> {
        Self::with_caps(
            limits.max_service_connections,
            limits.max_service_connections,
        )
    }

    fn with_caps(total: usize, per_client: usize) -> Arc<Self> {
        let max_total = total.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            total: Arc::new(Semaphore::new(max_total)),
            max_total,
            per_client: Mutex::new(HashMap::new()),
            max_per_client: per_client.max(1),
        })
    }

    /// Takes a slot for `client`, or says why not (never waits: a full proxy refuses fast
    /// instead of piling up accepted sockets).
    ///
    /// # Errors
    /// `too-many-connections`.
    pub fn try_take(self: &Arc<Self>, client: impl Into<Client>) -> Result<Slot, Reason> {
        let client = client.into();
        let permit = Arc::clone(&self.total)
            .try_acquire_owned()
            .map_err(|_| Reason::TooManyConnections)?;
        let mut map = self
            .per_client
            .lock()
            .map_err(|_| Reason::TooManyConnections)?;
        let n = map.entry(client).or_insert(0);
        if *n >= self.max_per_client {
            return Err(Reason::TooManyConnections);
        }
        *n += 1;
        drop(map);
        Ok(Slot {
            _permit: permit,
            slots: Arc::clone(self),
            client,
        })
    }

    /// Slots currently held.
    #[must_use]
    pub fn in_use(&self) -> usize {
        self.max_total - self.total.available_permits()
    }

    /// Waits until no slot is held, or `within` passes. True when idle.
    pub async fn wait_idle(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.in_use() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut map) = self.slots.per_client.lock()
            && let Some(n) = map.get_mut(&self.client)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_cannot_take_every_slot() {
        let limits = Limits {
            max_connections: 4,
            max_per_client: 2,
            ..Limits::default()
        };
        let slots = Slots::new(&limits);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = slots.try_take(a).unwrap();
        let _a2 = slots.try_take(a).unwrap();
        assert_eq!(slots.try_take(a).unwrap_err(), Reason::TooManyConnections);
        let _b1 = slots.try_take(b).unwrap();
        let _b2 = slots.try_take(b).unwrap();
        // Total cap reached.
        assert_eq!(slots.try_take(b).unwrap_err(), Reason::TooManyConnections);
        drop(a1);
        assert!(slots.try_take(a).is_ok());
    }

    #[tokio::test]
    async fn slots_come_back() {
        let slots = Slots::new(&Limits::default());
        let s = slots.try_take(Client::Uid(1000)).unwrap();
        assert_eq!(slots.in_use(), 1);
        assert!(!slots.wait_idle(Duration::from_millis(30)).await);
        drop(s);
        assert!(slots.wait_idle(Duration::from_millis(30)).await);
        assert!(slots.per_client.lock().unwrap().is_empty());
    }

    /// An agent whose sockets' uid cannot be found varies its source address across
    /// 127.0.0.0/8 to multiply its connection budget: every such connection counts against
    /// one budget.
    #[test]
    fn unknown_uids_share_one_budget_whatever_the_address() {
        let limits = Limits {
            max_connections: 100,
            max_per_client: 2,
            ..Limits::default()
        };
        let slots = Slots::new(&limits);
        let who = |i: u8| {
            let peer = std::net::SocketAddr::from(([127, 0, 0, i], 40000));
            let local = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 3128)));
            let nobody = crate::identity::NoIdentity;
            Client::of(crate::identity::caller(
                &nobody,
                Some(1000),
                crate::identity::Proto::Tcp,
                peer,
                local,
            ))
        };
        let _a = slots.try_take(who(1)).unwrap();
        let _b = slots.try_take(who(2)).unwrap();
        for i in 3..=20 {
            assert_eq!(
                slots.try_take(who(i)).unwrap_err(),
                Reason::TooManyConnections,
                "127.0.0.{i}"
            );
        }
        assert!(slots.try_take(Client::Uid(1000)).is_ok());
    }
}
