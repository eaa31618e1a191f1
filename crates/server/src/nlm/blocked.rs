//! Blocking NLM locks (`block` set in NLM4_LOCK; X/Open XNFS §10.14.2): a lock that
//! conflicts is answered NLM4_BLOCKED and waits here. Whenever a lock may have gone
//! (an NLM UNLOCK, a released host, a v4 LOCKU: a wake-up) and once a second anyway
//! (a v4 lock-owner released, or a lease expiry, which this module does not hear of),
//! the waiters are tried
//! in arrival order; one that gets its range is told with NLM4_GRANTED at its host's
//! lockd. A host that answers anything but NLM4_GRANTED no longer waits, and the lock
//! is released; a host that cannot be reached keeps the lock, and finds it at its next
//! retransmission of the LOCK (Linux retries every 30 seconds).
//!
//! A waiter not retransmitted for [`FORGET_AFTER`] is forgotten (its host gave up
//! without a CANCEL).

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use txnfs_proto::nlm4::*;
use txnfs_state::{ClientId, NlmLock, StateError};
use txnfs_xdr::{Decode, Encode};

use crate::server::Server;

/// Waiting locks at most; a blocking LOCK past it is refused (NLM4_DENIED_NOLOCKS).
pub const MAX_BLOCKED: usize = 1024;
/// A waiter not retransmitted for this long is forgotten.
pub const FORGET_AFTER: Duration = Duration::from_secs(120);
/// How often the waiters are tried without a wake-up.
pub const POLL: Duration = Duration::from_secs(1);
/// NLM4_GRANTED attempts, and the pause between them.
const GRANTED_ATTEMPTS: u32 = 3;
const GRANTED_PAUSE: Duration = Duration::from_secs(2);

const NLM4_GRANTED_PROC: u32 = 5;

/// One blocked lock.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub req: NlmLock,
    /// What NLM4_GRANTED tells the host: the LOCK's cookie and lock.
    pub cookie: Bytes,
    pub exclusive: bool,
    pub alock: nlm4_lock,
    /// Where the host's lockd is.
    pub addr: IpAddr,
    /// Last (re)transmission of the LOCK.
    pub refreshed: Instant,
}

fn same(a: &NlmLock, b: &NlmLock) -> bool {
    (a.host, a.file, &a.owner, a.lock_type, a.offset, a.length)
        == (b.host, b.file, &b.owner, b.lock_type, b.offset, b.length)
}

#[derive(Default)]
pub struct Blocked {
    list: Mutex<Vec<Waiter>>,
    wake: Notify,
}

impl Blocked {
    /// `w` waits (a retransmission refreshes its entry); `false` when
    /// [`MAX_BLOCKED`] wait already.
    pub fn add(&self, w: Waiter) -> bool {
        let mut list = super::lock(&self.list);
        if let Some(old) = list.iter_mut().find(|o| same(&o.req, &w.req)) {
            *old = w;
            return true;
        }
        if list.len() >= MAX_BLOCKED {
            return false;
        }
        list.push(w);
        true
    }

    /// CANCEL, or the lock was granted to a LOCK itself: the waiter of `req` goes.
    /// Whether there was one.
    pub fn cancel(&self, req: &NlmLock) -> bool {
        let mut list = super::lock(&self.list);
        let before = list.len();
        list.retain(|w| !same(&w.req, req));
        list.len() != before
    }

    /// Every waiter of `host` goes.
    pub fn release_host(&self, host: ClientId) {
        super::lock(&self.list).retain(|w| w.req.host != host);
    }

    /// Whether a lock of `host` waits.
    pub fn waits(&self, host: ClientId) -> bool {
        super::lock(&self.list).iter().any(|w| w.req.host == host)
    }

    pub fn len(&self) -> usize {
        super::lock(&self.list).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A lock may have gone: try the waiters now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Tries the waiters until the task is aborted (started by `crate::service::run`).
pub async fn run(srv: Arc<Server>) {
    loop {
        tokio::select! {
            _ = srv.nlm.blocked.wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        if srv.nlm.blocked.is_empty() {
            continue;
        }
        let s = srv.clone();
        let Ok(granted) = tokio::task::spawn_blocking(move || retry(&s)).await else {
            continue;
        };
        for w in granted {
            let srv = srv.clone();
            tokio::spawn(async move { send_granted(&srv, w).await });
        }
    }
}

/// One round: forgets stale waiters, tries the others in order; returns those
/// granted.
pub fn retry(srv: &Server) -> Vec<Waiter> {
    let now = srv.clock.now();
    let mut list = super::lock(&srv.nlm.blocked.list);
    list.retain(|w| now.saturating_duration_since(w.refreshed) < FORGET_AFTER);
    let mut granted = Vec::new();
    let Ok(mut core) = srv.core() else {
        return granted;
    };
    let mut i = 0;
    while i < list.len() {
        match core.nlm_lock(now, false, &list[i].req) {
            Ok(()) => granted.push(list.remove(i)),
            Err(StateError::Denied(_) | StateError::Grace) => i += 1,
            Err(e) => {
                tracing::debug!(error = ?e, "a blocked NLM lock cannot be granted: forgotten");
                list.remove(i);
            }
        }
    }
    granted
}

/// NLM4_GRANTED to the waiter's host; the lock is released if the host no longer
/// wants it.
async fn send_granted(srv: &Arc<Server>, w: Waiter) {
    let args = nlm4_testargs {
        cookie: w.cookie.clone(),
        exclusive: w.exclusive,
        alock: w.alock.clone(),
    }
    .to_bytes();
    let port = srv.nlm.client_rpcbind_port();
    for attempt in 1..=GRANTED_ATTEMPTS {
        let r = super::callback::call(
            w.addr,
            port,
            super::NLM_PROGRAM,
            super::NLM_V4,
            NLM4_GRANTED_PROC,
            args.clone(),
        )
        .await;
        match r.map(nlm4_res::from_bytes) {
            Ok(Ok(res)) if res.stat.stat == nlm4_stats::NLM4_GRANTED => return,
            Ok(Ok(res)) => {
                tracing::debug!(status = ?res.stat.stat, "NLM4_GRANTED refused: the lock is released");
                let s = srv.clone();
                let req = w.req.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Ok(mut core) = s.core() {
                        let _ = core.nlm_unlock(&req);
                    }
                    s.nlm.blocked.wake();
                })
                .await;
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!("undecodable NLM4_GRANTED reply: {e}");
                return;
            }
            Err(e) if attempt == GRANTED_ATTEMPTS => tracing::info!(
                addr = %w.addr,
                "cannot send NLM4_GRANTED ({e}): the lock stays granted for the client's next retry"
            ),
            Err(_) => tokio::time::sleep(GRANTED_PAUSE).await,
        }
    }
}
