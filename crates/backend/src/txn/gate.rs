//! Whether plain COMPOUNDs need locks at all (ADR 0058).
//!
//! Plain callers never conflict with each other (`locks`): their locks only keep them
//! and transactions apart. While no transaction is open in the layer they protect
//! nothing, yet a READ paid for taking, recording and giving back two of them (a tenth
//! of the server's CPU per READ). So a plain COMPOUND that starts while no transaction
//! is open runs *unlocked*: its calls take no locks at all, to its end. A transaction
//! that opens first closes the gate (plain COMPOUNDs that start from then on lock as
//! before) and then waits for the unlocked ones to end before it takes its first lock,
//! so it never meets an unlocked reader or writer.
//!
//! The handshake is Dekker's: each side raises its own counter, then reads the other's
//! (sequentially consistent), so at least one of them sees the other and backs off or
//! waits. The wait is bounded by the layer's lock wait; a transaction that cannot
//! open in time answers `Conflict` (NFS4ERR_DELAY), like one that cannot get a lock.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct Gate {
    /// Transactions open in the layer, from before their first lock until their locks
    /// are released (a rollback that stopped half-way keeps its count).
    txns: AtomicUsize,
    /// Plain COMPOUNDs running unlocked.
    unlocked: AtomicUsize,
    /// Where an opening transaction waits for `unlocked` to reach 0.
    drained: Mutex<()>,
    drained_cv: Condvar,
}

impl Gate {
    /// A plain COMPOUND starts: true when it runs unlocked (then it must `leave`).
    pub(super) fn enter(&self) -> bool {
        if self.txns.load(SeqCst) != 0 {
            return false;
        }
        self.unlocked.fetch_add(1, SeqCst);
        if self.txns.load(SeqCst) == 0 {
            return true;
        }
        // A transaction opened meanwhile: lock after all (and let it stop waiting).
        self.leave();
        false
    }

    /// An unlocked plain COMPOUND ends.
    pub(super) fn leave(&self) {
        if self.unlocked.fetch_sub(1, SeqCst) == 1 && self.txns.load(SeqCst) != 0 {
            // (Under the mutex: a transaction between its check and its wait holds it,
            // so this notify cannot fall in between.)
            let _g = self.drained.lock().unwrap_or_else(|p| p.into_inner());
            self.drained_cv.notify_all();
        }
    }

    /// A transaction opens: plain COMPOUNDs lock from now on, and this waits (until
    /// `deadline`) for the unlocked ones to end. False when they did not: the
    /// transaction is not open (nothing to `close_txn`).
    pub(super) fn open_txn(&self, deadline: Instant) -> bool {
        self.txns.fetch_add(1, SeqCst);
        if self.unlocked.load(SeqCst) == 0 {
            return true;
        }
        let drained = crate::blocking::may_block(|| {
            let mut g = self.drained.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if self.unlocked.load(SeqCst) == 0 {
                    return true;
                }
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                // (Capped: a COMPOUND that ends unlocked while no transaction had
                // opened yet does not notify.)
                let step = (deadline - now).min(Duration::from_millis(1));
                g = self
                    .drained_cv
                    .wait_timeout(g, step)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        });
        if !drained {
            self.close_txn();
        }
        drained
    }

    /// A transaction's locks are released: it no longer counts.
    pub(super) fn close_txn(&self) {
        self.txns.fetch_sub(1, SeqCst);
    }

    /// Transactions open (tests and leak checks).
    #[cfg(test)]
    pub(super) fn open_txns(&self) -> usize {
        self.txns.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn plain_compounds_run_unlocked_only_while_no_transaction_is_open() {
        let g = Gate::default();
        assert!(g.enter(), "no transaction: unlocked");
        assert!(g.enter());
        g.leave();
        g.leave();
        assert!(g.open_txn(Instant::now()), "nothing to wait for");
        assert!(!g.enter(), "a transaction is open: lock");
        g.close_txn();
        assert!(g.enter(), "open again after it closed");
        g.leave();
        assert_eq!(g.open_txns(), 0);
    }

    #[test]
    fn a_transaction_waits_for_the_unlocked_compounds_and_gives_up_in_time() {
        let g = Arc::new(Gate::default());
        assert!(g.enter());
        // Gives up: the unlocked COMPOUND does not end within the deadline, and the
        // failed opening leaves no count behind.
        let t = Instant::now();
        assert!(!g.open_txn(t + Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(g.open_txns(), 0);
        assert!(g.enter(), "still no transaction");
        g.leave();
        // Waits: the COMPOUND ends after 30 ms, well within the deadline.
        let g2 = g.clone();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            g2.leave();
        });
        let t = Instant::now();
        assert!(g.open_txn(t + Duration::from_secs(5)));
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(25), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        ender.join().unwrap();
        assert!(!g.enter(), "the transaction is open");
        g.close_txn();
    }
}
