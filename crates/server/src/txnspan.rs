//! Transactions that span several COMPOUNDs of one session (ADR 0021).
//!
//! The procedure number says what a transactional COMPOUND does
//! ([`txnfs_proto::PROC_TXN_BEGIN`] and friends); this registry knows which session has
//! a transaction open, in which export, since when, and whether one of its COMPOUNDs is
//! running. One open transaction per session, one COMPOUND of it at a time, at most
//! `max_txn_compounds` COMPOUNDs and `txn_timeout` long; a transaction whose session
//! is gone or that ran out of time is rolled back by the housekeeping tick, and one
//! whose session lost its last connection is rolled back at once (ADR 0036): the
//! client that could finish it is gone, and its locks would make every other client
//! wait for the timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use txnfs_backend::TxnSpan;
use txnfs_state::session::SessionId;

use crate::export::{CompoundScope, Exports};
use crate::nfs::nfsstat4;

/// What a transactional RPC procedure asks of the session's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnProc {
    /// Not a transaction.
    Plain,
    /// A transaction of this one COMPOUND.
    Whole,
    Begin,
    Continue,
    Commit,
    Abort,
}

impl TxnProc {
    /// The procedure's meaning, if it is one of the transactional ones.
    pub fn of_procedure(p: u32) -> Option<TxnProc> {
        Some(match p {
            txnfs_proto::PROC_TXN_COMPOUND => TxnProc::Whole,
            txnfs_proto::PROC_TXN_BEGIN => TxnProc::Begin,
            txnfs_proto::PROC_TXN_CONTINUE => TxnProc::Continue,
            txnfs_proto::PROC_TXN_COMMIT => TxnProc::Commit,
            txnfs_proto::PROC_TXN_ABORT => TxnProc::Abort,
            _ => return None,
        })
    }

    pub fn is_txn(self) -> bool {
        self != TxnProc::Plain
    }
}

struct Open {
    id: u64,
    /// The export the transaction touched first (a transaction stays in one).
    export: Option<u16>,
    started: Instant,
    compounds: u32,
    /// A COMPOUND of the transaction is running.
    busy: bool,
    /// The session's last connection closed while that COMPOUND ran: roll it back when
    /// the COMPOUND is over.
    orphaned: bool,
}

/// A transaction to roll back (housekeeping): its id and export.
pub struct Expired {
    pub id: u64,
    pub export: Option<u16>,
}

#[derive(Default)]
pub struct OpenTxns {
    open: Mutex<HashMap<SessionId, Open>>,
    /// How many are open, readable without the lock (placement asks on every request).
    count: AtomicUsize,
}

/// The session's transaction as a COMPOUND of it starts: its span and export.
pub struct Started {
    pub span: TxnSpan,
    pub export: Option<u16>,
}

impl OpenTxns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A COMPOUND of `proc` starts on `session` (as the COMPOUND `compound`): which
    /// transaction it belongs to, or why it may not run (NFS4ERR_INVAL: no transaction
    /// open, or one open already at BEGIN; NFS4ERR_DELAY: another COMPOUND of it is
    /// running; NFS4ERR_TOO_MANY_OPS: the transaction reached its size bound).
    pub fn start(
        &self,
        session: &SessionId,
        proc: TxnProc,
        compound: u64,
        now: Instant,
        max_compounds: u32,
    ) -> Result<Started, nfsstat4> {
        let mut open = self.lock();
        let whole = Started {
            span: TxnSpan::Whole,
            export: None,
        };
        match proc {
            TxnProc::Plain | TxnProc::Whole => Ok(whole),
            TxnProc::Begin => {
                if open.contains_key(session) {
                    return Err(nfsstat4::NFS4ERR_INVAL);
                }
                self.count.fetch_add(1, Ordering::Relaxed);
                open.insert(
                    *session,
                    Open {
                        id: compound,
                        export: None,
                        started: now,
                        compounds: 1,
                        busy: true,
                        orphaned: false,
                    },
                );
                Ok(Started {
                    span: TxnSpan::Begin(compound),
                    export: None,
                })
            }
            TxnProc::Continue | TxnProc::Commit | TxnProc::Abort => {
                let o = open.get_mut(session).ok_or(nfsstat4::NFS4ERR_INVAL)?;
                if o.busy {
                    return Err(nfsstat4::NFS4ERR_DELAY);
                }
                if proc == TxnProc::Continue && o.compounds >= max_compounds {
                    return Err(nfsstat4::NFS4ERR_TOO_MANY_OPS);
                }
                o.busy = true;
                o.compounds += 1;
                let span = match proc {
                    TxnProc::Continue => TxnSpan::Continue(o.id),
                    TxnProc::Commit => TxnSpan::Commit(o.id),
                    _ => TxnSpan::Abort(o.id),
                };
                Ok(Started {
                    span,
                    export: o.export,
                })
            }
        }
    }

    /// The COMPOUND of `span` on `session` is over (`ok`: all its ops succeeded;
    /// `export`: the export the transaction is in now). A transaction that ended
    /// (committed, aborted, or failed) is forgotten. A transaction still open whose
    /// session lost its last connection meanwhile is returned, removed, for the caller
    /// to roll back.
    pub fn finish(
        &self,
        session: &SessionId,
        span: TxnSpan,
        ok: bool,
        export: Option<u16>,
    ) -> Option<Expired> {
        if span == TxnSpan::Whole {
            return None;
        }
        let mut open = self.lock();
        let ends = span.ends() || !ok;
        if ends {
            if open.get(session).is_some_and(|o| o.id == span.key(0)) {
                open.remove(session);
                self.count.fetch_sub(1, Ordering::Relaxed);
            }
            return None;
        }
        let o = open.get_mut(session)?;
        o.busy = false;
        o.export = o.export.or(export);
        if !o.orphaned {
            return None;
        }
        let o = open.remove(session)?;
        self.count.fetch_sub(1, Ordering::Relaxed);
        Some(Expired {
            id: o.id,
            export: o.export,
        })
    }

    /// `sessions` lost their last connection: their transactions that are not running
    /// are removed and returned, for the caller to roll back now; a running one is
    /// rolled back when its COMPOUND is over ([`OpenTxns::finish`]).
    pub fn orphaned(&self, sessions: &[SessionId]) -> Vec<Expired> {
        let mut open = self.lock();
        let mut idle = Vec::new();
        for s in sessions {
            match open.get_mut(s) {
                Some(o) if o.busy => o.orphaned = true,
                Some(_) => {
                    if let Some(o) = open.remove(s) {
                        self.count.fetch_sub(1, Ordering::Relaxed);
                        idle.push(Expired {
                            id: o.id,
                            export: o.export,
                        });
                    }
                }
                None => {}
            }
        }
        idle
    }

    /// Transactions that are not running and whose session is gone (`alive` says) or
    /// that are older than `timeout`: removed here, for the caller to roll back.
    pub fn expired(
        &self,
        now: Instant,
        timeout: Duration,
        alive: impl Fn(&SessionId) -> bool,
    ) -> Vec<Expired> {
        let mut open = self.lock();
        let dead: Vec<SessionId> = open
            .iter()
            .filter(|(s, o)| !o.busy && (!alive(s) || now.duration_since(o.started) > timeout))
            .map(|(s, _)| *s)
            .collect();
        self.count.fetch_sub(dead.len(), Ordering::Relaxed);
        dead.iter()
            .filter_map(|s| open.remove(s))
            .map(|o| Expired {
                id: o.id,
                export: o.export,
            })
            .collect()
    }

    /// Open transactions (tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no transaction of several COMPOUNDs is open (without the lock).
    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Relaxed) == 0
    }
}

/// Rolls back `txns`, taken out of [`OpenTxns`], each in its export (`why`: for the
/// log). One that never touched an export changed nothing.
pub fn roll_back(exports: &Exports, txns: Vec<Expired>, why: &str) {
    for t in txns {
        let Some(export) = t.export.and_then(|id| exports.get(id)) else {
            continue;
        };
        tracing::info!(txn = t.id, "rolling back a transaction: {why}");
        let mut scope = CompoundScope::with_txn(exports, true, Default::default());
        scope.set_span(TxnSpan::Abort(t.id), Some(export.id));
        if scope
            .enter(&export, &txnfs_backend::Creds::default(), None)
            .is_ok()
        {
            let _ = scope.finish(false);
        }
    }
}
