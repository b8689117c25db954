//! The head-read deadline's clock: hyper's [`Timer`], coarse and without a syscall per
//! request.
//!
//! hyper enforces `header_read_timeout` (the slowloris guard: a connection whose next
//! request head does not arrive in time is closed) by arming a new sleep each time it starts
//! reading a head and dropping it when the head is in: once per request on a keep-alive
//! connection. On tokio's timer that sleep is, on a proxy serving one busy connection, the
//! runtime's earliest deadline, so arming it wakes the I/O driver to sleep shorter: an
//! `eventfd` write and one more `epoll_wait` per request, about a tenth of what the kernel
//! does for an intercepted keep-alive request (issue 22).
//!
//! [`HeadTimer`] keeps the deadlines itself instead. Arming is a note in a list under a
//! lock (no syscall); one ticker task per proxy looks at the list every
//! [`HeadTimer::resolution`] and wakes what is due, and sleeps on its own while nothing is
//! armed. A deadline therefore fires up to one resolution late (a tenth of the timeout, at
//! most a second: the 10 s default closes a silent connection between 10 and 11 s), never
//! early: a sleep is ready only when its deadline has passed.
//!
//! Only hyper's server connections use it (the gate's head-read timeout); everything else
//! keeps tokio's timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};
use tokio::sync::Notify;

/// The finest resolution: a timeout of a few milliseconds (tests) still fires promptly.
const FINEST: Duration = Duration::from_millis(5);
/// The coarsest resolution.
const COARSEST: Duration = Duration::from_secs(1);

/// hyper's timer for one proxy's server connections (clone it per connection).
#[derive(Debug, Clone)]
pub struct HeadTimer {
    wheel: Arc<Wheel>,
}

#[derive(Debug)]
struct Wheel {
    /// Deadlines are kept as nanoseconds after this instant.
    base: Instant,
    /// Sleeps armed and not yet fired; a dropped sleep's entry is gone at the next tick.
    armed: Mutex<Vec<Weak<Entry>>>,
    /// Wakes the ticker when something is armed while it sleeps.
    ticker: Arc<Notify>,
}

#[derive(Debug)]
struct Entry {
    /// Nanoseconds after [`Wheel::base`].
    deadline: AtomicU64,
    waker: Mutex<Option<Waker>>,
}

impl HeadTimer {
    /// A timer for deadlines about `timeout` away; starts its ticker on the current tokio
    /// runtime (the ticker ends when the last clone is dropped).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        let wheel = Arc::new(Wheel {
            base: Instant::now(),
            armed: Mutex::new(Vec::new()),
            ticker: Arc::new(Notify::new()),
        });
        let resolution = Self::resolution(timeout);
        tokio::spawn(tick(
            Arc::downgrade(&wheel),
            Arc::clone(&wheel.ticker),
            resolution,
        ));
        Self { wheel }
    }

    /// How often the ticker looks for due deadlines when a timeout is `timeout`: a tenth of
    /// it, between 5 ms and 1 s.
    #[must_use]
    pub fn resolution(timeout: Duration) -> Duration {
        (timeout / 10).clamp(FINEST, COARSEST)
    }

    /// Entries in the list (armed, or dropped and not yet swept).
    #[cfg(test)]
    fn listed(&self) -> usize {
        self.wheel.list().len()
    }
}

impl Wheel {
    fn list(&self) -> MutexGuard<'_, Vec<Weak<Entry>>> {
        // The list is valid after any panic (pushes and retains are whole).
        self.armed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Drop for Wheel {
    fn drop(&mut self) {
        // Let a sleeping ticker see that the wheel is gone.
        self.ticker.notify_one();
    }
}

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadSleep {
            entry: Arc::new(Entry {
                deadline: AtomicU64::new(self.wheel.nanos(deadline)),
                waker: Mutex::new(None),
            }),
            wheel: Arc::clone(&self.wheel),
            listed: false,
        })
    }
}

/// One armed deadline.
struct HeadSleep {
    entry: Arc<Entry>,
    wheel: Arc<Wheel>,
    /// Whether the entry is in the wheel's list (from its first pending poll).
    listed: bool,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let now = self.wheel.nanos(Instant::now());
        if now >= self.entry.deadline.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        {
            let mut waker = self
                .entry
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match waker.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        if !self.listed {
            self.listed = true;
            let was_empty = {
                let mut list = self.wheel.list();
                let was_empty = list.is_empty();
                list.push(Arc::downgrade(&self.entry));
                was_empty
            };
            if was_empty {
                self.wheel.ticker.notify_one();
            }
        }
        Poll::Pending
    }
}

impl Sleep for HeadSleep {}

/// The ticker: every `resolution`, wakes the due sleeps and forgets dropped ones; while
/// nothing is armed it waits to be told. Ends when the wheel is gone.
async fn tick(wheel: Weak<Wheel>, told: Arc<Notify>, resolution: Duration) {
    let mut interval = tokio::time::interval(resolution);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(w) = wheel.upgrade() else { return };
        let now = w.nanos(Instant::now());
        let mut due = Vec::new();
        let empty = {
            let mut list = w.list();
            list.retain(|weak| match weak.upgrade() {
                None => false,
                Some(e) if e.deadline.load(Ordering::Acquire) <= now => {
                    due.push(e);
                    false
                }
                Some(_) => true,
            });
            list.is_empty()
        };
        drop(w);
        for e in due {
            let waker = e
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        if empty {
            told.notified().await;
            interval.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_deadline_fires_after_it_passes_never_before() {
        let timer = HeadTimer::new(TIMEOUT);
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), timer.sleep(TIMEOUT))
            .await
            .expect("the sleep fires");
        assert!(
            start.elapsed() >= TIMEOUT,
            "fired early: {:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_dropped_sleep_is_forgotten_and_the_ticker_rests_then_wakes_again() {
        let timer = HeadTimer::new(TIMEOUT);
        {
            let mut s = timer.sleep(Duration::from_secs(60));
            assert!(futures_poll_once(&mut s).await.is_pending());
            assert_eq!(timer.listed(), 1);
        }
        // The next sweep drops the dead entry; the ticker then waits to be told.
        let swept = tokio::time::timeout(Duration::from_secs(5), async {
            while timer.listed() != 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(swept.is_ok(), "the dropped sleep stayed listed");
        // Armed again after the rest: it still fires.
        tokio::time::timeout(Duration::from_secs(5), timer.sleep(TIMEOUT))
            .await
            .expect("the ticker woke for the new sleep");
    }

    #[tokio::test]
    async fn the_ticker_ends_with_the_last_timer() {
        let timer = HeadTimer::new(TIMEOUT);
        let ticker = Arc::downgrade(&timer.wheel.ticker);
        drop(timer);
        tokio::time::timeout(Duration::from_secs(5), async {
            while ticker.upgrade().is_some() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the ticker task ended and dropped its Notify");
    }

    #[test]
    fn resolution_is_a_tenth_within_bounds() {
        assert_eq!(HeadTimer::resolution(Duration::from_secs(10)), COARSEST);
        assert_eq!(HeadTimer::resolution(Duration::from_secs(60)), COARSEST);
        assert_eq!(
            HeadTimer::resolution(Duration::from_millis(300)),
            Duration::from_millis(30)
        );
        assert_eq!(HeadTimer::resolution(Duration::from_millis(10)), FINEST);
    }

    /// Polls `s` once with the task's own waker.
    async fn futures_poll_once(s: &mut Pin<Box<dyn Sleep>>) -> Poll<()> {
        std::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await
    }
}
