//! The operator's inbox: hosts the policy asks about (`[network] unlisted = "ask"`), filed
//! when the agent first asks for them, and the operator's answers.
//!
//! An asked request is refused at once (`approval-required`, naming its item), so an
//! autonomous agent never hangs on it; the item waits here. With `[limits]
//! approvals_hold_seconds` the request is held open that long for the answer instead, at
//! most `approvals_holds` at once per session ([`Approvals::hold`]; past it, at once). Items are one per (session,
//! host, port): asking again counts a hit on the pending one. A session holds at most
//! `[limits] approvals_pending` pending items and files at most `approvals_per_minute` new
//! ones a minute; past either its asks are refused without an item (`Asked::Full`,
//! `Asked::TooFast`). A reload that lists a pending host drops its item ([`Approvals::drop_covered`]).
//!
//! An answer is its session's, and dies with it: session numbers are reused, so when a
//! second session begins (the entrypoint tells the admin API, [`Approvals::begin`]) every
//! item of the ended session that had its number before is dropped, pending or answered,
//! but for its `always` answers (grants: policy for every session).
//!
//! The operator answers through the admin API, never through the agent's terminal:
//! - approve `once`: the session's next connection to the host and port is admitted, then
//!   the item is spent (the one after files a new one);
//! - approve `session`: every connection of that session to it, until the session ends
//!   (its number begun again), the sandbox stops or the `for` time ends; another session is
//!   still asked;
//! - approve `always`: every session's, across restarts, until revoked: a grant the policy
//!   carries (the admin API makes it a revision first; the item keeps the record);
//! - deny: that session's requests to it are refused `approval-denied` with the operator's
//!   reason, until the `for` time ends (none: until the sandbox stops); deny `always`: a
//!   grant that denies it to every session, as approve `always`.
//!
//! A review token ([`token`]) binds what the operator was shown (the item and the policy
//! revision): an answer with a stale token is refused. Who answered is the operator's uid
//! from the admin socket's credentials; the admin API writes it to the audit log.
//!
//! What this module does not do: decide that a host is asked (the policy step of
//! `admission`), lift a hard deny, a listed deny or a secret in a name (those refuse before
//! an item is looked at), or keep anything across a restart (grants are policy: the
//! revision's and [`crate::grants`]'s).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::limits::Client;

/// Items kept in all (answered ones are dropped oldest first past it; pending ones are
/// bounded per session).
const MAX_ITEMS: usize = 1024;

/// How long an approval holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The session's next connection to the host and port.
    Once,
    /// Every connection of the session to it.
    Session,
    /// Every session's, kept across restarts until revoked: a grant the policy carries
    /// (`crate::revision::Revisions::regrant`). The item records it, and answers the
    /// session that asked until it is revoked (a request held under the revision before).
    Always,
}

impl Scope {
    /// As the API and the audit line write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
        }
    }
}

/// Where an item stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Waiting for the operator.
    Pending,
    /// Approved by the operator `by` (a uid), until `until` if given.
    Approved {
        scope: Scope,
        by: u32,
        until: Option<SystemTime>,
    },
    /// An approval for one connection, spent.
    Spent { by: u32 },
    /// An `always` answer whose grant the operator `by` took back: it answers nothing.
    Revoked { by: u32 },
    /// Denied by the operator `by`, with a reason the agent reads, until `until` if given;
    /// `always`: for every session, by a grant the policy carries.
    Denied {
        by: u32,
        reason: String,
        until: Option<SystemTime>,
        always: bool,
    },
}

impl State {
    /// As the API writes it.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved { .. } => "approved",
            State::Spent { .. } => "spent",
            State::Revoked { .. } => "revoked",
            State::Denied { .. } => "denied",
        }
    }
}

/// One asked destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub who: Client,
    pub host: String,
    pub port: u16,
    /// Requests that asked for it (the first included).
    pub hits: u64,
    pub first: SystemTime,
    pub last: SystemTime,
    pub state: State,
    /// Why the agent says it needs the host, when it asked ahead of need (untrusted text,
    /// one line, at most [`MAX_SAID`] characters).
    pub said: Option<String>,
    /// The `action = "ask"` rule of `[[rules]]` that asked (its label): an approval then
    /// lets the session's requests that rule matches through, nothing else on the host.
    /// `None`: the host itself was asked about (`unlisted = "ask"`).
    pub rule: Option<String>,
}

/// Longest reason the agent may give, in characters.
pub const MAX_SAID: usize = 300;

/// How much one session may ask (`[limits] approvals_pending`, `approvals_per_minute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub pending: usize,
    pub per_minute: u32,
}

impl Caps {
    /// The caps `limits` sets.
    #[must_use]
    pub fn of(limits: &airlock_policy::limits::Limits) -> Self {
        Self {
            pending: limits.approvals_pending as usize,
            per_minute: limits.approvals_per_minute,
        }
    }
}

/// What an asked request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// Approved: through, the line naming the item and its scope.
    Granted { id: String, scope: Scope },
    /// Denied by the operator: refused with the operator's reason.
    Denied { id: String, reason: String },
    /// Waiting (filed now, or before): refused, naming the item.
    Pending { id: String },
    /// The session holds `approvals_pending` pending items: refused, nothing filed.
    Full,
    /// The session filed `approvals_per_minute` items this minute: refused, nothing filed.
    TooFast,
}

/// The operator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approve {
        scope: Scope,
        until: Option<SystemTime>,
    },
    Deny {
        reason: String,
        until: Option<SystemTime>,
        always: bool,
    },
}

impl Answer {
    /// Whether it is for every session, kept until revoked: a grant.
    #[must_use]
    pub const fn always(&self) -> bool {
        matches!(
            self,
            Answer::Approve {
                scope: Scope::Always,
                ..
            } | Answer::Deny { always: true, .. }
        )
    }
}

/// What [`Approvals::begin`] forgot of the ended session that had the number before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forgotten {
    /// Its pending items.
    pub pending: usize,
    /// Its `once` and `session` approvals, a spent `once` included.
    pub approvals: usize,
    /// Its denials for that session only.
    pub denials: usize,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("no approval {0} (answered and spent, dropped by a reload, or never filed)")]
    NotFound(String),
    #[error("approval {id} was already answered ({state})")]
    Answered { id: String, state: &'static str },
    #[error(
        "the review token does not match approval {0} as it is now (the policy changed since it was shown): show it again"
    )]
    StaleToken(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    who: Client,
    host: String,
    port: u16,
    rule: Option<String>,
}

/// Filing pace of one session: new items in the current minute.
#[derive(Debug, Clone, Copy)]
struct Pace {
    since: Instant,
    filed: u32,
}

#[derive(Debug, Default)]
struct Inner {
    /// By id, in filing order of their ids' first use (see [`Inner::order`]).
    items: HashMap<String, Item>,
    /// Ids oldest first.
    order: Vec<String>,
    /// The live item of each (session, host, port): pending, approved or denied.
    live: HashMap<Key, String>,
    pace: HashMap<Client, Pace>,
    /// Requests of each session held open for an answer now.
    holding: HashMap<Client, u32>,
    /// The second sessions begun since the proxy started, by number: when each began
    /// ([`Approvals::begin`]; a number begun again, its latest).
    begun: std::collections::BTreeMap<u16, SystemTime>,
}

/// One request held open for the operator's answer ([`Approvals::hold`]).
#[derive(Debug)]
pub struct Hold<'a> {
    approvals: &'a Approvals,
    who: Client,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut inner = lock(&self.approvals.inner);
        if let Some(n) = inner.holding.get_mut(&self.who) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.holding.remove(&self.who);
            }
        }
    }
}

/// The inbox (one per proxy).
#[derive(Debug, Default)]
pub struct Approvals {
    inner: Mutex<Inner>,
    /// Woken on every answer, for the agent's wait ([`Approvals::wait`]).
    answered: tokio::sync::Notify,
}

impl Approvals {
    /// The answer for an asked connection of `who` to `host:port`, filing an item when none
    /// is live (see the module docs).
    pub fn ask(
        &self,
        who: Client,
        host: &str,
        port: u16,
        caps: Caps,
        now: Instant,
        wall: SystemTime,
    ) -> Asked {
        self.ask_saying(who, (host, port), None, caps, now, wall)
    }

    /// [`Approvals::ask`] by the agent ahead of need, with its reason (kept on the item, the
    /// latest one if it asks again while the item waits; control characters dropped).
    pub fn ask_saying(
        &self,
        who: Client,
        (host, port): (&str, u16),
        said: Option<&str>,
        caps: Caps,
        now: Instant,
        wall: SystemTime,
    ) -> Asked {
        let key = Key {
            who,
            host: host.to_owned(),
            port,
            rule: None,
        };
        self.ask_keyed(key, said, caps, (now, wall))
    }

    /// [`Approvals::ask`] for a request an `action = "ask"` rule (labelled `rule`) matched:
    /// its own item, apart from the host's.
    pub fn ask_rule(
        &self,
        who: Client,
        (host, port): (&str, u16),
        rule: &str,
        caps: Caps,
        (now, wall): (Instant, SystemTime),
    ) -> Asked {
        let key = Key {
            who,
            host: host.to_owned(),
            port,
            rule: Some(rule.to_owned()),
        };
        self.ask_keyed(key, None, caps, (now, wall))
    }

    fn ask_keyed(
        &self,
        key: Key,
        said: Option<&str>,
        caps: Caps,
        (now, wall): (Instant, SystemTime),
    ) -> Asked {
        let said: Option<String> = said.map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(MAX_SAID)
                .collect()
        });
        let who = key.who;
        let mut inner = lock(&self.inner);
        if let Some(id) = inner.live.get(&key).cloned()
            && let Some(asked) = inner.answer_live(&key, &id, wall)
        {
            if let (Asked::Pending { .. }, Some(s), Some(item)) =
                (&asked, said, inner.items.get_mut(&id))
            {
                item.said = Some(s);
            }
            return asked;
        }
        let pending = inner
            .items
            .values()
            .filter(|i| i.who == who && i.state == State::Pending)
            .count();
        if pending >= caps.pending {
            return Asked::Full;
        }
        let pace = inner.pace.entry(who).or_insert(Pace {
            since: now,
            filed: 0,
        });
        if now.duration_since(pace.since) >= Duration::from_secs(60) {
            *pace = Pace {
                since: now,
                filed: 0,
            };
        }
        if pace.filed >= caps.per_minute {
            return Asked::TooFast;
        }
        pace.filed += 1;
        let id = new_id(&inner.items);
        inner.file(Item {
            id: id.clone(),
            who,
            host: key.host.clone(),
            port: key.port,
            hits: 1,
            first: wall,
            last: wall,
            state: State::Pending,
            said,
            rule: key.rule.clone(),
        });
        inner.live.insert(key, id.clone());
        Asked::Pending { id }
    }

    /// Whether `who` holds a standing approval for `host` on some port (the DNS filter's
    /// question: it has no port). Spends nothing.
    pub fn approved_name(&self, who: Client, host: &str, wall: SystemTime) -> bool {
        let inner = lock(&self.inner);
        inner.live.iter().any(|(k, id)| {
            k.who == who
                && k.host == host
                && k.rule.is_none()
                && inner.items.get(id).is_some_and(|i| match &i.state {
                    State::Approved { until, .. } => until.is_none_or(|u| wall < u),
                    _ => false,
                })
        })
    }

    /// Every item, pending ones first (oldest first), then the answered ones, newest first.
    pub fn list(&self) -> Vec<Item> {
        let inner = lock(&self.inner);
        let mut items: Vec<Item> = inner
            .order
            .iter()
            .filter_map(|id| inner.items.get(id).cloned())
            .collect();
        items.sort_by(|a, b| {
            let (pa, pb) = (a.state == State::Pending, b.state == State::Pending);
            pb.cmp(&pa).then_with(|| {
                if pa {
                    a.first.cmp(&b.first)
                } else {
                    b.last.cmp(&a.last)
                }
            })
        });
        items
    }

    /// The item `id`.
    pub fn get(&self, id: &str) -> Option<Item> {
        lock(&self.inner).items.get(id).cloned()
    }

    /// Takes the operator `by`'s answer to the pending item `id`. With `token`, only if
    /// the item is still what [`token`] was made of at `revision`.
    ///
    /// # Errors
    /// [`AnswerError`]: no such item, answered already, or a stale token.
    pub fn answer(
        &self,
        id: &str,
        answer: Answer,
        by: u32,
        token_given: Option<&str>,
        revision: u64,
    ) -> Result<Item, AnswerError> {
        let mut inner = lock(&self.inner);
        let item = inner
            .items
            .get_mut(id)
            .ok_or_else(|| AnswerError::NotFound(id.to_owned()))?;
        answerable(item, token_given, revision)?;
        item.state = match answer {
            Answer::Approve { scope, until } => State::Approved { scope, by, until },
            Answer::Deny {
                reason,
                until,
                always,
            } => State::Denied {
                by,
                reason,
                until,
                always,
            },
        };
        let item = item.clone();
        drop(inner);
        self.answered.notify_waiters();
        Ok(item)
    }

    /// Item `id` if an answer with `token_given` under `revision` would be taken now (the
    /// check [`Approvals::answer`] makes again when it takes it).
    ///
    /// # Errors
    /// As [`Approvals::answer`].
    pub fn answerable(
        &self,
        id: &str,
        token_given: Option<&str>,
        revision: u64,
    ) -> Result<Item, AnswerError> {
        let item = self
            .get(id)
            .ok_or_else(|| AnswerError::NotFound(id.to_owned()))?;
        answerable(&item, token_given, revision)?;
        Ok(item)
    }

    /// Item `id` of the session `who` once it is answered, or as it is at `deadline`;
    /// `None` when there is no such item of that session (another session's items are not
    /// its to see).
    pub async fn wait(
        &self,
        id: &str,
        who: Client,
        deadline: tokio::time::Instant,
    ) -> Option<Item> {
        loop {
            // Registered before the look, so an answer between the two is not missed.
            let answered = self.answered.notified();
            let item = self.get(id).filter(|i| i.who == who)?;
            if item.state != State::Pending {
                return Some(item);
            }
            if tokio::time::timeout_at(deadline, answered).await.is_err() {
                return Some(item);
            }
        }
    }

    /// A hold for one request of `who`, unless it already has `cap` held: released when the
    /// returned guard is dropped.
    pub fn hold(&self, who: Client, cap: u32) -> Option<Hold<'_>> {
        let mut inner = lock(&self.inner);
        let n = inner.holding.entry(who).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Hold {
            approvals: self,
            who,
        })
    }

    /// Marks item `id` revoked by the operator `by` when it is an `always` answer (its
    /// grant was taken back); any other item is left as it is.
    pub fn revoked(&self, id: &str, by: u32) {
        let mut inner = lock(&self.inner);
        if let Some(item) = inner.items.get_mut(id)
            && matches!(
                item.state,
                State::Approved {
                    scope: Scope::Always,
                    ..
                } | State::Denied { always: true, .. }
            )
        {
            item.state = State::Revoked { by };
        }
    }

    /// Requests of `who` held open now.
    #[must_use]
    pub fn holding(&self, who: Client) -> u32 {
        lock(&self.inner).holding.get(&who).copied().unwrap_or(0)
    }

    /// Drops the pending items whose host, port and rule (`None`: the host's own item)
    /// `covered` says the policy now decides itself (a reload listed or denied the host, or
    /// no longer has the ask rule); the number dropped.
    pub fn drop_covered(&self, covered: impl Fn(&str, u16, Option<&str>) -> bool) -> usize {
        let mut inner = lock(&self.inner);
        let gone: Vec<Key> = inner
            .live
            .iter()
            .filter(|(k, id)| {
                inner
                    .items
                    .get(*id)
                    .is_some_and(|i| i.state == State::Pending)
                    && covered(&k.host, k.port, k.rule.as_deref())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            if let Some(id) = inner.live.remove(k) {
                inner.items.remove(&id);
                inner.order.retain(|o| *o != id);
            }
        }
        gone.len()
    }

    /// Session `k` begins (root says so on the admin socket as the entrypoint starts a
    /// second session), at `wall`. Session numbers are reused once a session has ended,
    /// and what a session was answered is that session's alone: every item of the ended
    /// session that had `k` before is dropped (its pending items, its `once` and `session`
    /// approvals, its denials for that session), and its filing pace with them, so the new
    /// session is asked afresh. Its `always` answers stay: they are grants the policy
    /// carries for every session (and their records, revoked or not, stay listed). Once
    /// this returns nothing of the previous session answers a request of `k`.
    pub fn begin(&self, k: u16, wall: SystemTime) -> Forgotten {
        let of_k = |who: &Client| matches!(who, Client::Session { session, .. } if *session == k);
        let mut inner = lock(&self.inner);
        let mut forgotten = Forgotten::default();
        let gone: std::collections::HashSet<String> = (inner.items.values())
            .filter(|i| of_k(&i.who))
            .filter_map(|i| {
                match &i.state {
                    State::Pending => forgotten.pending += 1,
                    State::Approved {
                        scope: Scope::Once | Scope::Session,
                        ..
                    }
                    | State::Spent { .. } => forgotten.approvals += 1,
                    State::Denied { always: false, .. } => forgotten.denials += 1,
                    State::Approved {
                        scope: Scope::Always,
                        ..
                    }
                    | State::Denied { always: true, .. }
                    | State::Revoked { .. } => return None,
                }
                Some(i.id.clone())
            })
            .collect();
        inner.items.retain(|id, _| !gone.contains(id));
        inner.order.retain(|id| !gone.contains(id));
        inner.live.retain(|_, id| !gone.contains(id));
        inner.pace.retain(|who, _| !of_k(who));
        inner.begun.insert(k, wall);
        forgotten
    }

    /// The second sessions begun since the proxy started ([`Approvals::begin`]), by number,
    /// each with when it (the latest to take the number) began.
    pub fn begun(&self) -> Vec<(u16, SystemTime)> {
        lock(&self.inner)
            .begun
            .iter()
            .map(|(k, t)| (*k, *t))
            .collect()
    }
}

impl Inner {
    /// The answer a live item gives an asked request (`None`: it ran out; file anew).
    fn answer_live(&mut self, key: &Key, id: &str, wall: SystemTime) -> Option<Asked> {
        let item = self.items.get_mut(id)?;
        let asked = match item.state.clone() {
            State::Pending => {
                item.hits += 1;
                item.last = wall;
                Asked::Pending { id: id.to_owned() }
            }
            State::Approved { until, .. } | State::Denied { until, .. }
                if until.is_some_and(|u| wall >= u) =>
            {
                self.live.remove(key);
                return None;
            }
            State::Approved { scope, by, .. } => {
                item.hits += 1;
                item.last = wall;
                if scope == Scope::Once {
                    item.state = State::Spent { by };
                    self.live.remove(key);
                }
                Asked::Granted {
                    id: id.to_owned(),
                    scope,
                }
            }
            State::Denied { reason, .. } => {
                item.hits += 1;
                item.last = wall;
                Asked::Denied {
                    id: id.to_owned(),
                    reason,
                }
            }
            State::Spent { .. } | State::Revoked { .. } => {
                self.live.remove(key);
                return None;
            }
        };
        Some(asked)
    }

    /// Files `item`, dropping the oldest items past [`MAX_ITEMS`] that no longer answer
    /// anything (spent, or run out).
    fn file(&mut self, item: Item) {
        self.order.push(item.id.clone());
        self.items.insert(item.id.clone(), item);
        if self.items.len() <= MAX_ITEMS {
            return;
        }
        let live: std::collections::HashSet<String> = self.live.values().cloned().collect();
        let mut excess = self.items.len() - MAX_ITEMS;
        let items = &mut self.items;
        self.order.retain(|id| {
            if excess == 0 || live.contains(id) {
                return true;
            }
            excess -= 1;
            items.remove(id);
            false
        });
    }
}

/// Whether `item` takes an answer: pending, and (with a token) still what the token was
/// made of.
fn answerable(item: &Item, token_given: Option<&str>, revision: u64) -> Result<(), AnswerError> {
    if item.state != State::Pending {
        return Err(AnswerError::Answered {
            id: item.id.clone(),
            state: item.state.as_str(),
        });
    }
    if token_given.is_some_and(|t| t != token(item, revision)) {
        return Err(AnswerError::StaleToken(item.id.clone()));
    }
    Ok(())
}

/// The review token of `item` under policy `revision`: what the operator was shown (the
/// item, its session, host and port, and the revision it would be approved under), hashed.
#[must_use]
pub fn token(item: &Item, revision: u64) -> String {
    let who = item.who;
    let text = format!(
        "{}\n{who}\n{}\n{}\n{revision}\n{}",
        item.id,
        item.host,
        item.port,
        item.rule.as_deref().unwrap_or("")
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh item id: 8 hex digits, none in use.
fn new_id(items: &HashMap<String, Item>) -> String {
    loop {
        let mut b = [0u8; 4];
        if getrandom::fill(&mut b).is_err() {
            // No randomness: a counter still makes ids unique.
            return format!("{:08x}", items.len());
        }
        let id: String = b.iter().map(|x| format!("{x:02x}")).collect();
        if !items.contains_key(&id) {
            return id;
        }
    }
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
