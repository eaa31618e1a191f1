//! The grace period after a restart (RFC 8881 §8.4.2): clients that held state before
//! may reclaim it; new opens and locks wait. It ends when every previous client has
//! sent RECLAIM_COMPLETE or the lease time has passed, whichever comes first.

use bytes::Bytes;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

pub struct Grace {
    inner: Mutex<Option<GraceState>>,
}

struct GraceState {
    until: Instant,
    waiting: HashSet<Bytes>,
}

impl Grace {
    pub fn none() -> Self {
        Grace {
            inner: Mutex::new(None),
        }
    }

    pub fn new(until: Instant, clients: Vec<Bytes>) -> Self {
        Grace {
            inner: Mutex::new(Some(GraceState {
                until,
                waiting: clients.into_iter().collect(),
            })),
        }
    }

    pub fn in_grace(&self, now: Instant) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        let active = g
            .as_ref()
            .is_some_and(|s| now < s.until && !s.waiting.is_empty());
        if !active && g.is_some() {
            *g = None;
            tracing::info!("grace period over");
        }
        active
    }

    pub fn reclaim_complete(&self, owner: &Bytes) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(s) = g.as_mut() {
                s.waiting.remove(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ends_when_all_reclaimed() {
        let g = Grace::new(
            Instant::now() + Duration::from_secs(60),
            vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
        );
        let now = Instant::now();
        assert!(g.in_grace(now));
        g.reclaim_complete(&Bytes::from_static(b"a"));
        assert!(g.in_grace(now));
        g.reclaim_complete(&Bytes::from_static(b"b"));
        assert!(!g.in_grace(now));
        assert!(!Grace::none().in_grace(now));
        let expired = Grace::new(now, vec![Bytes::from_static(b"a")]);
        assert!(!expired.in_grace(now));
    }
}
