//! Who holds which locks in the `txn` layer: the COMPOUND a thread runs, the locks a
//! transaction or a plain COMPOUND keeps to its end, and a plain call's guard (the
//! rules themselves are in `locks`).

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::time::Duration;

use super::locks::{Kind, LockId, Mode, Owner};
use super::{Txn, TxnLayer};
use crate::{BackendError, OpCtx, Result};

thread_local! {
    /// The COMPOUND this thread runs (id, transactional), set by `begin_compound`: the
    /// read calls carry no `OpCtx`, and the server runs a whole COMPOUND on one thread.
    pub(super) static CURRENT: Cell<(u64, bool)> = const { Cell::new((0, false)) };
    /// The read locks the plain COMPOUND of this thread holds to its end: (layer, lock,
    /// mode), the layer by address (a COMPOUND may touch several exports).
    pub(super) static HELD: RefCell<HashSet<(usize, LockId, Mode)>> = RefCell::new(HashSet::new());
}

/// Who reads on this thread: its transaction, its plain COMPOUND (read locks kept to
/// the end), or a call outside any COMPOUND.
pub(super) fn current_reader() -> Owner {
    let (id, txn) = CURRENT.with(Cell::get);
    let kind = match (txn, id) {
        (true, _) => Kind::Txn,
        (false, 0) => Kind::Call,
        (false, _) => Kind::Compound,
    };
    Owner { id, kind }
}

impl TxnLayer {
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

    pub(super) fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Does the plain COMPOUND `id` of this thread hold read locks here?
    pub(super) fn compound_holds(&self, id: u64) -> bool {
        let me = self.addr();
        id != 0
            && CURRENT.with(Cell::get).0 == id
            && HELD.with(|h| h.borrow().iter().any(|&(l, _, _)| l == me))
    }

    /// Takes `set` for `owner`: a transaction keeps it until its end, so does a plain
    /// COMPOUND its read locks; a plain call gets a guard that gives them back.
    pub(super) fn lock(&self, owner: Owner, set: &[(LockId, Mode)]) -> Result<LockGuard<'_>> {
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
                self.locks
                    .acquire(owner, &todo, holding)
                    .map_err(|_| BackendError::Conflict)?;
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
        // after its COMPOUND ended, locks as a plain call.)
        let owner = match owner.kind {
            Kind::Txn => Owner {
                kind: Kind::Call,
                ..owner
            },
            _ => owner,
        };
        if owner.kind == Kind::Compound {
            let me = self.addr();
            let todo: Vec<_> = HELD.with(|h| {
                let h = h.borrow();
                set.iter()
                    .copied()
                    .filter(|&(id, m)| !h.contains(&(me, id, m)))
                    .collect()
            });
            if !todo.is_empty() {
                let holding = self.compound_holds(owner.id);
                self.locks
                    .acquire(owner, &todo, holding)
                    .map_err(|_| BackendError::Conflict)?;
                HELD.with(|h| {
                    let mut h = h.borrow_mut();
                    for (id, m) in todo {
                        h.insert((me, id, m));
                    }
                });
            }
            return Ok(LockGuard::none(self));
        }
        self.locks
            .acquire(owner, set, self.compound_holds(owner.id))
            .map_err(|_| BackendError::Conflict)?;
        Ok(LockGuard {
            table: self,
            owner,
            set: set.to_vec(),
        })
    }

    /// Gives back the read locks of this thread's plain COMPOUND `id` here.
    pub(super) fn release_compound(&self, id: u64) {
        let me = self.addr();
        let mine: Vec<_> = HELD.with(|h| {
            let mut h = h.borrow_mut();
            let mine: Vec<_> = h.iter().copied().filter(|&(l, _, _)| l == me).collect();
            for e in &mine {
                h.remove(e);
            }
            mine
        });
        let owner = Owner {
            id,
            kind: Kind::Compound,
        };
        for (_, lock, mode) in mine {
            self.locks.release(owner, lock, mode);
        }
    }

    /// Adds object locks found after a lookup to `guard` (a plain call must not wait
    /// while it holds locks: it gives up with `Conflict` for the retry loop instead).
    pub(super) fn lock_more(
        &self,
        guard: &mut LockGuard<'_>,
        owner: Owner,
        set: &[(LockId, Mode)],
    ) -> Result<()> {
        if owner.is_txn() {
            // A transaction's locks live in the transaction, not in the guard.
            self.lock(owner, set)?;
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
    pub(super) fn retrying<R>(&self, owner: Owner, mut f: impl FnMut() -> Result<R>) -> Result<R> {
        let deadline = std::time::Instant::now() + self.settings.lock_wait;
        loop {
            match f() {
                Err(BackendError::Conflict)
                    if !owner.is_txn()
                        && !self.compound_holds(owner.id)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => return r,
            }
        }
    }
}

/// A plain call's locks, given back when it returns.
pub(super) struct LockGuard<'a> {
    table: &'a TxnLayer,
    owner: Owner,
    set: Vec<(LockId, Mode)>,
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
        }
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.table.locks.release_set(self.owner, &self.set);
    }
}
