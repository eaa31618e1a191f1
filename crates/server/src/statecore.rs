//! The state core behind its lock (ADR 0008): taking the lock (a poisoned lock is
//! reported, rechecked and taken back into service, ADR 0029), the guard that hands
//! the effects a decision left in the core to their owner once the lock is released,
//! and the one pair of stateid conversions between the wire and the core.
//!
//! The server owns the core and carries out its effects ([`CoreAccess`] is how the
//! server's parts reach it without knowing the server).

use crate::nfs::{nfsstat4, stateid4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use txnfs_state::{Effect, StateCore, Stateid};

/// The state core as the server's parts reach it: implemented by the server, which
/// owns the core and carries out its effects.
pub trait CoreAccess: Sync {
    /// The core's lock, taken back into service if it was poisoned ([`lock`]). `who`
    /// names the taker in the log.
    fn lock_core(&self, who: &str) -> MutexGuard<'_, StateCore>;

    /// Carry out what the core asked for. Called after the core's lock is released.
    fn apply(&self, effects: Vec<Effect>);

    /// The state core, for one decision: effects it leaves are carried out when the
    /// guard is dropped. (The `Result` is for the callers' `?`; it is always `Ok`.)
    fn core(&self) -> Result<CoreGuard<'_>, nfsstat4>;
}

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

/// The locked state core of [`CoreAccess::core`].
pub struct CoreGuard<'a> {
    owner: &'a dyn CoreAccess,
    /// `None` only inside `drop`.
    guard: Option<MutexGuard<'a, StateCore>>,
}

impl<'a> CoreGuard<'a> {
    /// The core locked by `owner` (who carries out its effects when this is dropped).
    pub fn new(owner: &'a dyn CoreAccess) -> Self {
        CoreGuard {
            owner,
            guard: Some(owner.lock_core("a request")),
        }
    }
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
            self.owner.apply(effects);
        }
    }
}

/// The counts of [`lock`]'s recoveries.
pub struct CoreFaults<'a> {
    /// Times the lock was found poisoned and the core taken back into service.
    pub faults: &'a AtomicU64,
    /// Of those, the times the recheck found a broken invariant.
    pub invariant_failures: &'a AtomicU64,
}

/// The core's lock. When it is poisoned (a thread panicked holding it), the core is
/// rechecked (`StateCore::check_invariants`), the fault logged and counted, and the
/// poison cleared; a broken invariant is logged at error level and counted, and the
/// server still goes on (refusing every request would not repair the state;
/// housekeeping keeps expiring leases either way). `who` names the finder.
pub fn lock<'a>(
    core: &'a Mutex<StateCore>,
    counts: CoreFaults<'_>,
    who: &str,
) -> MutexGuard<'a, StateCore> {
    match core.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            let guard = poisoned.into_inner();
            recover(&guard, counts, who);
            core.clear_poison();
            guard
        }
    }
}

fn recover(core: &StateCore, counts: CoreFaults<'_>, found_by: &str) {
    let n = counts.faults.fetch_add(1, Ordering::Relaxed) + 1;
    match core.check_invariants() {
        Ok(()) => tracing::error!(
            faults = n,
            found_by,
            "state core lock poisoned (a thread panicked while holding it): \
             invariants rechecked and hold; serving on"
        ),
        Err(violation) => {
            let m = counts.invariant_failures.fetch_add(1, Ordering::Relaxed) + 1;
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
