//! The grace period after a restart (RFC 8881 §8.4.2): clients that held state before
//! may reclaim it; new opens and locks wait. It ends when every previous client has
//! sent RECLAIM_COMPLETE or the grace time has passed, whichever comes first.
//!
//! Sans-IO: `now` is an argument; the core turns an end of grace into an
//! [`crate::Effect::GraceEnded`].

use bytes::Bytes;
use std::collections::BTreeSet;
use std::time::Instant;

/// Why the grace period ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceEnd {
    /// Every client of the previous instance sent RECLAIM_COMPLETE.
    AllReclaimed,
    /// The grace time ran out; `unreclaimed` clients never completed.
    TimedOut {
        /// Clients still waited for.
        unreclaimed: usize,
    },
}

/// The grace period of one server instance.
#[derive(Debug, Default)]
pub struct Grace {
    state: Option<GraceState>,
}

#[derive(Debug)]
struct GraceState {
    until: Instant,
    /// Owners of the previous instance's clients that have not completed reclaim
    /// (ordered, so persisting them is deterministic).
    waiting: BTreeSet<Bytes>,
}

impl Grace {
    /// No grace period (fresh start, or grace disabled).
    pub fn none() -> Self {
        Grace { state: None }
    }

    /// A grace period until `until`, waiting for the owners in `clients`. With no
    /// client to wait for there is no grace period.
    pub fn new(until: Instant, clients: Vec<Bytes>) -> Self {
        if clients.is_empty() {
            return Self::none();
        }
        Grace {
            state: Some(GraceState {
                until,
                waiting: clients.into_iter().collect(),
            }),
        }
    }

    /// Whether reclaims are allowed (and new state refused) at `now`.
    pub fn in_grace(&self, now: Instant) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| now < s.until && !s.waiting.is_empty())
    }

    /// `owner` sent RECLAIM_COMPLETE.
    pub fn reclaim_complete(&mut self, owner: &Bytes) {
        if let Some(s) = self.state.as_mut() {
            s.waiting.remove(owner);
        }
    }

    /// Ends the grace period if it is over at `now`; returns why, exactly once.
    pub fn poll(&mut self, now: Instant) -> Option<GraceEnd> {
        let s = self.state.as_ref()?;
        let end = if s.waiting.is_empty() {
            GraceEnd::AllReclaimed
        } else if now >= s.until {
            GraceEnd::TimedOut {
                unreclaimed: s.waiting.len(),
            }
        } else {
            return None;
        };
        self.state = None;
        Some(end)
    }

    /// Owners still waited for (empty outside grace).
    pub fn waiting(&self) -> impl Iterator<Item = &Bytes> {
        self.state.iter().flat_map(|s| s.waiting.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ends_when_all_reclaimed() {
        let now = Instant::now();
        let mut g = Grace::new(
            now + Duration::from_secs(60),
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
        );
        assert!(g.in_grace(now));
        g.reclaim_complete(&Bytes::from_static(b"a"));
        assert!(g.in_grace(now));
        assert_eq!(g.poll(now), None);
        g.reclaim_complete(&Bytes::from_static(b"b"));
        assert!(!g.in_grace(now));
        assert_eq!(g.poll(now), Some(GraceEnd::AllReclaimed));
        assert_eq!(g.poll(now), None, "reported once");
        assert!(!Grace::none().in_grace(now));
    }

    #[test]
    fn ends_on_time() {
        let now = Instant::now();
        let mut g = Grace::new(
            now + Duration::from_secs(60),
            vec![Bytes::from_static(b"a")],
        );
        let late = now + Duration::from_secs(60);
        assert!(g.in_grace(late - Duration::from_nanos(1)));
        assert!(!g.in_grace(late));
        assert_eq!(g.poll(late), Some(GraceEnd::TimedOut { unreclaimed: 1 }));
        assert_eq!(g.waiting().count(), 0);
        assert!(!Grace::new(now, vec![]).in_grace(now));
    }
}
