//! An interrupted transaction (ADR 0036): the command running it was stopped (SIGINT,
//! SIGTERM) and the future sending it dropped. The client remembers how far the
//! transaction had got ([`TxnPhase`]); [`Client::interrupt_txn`] then rolls back what
//! is open (PROC_TXN_ABORT) and says what became of it. Should the ABORT not get
//! through, closing the connection does the same: the server rolls back a transaction
//! whose session's last connection closes.

use super::{INTERRUPT_ABORT_PAUSE, TXN_ABORT_TRIES};
use crate::Client;
use std::sync::PoisonError;

/// How far this client's transaction has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnPhase {
    /// None running (or the last one ended and its outcome was returned).
    Idle,
    /// A transaction of several COMPOUNDs is open and its COMMIT not sent yet: nothing
    /// of it can have committed.
    Open,
    /// Its last COMPOUND (the COMMIT, or the one COMPOUND of a one-COMPOUND
    /// transaction) was sent and its reply not seen: it may have committed.
    Committing,
}

/// What became of an interrupted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    /// No transaction was running.
    NoneRunning,
    /// It was rolled back: nothing was changed.
    Aborted,
    /// Its commit was under way: it either committed entirely or changed nothing.
    CommitUnknown,
}

impl Interrupted {
    /// One line for the user.
    pub fn message(self) -> &'static str {
        match self {
            Interrupted::NoneRunning => "interrupted",
            Interrupted::Aborted => "interrupted: transaction aborted, nothing was changed",
            Interrupted::CommitUnknown => {
                "interrupted while the transaction was committing: it either happened \
                 entirely or not at all"
            }
        }
    }
}

impl Client {
    pub(crate) fn set_txn_phase(&self, phase: TxnPhase) {
        *self
            .inner
            .txn_phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = phase;
    }

    /// Where this client's transaction stands.
    pub fn txn_phase(&self) -> TxnPhase {
        *self
            .inner
            .txn_phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// After the future running a transaction was dropped: roll back what is open
    /// (PROC_TXN_ABORT, waiting while a COMPOUND of it still runs on the server) and
    /// say what became of it. Call it once that future is gone.
    pub async fn interrupt_txn(&self) -> Interrupted {
        let phase = self.txn_phase();
        self.set_txn_phase(TxnPhase::Idle);
        match phase {
            TxnPhase::Idle => Interrupted::NoneRunning,
            TxnPhase::Open => {
                // Found open and rolled back, or never begun on the server (BEGIN
                // not arrived): nothing committed either way. Without an answer the
                // connection's close rolls it back.
                let _ = self
                    .abort_txn_tries(TXN_ABORT_TRIES, INTERRUPT_ABORT_PAUSE)
                    .await;
                Interrupted::Aborted
            }
            TxnPhase::Committing => {
                // An ABORT that still finds it open was in time (the COMMIT had not
                // arrived); otherwise the COMMIT ran, with whatever outcome.
                if self
                    .abort_txn_tries(TXN_ABORT_TRIES, INTERRUPT_ABORT_PAUSE)
                    .await
                {
                    Interrupted::Aborted
                } else {
                    Interrupted::CommitUnknown
                }
            }
        }
    }
}
