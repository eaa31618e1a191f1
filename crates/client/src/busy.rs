//! Waiting out a server that says "not now" (ADR 0036): NFS4ERR_DELAY and
//! NFS4ERR_GRACE. On txnfs (known by its EXCHANGE_ID implementation name) a DELAY to a
//! plain request almost always means that it met an object or name locked by another
//! client's uncommitted transaction (the
//! holder commits or is rolled back: at once when its connection closes, else after
//! `txn_timeout`); GRACE means a restarted server waits for the clients that held state
//! to reclaim it (at most a lease). Both end by themselves, so the client keeps
//! retrying, for [`ClientConfig::busy_wait`](crate::ClientConfig::busy_wait), and says
//! once per client what it is waiting for instead of failing with a bare status.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_proto::nfs4::nfsstat4;

/// What the server is busy with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// NFS4ERR_DELAY from txnfs: an uncommitted transaction holds what the request
    /// needs (or, less often, a delegation is being recalled).
    Locked,
    /// NFS4ERR_DELAY from another server.
    Delayed,
    /// NFS4ERR_GRACE: the server restarted and waits for its clients to reclaim.
    Grace,
}

impl Busy {
    /// The status's meaning, if it asks to come back later (`txnfs`: the server is
    /// txnfs).
    pub fn of(status: nfsstat4, txnfs: bool) -> Option<Busy> {
        match status {
            nfsstat4::NFS4ERR_DELAY if txnfs => Some(Busy::Locked),
            nfsstat4::NFS4ERR_DELAY => Some(Busy::Delayed),
            nfsstat4::NFS4ERR_GRACE => Some(Busy::Grace),
            _ => None,
        }
    }

    /// The one line a user is told (the client keeps retrying).
    pub fn message(self) -> &'static str {
        match self {
            Busy::Locked => "locked by an uncommitted transaction; retrying",
            Busy::Delayed => "server busy (NFS4ERR_DELAY); retrying",
            Busy::Grace => "server restarted: grace period while its clients reclaim; waiting",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Busy::Locked => 1,
            Busy::Grace => 2,
            Busy::Delayed => 4,
        }
    }
}

/// Told once per client and kind when the client starts waiting
/// ([`crate::ClientConfig::on_busy`]); without one the client logs the message at
/// INFO.
#[derive(Clone)]
pub struct BusyNotice(pub Arc<dyn Fn(Busy) + Send + Sync>);

impl fmt::Debug for BusyNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BusyNotice")
    }
}

/// Which kinds a client has told already.
#[derive(Debug, Default)]
pub(crate) struct Told(AtomicU8);

impl Told {
    /// Tell `notice` (or the log) of `b` unless it was told before.
    pub(crate) fn tell(&self, b: Busy, notice: Option<&BusyNotice>) {
        if self.0.fetch_or(b.bit(), Ordering::Relaxed) & b.bit() != 0 {
            return;
        }
        match notice {
            Some(n) => (n.0)(b),
            None => tracing::info!("{}", b.message()),
        }
    }
}

/// Longest pause between two tries: short enough that a request goes on well within
/// a second of the lock's release or the end of grace.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// The retries of one request that the server keeps answering "not now".
#[derive(Debug)]
pub(crate) struct BusyWait {
    started: Instant,
    tries: u32,
    budget: Duration,
}

impl BusyWait {
    pub(crate) fn new(budget: Duration) -> Self {
        BusyWait {
            started: Instant::now(),
            tries: 0,
            budget,
        }
    }

    /// The pause before the next try (25 ms doubling to [`MAX_PAUSE`]), or `None` once
    /// the budget is spent.
    pub(crate) fn next_pause(&mut self) -> Option<Duration> {
        self.tries += 1;
        let pause = Duration::from_millis(25 << self.tries.min(5)).min(MAX_PAUSE);
        (self.started.elapsed() + pause <= self.budget).then_some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_to_a_cap_and_stop_at_the_budget() {
        let mut w = BusyWait::new(Duration::from_secs(2));
        let pauses: Vec<Duration> = std::iter::from_fn(|| w.next_pause()).take(6).collect();
        assert_eq!(pauses[0], Duration::from_millis(50));
        assert_eq!(pauses[5], MAX_PAUSE);
        let mut spent = BusyWait::new(Duration::from_millis(10));
        assert_eq!(spent.next_pause(), None);
    }

    #[test]
    fn each_kind_is_told_once() {
        let told = Told::default();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let notice = BusyNotice(Arc::new(move |b| s.lock().unwrap().push(b)));
        for _ in 0..3 {
            told.tell(Busy::Locked, Some(&notice));
            told.tell(Busy::Grace, Some(&notice));
        }
        assert_eq!(*seen.lock().unwrap(), vec![Busy::Locked, Busy::Grace]);
    }
}
