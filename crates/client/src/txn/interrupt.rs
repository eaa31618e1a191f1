//! Rolling a transaction back from the client: the ABORT after a lost reply, and an
//! interrupted transaction (ADR 0036): the command running it was stopped (SIGINT,
//! SIGTERM) and the future sending it dropped. The client remembers how far the
//! transaction had got ([`TxnPhase`]); [`Client::interrupt_txn`] then rolls back what
//! is open (PROC_TXN_ABORT) and says what became of it. Should the ABORT not get
//! through, closing the connection does the same: the server rolls back a transaction
//! whose session's last connection closes.

use super::backoff;
use crate::client::{Mode, TxnPart};
use crate::compound::Compound;
use crate::Client;
use std::sync::PoisonError;
use std::time::Duration;
use txnfs_proto::nfs4::nfsstat4;

/// ABORTs tried while a COMPOUND of the transaction still runs (DELAY) after a lost
/// reply (a few seconds of backoff).
const LOST_ABORT_TRIES: u32 = 10;
/// And after an interrupted command ([`Client::interrupt_txn`]), at most
/// [`INTERRUPT_ABORT_PAUSE`] apart: the COMPOUND it dropped may carry a MiB of writes
/// (about 5 s in all), and the ABORT should follow its end closely (others wait).
const TXN_ABORT_TRIES: u32 = 100;
const INTERRUPT_ABORT_PAUSE: Duration = Duration::from_millis(50);

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
    /// Roll back this session's open transaction (PROC_TXN_ABORT). True when one was
    /// open and is rolled back now; false when none was open (it ended already) or the
    /// ABORT got no answer.
    pub(crate) async fn abort_txn(&self) -> bool {
        self.abort_txn_tries(LOST_ABORT_TRIES, Duration::MAX).await
    }

    /// [`Client::abort_txn`], trying at most `tries` times, at most `max_pause` apart,
    /// while a COMPOUND of the transaction still runs.
    async fn abort_txn_tries(&self, tries: u32, max_pause: Duration) -> bool {
        let mode = Mode::Txn {
            cache: false,
            part: TxnPart::Abort,
        };
        for n in 1..=tries {
            match self.send_as(&Compound::new(), true, mode).await {
                Ok(r) => match r.status {
                    nfsstat4::NFS4_OK => return true,
                    // A COMPOUND of it is still running (its reply was lost).
                    nfsstat4::NFS4ERR_DELAY => tokio::time::sleep(backoff(n).min(max_pause)).await,
                    _ => return false,
                },
                Err(e) => {
                    tracing::debug!("PROC_TXN_ABORT: {e}");
                    return false;
                }
            }
        }
        false
    }

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
