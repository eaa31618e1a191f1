//! The time one COMPOUND spent waiting for others, so that its execution time can be
//! told apart from it.
//!
//! The server times the waits it makes itself (a delegation's recall) and the `txn`
//! layer the waits for another transaction's locks; both add to the one clock the
//! COMPOUND's [`crate::OpCtx`] carries. The server's placement (ADR 0033) learns from
//! execution time only: a COMPOUND that waited 200 ms for a lock says nothing about how
//! slow the file system is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shared by every copy of one COMPOUND's context (clones count into one total).
#[derive(Debug, Clone, Default)]
pub struct WaitClock(Arc<AtomicU64>);

thread_local! {
    /// The last clock [`WaitClock::fresh`] handed out on this thread.
    static SPARE: std::cell::RefCell<Option<Arc<AtomicU64>>> = const { std::cell::RefCell::new(None) };
}

impl WaitClock {
    /// A clock at zero, like `default()`, but reusing the last one this thread made
    /// when no copy of it is held any more (a COMPOUND's clock, per COMPOUND: one
    /// allocation fewer for each).
    pub fn fresh() -> WaitClock {
        SPARE.with_borrow_mut(|spare| match spare {
            // Only this thread's slot holds it: no one can count into it any more.
            Some(clock) if Arc::strong_count(clock) == 1 => {
                clock.store(0, Ordering::Relaxed);
                WaitClock(clock.clone())
            }
            _ => {
                let clock = Arc::new(AtomicU64::new(0));
                *spare = Some(clock.clone());
                WaitClock(clock)
            }
        })
    }

    /// Adds a wait of `d`.
    pub fn add(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }

    /// Runs `f`, a wait, and adds the time it took.
    pub fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let started = Instant::now();
        let r = f();
        self.add(started.elapsed());
        r
    }

    /// The time waited so far.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// An instrument, not part of what a context is: two contexts that differ only in
/// their clocks are the same context.
impl PartialEq for WaitClock {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for WaitClock {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_clock_starts_at_zero_and_is_never_one_still_held() {
        let a = WaitClock::fresh();
        a.add(Duration::from_millis(3));
        let b = WaitClock::fresh();
        assert_eq!(
            b.total(),
            Duration::ZERO,
            "a new clock while the first is held"
        );
        b.add(Duration::from_millis(1));
        assert_eq!(
            a.total(),
            Duration::from_millis(3),
            "and the first counts alone"
        );
        drop(b);
        let c = WaitClock::fresh();
        assert_eq!(c.total(), Duration::ZERO, "a reused clock starts at zero");
        c.add(Duration::from_millis(2));
        assert_eq!(a.total(), Duration::from_millis(3));
    }

    #[test]
    fn clones_share_one_total() {
        let a = WaitClock::default();
        let b = a.clone();
        a.add(Duration::from_millis(3));
        b.timed(|| std::thread::sleep(Duration::from_millis(2)));
        assert!(a.total() >= Duration::from_millis(5), "{:?}", a.total());
        assert_eq!(a.total(), b.total());
    }
}
