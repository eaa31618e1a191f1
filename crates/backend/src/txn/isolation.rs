//! Who holds which locks in the `txn` layer: the reader a call's [`OpCtx`] names, the
//! locks a transaction or a plain COMPOUND keeps to its end, and a plain call's guard
//! (the rules themselves are in `locks`).
//!
//! Everything is found from the context alone (its `compound`, `txn` and `span`), never
//! from the thread that makes the call: one COMPOUND's calls may come from several
//! threads, and one thread may interleave several COMPOUNDs.

use std::collections::hash_map::Entry;
use std::collections::HashSet;

use foldhash::{HashMap, HashMapExt};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::locks::{Kind, LockId, Mode, Owner};
use super::{Txn, TxnLayer};
use crate::{BackendError, OpCtx, Result, WaitClock};

const SHARDS: usize = 16;

/// A plain COMPOUND open here: whether it runs unlocked (`gate`), else the (lock,
/// mode) pairs it holds.
struct Open {
    unlocked: bool,
    held: HashSet<(LockId, Mode)>,
}

/// One shard: COMPOUND id → what it holds.
type Shard = HashMap<u64, Open>;

/// What a plain COMPOUND's call has to take (`CompoundLocks::missing`).
enum Missing {
    /// Nothing: the COMPOUND runs unlocked.
    Nothing,
    /// These locks, which it does not hold yet.
    Locks(Vec<(LockId, Mode)>),
}

/// The read locks each plain COMPOUND holds in this layer until its `end_compound`, by
/// COMPOUND id (`OpCtx::compound`). A COMPOUND has an entry from its `begin_compound`
/// to its `end_compound` here; a call of a COMPOUND without one (it never began here,
/// or ended already) reads as a plain call. Sharded by id: COMPOUNDs run side by side.
pub(super) struct CompoundLocks {
    shards: Vec<Mutex<Shard>>,
}

impl CompoundLocks {
    pub(super) fn new() -> Self {
        CompoundLocks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, Shard> {
        self.shards[(id % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The plain COMPOUND `id` starts here; false when it had already (no change).
    fn begin(&self, id: u64, unlocked: bool) -> bool {
        match self.shard(id).entry(id) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(Open {
                    unlocked,
                    held: HashSet::new(),
                });
                true
            }
        }
    }

    /// Does the plain COMPOUND `id` hold read locks here?
    pub(super) fn holds(&self, id: u64) -> bool {
        self.shard(id).get(&id).is_some_and(|o| !o.held.is_empty())
    }

    /// Does the plain COMPOUND `id` run unlocked here?
    fn unlocked(&self, id: u64) -> bool {
        self.shard(id).get(&id).is_some_and(|o| o.unlocked)
    }

    /// What of `set` COMPOUND `id` has to take (`None`: it is not open).
    fn missing(&self, id: u64, set: &[(LockId, Mode)]) -> Option<Missing> {
        let shard = self.shard(id);
        let open = shard.get(&id)?;
        if open.unlocked {
            return Some(Missing::Nothing);
        }
        Some(Missing::Locks(
            set.iter()
                .copied()
                .filter(|l| !open.held.contains(l))
                .collect(),
        ))
    }

    /// Records that COMPOUND `id` holds `l`; false if it held it already or is no
    /// longer open (the caller then gives back the count it took).
    fn insert(&self, id: u64, l: (LockId, Mode)) -> bool {
        self.shard(id)
            .get_mut(&id)
            .is_some_and(|o| !o.unlocked && o.held.insert(l))
    }

    /// The COMPOUND `id` ends here: its entry goes, and with it the locks it held.
    fn end(&self, id: u64) -> Option<Open> {
        self.shard(id).remove(&id)
    }
}

impl TxnLayer {
    /// Who reads with `cx`: its transaction, its plain COMPOUND (read locks kept to the
    /// end; `lock` treats a COMPOUND that is not open here as a plain call), or a plain
    /// call (a context outside any COMPOUND).
    pub(super) fn reader(cx: &OpCtx) -> Owner {
        if cx.txn {
            return Self::owner_of(cx);
        }
        let kind = match cx.compound {
            0 => Kind::Call,
            _ => Kind::Compound,
        };
        Owner {
            id: cx.compound,
            kind,
        }
    }

    /// The owner of a change made with `cx`: its transaction, or a plain call (whose
    /// change locks last as long as the call).
    pub(super) fn owner_of(cx: &OpCtx) -> Owner {
        if cx.txn {
            Owner {
                id: cx.span.key(cx.compound),
                kind: Kind::Txn,
            }
        } else {
            Owner {
                id: cx.compound,
                kind: Kind::Call,
            }
        }
    }

    pub(super) fn with_txn<R>(&self, owner: Owner, f: impl FnOnce(&mut Txn) -> R) -> Option<R> {
        if !owner.is_txn() {
            return None;
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get_mut(&owner.id).map(f)
    }

    /// Does the plain COMPOUND `id` hold read locks here?
    pub(super) fn compound_holds(&self, id: u64) -> bool {
        id != 0 && self.compounds.holds(id)
    }

    /// Takes `set` for `owner`: a transaction keeps it until its end, so does a plain
    /// COMPOUND its read locks; a plain call gets a guard that gives them back.
    pub(super) fn lock(
        &self,
        waited: &WaitClock,
        owner: Owner,
        set: &[(LockId, Mode)],
    ) -> Result<LockGuard<'_>> {
        let in_txn = self.with_txn(owner, |t| {
            let todo: Vec<_> = set
                .iter()
                .copied()
                .filter(|l| !t.held.contains(l))
                .collect();
            (todo, !t.locks.is_empty())
        });
        if let Some((todo, holding)) = in_txn {
            if !todo.is_empty() {
                self.acquire(waited, owner, &todo, holding)?;
                self.with_txn(owner, |t| {
                    for l in todo {
                        if t.held.insert(l) {
                            t.locks.push(l);
                        } else {
                            self.locks.release(owner, l.0, l.1);
                        }
                    }
                });
            }
            return Ok(LockGuard::none(self));
        }
        // (A transactional owner without an open transaction here, e.g. a call made
        // after its COMPOUND ended, locks as a plain call; so does a plain COMPOUND that
        // is not open here, or no longer.)
        let todo = match owner.kind {
            Kind::Compound => self.compounds.missing(owner.id, set),
            // A plain change of an unlocked COMPOUND takes nothing either.
            Kind::Call if owner.id != 0 && self.compounds.unlocked(owner.id) => {
                return Ok(LockGuard::unlocked(self));
            }
            _ => None,
        };
        let owner = match todo {
            Some(_) => owner,
            None => Owner {
                kind: Kind::Call,
                ..owner
            },
        };
        match todo {
            Some(Missing::Nothing) => return Ok(LockGuard::unlocked(self)),
            Some(Missing::Locks(todo)) => {
                if !todo.is_empty() {
                    let holding = self.compound_holds(owner.id);
                    self.acquire(waited, owner, &todo, holding)?;
                    for l in todo {
                        // Taken twice (two calls of the COMPOUND at once) or after its
                        // end: the extra count goes back.
                        if !self.compounds.insert(owner.id, l) {
                            self.locks.release(owner, l.0, l.1);
                        }
                    }
                }
                return Ok(LockGuard::none(self));
            }
            None => {}
        }
        self.acquire(waited, owner, set, self.compound_holds(owner.id))?;
        Ok(LockGuard {
            table: self,
            owner,
            set: set.to_vec(),
            unlocked: false,
        })
    }

    /// Takes `set` for `owner` (`LockTable::acquire`), counting a wait for others on
    /// `waited`. Free locks are taken without reading the clock: most calls never wait,
    /// and a clock read costs as much as the lock itself.
    fn acquire(
        &self,
        waited: &WaitClock,
        owner: Owner,
        set: &[(LockId, Mode)],
        holding: bool,
    ) -> Result<()> {
        if self.locks.try_acquire(owner, set) {
            return Ok(());
        }
        waited
            .timed(|| self.locks.acquire(owner, set, holding))
            .map_err(|_| BackendError::Conflict)
    }

    /// The plain COMPOUND `id` starts here: from now on its reads keep their locks, or,
    /// while no transaction is open, it runs unlocked to its end (`gate`).
    pub(super) fn begin_plain_compound(&self, id: u64) {
        if id != 0 {
            let unlocked = self.gate.enter();
            if !self.compounds.begin(id, unlocked) && unlocked {
                self.gate.leave();
            }
        }
    }

    /// Gives back the read locks of the plain COMPOUND `id` here (at its end).
    pub(super) fn release_compound(&self, id: u64) {
        let Some(open) = self.compounds.end(id) else {
            return;
        };
        if open.unlocked {
            self.gate.leave();
            return;
        }
        let owner = Owner {
            id,
            kind: Kind::Compound,
        };
        for (lock, mode) in open.held {
            self.locks.release(owner, lock, mode);
        }
    }

    /// Adds object locks found after a lookup to `guard` (a plain call must not wait
    /// while it holds locks: it gives up with `Conflict` for the retry loop instead).
    pub(super) fn lock_more(
        &self,
        guard: &mut LockGuard<'_>,
        waited: &WaitClock,
        owner: Owner,
        set: &[(LockId, Mode)],
    ) -> Result<()> {
        if owner.is_txn() {
            // A transaction's locks live in the transaction, not in the guard.
            self.lock(waited, owner, set)?;
            return Ok(());
        }
        if guard.unlocked {
            return Ok(());
        }
        if !self.locks.try_acquire(owner, set) {
            return Err(BackendError::Conflict);
        }
        guard.set.extend_from_slice(set);
        Ok(())
    }

    /// Runs a plain mutator that locks in two steps (entries, then the objects found
    /// under them) until it gets every lock without waiting while holding one, or the
    /// lock wait runs out. (Not when its COMPOUND holds read locks: that one must not
    /// wait at all, see `locks`.)
    pub(super) fn retrying<R>(
        &self,
        waited: &WaitClock,
        owner: Owner,
        mut f: impl FnMut() -> Result<R>,
    ) -> Result<R> {
        let deadline = std::time::Instant::now() + self.settings.lock_wait;
        let may_wait = || {
            !owner.is_txn()
                && !self.compound_holds(owner.id)
                && std::time::Instant::now() < deadline
        };
        match f() {
            Err(BackendError::Conflict) if may_wait() => {}
            r => return r,
        }
        waited.timed(|| {
            crate::blocking::may_block(|| loop {
                std::thread::sleep(Duration::from_millis(1));
                match f() {
                    Err(BackendError::Conflict) if may_wait() => {}
                    r => return r,
                }
            })
        })
    }
}

/// A plain call's locks, given back when it returns.
pub(super) struct LockGuard<'a> {
    table: &'a TxnLayer,
    owner: Owner,
    set: Vec<(LockId, Mode)>,
    /// The call's COMPOUND runs unlocked: `lock_more` takes nothing either.
    unlocked: bool,
}

impl<'a> LockGuard<'a> {
    pub(super) fn none(table: &'a TxnLayer) -> Self {
        LockGuard {
            table,
            owner: Owner {
                id: 0,
                kind: Kind::Txn,
            },
            set: Vec::new(),
            unlocked: false,
        }
    }

    /// The call's COMPOUND runs unlocked (`gate`): a plain change needs no lookup to
    /// find the objects to lock.
    pub(super) fn is_unlocked(&self) -> bool {
        self.unlocked
    }

    fn unlocked(table: &'a TxnLayer) -> Self {
        let mut g = Self::none(table);
        g.unlocked = true;
        g
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.table.locks.release_set(self.owner, &self.set);
    }
}
