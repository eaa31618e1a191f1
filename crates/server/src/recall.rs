//! Recall-and-wait (ADR 0017): a request that conflicts with another
//! client's delegation is held in the server while the holder is asked to give it back
//! (CB_RECALL), and answered as soon as the delegation is returned, not with
//! NFS4ERR_DELAY for the client to poll. A holder that stays silent for
//! `Config::recall_wait` makes the request answer DELAY, and loses the delegation. A
//! request held on its connection's reader gives way with DELAY, revoking nothing, once
//! its own client's delegations are recalled, or after 20 ms when its connection had
//! other calls lately (ADR 0062).
//!
//! The executor is synchronous, so holding a request means blocking its thread: on a
//! blocking-pool thread directly, on a multi-threaded runtime's worker through
//! `block_in_place` (the runtime moves its other tasks to another worker first). Where
//! neither is possible — a current-thread runtime, or the simulation, which runs
//! without one — the request is answered DELAY at once, the recall still goes out, and
//! the client's retry finds the delegation gone. At most `Config::max_held_requests`
//! requests are held at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use txnfs_backend::Timestamp;
use txnfs_proto::nfs4::*;
use txnfs_state::clock::Clock;
use txnfs_state::{Access, Callback, ClientId, FileId, HoldOutcome, RevokeReason, Stateid};

use crate::callback::{cb_compound, CallbackFailure, Callbacks, SessionCallback};
use crate::config::Config;
use crate::placement::WaitClock;
use crate::statecore::{stateid_to_wire, CoreAccess};
pub use crate::waitmode::on_blocking_pool;
use crate::waitmode::{blocking, wait_mode, WaitMode};

/// Wakes requests held for recalls when delegations go away.
#[derive(Debug, Default)]
pub struct RecallWaits {
    generation: Mutex<u64>,
    changed: Condvar,
    held: AtomicUsize,
}

impl RecallWaits {
    /// Delegations went away: every held request looks again.
    pub fn notify(&self) {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += 1;
        self.changed.notify_all();
    }

    fn generation(&self) -> u64 {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Block until the generation moves past `seen` or `deadline` passes.
    fn wait(&self, seen: u64, deadline: Instant) {
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *g == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Requests held right now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// When a held request stops waiting without its delegations back (NFS4ERR_DELAY, no
/// revocation): once a delegation of `own` is being recalled, at `at`, or, from
/// `behind_from` on, once another call of its connection has arrived behind it
/// (`txnfs_rpc::calls_waiting_behind`).
#[derive(Debug, Clone, Copy, Default)]
struct GiveWay {
    own: Option<ClientId>,
    at: Option<Instant>,
    behind_from: Option<Instant>,
}

impl GiveWay {
    /// Whether the request should give way now (`own_recalled` says whether a
    /// delegation of its own client is being recalled).
    fn now(&self, now: Instant, own_recalled: impl FnOnce(ClientId) -> bool) -> bool {
        self.at.is_some_and(|at| now >= at)
            || self.own.is_some_and(own_recalled)
            || self
                .behind_from
                .is_some_and(|from| now >= from && txnfs_rpc::calls_waiting_behind() == Some(true))
    }

    /// Whether it must look again every few milliseconds (a recall of its own client
    /// and a call arriving behind it wake no one).
    fn polls(&self) -> bool {
        self.own.is_some() || self.behind_from.is_some()
    }
}

/// How long a request held on its connection's reader waits when that connection had
/// other calls lately (`waitmode::reader_has_company`), or once a call has arrived
/// behind it: a holder on the same network returns within a few milliseconds, and the
/// calls behind it should not wait for a silent one.
const INLINE_HOLD: Duration = Duration::from_millis(20);

struct HeldGuard<'a>(&'a AtomicUsize);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Recall-and-wait as the server's parts reach it: the state core, the back
/// channels, the held requests' wake-ups, the clock and the configuration. The server
/// makes one per use (`Server::recall`).
#[derive(Clone, Copy)]
pub struct Recall<'a> {
    pub core: &'a dyn CoreAccess,
    pub callbacks: &'a Callbacks,
    pub waits: &'a RecallWaits,
    pub clock: &'a dyn Clock,
    pub cfg: &'a Config,
}

impl<'a> Recall<'a> {
    /// Hold the current request until no other client's delegation conflicts with
    /// `access` to `file`: conflicting delegations are recalled (the CB_RECALLs go out
    /// when the core's guard is dropped) and the request waits for their return.
    ///
    /// Only a holder that can answer is waited for. One that cannot — its back channel
    /// is down (connection closed, a callback failed at the transport or session
    /// level), it has no session left, or its lease ran out — loses the delegation at
    /// once (revoked, [`RevokeReason::Unreachable`]) and the request proceeds; this is
    /// checked again whenever something changes (a connection closes, a callback
    /// fails, a session goes). A reachable holder that does not return within
    /// `Config::recall_wait` loses the delegation too ([`RevokeReason::Timeout`]) and
    /// the request is answered NFS4ERR_DELAY; so is a request that cannot be held (see
    /// the module documentation).
    /// The time spent waiting is added to `waited`.
    pub fn clear_delegations(
        &self,
        now: std::time::Instant,
        client: Option<ClientId>,
        file: FileId,
        access: Access,
        waited: &WaitClock,
    ) -> Result<(), nfsstat4> {
        let ids =
            self.core
                .core()?
                .delegation_conflicts(now, client, file, access, self.unreachable());
        if ids.is_empty() {
            return Ok(());
        }
        let mode = wait_mode();
        if mode == WaitMode::Never {
            return Err(nfsstat4::NFS4ERR_DELAY);
        }
        let waits = self.waits;
        if waits.held.fetch_add(1, Ordering::Relaxed) >= self.cfg.max_held_requests {
            waits.held.fetch_sub(1, Ordering::Relaxed);
            return Err(nfsstat4::NFS4ERR_DELAY);
        }
        let _held = HeldGuard(&waits.held);
        let start = Instant::now();
        let deadline = start + self.cfg.recall_wait();
        let r = match mode {
            // Held on its connection's reader (ADR 0057): nothing more of that connection
            // is read while it waits, not even its own client's DELEGRETURNs. Should that
            // client's delegations be recalled meanwhile (another client waits for them;
            // two clients may wait for each other so), the request gives way: NFS4ERR_DELAY,
            // and its client's returns come in. So it does after `INLINE_HOLD` when its
            // connection had other calls lately (they would wait behind it), and, from
            // `INLINE_HOLD` on, once a call has arrived behind it.
            WaitMode::InPlace => {
                let on_reader = txnfs_rpc::on_connection_reader();
                let give_way = GiveWay {
                    own: client,
                    at: crate::waitmode::reader_has_company().then(|| start + INLINE_HOLD),
                    behind_from: on_reader.then(|| start + INLINE_HOLD),
                };
                self.wait(&ids, mode, start, deadline, give_way)
            }
            _ => self.wait_for_return(&ids, mode, start, deadline),
        };
        waited.add(start.elapsed());
        r
    }

    /// Wait (as `mode` allows, never with [`WaitMode::Never`]) until none of the
    /// delegations `ids` is held any more; revoke a holder that cannot be reached at
    /// once, and at `deadline` the rest (then NFS4ERR_DELAY).
    pub(crate) fn wait_for_return(
        &self,
        ids: &[u64],
        mode: WaitMode,
        start: Instant,
        deadline: Instant,
    ) -> Result<(), nfsstat4> {
        self.wait(ids, mode, start, deadline, GiveWay::default())
    }

    /// [`Recall::wait_for_return`], giving way (NFS4ERR_DELAY, no revocation) as
    /// `give_way` says.
    fn wait(
        &self,
        ids: &[u64],
        mode: WaitMode,
        start: Instant,
        deadline: Instant,
        give_way: GiveWay,
    ) -> Result<(), nfsstat4> {
        // A recall of the waiter's own client wakes no one: look every few milliseconds.
        const LOOK_AGAIN: Duration = Duration::from_millis(2);
        let waits = self.waits;
        let mut revoked_some = false;
        blocking(mode, || loop {
            let seen = waits.generation();
            {
                let mut core = self.core.core()?;
                revoked_some |= core.revoke_unreachable(self.clock.now(), ids, self.unreachable());
                if !core.delegations_held(ids) {
                    let outcome = if revoked_some {
                        HoldOutcome::Unreachable
                    } else {
                        HoldOutcome::Returned
                    };
                    core.note_hold(outcome, start.elapsed());
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    core.revoke_delegations(ids, RevokeReason::Timeout);
                    core.note_hold(HoldOutcome::Timeout, start.elapsed());
                    return Err(nfsstat4::NFS4ERR_DELAY);
                }
                if give_way.now(Instant::now(), |own| core.client_is_recalled(own)) {
                    core.note_hold(HoldOutcome::GaveWay, start.elapsed());
                    return Err(nfsstat4::NFS4ERR_DELAY);
                }
            }
            // Wake at the deadline, at the time to give way, and (only to see whether
            // its own client is recalled or a call arrived behind it) every `LOOK_AGAIN`.
            let mut until = give_way.at.map_or(deadline, |at| at.min(deadline));
            if give_way.polls() {
                until = until.min(Instant::now() + LOOK_AGAIN);
            }
            waits.wait(seen, until);
        })
    }

    /// Whether a recall cannot reach a client (see [`Callbacks::client_reachable`]).
    /// Called under the core's lock: the callback registry's locks are taken after it,
    /// never before.
    ///
    /// [`Callbacks::client_reachable`]: crate::callback::Callbacks::client_reachable
    pub fn unreachable(&self) -> impl Fn(ClientId) -> bool + 'a {
        let callbacks = self.callbacks;
        move |c| !callbacks.client_reachable(c)
    }

    /// The back channel of some client may have gone: requests held for recalls look
    /// again (a holder that cannot be reached any more loses its delegation at once).
    pub fn back_channel_lost(&self) {
        self.waits.notify();
    }

    /// Deliver a callback the core asked for (the server spawns this on its runtime;
    /// without one the simulation delivers it). CB_RECALL goes to a session of the
    /// holder with a working back channel. When the recall cannot be delivered — no
    /// back channel, a transport failure, a refusal at the session level — the
    /// session's path is marked down and the requests held for the delegation are
    /// woken: they revoke it at once if the holder has no other way to be reached. A
    /// transport failure is retried (the client may be reconnecting) until the
    /// delegation is gone or the recall wait is over.
    pub async fn deliver(self, client: ClientId, call: Callback) {
        let Callback::Recall {
            stateid,
            fh,
            truncate,
        } = call;
        let give_up = tokio::time::Instant::now() + self.cfg.recall_wait();
        let mut bad_stateid_retried = false;
        loop {
            let r = match self.callbacks.session_of(client) {
                Some(s) => recall(self.cfg, &s, &stateid, &fh, truncate).await,
                // A v4.0 holder: over its own callback connection.
                None => match self.callbacks.v40.get(client) {
                    Some(t) => {
                        let sid = stateid_to_wire(&stateid);
                        let timeout = self.cfg.callback_timeout();
                        crate::callback40::recall(&t, sid, fh.clone(), truncate, timeout).await
                    }
                    None => Err(CallbackFailure::NoBackChannel),
                },
            };
            match r {
                Ok(()) => return,
                // The client may not know the delegation yet (the OPEN reply that
                // granted it is still on its way): once more, shortly (as knfsd).
                Err(CallbackFailure::Status(nfsstat4::NFS4ERR_BAD_STATEID))
                    if !bad_stateid_retried =>
                {
                    bad_stateid_retried = true;
                }
                Err(e) => {
                    tracing::info!(
                        client = format_args!("{client:#x}"),
                        "CB_RECALL failed: {e}"
                    );
                    if e.proves_unreachable() {
                        self.back_channel_lost();
                    }
                    if matches!(e, CallbackFailure::Status(_) | CallbackFailure::Sequence(_)) {
                        return;
                    }
                }
            }
            if tokio::time::Instant::now() >= give_up || !self.delegation_live(client, &stateid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn delegation_live(&self, client: ClientId, sid: &Stateid) -> bool {
        self.core
            .core()
            .map(|c| c.delegations().test(client, sid).is_ok())
            .unwrap_or(false)
    }

    /// CB_GETATTR (RFC 8881 §20.1) of size and change (and, with `timestamps`, the
    /// delegated times) to the write-delegation holder `client` of the file `fh`,
    /// waiting at most the callback timeout. `None` when the answer did not come (the
    /// caller recalls instead) or the thread may not wait.
    pub fn cb_getattr(
        &self,
        client: ClientId,
        fh: &Bytes,
        timestamps: bool,
        waited: &WaitClock,
    ) -> Option<HolderAttrs> {
        let mode = wait_mode();
        if mode == WaitMode::Never {
            return None;
        }
        let s = self.callbacks.session_of(client)?;
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let timeout = self.cfg.callback_timeout();
        let (tx, rx) = std::sync::mpsc::channel();
        let fh = fh.clone();
        rt.spawn(async move {
            let op = nfs_cb_argop4::OP_CB_GETATTR(CB_GETATTR4args {
                fh,
                attr_request: if timestamps {
                    vec![
                        (1 << FATTR4_SIZE) | (1 << FATTR4_CHANGE),
                        0,
                        DELEG_TIMES_WORD2,
                    ]
                } else {
                    vec![(1 << FATTR4_SIZE) | (1 << FATTR4_CHANGE)]
                },
            });
            let r = cb_compound(&s, vec![op], timeout).await;
            s.observe(&r);
            let _ = tx.send(r);
        });
        let asked = Instant::now();
        let r = blocking(mode, || {
            rx.recv_timeout(timeout + Duration::from_millis(100))
        });
        waited.add(asked.elapsed());
        let results = r.ok()?.ok()?;
        let Some(nfs_cb_resop4::OP_CB_GETATTR(CB_GETATTR4res::NFS4_OK(ok))) =
            results.into_iter().next()
        else {
            return None;
        };
        holder_attrs(&ok.obj_attributes)
    }
}

/// CB_RECALL of `stateid` on the session `s`.
async fn recall(
    cfg: &Config,
    s: &SessionCallback,
    stateid: &Stateid,
    fh: &Bytes,
    truncate: bool,
) -> Result<(), CallbackFailure> {
    let op = nfs_cb_argop4::OP_CB_RECALL(CB_RECALL4args {
        stateid: stateid_to_wire(stateid),
        truncate,
        fh: fh.clone(),
    });
    let r = cb_compound(s, vec![op], cfg.callback_timeout()).await;
    s.observe(&r);
    match r?.into_iter().next() {
        Some(nfs_cb_resop4::OP_CB_RECALL(CB_RECALL4res { status }))
            if status != nfsstat4::NFS4_OK =>
        {
            Err(CallbackFailure::Status(status))
        }
        _ => Ok(()),
    }
}

/// What a write-delegation holder told CB_GETATTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderAttrs {
    pub size: u64,
    pub change: u64,
    /// With delegated timestamps (RFC 9754): the holder's access and modify times.
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
}

/// `time_deleg_access` and `time_deleg_modify` in the third bitmap word (84, 85).
const DELEG_TIMES_WORD2: u32 =
    (1 << (FATTR4_TIME_DELEG_ACCESS - 64)) | (1 << (FATTR4_TIME_DELEG_MODIFY - 64));

/// The attributes of a CB_GETATTR reply (RFC 8881 §20.1.3: the client returns what it
/// has of the requested ones, in bit order: change (3), size (4), then the delegated
/// times (84, 85) when asked). Size and change must both be there.
fn holder_attrs(f: &fattr4) -> Option<HolderAttrs> {
    let want0 = (1u32 << FATTR4_CHANGE) | (1u32 << FATTR4_SIZE);
    let m = &f.attrmask;
    if m.first().copied().unwrap_or(0) != want0
        || m.get(1).copied().unwrap_or(0) != 0
        || m.get(2).copied().unwrap_or(0) & !DELEG_TIMES_WORD2 != 0
        || m.iter().skip(3).any(|w| *w != 0)
    {
        return None;
    }
    let mut v = f.attr_vals.clone();
    let change = txnfs_xdr::get_u64(&mut v).ok()?;
    let size = txnfs_xdr::get_u64(&mut v).ok()?;
    let time = |v: &mut Bytes| -> Option<Timestamp> {
        let sec = txnfs_xdr::get_i64(v).ok()?;
        let nsec = txnfs_xdr::get_u32(v).ok()?;
        (nsec < 1_000_000_000).then_some(Timestamp { sec, nsec })
    };
    let word2 = m.get(2).copied().unwrap_or(0);
    let atime = if word2 & (1 << (FATTR4_TIME_DELEG_ACCESS - 64)) != 0 {
        Some(time(&mut v)?)
    } else {
        None
    };
    let mtime = if word2 & (1 << (FATTR4_TIME_DELEG_MODIFY - 64)) != 0 {
        Some(time(&mut v)?)
    } else {
        None
    };
    if !v.is_empty() {
        return None;
    }
    Some(HolderAttrs {
        size,
        change,
        atime,
        mtime,
    })
}
