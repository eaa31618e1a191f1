//! The server's side of the state core (ADR 0008): taking its lock (a poisoned lock
//! is reported, rechecked and taken back into service, ADR 0029), executing the effects the
//! core returns, housekeeping on the injected clock, and the one pair of stateid
//! conversions between the wire and the core.

use crate::nfs::{nfsstat4, stateid4};
use crate::server::Server;
use crate::session::{ClientId, Session};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use txnfs_state::{ClientList, Effect, FileId, StateCore, Stateid};

/// A core stateid as `stateid4`.
pub fn stateid_to_wire(s: &Stateid) -> stateid4 {
    stateid4 {
        seqid: s.seqid,
        other: s.other,
    }
}

/// A `stateid4` as a core stateid.
pub fn stateid_from_wire(s: &stateid4) -> Stateid {
    Stateid {
        seqid: s.seqid,
        other: s.other,
    }
}

/// The locked state core of [`Server::core`].
pub struct CoreGuard<'a> {
    srv: &'a Server,
    /// `None` only inside `drop`.
    guard: Option<MutexGuard<'a, StateCore>>,
}

impl std::ops::Deref for CoreGuard<'_> {
    type Target = StateCore;
    fn deref(&self) -> &StateCore {
        match &self.guard {
            Some(g) => g,
            None => unreachable!("the guard is taken only when dropped"),
        }
    }
}

impl std::ops::DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut StateCore {
        match &mut self.guard {
            Some(g) => g,
            None => unreachable!("the guard is taken only when dropped"),
        }
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        let effects = guard.take_effects();
        // Effects may write the state directory: never under the core's lock.
        drop(guard);
        if !effects.is_empty() {
            self.srv.apply(effects);
        }
    }
}

impl Server {
    /// The state core, for one decision. A poisoned lock (a thread panicked while
    /// holding it) is taken back into service after the core's invariants are
    /// rechecked ([`Server::lock_core`], ADR 0029): one panicking request must not
    /// turn every later request into `NFS4ERR_SERVERFAULT`. (The `Result` stays for
    /// the callers' `?`; it is always `Ok`.)
    ///
    /// Effects a decision leaves in the core ([`StateCore::take_effects`]: a courtesy
    /// client released by a conflicting OPEN or LOCK) are executed when the guard is
    /// dropped, after the lock is released.
    pub fn core(&self) -> Result<CoreGuard<'_>, nfsstat4> {
        Ok(CoreGuard {
            srv: self,
            guard: Some(self.lock_core("a request")),
        })
    }

    /// The core's lock. When it is poisoned, the core is rechecked
    /// (`StateCore::check_invariants`), the fault logged and counted in
    /// [`Server::core_faults`], and the poison cleared; a broken invariant is logged
    /// at error level and counted in [`Server::core_invariant_failures`], and the
    /// server still goes on (refusing every request would not repair the state;
    /// housekeeping keeps expiring leases either way). `who` names the finder.
    pub(crate) fn lock_core(&self, who: &str) -> MutexGuard<'_, StateCore> {
        match self.core.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let guard = poisoned.into_inner();
                self.recover_core(&guard, who);
                self.core.clear_poison();
                guard
            }
        }
    }

    /// The housekeeping name of [`Server::lock_core`].
    fn core_for_housekeeping(&self, what: &str) -> MutexGuard<'_, StateCore> {
        self.lock_core(what)
    }

    fn recover_core(&self, core: &StateCore, found_by: &str) {
        let n = self.core_faults.fetch_add(1, Ordering::Relaxed) + 1;
        match core.check_invariants() {
            Ok(()) => tracing::error!(
                faults = n,
                found_by,
                "state core lock poisoned (a thread panicked while holding it): \
                 invariants rechecked and hold; serving on"
            ),
            Err(violation) => {
                let m = self.core_invariant_failures.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::error!(
                    faults = n,
                    invariant_failures = m,
                    found_by,
                    %violation,
                    "STATE CORE INCONSISTENT after a panic while holding its lock: serving \
                     on with the state as it is; clients may see wrong open, lock or \
                     delegation state until the server is restarted"
                );
            }
        }
    }

    /// Execute what the core asked for. Call after the core's lock is released.
    pub fn apply(&self, effects: Vec<Effect>) {
        let mut released_clients = false;
        for e in effects {
            match e {
                Effect::PersistClients(list) => self.persist(list),
                Effect::ClientReleased {
                    client,
                    reason,
                    states,
                } => {
                    released_clients = true;
                    // Its asynchronous copies stop with it (ADR 0026).
                    self.offloads.cancel_client(client);
                    tracing::info!(
                        client = format_args!("{client:#x}"),
                        ?reason,
                        states,
                        "released client state"
                    )
                }
                Effect::GraceEnded(end) => tracing::info!(?end, "grace period over"),
                Effect::Callback { client, call } => match self.arc() {
                    Some(me) => me.send_callback(client, call),
                    None => tracing::warn!("callback dropped: the server is shutting down"),
                },
                Effect::Revoke {
                    client,
                    stateid,
                    reason,
                } => match reason {
                    txnfs_state::RevokeReason::Timeout => tracing::info!(
                        client = format_args!("{client:#x}"),
                        ?stateid,
                        "delegation revoked: not returned in time"
                    ),
                    txnfs_state::RevokeReason::Unreachable => tracing::info!(
                        client = format_args!("{client:#x}"),
                        ?stateid,
                        "delegation revoked: holder unreachable (no back channel)"
                    ),
                },
                Effect::DelegationsReleased => {
                    // Watches first: a woken request may open the file.
                    self.unwatch_released();
                    self.recall_waits.notify();
                }
                Effect::NotifyDue { client, id, after } => match self.arc() {
                    Some(me) => me.schedule_notify(client, id, after),
                    None => tracing::warn!("notification dropped: the server is shutting down"),
                },
            }
        }
        if released_clients {
            // Their opens are gone: so are the holds that kept those files alive.
            let released = {
                let core = self.lock_core("releasing holds");
                // No COMPOUND gives them back: a context outside any.
                let cx = txnfs_backend::OpCtx::default();
                self.held.release_closed(&core, None, &cx)
            };
            drop(released);
        }
    }

    /// Write a client list unless a newer one was written already. Writes are
    /// serialised, so two snapshots never race on the same file.
    fn persist(&self, list: ClientList) {
        let mut last = self
            .persisted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if list.generation <= *last {
            return;
        }
        match self.statedir.save_clients(&list.owners) {
            Ok(()) => *last = list.generation,
            Err(e) => tracing::error!(
                "cannot record clients in the state directory (a restart would not wait for them to reclaim): {e}"
            ),
        }
    }

    /// Persist the owners of confirmed clients so that after a restart the grace period
    /// knows whom to wait for.
    pub fn persist_clients(&self) {
        let e = self
            .core_for_housekeeping("persisting clients")
            .persist_clients();
        self.apply(vec![e]);
    }

    /// Periodic housekeeping on the server's clock: expire clients whose lease ran out
    /// (with their opens and locks), end the grace period when due.
    pub fn tick(&self) {
        let now = self.clock.now();
        let effects = {
            let mut core = self.core_for_housekeeping("lease expiry");
            let effects = core.tick(now);
            // Back channels of sessions that expired with their client go too.
            self.callbacks
                .retain(|id| core.sessions().session(id).is_some());
            effects
        };
        self.apply(effects);
        // A backstop for a lost SIGIO (ADR 0027).
        if let Some(me) = self.arc() {
            me.lease_breaks();
        }
        self.reap_transactions(now);
        // Finished copies are reported for two leases (OFFLOAD_STATUS), then forgotten.
        let lease = std::time::Duration::from_secs(u64::from(self.cfg.lease_time.max(1)));
        self.offloads.reap(now, 2 * lease);
    }

    /// Rolls back the transactions of several COMPOUNDs whose session is gone or that
    /// stayed open longer than `txn_timeout`.
    fn reap_transactions(&self, now: std::time::Instant) {
        if self.txns.is_empty() {
            return;
        }
        let expired = {
            // (Reading which sessions exist: a poisoned core was reported by `tick`.)
            let core = self.lock_core("transaction reaping");
            self.txns.expired(now, self.cfg.txn_timeout(), |s| {
                core.sessions().session(s).is_some()
            })
        };
        for t in expired {
            let Some(export) = t.export.and_then(|id| self.exports.get(id)).cloned() else {
                continue;
            };
            tracing::info!(txn = t.id, "rolling back an abandoned transaction");
            let mut scope = crate::export::CompoundScope::with_txn(&self.exports, true);
            scope.set_span(txnfs_backend::TxnSpan::Abort(t.id), Some(export.id));
            if scope
                .enter(&export, &txnfs_backend::Creds::default(), None)
                .is_ok()
            {
                let _ = scope.finish(false);
            }
        }
    }

    /// A transport connection closed: unbind it from every session. A back channel it
    /// was the last connection of is down: requests held for recalls look again (its
    /// client's delegations are revoked at once if it cannot be reached otherwise).
    pub fn connection_closed(&self, conn: u64) {
        self.core_for_housekeeping("connection close")
            .connection_closed(conn);
        if self.callbacks.connection_closed(conn) {
            self.back_channel_lost();
        }
    }

    /// Complete the slot a COMPOUND's SEQUENCE opened (`reply`: the reply to cache, or
    /// `None` when it is not cached).
    pub fn finish_slot(&self, session: &Session, slot: u32, reply: Option<Bytes>) {
        self.lock_core("completing a slot")
            .finish_slot(&session.id, slot, reply);
    }

    /// Validate the stateid of a READ, WRITE or SETATTR(size) of `file`, after another
    /// client's conflicting delegation is recalled and returned (`crate::recall`). One
    /// acquisition of the core's lock when no delegation is in the way, as before
    /// delegations existed: this is every READ's and WRITE's path.
    pub fn check_io(
        &self,
        now: std::time::Instant,
        client: Option<ClientId>,
        sid: &stateid4,
        file: FileId,
        write: bool,
        waited: &crate::placement::WaitClock,
    ) -> Result<(), nfsstat4> {
        let access = if write {
            txnfs_state::Access::Modify
        } else {
            txnfs_state::Access::Read
        };
        let sid = stateid_from_wire(sid);
        let check = |core: &StateCore| {
            core.check_io(client.unwrap_or(0), &sid, file, write)
                .map_err(|e| crate::errors::state_status(&e))
        };
        {
            let mut core = self.core()?;
            if core
                .delegation_conflicts(now, client, file, access, self.unreachable())
                .is_empty()
            {
                return check(&core);
            }
        }
        self.clear_delegations(now, client, file, access, waited)?;
        let core = self.core()?;
        check(&core)
    }
}

#[cfg(test)]
mod tests;
