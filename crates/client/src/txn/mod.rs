//! Transactions (ADR 0021): a COMPOUND sent as RPC procedure `PROC_TXN_COMPOUND` runs
//! all-or-nothing on a txnfs server. Either every op succeeds and every change is
//! durable when the reply arrives, or the COMPOUND stops at its first failing op and
//! nothing an earlier op changed remains.
//!
//! Two levels:
//! - [`Client::compound_txn`] sends a prepared [`Compound`] as a transaction: it checks
//!   the ops and the size against the session's limits before sending, retries the
//!   whole transaction on NFS4ERR_DELAY (a conflict with a concurrent transaction, which
//!   the server rolled back) with bounded randomized backoff, and turns PROC_UNAVAIL and
//!   NFS4ERR_NOTSUPP into typed errors. It never falls back to a plain COMPOUND: that
//!   would run the ops non-atomically.
//! - [`Client::compounds_txn`] sends several prepared COMPOUNDs as ONE transaction
//!   (ADR 0021: PROC_TXN_BEGIN, PROC_TXN_CONTINUE..., PROC_TXN_COMMIT on this session):
//!   nothing of any of them is visible to others before the last one commits, and a
//!   failing op in any of them rolls back all of them. A conflict (NFS4ERR_DELAY)
//!   restarts the whole transaction from its first COMPOUND.
//! - [`Transaction`] (from [`Client::transaction`]) composes path-based steps (mkdir,
//!   write_file, remove, rename, symlink, link, setattr) into one COMPOUND when they fit
//!   the session's limits, otherwise into several (split between steps, at most
//!   [`MAX_TXN_COMPOUNDS`]); `commit` returns the results per step, or the step that
//!   failed.
//!
//! ```no_run
//! # async fn demo(client: txnfs_client::Client) -> Result<(), txnfs_client::ClientError> {
//! let mut t = client.transaction();
//! t.mkdir("new.tmp", 0o755);
//! t.write_file("new.tmp/a", b"alpha".to_vec(), 0o644, true);
//! t.rename("new.tmp", "new");
//! t.commit().await?; // "new/a" exists, or nothing changed
//! # Ok(()) }
//! ```

mod interrupt;
mod steps;

pub use interrupt::{Interrupted, TxnPhase};

use crate::attrs::SetAttributes;
use crate::client::{Mode, TxnPart};
use crate::compound::{op_name, Compound, Reply};
use crate::vector::{components, request_size};
use crate::{Client, ClientError};
use bytes::Bytes;
use std::ops::Range;
use std::time::{Duration, Instant};
use steps::{emit, first_dir, Position, Step};
use txnfs_proto::nfs4::*;

/// Tries of a transaction that keeps conflicting (NFS4ERR_DELAY) before giving up.
const MAX_TRIES: u32 = 30;
/// And the longest time spent retrying it.
const MAX_RETRY_TIME: Duration = Duration::from_secs(5);
/// Room in the request for the RPC header, credentials, tag and SEQUENCE.
const REQUEST_OVERHEAD: usize = 512;
/// The reply's SEQUENCE result, status, tag and array length.
const REPLY_OVERHEAD: usize = 96;
/// COMPOUNDs one transaction may span: txnfs's `max_txn_compounds` default. A server
/// configured lower answers NFS4ERR_TOO_MANY_OPS past its bound (reported as
/// [`ClientError::TxnTooLarge`] in "COMPOUNDs"; nothing is changed then either).
pub const MAX_TXN_COMPOUNDS: usize = 4096;
/// The largest piece of a file one step writes ([`Transaction::write_file`]): a
/// step never spans COMPOUNDs, and this leaves room within txnfs's 1 MiB + 64 KiB
/// requests and servers that grant 1 MiB.
pub const FILE_PIECE: usize = 960 << 10;
/// Lost replies in the middle of a transaction of several COMPOUNDs (each one aborted,
/// so known not to have committed) after which it is not started again.
const MAX_LOST: u32 = 2;
/// The ops a transaction may hold (the server's list: `txnfs_proto::ops`); others are
/// refused before sending, saving a round trip.
pub use txnfs_proto::ops::allowed_in_txn;

/// A generous estimate of the reply to `c` (bytes): what decides whether to ask the
/// server to cache it (ca_maxresponsesize_cached) and whether it can fit a reply at
/// all (ca_maxresponsesize).
fn reply_estimate(c: &Compound) -> usize {
    REPLY_OVERHEAD + c.ops.iter().map(op_reply_estimate).sum::<usize>()
}

/// [`reply_estimate`] of one op: the bound a txnfs server checks it against.
fn op_reply_estimate(op: &nfs_argop4) -> usize {
    txnfs_proto::reply_bound::reply_bound(op)
}

/// Refuse, before sending, a transaction the server could not run in one COMPOUND.
pub(crate) fn check_fits(c: &Compound, limits: crate::Limits) -> Result<(), ClientError> {
    for (index, op) in c.ops.iter().enumerate() {
        if !allowed_in_txn(op.discriminant()) {
            let op = op_name(op.discriminant());
            return Err(ClientError::TxnOpNotAllowed { op, index });
        }
    }
    // SEQUENCE is one more op of the COMPOUND.
    let ops = c.len() + 1;
    if ops > limits.max_ops as usize {
        return Err(ClientError::TxnTooLarge {
            n: ops,
            max: limits.max_ops as usize,
            unit: "ops",
        });
    }
    let bytes = c.ops.iter().map(request_size).sum::<usize>() + REQUEST_OVERHEAD;
    if bytes > limits.max_request as usize {
        return Err(ClientError::TxnTooLarge {
            n: bytes,
            max: limits.max_request as usize,
            unit: "bytes",
        });
    }
    let reply = reply_estimate(c);
    if reply > limits.max_response as usize {
        return Err(ClientError::TxnTooLarge {
            n: reply,
            max: limits.max_response as usize,
            unit: "bytes of reply",
        });
    }
    Ok(())
}

/// A random backoff for try `n` (1-based): 10 ms doubling to at most 320 ms, times a
/// factor in [0.5, 1.5) so that transactions that conflicted once do not meet again at
/// the same moment. No RNG crate: the clock's nanoseconds and a counter are random
/// enough for jitter.
fn backoff(n: u32) -> Duration {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos
        ^ SEQ
            .fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed)
            .rotate_left(17);
    // xorshift64* to spread the bits
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) % 1000;
    let base = 10u64 << n.saturating_sub(1).min(5);
    Duration::from_millis(base * (500 + r) / 1000)
}

impl Client {
    /// Send `c` as one transaction (see the module documentation). `Ok` carries the
    /// reply as a plain COMPOUND's: when its status is an error, the op at
    /// [`Reply::failed`] failed and the server rolled back every earlier op.
    ///
    /// Errors: [`ClientError::TxnUnsupported`] (the server does not run transactions),
    /// [`ClientError::TxnExportUnsupported`] (NFS4ERR_NOTSUPP: the export has no `txn`
    /// layer), [`ClientError::TxnOpNotAllowed`] and [`ClientError::TxnTooLarge`] (found
    /// before sending), [`ClientError::TxnConflict`] (NFS4ERR_DELAY on every try),
    /// [`ClientError::TxnOutcomeUnknown`] (no reply; all or nothing happened).
    pub async fn compound_txn(&self, c: &Compound) -> Result<Reply, ClientError> {
        self.set_txn_phase(TxnPhase::Committing);
        let r = self.compound_txn_once(c).await;
        // (Not reached when this future is dropped: the phase then stays for
        // `interrupt_txn`.)
        self.set_txn_phase(TxnPhase::Idle);
        r
    }

    /// [`Client::compound_txn`] without the phase.
    async fn compound_txn_once(&self, c: &Compound) -> Result<Reply, ClientError> {
        let limits = self.limits();
        check_fits(c, limits)?;
        // The server keeps the reply for a retransmission when it fits its reply cache;
        // a bigger one is sent uncached (a lost reply then means an unknown outcome,
        // never a second run).
        let mut cache = reply_estimate(c) <= limits.max_response_cached as usize;
        let started = Instant::now();
        let mut tries = 0u32;
        loop {
            tries += 1;
            let mode = Mode::Txn {
                cache,
                part: TxnPart::Whole,
            };
            let reply = self.send_as(c, true, mode).await?;
            match reply.failed() {
                Some((_, nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)) if cache => {
                    // The estimate was short; the server rolled back: send it uncached.
                    cache = false;
                    tries -= 1;
                }
                Some((_, nfsstat4::NFS4ERR_DELAY)) => {
                    // A conflict: the server rolled everything back; run it all again.
                    let wait = backoff(tries);
                    if tries >= MAX_TRIES || started.elapsed() + wait > MAX_RETRY_TIME {
                        return Err(ClientError::TxnConflict { tries });
                    }
                    tracing::debug!(tries, ?wait, "transaction conflicted; retrying");
                    tokio::time::sleep(wait).await;
                }
                Some((index, nfsstat4::NFS4ERR_NOTSUPP)) => {
                    let op = c
                        .ops
                        .get(index)
                        .map_or("COMPOUND", |o| op_name(o.discriminant()));
                    return Err(ClientError::TxnExportUnsupported { op, index });
                }
                _ => return Ok(reply),
            }
        }
    }

    /// Send `cs` as ONE transaction of several COMPOUNDs (ADR 0021): the first as
    /// PROC_TXN_BEGIN, the last as PROC_TXN_COMMIT, the others as PROC_TXN_CONTINUE, one
    /// after the other on this session. Each COMPOUND starts from nothing (no current
    /// filehandle carries over): begin each with PUTROOTFH or PUTFH.
    ///
    /// `Ok` carries the replies of the COMPOUNDs that ran, in order: all of them when
    /// the transaction committed; otherwise the last one's status is an error, the op
    /// at its [`Reply::failed`] failed and the server rolled back every COMPOUND of the
    /// transaction. One COMPOUND (or none) is sent as [`Client::compound_txn`].
    ///
    /// NFS4ERR_DELAY (a conflict; the server rolled everything back) restarts the whole
    /// transaction from BEGIN with the backoff of [`Client::compound_txn`]. A lost reply
    /// before the last COMPOUND: the transaction is aborted (PROC_TXN_ABORT) and started
    /// again, at most [`MAX_LOST`] times ([`ClientError::TxnNotCommitted`] after that);
    /// a lost reply to the last one is [`ClientError::TxnOutcomeUnknown`], unless the
    /// ABORT then sent finds the transaction still open (so it never committed: it is
    /// started again). Transactions of several COMPOUNDs of one `Client` run one at a
    /// time (the server holds one open per session).
    pub async fn compounds_txn(&self, cs: &[Compound]) -> Result<Vec<Reply>, ClientError> {
        if cs.len() <= 1 {
            return match cs.first() {
                Some(c) => Ok(vec![self.compound_txn(c).await?]),
                None => Ok(Vec::new()),
            };
        }
        let r = self.compounds_txn_spanning(cs).await;
        // (Not reached when this future is dropped: see `compound_txn`.)
        self.set_txn_phase(TxnPhase::Idle);
        r
    }

    /// [`Client::compounds_txn`] of two or more COMPOUNDs, keeping
    /// [`Client::txn_phase`].
    async fn compounds_txn_spanning(&self, cs: &[Compound]) -> Result<Vec<Reply>, ClientError> {
        let limits = self.limits();
        for c in cs {
            check_fits(c, limits)?;
        }
        if cs.len() > MAX_TXN_COMPOUNDS {
            return Err(ClientError::TxnTooLarge {
                n: cs.len(),
                max: MAX_TXN_COMPOUNDS,
                unit: "COMPOUNDs",
            });
        }
        let _one_at_a_time = self.inner.txn_span.lock().await;
        let mut cache: Vec<bool> = cs
            .iter()
            .map(|c| reply_estimate(c) <= limits.max_response_cached as usize)
            .collect();
        let last = cs.len() - 1;
        let started = Instant::now();
        let mut tries = 0u32;
        let mut lost = 0u32;
        let mut cleared = false;
        'transaction: loop {
            tries += 1;
            let mut replies = Vec::with_capacity(cs.len());
            for (i, c) in cs.iter().enumerate() {
                let part = match i {
                    0 => TxnPart::Begin,
                    i if i == last => TxnPart::Commit,
                    _ => TxnPart::Continue,
                };
                let mode = Mode::Txn {
                    cache: cache[i],
                    part,
                };
                self.set_txn_phase(if part == TxnPart::Commit {
                    TxnPhase::Committing
                } else {
                    TxnPhase::Open
                });
                let reply = match self.send_as(c, true, mode).await {
                    Ok(r) => r,
                    Err(ClientError::TxnOutcomeUnknown(e)) => {
                        // No reply. Before COMMIT the transaction cannot have committed;
                        // after it, only an ABORT that still finds it open says so.
                        let aborted = self.abort_txn().await;
                        if part == TxnPart::Commit && !aborted {
                            return Err(ClientError::TxnOutcomeUnknown(e));
                        }
                        lost += 1;
                        if lost > MAX_LOST {
                            return Err(ClientError::TxnNotCommitted(e));
                        }
                        tracing::debug!(compound = i, "lost reply in a transaction; restarting");
                        continue 'transaction;
                    }
                    Err(e) => {
                        // Refused before running (PROC_UNAVAIL, RPC errors, SEQUENCE):
                        // leave nothing open behind.
                        if i > 0 {
                            self.abort_txn().await;
                        }
                        return Err(e);
                    }
                };
                let Some((index, status)) = reply.failed() else {
                    replies.push(reply);
                    continue;
                };
                // The server rolled the whole transaction back and closed it, except for
                // the refusals of BEGIN and CONTINUE noted below.
                let refused = index == 0 && reply.results.len() <= 1;
                match status {
                    nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE if cache[i] => {
                        cache[i] = false;
                        tries -= 1;
                    }
                    nfsstat4::NFS4ERR_INVAL if refused && i == 0 && !cleared => {
                        // BEGIN with a transaction still open on the session (left by
                        // an earlier try whose ABORT was lost): abort it, begin again.
                        cleared = true;
                        self.abort_txn().await;
                        tries -= 1;
                    }
                    nfsstat4::NFS4ERR_INVAL if refused && i > 0 => {
                        // Rolled back by the server (its session lost its connection
                        // a moment, or it ran out of time): nothing of it committed,
                        // so it may start again, as after a lost reply.
                        lost += 1;
                        if lost > MAX_LOST {
                            return Err(ClientError::TxnClosed { compound: i });
                        }
                        tracing::debug!(
                            compound = i,
                            "transaction closed by the server; restarting"
                        );
                    }
                    nfsstat4::NFS4ERR_TOO_MANY_OPS if refused && i > 0 => {
                        // The server's max_txn_compounds is lower than ours; what ran is
                        // rolled back by the ABORT.
                        self.abort_txn().await;
                        return Err(ClientError::TxnTooLarge {
                            n: cs.len(),
                            max: i,
                            unit: "COMPOUNDs",
                        });
                    }
                    nfsstat4::NFS4ERR_DELAY => {
                        // A conflict: rolled back; run it all again. (A CONTINUE refused
                        // because an earlier COMPOUND of it still runs — after a lost
                        // reply — leaves it open: the next BEGIN clears it.)
                        let wait = backoff(tries);
                        if tries >= MAX_TRIES || started.elapsed() + wait > MAX_RETRY_TIME {
                            self.abort_txn().await;
                            return Err(ClientError::TxnConflict { tries });
                        }
                        tracing::debug!(tries, ?wait, compound = i, "transaction conflicted");
                        tokio::time::sleep(wait).await;
                        cleared = false;
                    }
                    nfsstat4::NFS4ERR_NOTSUPP => {
                        let op = c
                            .ops
                            .get(index)
                            .map_or("COMPOUND", |o| op_name(o.discriminant()));
                        return Err(ClientError::TxnExportUnsupported { op, index });
                    }
                    _ => {
                        replies.push(reply);
                        return Ok(replies);
                    }
                }
                continue 'transaction;
            }
            return Ok(replies);
        }
    }

    /// A new, empty transaction on this session. Beside an [`crate::Fs`] of this
    /// client, use [`crate::Fs::transaction`] instead: it keeps the `Fs`'s cache of
    /// directory handles right after renames and removals.
    pub fn transaction(&self) -> Transaction {
        Transaction {
            client: self.clone(),
            fs: None,
            steps: Vec::new(),
            owner: Vec::new(),
            added: 0,
            whats: Vec::new(),
            error: None,
        }
    }
}

/// The results of one committed step: the replies of its ops, in order (the LOOKUPs
/// that reach its directory included).
#[derive(Debug, Clone)]
pub struct StepResult {
    /// The step, as error messages name it.
    pub what: String,
    pub results: Vec<nfs_resop4>,
}

impl StepResult {
    /// Bytes the step's WRITEs wrote (0 for other steps).
    pub fn written(&self) -> u64 {
        self.results
            .iter()
            .map(|r| match r {
                nfs_resop4::OP_WRITE(WRITE4res::NFS4_OK(w)) => w.count as u64,
                _ => 0,
            })
            .sum()
    }
}

/// Path-based steps sent as one transaction by [`Transaction::commit`]: one COMPOUND
/// when they fit, otherwise several COMPOUNDs of one transaction (split between steps).
/// Each step method returns the step's index; a bad path is reported by `commit`
/// (nothing is sent then). Steps run in the order they were added, each seeing what
/// the earlier ones did (e.g. write into a directory made by an earlier step).
pub struct Transaction {
    client: Client,
    /// The `Fs` whose path -> handle cache must forget what the transaction moved or
    /// removed (a cached handle of a renamed directory would send later calls on the
    /// old path into the new one).
    fs: Option<crate::Fs>,
    steps: Vec<Step>,
    /// The caller's step each of `steps` belongs to (a large file is several).
    owner: Vec<usize>,
    /// Steps the caller added.
    added: usize,
    /// Each of them as error messages and results name it.
    whats: Vec<String>,
    /// The first bad step (its index and path error), returned by `commit`.
    error: Option<ClientError>,
}

impl Transaction {
    /// This transaction, created for `fs` (see [`crate::Fs::transaction`]).
    pub(crate) fn for_fs(mut self, fs: &crate::Fs) -> Self {
        self.fs = Some(fs.clone());
        self
    }

    /// Steps added so far.
    pub fn len(&self) -> usize {
        self.added
    }

    pub fn is_empty(&self) -> bool {
        self.added == 0
    }

    /// `path` as components; not the root (every step names an entry of a directory).
    fn path(&mut self, path: &str) -> Vec<String> {
        match components(path) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) | Err(_) => {
                if self.error.is_none() {
                    self.error = Some(ClientError::BadPath(format!(
                        "{path} (step {} of the transaction)",
                        self.added
                    )));
                }
                Vec::new()
            }
        }
    }

    fn push(&mut self, s: Step) -> usize {
        let what = s.describe();
        self.push_all(vec![s], what)
    }

    /// One step of the caller (`what`) made of `parts` (in order).
    fn push_all(&mut self, parts: Vec<Step>, what: String) -> usize {
        let step = self.added;
        self.added += 1;
        self.whats.push(what);
        self.owner.extend(parts.iter().map(|_| step));
        self.steps.extend(parts);
        step
    }

    /// Create directory `path` (its parent must exist, or be made by an earlier step).
    pub fn mkdir(&mut self, path: &str, mode: u32) -> usize {
        let path = self.path(path);
        self.push(Step::Mkdir { path, mode })
    }

    /// Create regular file `path` with mode `mode` and content `data` (written with
    /// FILE_SYNC). `guarded`: fail with NFS4ERR_EXIST if the name exists; otherwise an
    /// existing file is truncated and overwritten. Data over [`FILE_PIECE`] bytes is
    /// written in pieces of that size, each of which may go in a different COMPOUND
    /// of the transaction (the file is created writable by its owner, and given `mode`
    /// after its last piece).
    pub fn write_file(
        &mut self,
        path: &str,
        data: impl Into<Bytes>,
        mode: u32,
        guarded: bool,
    ) -> usize {
        let path = self.path(path);
        let data: Bytes = data.into();
        let what = format!("write {:?} ({} bytes)", path.join("/"), data.len());
        if data.len() <= FILE_PIECE {
            return self.push(Step::Write {
                path,
                data,
                mode,
                guarded,
            });
        }
        let mut parts = vec![Step::Write {
            path: path.clone(),
            data: data.slice(..FILE_PIECE),
            mode: mode | 0o200,
            guarded,
        }];
        let mut off = FILE_PIECE;
        while off < data.len() {
            let end = (off + FILE_PIECE).min(data.len());
            parts.push(Step::WriteMore {
                path: path.clone(),
                offset: off as u64,
                data: data.slice(off..end),
            });
            off = end;
        }
        if mode | 0o200 != mode {
            parts.push(Step::SetAttr {
                path,
                set: SetAttributes {
                    mode: Some(mode),
                    ..Default::default()
                },
            });
        }
        self.push_all(parts, what)
    }

    /// Remove file, symlink or empty directory `path`.
    pub fn remove(&mut self, path: &str) -> usize {
        let path = self.path(path);
        self.push(Step::Remove { path })
    }

    /// Rename `from` to `to` (files and directories; an existing `to` is replaced as
    /// RENAME does).
    pub fn rename(&mut self, from: &str, to: &str) -> usize {
        let from = self.path(from);
        let to = self.path(to);
        self.push(Step::Rename { from, to })
    }

    /// Create symlink `path` whose text is `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> usize {
        let path = self.path(path);
        self.push(Step::Symlink {
            path,
            target: target.to_string(),
        })
    }

    /// Hard link: `new` becomes another name of `existing`.
    pub fn link(&mut self, existing: &str, new: &str) -> usize {
        let existing = self.path(existing);
        let new = self.path(new);
        self.push(Step::Link { existing, new })
    }

    /// Set attributes (mode, size, times, ...) of `path` (symlinks not followed).
    pub fn setattr(&mut self, path: &str, set: SetAttributes) -> usize {
        let path = self.path(path);
        self.push(Step::SetAttr { path, set })
    }

    /// The COMPOUND of the steps, and the range of ops of each step.
    fn compose(&self) -> (Compound, Vec<Range<usize>>) {
        let mut c = Compound::new();
        let mut ranges = Vec::with_capacity(self.steps.len());
        let mut pos: Position = None;
        for (i, step) in self.steps.iter().enumerate() {
            let start = c.len();
            let next_dir = self.steps.get(i + 1).map(first_dir);
            pos = emit(&mut c, step, pos, next_dir);
            ranges.push(start..c.len());
        }
        (c, ranges)
    }

    /// All steps in one COMPOUND (for inspection and op counts; [`Transaction::plan`]
    /// says what `commit` sends).
    pub fn compound(&self) -> Compound {
        self.compose().0
    }

    /// The steps as COMPOUNDs that fit `limits`: one when they all fit, otherwise
    /// split between steps, each COMPOUND walking from PUTROOTFH again.
    fn split(&self, limits: crate::Limits) -> Result<Vec<Part>, ClientError> {
        let (c, ranges) = self.compose();
        if check_fits(&c, limits).is_ok() {
            return Ok(vec![Part {
                c,
                ranges,
                first: 0,
            }]);
        }
        let max_ops = limits.max_ops as usize;
        let max_request = limits.max_request as usize;
        let max_reply = limits.max_response as usize;
        let mut parts = Vec::new();
        let mut cur = Part::starting_at(0);
        let (mut bytes, mut reply) = (REQUEST_OVERHEAD, REPLY_OVERHEAD);
        let mut pos: Position = None;
        let mut i = 0;
        while i < self.steps.len() {
            let start = cur.c.len();
            let next_dir = self.steps.get(i + 1).map(first_dir);
            let after = emit(&mut cur.c, &self.steps[i], pos.clone(), next_dir);
            let added = &cur.c.ops[start..];
            let add_bytes: usize = added.iter().map(request_size).sum();
            let add_reply: usize = added.iter().map(op_reply_estimate).sum();
            // SEQUENCE is one more op of the COMPOUND.
            let ops = cur.c.len() + 1;
            if ops <= max_ops && bytes + add_bytes <= max_request && reply + add_reply <= max_reply
            {
                bytes += add_bytes;
                reply += add_reply;
                cur.ranges.push(start..cur.c.len());
                pos = after;
                i += 1;
                continue;
            }
            if cur.ranges.is_empty() {
                // Alone in a COMPOUND, walking from the root, and still too large.
                let (n, max, unit) = if ops > max_ops {
                    (ops, max_ops, "ops")
                } else if bytes + add_bytes > max_request {
                    (bytes + add_bytes, max_request, "bytes")
                } else {
                    (reply + add_reply, max_reply, "bytes of reply")
                };
                return Err(ClientError::TxnStepTooLarge {
                    step: self.owner[i],
                    what: self.steps[i].describe(),
                    n,
                    max,
                    unit,
                });
            }
            // Step i starts the next COMPOUND.
            cur.c.ops.truncate(start);
            parts.push(std::mem::replace(&mut cur, Part::starting_at(i)));
            (bytes, reply) = (REQUEST_OVERHEAD, REPLY_OVERHEAD);
            pos = None;
        }
        if !cur.ranges.is_empty() {
            parts.push(cur);
        }
        if parts.len() > MAX_TXN_COMPOUNDS {
            return Err(ClientError::TxnTooLarge {
                n: parts.len(),
                max: MAX_TXN_COMPOUNDS,
                unit: "COMPOUNDs",
            });
        }
        Ok(parts)
    }

    /// The COMPOUNDs `commit` sends, in order, on this session's limits: one when the
    /// steps fit it, otherwise several (one transaction of several COMPOUNDs). Errors:
    /// a bad path, [`ClientError::TxnStepTooLarge`], [`ClientError::TxnTooLarge`].
    pub fn plan(&self) -> Result<Vec<Compound>, ClientError> {
        if let Some(ClientError::BadPath(p)) = &self.error {
            return Err(ClientError::BadPath(p.clone()));
        }
        Ok(self
            .split(self.client.limits())?
            .into_iter()
            .map(|p| p.c)
            .collect())
    }

    /// Send the steps as one transaction: one COMPOUND when they fit the session's
    /// limits, otherwise several (split between steps; see [`Client::compounds_txn`]).
    /// `Ok`: every step happened (results in step order). On a failing step,
    /// [`ClientError::TxnStepFailed`] names it (index, path, op, status) and nothing of
    /// the transaction remains, whichever COMPOUND it was in. A step that does not fit
    /// one COMPOUND by itself is [`ClientError::TxnStepTooLarge`] and more than
    /// [`MAX_TXN_COMPOUNDS`] COMPOUNDs [`ClientError::TxnTooLarge`], before anything
    /// is sent; see [`Client::compounds_txn`] for the other errors.
    pub async fn commit(self) -> Result<Vec<StepResult>, ClientError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.steps.is_empty() {
            return Ok(Vec::new());
        }
        let parts = self.split(self.client.limits())?;
        // Delegations of what the steps change go back first (buffered writes flushed):
        // the server would otherwise have to recall them in the middle of the
        // transaction.
        let touched: Vec<String> = self.steps.iter().flat_map(Step::touched).collect();
        let refs: Vec<&str> = touched.iter().map(String::as_str).collect();
        let cache = self.client.cache().clone();
        cache.forget_paths(&refs, true).await;
        let replies = if let [one] = &parts[..] {
            self.client.compound_txn(&one.c).await.map(|r| vec![r])
        } else {
            let cs: Vec<Compound> = parts.iter().map(|p| p.c.clone()).collect();
            self.client.compounds_txn(&cs).await
        };
        // The server does not notify a client of its own changes: listings of the
        // changed directories are stale whatever the outcome was.
        for p in &refs {
            cache.invalidate_parent_listing(p);
        }
        if let Some(fs) = &self.fs {
            // Whatever the outcome (a committed or unknown one moved them), cached
            // handles of what the steps renamed or removed are no longer trusted.
            for s in &self.steps {
                match s {
                    Step::Remove { path } => fs.forget_dir(&path.join("/")),
                    Step::Rename { from, to } => {
                        fs.forget_dir(&from.join("/"));
                        fs.forget_dir(&to.join("/"));
                    }
                    _ => {}
                }
            }
        }
        let replies = replies?;
        let mut out: Vec<StepResult> = Vec::with_capacity(self.added);
        for (part, reply) in parts.iter().zip(&replies) {
            if let Some((f, status)) = reply.failed() {
                let part_step =
                    part.first + part.ranges.iter().position(|r| r.contains(&f)).unwrap_or(0);
                let op = reply
                    .results
                    .get(f)
                    .map_or("COMPOUND", |r| op_name(r.discriminant()));
                return Err(ClientError::TxnStepFailed {
                    step: self.owner.get(part_step).copied().unwrap_or(0),
                    what: self
                        .steps
                        .get(part_step)
                        .map(Step::describe)
                        .unwrap_or_default(),
                    op,
                    status,
                });
            }
            for (k, r) in part.ranges.iter().enumerate() {
                let results = reply
                    .results
                    .get(r.clone())
                    .map(|s| s.to_vec())
                    .ok_or_else(|| {
                        ClientError::Protocol("short reply to a committed transaction".into())
                    })?;
                // The parts of one step (a large file) make one result.
                let step = self.owner[part.first + k];
                match out.get_mut(step) {
                    Some(r) => r.results.extend(results),
                    None => out.push(StepResult {
                        what: self.whats[step].clone(),
                        results,
                    }),
                }
            }
        }
        if out.len() != self.added {
            return Err(ClientError::Protocol(
                "fewer replies than COMPOUNDs from a committed transaction".into(),
            ));
        }
        Ok(out)
    }
}

/// One COMPOUND of a transaction's steps: its ops, the range of ops of each of its
/// steps, and the index of its first step.
struct Part {
    c: Compound,
    ranges: Vec<Range<usize>>,
    first: usize,
}

impl Part {
    fn starting_at(first: usize) -> Self {
        Part {
            c: Compound::new(),
            ranges: Vec::new(),
            first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_ops: u32, max_request: u32) -> crate::Limits {
        crate::Limits {
            max_ops,
            max_request,
            max_response: 1 << 20,
            max_response_cached: 64 << 10,
            slots: 1,
        }
    }

    #[test]
    fn too_large_is_refused_before_sending() {
        let mut c = Compound::new();
        for _ in 0..10 {
            c.putrootfh();
        }
        match check_fits(&c, limits(8, 1 << 20)) {
            Err(ClientError::TxnTooLarge {
                n: 11,
                max: 8,
                unit,
            }) => assert_eq!(unit, "ops"),
            other => panic!("{other:?}"),
        }
        let mut c = Compound::new();
        c.putrootfh();
        c.write(
            crate::compound::CURRENT_STATEID,
            0,
            Bytes::from(vec![0u8; 4096]),
            true,
        );
        assert!(matches!(
            check_fits(&c, limits(100, 4096)),
            Err(ClientError::TxnTooLarge { unit: "bytes", .. })
        ));
        let mut c = Compound::new();
        c.op(nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
            rca_one_fs: false,
        }));
        assert!(matches!(
            check_fits(&c, limits(100, 1 << 20)),
            Err(ClientError::TxnOpNotAllowed { index: 0, .. })
        ));
    }

    #[test]
    fn backoff_is_bounded_and_jittered() {
        for n in 1..40 {
            let d = backoff(n);
            assert!(d >= Duration::from_millis(5) && d < Duration::from_millis(480));
        }
    }
}
