//! What a file command does when it is stopped (SIGINT, SIGTERM, SIGHUP) while a
//! transaction of `--atomic` runs (ADR 0036): a transaction whose commit was sent is
//! let finish (within the departure bound) so that its outcome is known; one still
//! open is rolled back with PROC_TXN_ABORT; the command says which, in one line. Also
//! the one progress line a command prints when it starts waiting out a busy server
//! (a transaction's lock, a grace period).

use std::sync::{Arc, Mutex, PoisonError};
use txnfs_client::txn::{Interrupted, TxnPhase};
use txnfs_client::{Busy, BusyNotice, Client};

/// The clients a command connected, shared with the signal handling (which cannot
/// reach the command's context while the command runs).
#[derive(Clone, Default)]
pub struct Connected(Arc<Mutex<Vec<Client>>>);

impl Connected {
    pub fn add(&self, c: Client) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
    }

    fn all(&self) -> Vec<Client> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a transaction's last COMPOUND was sent and its reply is awaited.
    pub fn committing(&self) -> bool {
        self.all()
            .iter()
            .any(|c| c.txn_phase() == TxnPhase::Committing)
    }

    /// After the command was dropped: roll back the transactions it left open, and
    /// say what became of them (nothing when none was running).
    pub async fn interrupt(&self) -> Option<Interrupted> {
        let mut worst = None;
        for c in self.all() {
            let got = c.interrupt_txn().await;
            worst = match (worst, got) {
                (_, Interrupted::CommitUnknown) => Some(got),
                (Some(Interrupted::CommitUnknown), _) => worst,
                (_, Interrupted::Aborted) => Some(got),
                (w, Interrupted::NoneRunning) => w,
            };
        }
        worst
    }
}

/// The progress line of a command that waits out a busy server (once per kind and
/// server, on stderr).
pub fn busy_notice(server: String) -> BusyNotice {
    BusyNotice(Arc::new(move |b: Busy| {
        eprintln!("txnfs: {server}: {}", b.message());
    }))
}
