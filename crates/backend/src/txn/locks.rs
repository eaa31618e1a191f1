//! The lock manager of the `txn` layer: isolation between transactions, and between
//! transactions and plain COMPOUNDs (ADR 0021).
//!
//! Locks name objects (a [`FileKey`]) and directory entries (a directory's key and a
//! name), hashed to 64 bits: a collision only makes two unrelated things conflict, which
//! costs a retry, never correctness. Three modes:
//! - `Shared`: reading an object or looking a name up;
//! - `Intent`: changing some entries of a directory (compatible with other `Intent`s, so
//!   two transactions can create different names in one directory);
//! - `Exclusive`: changing an object or an entry.
//!
//! A transaction keeps its locks until it commits or rolls back; a plain call holds its
//! locks only while it runs. No deadlock, by construction: a plain call takes all its
//! locks at once or none (it never waits while holding), and a transaction waits only
//! for plain calls, or while it holds nothing yet; in every other conflict it gives up
//! ([`Conflict`]), rolls back and the client retries after NFS4ERR_DELAY. Every wait is
//! bounded.

use foldhash::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::FileKey;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reading an object's attributes: compatible with `Intent`, so permission checks
    /// and GETATTR of a directory do not wait for transactions creating other names in
    /// it (they may see its size, times and `change` move before those commit).
    Stat,
    Shared,
    Intent,
    Exclusive,
}

impl Mode {
    fn compatible(self, other: Mode) -> bool {
        matches!(
            (self, other),
            (Mode::Shared | Mode::Stat, Mode::Shared | Mode::Stat)
                | (Mode::Intent | Mode::Stat, Mode::Intent | Mode::Stat)
        )
    }
}

/// What a lock protects, hashed.
pub type LockId = u64;

/// The hasher of lock ids: seeded once per process. A lock id lives in memory only;
/// two objects whose ids collide share a lock, which costs waiting, never isolation.
/// (SipHash here was about 1 % of a small READ's instructions: ADR 0064 addendum.)
fn lock_hasher() -> &'static foldhash::quality::RandomState {
    static HASHER: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    HASHER.get_or_init(Default::default)
}

/// The lock on an object.
pub fn object(key: &FileKey) -> LockId {
    lock_hasher().hash_one((0u8, key))
}

/// The lock on the entry `name` of directory `dir`.
pub fn entry(dir: &FileKey, name: &[u8]) -> LockId {
    lock_hasher().hash_one((1u8, dir, name))
}

/// How long a holder keeps a lock (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Txn,
    Compound,
    Call,
}

/// Who holds a lock, by its COMPOUND id (0 for calls made outside any COMPOUND), and
/// for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub id: u64,
    pub kind: Kind,
}

impl Owner {
    pub fn is_txn(self) -> bool {
        self.kind == Kind::Txn
    }

    /// One COMPOUND's locks never conflict with each other, whatever their kind.
    fn same(self, other: Owner) -> bool {
        self.id == other.id
    }
}

#[derive(Debug)]
struct Holder {
    owner: Owner,
    mode: Mode,
    count: u32,
}

#[derive(Default)]
struct Shard {
    held: Mutex<HashMap<LockId, Vec<Holder>>>,
    released: Condvar,
    /// Callers inside `wait` on `released`; changed and read only under `held`'s
    /// mutex. A release notifies only when there is one: the condition variable's
    /// notify is a system call even with nobody waiting, and every plain call
    /// releases its locks (two `futex` calls per READ before this).
    waiters: AtomicUsize,
}

const SHARDS: usize = 64;

/// A lock could not be had in time (or a transaction holding locks met another
/// transaction): the caller answers NFS4ERR_DELAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict;

pub struct LockTable {
    shards: Vec<Shard>,
    /// How long a call may wait for a lock before it gives up.
    max_wait: Duration,
}

/// How a conflicting holder set looks to a would-be taker.
enum Blocked {
    /// Worth waiting for (see the module documentation).
    Waitable,
    /// Waiting could deadlock: give up.
    Abort,
}

/// May `taker`, holding locks already (`holding`), wait for `holder`?
fn may_wait(taker: Owner, holding: bool, holder: Owner) -> bool {
    !holding
        || holder.kind == Kind::Call
        || (taker.kind == Kind::Txn && holder.kind == Kind::Compound)
}

impl LockTable {
    pub fn new(max_wait: Duration) -> Self {
        LockTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            max_wait,
        }
    }

    fn shard(&self, id: LockId) -> &Shard {
        &self.shards[(id as usize) % SHARDS]
    }

    fn lock(shard: &Shard) -> MutexGuard<'_, HashMap<LockId, Vec<Holder>>> {
        // The map stays consistent even if a holder panicked (every update is a single
        // push or count change), so a poisoned mutex is still usable.
        shard.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tries to take `id` in `mode` for `owner`. `Err` says what is in the way.
    fn try_take(&self, owner: Owner, id: LockId, mode: Mode, holding: bool) -> Result<(), Blocked> {
        let shard = self.shard(id);
        let mut held = Self::lock(shard);
        let holders = held.entry(id).or_default();
        let mut blocked = None;
        for h in holders.iter() {
            // Plain callers never conflict with each other: among themselves they run
            // as they would without the layer (no isolation was promised to them); the
            // locks only keep them and transactions apart.
            let plain_pair = !h.owner.is_txn() && !owner.is_txn();
            if plain_pair || h.owner.same(owner) || h.mode.compatible(mode) {
                continue;
            }
            if !may_wait(owner, holding, h.owner) {
                return Err(Blocked::Abort);
            }
            blocked = Some(Blocked::Waitable);
        }
        // (A conflict implies a holder, so no empty entry is left behind here.)
        if let Some(b) = blocked {
            return Err(b);
        }
        match holders
            .iter_mut()
            .find(|h| h.owner == owner && h.mode == mode)
        {
            Some(h) => h.count += 1,
            None => holders.push(Holder {
                owner,
                mode,
                count: 1,
            }),
        }
        Ok(())
    }

    /// Gives back one take of `id` in `mode` by `owner`.
    pub fn release(&self, owner: Owner, id: LockId, mode: Mode) {
        let shard = self.shard(id);
        let mut held = Self::lock(shard);
        if let Some(holders) = held.get_mut(&id) {
            if let Some(i) = holders
                .iter()
                .position(|h| h.owner == owner && h.mode == mode)
            {
                holders[i].count -= 1;
                if holders[i].count == 0 {
                    holders.swap_remove(i);
                }
            }
            if holders.is_empty() {
                held.remove(&id);
            }
        }
        let waited_for = shard.waiters.load(Ordering::Relaxed) > 0;
        drop(held);
        if waited_for {
            shard.released.notify_all();
        }
    }

    /// Waits (at most until `deadline`) for a release in `id`'s shard.
    fn wait(&self, id: LockId, deadline: Instant) -> bool {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let shard = self.shard(id);
        let held = Self::lock(shard);
        // A release between the failed try and this wait is missed; the timeout (short,
        // capped below) bounds the cost of that.
        let step = (deadline - now).min(Duration::from_millis(2));
        shard.waiters.fetch_add(1, Ordering::Relaxed);
        let (held, _) = shard
            .released
            .wait_timeout(held, step)
            .unwrap_or_else(|p| p.into_inner());
        shard.waiters.fetch_sub(1, Ordering::Relaxed);
        drop(held);
        true
    }

    /// Takes every lock of `set` for `owner`, all or none. `holding` says whether the
    /// owner already holds locks beyond this call (then it waits only where the module
    /// documentation allows). On `Ok` the caller owns one take of each entry of `set`.
    pub fn acquire(
        &self,
        owner: Owner,
        set: &[(LockId, Mode)],
        holding: bool,
    ) -> Result<(), Conflict> {
        let deadline = Instant::now() + self.max_wait;
        if self.try_acquire(owner, set) {
            return Ok(());
        }
        crate::blocking::may_block(|| loop {
            let mut taken = 0;
            let mut blocked_on = None;
            for &(id, mode) in set {
                match self.try_take(owner, id, mode, holding) {
                    Ok(()) => taken += 1,
                    Err(Blocked::Abort) => {
                        self.release_set(owner, &set[..taken]);
                        return Err(Conflict);
                    }
                    Err(Blocked::Waitable) => {
                        blocked_on = Some(id);
                        break;
                    }
                }
            }
            let Some(id) = blocked_on else {
                return Ok(());
            };
            self.release_set(owner, &set[..taken]);
            if !self.wait(id, deadline) {
                return Err(Conflict);
            }
        })
    }

    /// Takes every lock of `set` for `owner` if that needs no waiting, all or none.
    pub fn try_acquire(&self, owner: Owner, set: &[(LockId, Mode)]) -> bool {
        for (taken, &(id, mode)) in set.iter().enumerate() {
            if self.try_take(owner, id, mode, true).is_err() {
                self.release_set(owner, &set[..taken]);
                return false;
            }
        }
        true
    }

    pub fn release_set(&self, owner: Owner, set: &[(LockId, Mode)]) {
        for &(id, mode) in set {
            self.release(owner, id, mode);
        }
    }

    /// Locks currently held (for tests and leak checks).
    pub fn held_count(&self) -> usize {
        self.shards.iter().map(|s| Self::lock(s).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: u64) -> Owner {
        Owner {
            id,
            kind: Kind::Txn,
        }
    }
    fn p(id: u64) -> Owner {
        Owner {
            id,
            kind: Kind::Call,
        }
    }
    fn c(id: u64) -> Owner {
        Owner {
            id,
            kind: Kind::Compound,
        }
    }

    #[test]
    fn holders_wait_only_where_no_cycle_can_form() {
        let l = LockTable::new(Duration::from_millis(5));
        l.acquire(c(1), &[(1, Mode::Shared)], false).unwrap();
        // A transaction holding locks waits for a plain COMPOUND's read lock (in vain
        // here: it times out), but gives up at once on another transaction.
        l.acquire(t(2), &[(2, Mode::Exclusive)], false).unwrap();
        let start = Instant::now();
        assert_eq!(
            l.acquire(t(2), &[(1, Mode::Exclusive)], true),
            Err(Conflict)
        );
        assert!(start.elapsed() >= Duration::from_millis(5));
        // A plain COMPOUND holding read locks gives up at once on a transaction.
        let start = Instant::now();
        assert_eq!(l.acquire(c(1), &[(2, Mode::Shared)], true), Err(Conflict));
        assert!(start.elapsed() < Duration::from_millis(5));
    }

    #[test]
    fn modes_conflict_as_documented() {
        let l = LockTable::new(Duration::from_millis(5));
        assert_eq!(l.acquire(t(1), &[(7, Mode::Shared)], false), Ok(()));
        assert_eq!(l.acquire(p(2), &[(7, Mode::Shared)], false), Ok(()));
        assert_eq!(
            l.acquire(p(3), &[(7, Mode::Exclusive)], false),
            Err(Conflict)
        );
        assert_eq!(l.acquire(t(4), &[(8, Mode::Intent)], false), Ok(()));
        assert_eq!(l.acquire(t(5), &[(8, Mode::Intent)], false), Ok(()));
        assert_eq!(l.acquire(p(6), &[(8, Mode::Shared)], false), Err(Conflict));
        // An owner never conflicts with itself, in any mode.
        assert_eq!(
            l.acquire(t(1), &[(7, Mode::Exclusive)], true),
            Err(Conflict)
        );
        l.release(p(2), 7, Mode::Shared);
        assert_eq!(l.acquire(t(1), &[(7, Mode::Exclusive)], true), Ok(()));
        l.release_set(t(1), &[(7, Mode::Shared), (7, Mode::Exclusive)]);
        l.release_set(t(4), &[(8, Mode::Intent)]);
        l.release_set(t(5), &[(8, Mode::Intent)]);
        assert_eq!(l.held_count(), 0);
    }

    #[test]
    fn a_holding_transaction_gives_up_at_once_on_another_transaction() {
        let l = LockTable::new(Duration::from_secs(5));
        l.acquire(t(1), &[(1, Mode::Exclusive)], false).unwrap();
        let start = Instant::now();
        assert_eq!(
            l.acquire(t(2), &[(1, Mode::Exclusive)], true),
            Err(Conflict)
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn all_or_none_and_a_waiter_gets_the_lock_once_released() {
        let l = std::sync::Arc::new(LockTable::new(Duration::from_secs(5)));
        l.acquire(t(1), &[(2, Mode::Exclusive)], false).unwrap();
        // Blocked on 2: must not keep 1.
        let l2 = l.clone();
        let waiter = std::thread::spawn(move || {
            l2.acquire(t(9), &[(1, Mode::Exclusive), (2, Mode::Exclusive)], false)
        });
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(l.acquire(t(3), &[(1, Mode::Exclusive)], false), Ok(()));
        l.release(t(3), 1, Mode::Exclusive);
        l.release(t(1), 2, Mode::Exclusive);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        l.release_set(t(9), &[(1, Mode::Exclusive), (2, Mode::Exclusive)]);
        assert_eq!(l.held_count(), 0);
    }
}
