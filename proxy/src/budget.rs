//! Hourly budgets (`[limits]`): bytes the agent sends upstream per session and host and for
//! the whole sandbox, and the sandbox's requests. The bound on what can leave, whatever
//! its encoding: no detector can read data the agent encrypted with a key of its own, but
//! every byte of it is counted here.
//!
//! Every connection and every intercepted request asks [`Budgets::check`] before any
//! policy work (through `crate::admission`): a spent budget refuses it `budget-exhausted`,
//! and the request counts against the sandbox's request budget. The bytes are counted as
//! they are read from the agent ([`Charge`] on a [`crate::tunnel::Meter`]): a passthrough
//! tunnel's, and each intercepted request's body (an upgraded WebSocket's frames
//! included), so a connection or body still sending when a budget runs out is cut. Nothing
//! of the read (a tunnel's, a streamed body's chunk) or the WebSocket frame that spends a
//! budget is sent; a body read whole is judged before any of it is.
//!
//! LLM tokens are budgets too: what each answer of an LLM API reports it used
//! ([`crate::usage`]) is spent per session and for the sandbox when the answer ends
//! ([`Budgets::spend_tokens`]); past the hard budget the next request to an LLM API is
//! refused, an answer under way always finishes, and the overshoot is said.
//!
//! Windows are fixed hours from a budget's first use; each names when it resets. The table
//! is bounded ([`MAX_WINDOWS`]): expired windows are dropped first, then new hosts of a
//! session share one overflow window, so varying hosts can neither grow memory nor reset a
//! budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use airlock_policy::host::Host;
use airlock_policy::limits::Limits;

use crate::limits::Client;

/// How long a window lasts.
pub const WINDOW: Duration = Duration::from_secs(3600);
/// Most (session, host) windows kept.
pub const MAX_WINDOWS: usize = 4096;

#[derive(Debug, Clone)]
struct Window {
    started: Instant,
    /// When it resets, for the agent's answer.
    resets_at: SystemTime,
    spent: Arc<AtomicU64>,
}

impl Window {
    fn new(now: Instant, wall: SystemTime) -> Self {
        Self {
            started: now,
            resets_at: wall + WINDOW,
            spent: Arc::new(AtomicU64::new(0)),
        }
    }

    /// This window, or a fresh one once its hour is over.
    fn current(&mut self, now: Instant, wall: SystemTime) -> &Self {
        if now.saturating_duration_since(self.started) >= WINDOW {
            *self = Self::new(now, wall);
        }
        self
    }
}

/// A spent budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// The knob, as the policy names it.
    pub knob: &'static str,
    /// Its value.
    pub limit: u64,
    /// When its window resets.
    pub resets_at: SystemTime,
}

/// Where the bytes of one connection or request body are counted: its (session, host)
/// window and the sandbox's.
#[derive(Debug, Clone)]
pub struct Charge {
    host: Arc<AtomicU64>,
    sandbox: Arc<AtomicU64>,
    host_limit: u64,
    sandbox_limit: u64,
}

impl Charge {
    /// The budgets it counts against, for the line of a cut.
    #[must_use]
    pub fn describe(&self) -> String {
        format!(
            "limits: upload_bytes_per_hour {} (per session and host) or sandbox_upload_bytes_per_hour {} spent",
            self.host_limit, self.sandbox_limit
        )
    }

    /// Whether `n` more bytes would spend either budget (nothing is counted).
    #[must_use]
    pub fn would_spend(&self, n: u64) -> bool {
        let after = |c: &AtomicU64| c.load(Ordering::Relaxed).saturating_add(n);
        after(&self.host) >= self.host_limit || after(&self.sandbox) >= self.sandbox_limit
    }

    /// Counts `n` bytes sent; `false` once either budget is spent.
    #[must_use]
    pub fn add(&self, n: u64) -> bool {
        let host = self.host.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        let sandbox = self
            .sandbox
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        host < self.host_limit && sandbox < self.sandbox_limit
    }
}

/// The windows of one proxy.
#[derive(Debug)]
pub struct Budgets {
    hosts: Mutex<HashMap<(Client, Option<Host>), Window>>,
    sandbox_bytes: Mutex<Window>,
    sandbox_requests: Mutex<Window>,
    /// LLM tokens per session (a handful of sessions: unbounded by design, one per uid).
    tokens: Mutex<HashMap<Client, Window>>,
    sandbox_tokens: Mutex<Window>,
}

/// What spending an answer's tokens did to the session's and the sandbox's budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenSpend {
    /// The session's tokens this hour, after this answer.
    pub session: u64,
    /// The sandbox's.
    pub sandbox: u64,
    /// This answer took the session past its warning threshold.
    pub warned: bool,
    /// This answer took the session or the sandbox past its hard budget (it finished;
    /// the next request is refused).
    pub exhausted: bool,
}

impl Default for Budgets {
    fn default() -> Self {
        let (now, wall) = (Instant::now(), SystemTime::now());
        Self {
            hosts: Mutex::new(HashMap::new()),
            sandbox_bytes: Mutex::new(Window::new(now, wall)),
            sandbox_requests: Mutex::new(Window::new(now, wall)),
            tokens: Mutex::new(HashMap::new()),
            sandbox_tokens: Mutex::new(Window::new(now, wall)),
        }
    }
}

impl Budgets {
    /// Whether `who` may send another request to `host` (`llm`: an LLM API) under `l`;
    /// counts it against the sandbox's request budget when it may.
    ///
    /// # Errors
    /// The first spent budget: the host's, the sandbox's bytes, the session's and the
    /// sandbox's LLM tokens (an LLM API only), the sandbox's requests.
    pub fn check(
        &self,
        who: Client,
        (host, llm): (&Host, bool),
        l: Limits,
        now: Instant,
        wall: SystemTime,
    ) -> Result<(), Exhausted> {
        let spent = |w: &Window, knob, limit| {
            if w.spent.load(Ordering::Relaxed) >= limit {
                Err(Exhausted {
                    knob,
                    limit,
                    resets_at: w.resets_at,
                })
            } else {
                Ok(())
            }
        };
        {
            let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
            let w = window(&mut hosts, who, host, now, wall);
            spent(w, "upload_bytes_per_hour", l.upload_bytes_per_hour)?;
        }
        {
            let mut w = self
                .sandbox_bytes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let w = w.current(now, wall);
            spent(
                w,
                "sandbox_upload_bytes_per_hour",
                l.sandbox_upload_bytes_per_hour,
            )?;
        }
        if llm {
            {
                let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
                let w = tokens
                    .entry(who)
                    .or_insert_with(|| Window::new(now, wall))
                    .current(now, wall);
                spent(w, "llm_tokens_per_hour", l.llm_tokens_per_hour)?;
            }
            let mut w = self
                .sandbox_tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let w = w.current(now, wall);
            spent(
                w,
                "sandbox_llm_tokens_per_hour",
                l.sandbox_llm_tokens_per_hour,
            )?;
        }
        let mut w = self
            .sandbox_requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let w = w.current(now, wall);
        spent(w, "sandbox_requests_per_hour", l.sandbox_requests_per_hour)?;
        w.spent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Spends `n` tokens an answer to `who` reported; says what that crossed.
    pub fn spend_tokens(&self, who: Client, n: u64, l: Limits) -> TokenSpend {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let session = {
            let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let w = tokens
                .entry(who)
                .or_insert_with(|| Window::new(now, wall))
                .current(now, wall);
            w.spent.fetch_add(n, Ordering::Relaxed).saturating_add(n)
        };
        let sandbox = {
            let mut w = self
                .sandbox_tokens
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let w = w.current(now, wall);
            w.spent.fetch_add(n, Ordering::Relaxed).saturating_add(n)
        };
        let before = session.saturating_sub(n);
        let crossed = |limit: u64, total: u64| total.saturating_sub(n) < limit && total >= limit;
        TokenSpend {
            session,
            sandbox,
            warned: before < l.llm_tokens_warn() && session >= l.llm_tokens_warn(),
            exhausted: crossed(l.llm_tokens_per_hour, session)
                || crossed(l.sandbox_llm_tokens_per_hour, sandbox),
        }
    }

    /// Where the bytes `who` sends to `host` are counted under `l` (the current windows).
    #[must_use]
    pub fn charge(&self, who: Client, host: &Host, l: Limits) -> Charge {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let host = {
            let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(&window(&mut hosts, who, host, now, wall).spent)
        };
        let sandbox = {
            let mut w = self
                .sandbox_bytes
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Arc::clone(&w.current(now, wall).spent)
        };
        Charge {
            host,
            sandbox,
            host_limit: l.upload_bytes_per_hour,
            sandbox_limit: l.sandbox_upload_bytes_per_hour,
        }
    }
}

/// One budget's use in its current window ([`Budgets::usage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// The knob, as the policy names it.
    pub knob: &'static str,
    /// Whose: `None` for the sandbox's, else the session (and host).
    pub scope: Option<String>,
    pub spent: u64,
    pub limit: u64,
    pub resets_at: SystemTime,
}

/// How many (session, host) upload windows [`Budgets::usage`] lists, most spent first.
pub const LISTED_HOSTS: usize = 5;

fn scope_of(who: Client) -> String {
    who.to_string()
}

impl Budgets {
    /// The budgets under `l` and what their current windows have spent: the sandbox's,
    /// each session's LLM tokens, and the [`LISTED_HOSTS`] (session, host) uploads that
    /// spent most.
    #[must_use]
    pub fn usage(&self, l: Limits) -> Vec<Use> {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let sandbox = |w: &Mutex<Window>, knob, limit| {
            let mut w = w.lock().unwrap_or_else(PoisonError::into_inner);
            let w = w.current(now, wall);
            Use {
                knob,
                scope: None,
                spent: w.spent.load(Ordering::Relaxed),
                limit,
                resets_at: w.resets_at,
            }
        };
        let mut out = vec![
            sandbox(
                &self.sandbox_bytes,
                "sandbox_upload_bytes_per_hour",
                l.sandbox_upload_bytes_per_hour,
            ),
            sandbox(
                &self.sandbox_requests,
                "sandbox_requests_per_hour",
                l.sandbox_requests_per_hour,
            ),
            sandbox(
                &self.sandbox_tokens,
                "sandbox_llm_tokens_per_hour",
                l.sandbox_llm_tokens_per_hour,
            ),
        ];
        let live = |w: &Window| now.saturating_duration_since(w.started) < WINDOW;
        {
            let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let mut sessions: Vec<_> = tokens.iter().filter(|(_, w)| live(w)).collect();
            sessions.sort_by_key(|(who, _)| scope_of(**who));
            out.extend(sessions.into_iter().map(|(who, w)| Use {
                knob: "llm_tokens_per_hour",
                scope: Some(scope_of(*who)),
                spent: w.spent.load(Ordering::Relaxed),
                limit: l.llm_tokens_per_hour,
                resets_at: w.resets_at,
            }));
        }
        let hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut uploads: Vec<_> = hosts
            .iter()
            .filter(|(_, w)| live(w) && w.spent.load(Ordering::Relaxed) > 0)
            .collect();
        uploads.sort_by_key(|(_, w)| std::cmp::Reverse(w.spent.load(Ordering::Relaxed)));
        out.extend(
            uploads
                .into_iter()
                .take(LISTED_HOSTS)
                .map(|((who, host), w)| {
                    let host = host.as_ref().map_or("other hosts", Host::as_str);
                    Use {
                        knob: "upload_bytes_per_hour",
                        scope: Some(format!("{}, {host}", scope_of(*who))),
                        spent: w.spent.load(Ordering::Relaxed),
                        limit: l.upload_bytes_per_hour,
                        resets_at: w.resets_at,
                    }
                }),
        );
        out
    }
}

/// The current window of (`who`, `host`), made when missing (see the module docs for the
/// bound).
fn window<'a>(
    hosts: &'a mut HashMap<(Client, Option<Host>), Window>,
    who: Client,
    host: &Host,
    now: Instant,
    wall: SystemTime,
) -> &'a Window {
    let mut key = (who, Some(host.clone()));
    if !hosts.contains_key(&key) && hosts.len() >= MAX_WINDOWS {
        hosts.retain(|_, w| now.saturating_duration_since(w.started) < WINDOW);
        if hosts.len() >= MAX_WINDOWS {
            key = (who, None);
        }
    }
    hosts
        .entry(key)
        .or_insert_with(|| Window::new(now, wall))
        .current(now, wall)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    fn limits(host: u64, sandbox: u64, requests: u64) -> Limits {
        Limits {
            upload_bytes_per_hour: host,
            sandbox_upload_bytes_per_hour: sandbox,
            sandbox_requests_per_hour: requests,
            ..Limits::default()
        }
    }

    #[test]
    fn bytes_spent_to_a_host_refuse_it_until_the_hour_is_over() {
        let b = Budgets::default();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let a = Client::Uid(1000);
        let l = limits(100, 1000, 1000);
        assert!(b.check(a, (&host("x.test"), false), l, t0, w0).is_ok());
        let c = b.charge(a, &host("x.test"), l);
        assert!(c.add(60));
        assert!(
            !c.add(60),
            "past 100 bytes the charge says so (the reader cuts)"
        );
        let e = b.check(a, (&host("x.test"), false), l, t0, w0).unwrap_err();
        assert_eq!((e.knob, e.limit), ("upload_bytes_per_hour", 100));
        // Another host, another session: their own windows.
        assert!(b.check(a, (&host("y.test"), false), l, t0, w0).is_ok());
        assert!(
            b.check(Client::Uid(1001), (&host("x.test"), false), l, t0, w0)
                .is_ok()
        );
        // The hour is over: a fresh window.
        assert!(
            b.check(a, (&host("x.test"), false), l, t0 + WINDOW, w0 + WINDOW)
                .is_ok()
        );
    }

    #[test]
    fn the_sandbox_budgets_hold_across_hosts_and_sessions() {
        let b = Budgets::default();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let l = limits(1000, 150, 3);
        let c1 = b.charge(Client::Uid(1), &host("a.test"), l);
        let c2 = b.charge(Client::Uid(2), &host("b.test"), l);
        assert!(c1.add(100));
        assert!(!c2.add(100));
        let e = b
            .check(Client::Uid(3), (&host("c.test"), false), l, t0, w0)
            .unwrap_err();
        assert_eq!(e.knob, "sandbox_upload_bytes_per_hour");
        // Requests: three, then refused.
        let b = Budgets::default();
        for _ in 0..3 {
            assert!(
                b.check(Client::Uid(1), (&host("a.test"), false), l, t0, w0)
                    .is_ok()
            );
        }
        let e = b
            .check(Client::Uid(1), (&host("a.test"), false), l, t0, w0)
            .unwrap_err();
        assert_eq!(e.knob, "sandbox_requests_per_hour");
        assert_eq!(e.resets_at, b.sandbox_requests.lock().unwrap().resets_at);
    }

    #[test]
    fn tokens_warn_then_exhaust_the_session_and_refuse_only_llm_hosts() {
        let b = Budgets::default();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let a = Client::Uid(1000);
        let l = Limits {
            llm_tokens_per_hour: 1000,
            ..Limits::DEFAULT
        };
        let s = b.spend_tokens(a, 700, l);
        assert_eq!((s.session, s.warned, s.exhausted), (700, false, false));
        let s = b.spend_tokens(a, 200, l);
        assert!(s.warned && !s.exhausted, "{s:?}");
        // The answer that crosses finished; the overshoot is its caller's to say.
        let s = b.spend_tokens(a, 500, l);
        assert_eq!((s.session, s.warned, s.exhausted), (1400, false, true));
        let e = b
            .check(a, (&host("api.anthropic.com"), true), l, t0, w0)
            .unwrap_err();
        assert_eq!((e.knob, e.limit), ("llm_tokens_per_hour", 1000));
        // Other hosts and other sessions go on.
        assert!(b.check(a, (&host("pypi.org"), false), l, t0, w0).is_ok());
        assert!(
            b.check(
                Client::Uid(7),
                (&host("api.anthropic.com"), true),
                l,
                t0,
                w0
            )
            .is_ok()
        );
    }

    #[test]
    fn varying_hosts_neither_grows_the_table_nor_escapes_the_budget() {
        let b = Budgets::default();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let a = Client::Uid(1000);
        let l = limits(100, u64::MAX, u64::MAX);
        for i in 0..MAX_WINDOWS {
            let _ = b.check(a, (&host(&format!("h{i}.test")), false), l, t0, w0);
        }
        // New hosts now share one window: what one spends, the next cannot.
        let c = b.charge(a, &host("new1.test"), l);
        assert!(!c.add(100));
        assert!(b.check(a, (&host("new2.test"), false), l, t0, w0).is_err());
        assert!(b.hosts.lock().unwrap().len() <= MAX_WINDOWS + 1);
    }
}
