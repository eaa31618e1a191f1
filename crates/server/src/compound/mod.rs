//! The COMPOUND executor (RFC 8881 §2.10.6, §15.2, §16.2): a loop over the op table
//! (`optable`, ADR 0007).
//!
//! Per op: decode, check the table's rules (SEQUENCE first, session-less ops alone,
//! NOTSUPP, NOFILEHANDLE), and for an op that modifies state check *before* running it
//! that its reply bound fits what is left of the reply (REP_TOO_BIG) and, when the
//! client asked for caching, of the reply cache (REP_TOO_BIG_TO_CACHE): an op that
//! changed state must never be reported as failed. Then run the handler, apply the op's
//! current-stateid rule, and encode the result straight into the reply buffer, so the
//! other ops are checked on real bytes. Stops at the first failing op. The reply is
//! what the slot's reply cache stores.

pub mod optable;

pub use crate::cstate::Compound;
pub use crate::errors::{OpError, OpResult};
pub use crate::fh::{Fh, ObjFh};

use crate::nfs::{nfs_argop4, nfs_opnum4, nfs_resop4, nfsstat4};
use crate::placement::{Blocking, WaitClock};
use crate::server::Server;
use crate::session::Session;
use crate::txnspan::TxnProc;
use bytes::{BufMut, Bytes, BytesMut};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use txnfs_backend::{Creds, TxnSpan};
use txnfs_xdr::{Decode, Encode, XdrError};

/// Reasons the whole call is rejected at the RPC level.
#[derive(Debug, thiserror::Error)]
pub enum CompoundError {
    #[error("COMPOUND header does not decode: {0}")]
    Garbage(#[from] XdrError),
}

const MAX_TAG: usize = 1024;

fn request_hash(args: &Bytes) -> u64 {
    // A false retry (same slot and seqid, different request) is a client bug; detecting
    // it from the length plus the head and tail of the request is enough and keeps a
    // 1 MiB WRITE from being hashed in full.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    args.len().hash(&mut h);
    args[..args.len().min(512)].hash(&mut h);
    args[args.len().saturating_sub(128)..].hash(&mut h);
    h.finish()
}

/// Execute one COMPOUND and return the encoded COMPOUND4res.
pub fn execute(srv: &Server, creds: Creds, conn: u64, args: Bytes) -> Result<Bytes, CompoundError> {
    execute_as(srv, creds, conn, args, false)
}

/// Execute one COMPOUND, as a transaction when `txn` (procedure
/// [`txnfs_proto::PROC_TXN_COMPOUND`]), and return the encoded COMPOUND4res.
pub fn execute_as(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    txn: bool,
) -> Result<Bytes, CompoundError> {
    let proc = if txn { TxnProc::Whole } else { TxnProc::Plain };
    execute_proc(srv, creds, conn, args, proc)
}

/// Execute one COMPOUND of RPC procedure `proc` (plain, a transaction, or a part of
/// one: `crate::txnspan`) and return the encoded COMPOUND4res.
///
/// A panicking handler fails its op with NFS4ERR_SERVERFAULT and the COMPOUND ends
/// there as after any failing op (`crate::panics`, ADR 0029). A panic elsewhere in the
/// executor (SEQUENCE, the end of the COMPOUND) is caught here as a backstop: the
/// answer is a COMPOUND4res of status NFS4ERR_SERVERFAULT with no results, and the
/// slot its SEQUENCE opened is completed without a cached reply ([`OpenSlot`]).
pub fn execute_proc(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    proc: TxnProc,
) -> Result<Bytes, CompoundError> {
    execute_timed(srv, creds, conn, args, proc, &WaitClock::default())
}

/// [`execute_proc`], adding the time the COMPOUND spent waiting for others to `waited`.
pub fn execute_timed(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    proc: TxnProc,
    waited: &WaitClock,
) -> Result<Bytes, CompoundError> {
    let request = args.clone();
    #[cfg(feature = "fault-injection")]
    srv.faults.before_compound();
    crate::panics::catch(srv, "COMPOUND", || {
        execute_unguarded(srv, creds, conn, args, proc, waited)
    })
    .unwrap_or_else(|crate::panics::Panicked| serverfault_reply(&request))
}

/// A COMPOUND4res of status NFS4ERR_SERVERFAULT, with the request's tag and no
/// results (the executor's backstop after a panic outside any handler).
fn serverfault_reply(args: &Bytes) -> Result<Bytes, CompoundError> {
    let mut src = args.clone();
    let tag = txnfs_xdr::get_opaque(&mut src, MAX_TAG)?;
    let mut out = BytesMut::with_capacity(16 + tag.len());
    out.put_i32(nfsstat4::NFS4ERR_SERVERFAULT as i32);
    txnfs_xdr::put_opaque(&mut out, &tag);
    out.put_u32(0);
    Ok(out.freeze())
}

/// The slot a COMPOUND's SEQUENCE opened, until the executor completes it with the
/// reply. If the executor unwinds first (a panic outside any handler), the slot is
/// completed without a cached reply, so the session's client can go on using it (a
/// retransmission gets NFS4ERR_RETRY_UNCACHED_REP, the next sequence id runs).
struct OpenSlot<'a> {
    srv: &'a Server,
    slot: Option<(Arc<Session>, u32)>,
}

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        if let Some((s, slotid)) = self.slot.take() {
            self.srv.finish_slot(&s, slotid, None);
        }
    }
}

fn execute_unguarded(
    srv: &Server,
    creds: Creds,
    conn: u64,
    args: Bytes,
    proc: TxnProc,
    waited: &WaitClock,
) -> Result<Bytes, CompoundError> {
    let txn = proc.is_txn();
    let mut src = args.clone();
    let tag = txnfs_xdr::get_opaque(&mut src, MAX_TAG)?;
    let minor = txnfs_xdr::get_u32(&mut src)?;
    let nops = txnfs_xdr::get_u32(&mut src)?;

    let mut out = BytesMut::with_capacity(256);
    out.put_u32(0); // status, patched at the end
    txnfs_xdr::put_opaque(&mut out, &tag);
    let count_at = out.len();
    out.put_u32(0); // result count, patched at the end

    if minor == 0 || minor > 2 {
        let mut b = out;
        b[..4].copy_from_slice(&(nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH as i32).to_be_bytes());
        return Ok(b.freeze());
    }

    let mut c = Compound {
        srv,
        creds,
        conn,
        cfh: None,
        sfh: None,
        cur_sid: None,
        saved_sid: None,
        session: None,
        client: None,
        minor,
        reply_left: srv.limits.max_response as usize,
        now: srv.clock.now(),
        scope: crate::export::CompoundScope::with_txn(&srv.exports, txn),
        txn_opens: Vec::new(),
        waited,
    };
    let mut status = nfsstat4::NFS4_OK;
    let mut done: u32 = 0;
    // (session, slot) whose reply cache entry we must complete.
    let mut slot = OpenSlot { srv, slot: None };
    let mut cache_limit = usize::MAX;
    let mut cachethis = false;
    // A persistent session's (sequence id, request hash): its reply is made durable
    // before it is sent (ADR 0022).
    let mut durable: Option<(u32, u64)> = None;
    // Where the last op's result starts, and its table entry: a transaction that fails
    // to commit is reported as that op failing with NFS4ERR_IO.
    let mut last_op = None;
    // A COMPOUND of a transaction of several: its session, or why it may not run (the
    // op after SEQUENCE fails with that).
    let mut txn_session = None;
    let mut refused: Option<nfsstat4> = None;

    for i in 0..nops {
        let opnum = match txnfs_xdr::get_u32(&mut src.clone()) {
            Ok(v) => v,
            Err(_) => {
                // Fewer ops than announced: malformed.
                status = nfsstat4::NFS4ERR_BADXDR;
                break;
            }
        };
        // An opnum the specification does not define (or only a later minor version
        // does), and OP_ILLEGAL itself, get NFS4ERR_OP_ILLEGAL with the result opcode
        // OP_ILLEGAL (RFC 8881 §15.2, §16.2.3) wherever they stand: before the position
        // rules, so that one without SEQUENCE in front is not answered OP_NOT_IN_SESSION.
        let Some(entry) = nfs_opnum4::from_i32(opnum as i32)
            .filter(|op| *op != nfs_opnum4::OP_ILLEGAL)
            .and_then(optable::entry)
            .filter(|e| !e.info().defined_after(minor))
        else {
            optable::encode_status(
                &mut out,
                nfs_opnum4::OP_ILLEGAL as u32,
                nfsstat4::NFS4ERR_OP_ILLEGAL,
            );
            done += 1;
            status = nfsstat4::NFS4ERR_OP_ILLEGAL;
            break;
        };
        srv.stats.count(opnum);
        let info = entry.info();
        let arg = match nfs_argop4::decode(&mut src) {
            Ok(a) => a,
            Err(_) => {
                entry.encode_error(&mut out, nfsstat4::NFS4ERR_BADXDR);
                done += 1;
                status = nfsstat4::NFS4ERR_BADXDR;
                break;
            }
        };
        let before = out.len();

        // Position rules for SEQUENCE and the session-less ops, then the table's flags.
        let pre: Result<optable::Handler, nfsstat4> = if i == 0 {
            if let nfs_argop4::OP_SEQUENCE(sa) = &arg {
                let hash = request_hash(&args);
                match crate::ops::session::sequence(&mut c, sa, nops, args.len(), hash, out.len()) {
                    Ok((res, s)) => {
                        if !matches!(proc, TxnProc::Plain | TxnProc::Whole) {
                            match srv.txns.start(
                                &s.id,
                                proc,
                                c.scope.ctx().compound,
                                c.now,
                                srv.cfg.max_txn_compounds,
                            ) {
                                Ok(st) => {
                                    c.scope.set_span(st.span, st.export);
                                    txn_session = Some(s.id);
                                }
                                Err(e) => refused = Some(e),
                            }
                        }
                        cachethis = sa.sa_cachethis;
                        durable = s.persistent.then_some((sa.sa_sequenceid, hash));
                        cache_limit = s.fore.max_response_cached as usize;
                        c.reply_left = s.fore.max_response as usize;
                        slot.slot = Some((s, sa.sa_slotid));
                        nfs_resop4::OP_SEQUENCE(crate::nfs::SEQUENCE4res::NFS4_OK(res))
                            .encode(&mut out);
                        done += 1;
                        continue;
                    }
                    Err(crate::ops::session::SeqFail::Replay(bytes)) => return Ok(bytes),
                    Err(crate::ops::session::SeqFail::Status(s)) => Err(s),
                }
            } else if !info.sessionless {
                Err(nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
            } else if nops != 1 {
                Err(nfsstat4::NFS4ERR_NOT_ONLY_OP)
            } else {
                runnable(entry, &c)
            }
        } else if let Some(e) = refused {
            Err(e)
        } else if matches!(arg, nfs_argop4::OP_SEQUENCE(_)) {
            Err(nfsstat4::NFS4ERR_SEQUENCE_POS)
        } else if txn && !entry.info().in_txn {
            Err(nfsstat4::NFS4ERR_NOTSUPP)
        } else {
            runnable(entry, &c)
        };
        // An op that changes state runs only if its result surely fits: afterwards it
        // could not be reported as failed without lying about what happened.
        let pre = pre.and_then(|h| {
            if !info.modifies {
                return Ok(h);
            }
            let need = out.len() + entry.reply_bound(&arg);
            if need > c.reply_left_total() {
                Err(nfsstat4::NFS4ERR_REP_TOO_BIG)
            } else if cachethis && need > cache_limit {
                Err(nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)
            } else {
                Ok(h)
            }
        });

        let result = match pre {
            Err(s) => Err(OpError::Status(s)),
            // A panic fails this op with SERVERFAULT (`crate::panics`, ADR 0029).
            Ok(handler) => crate::panics::catch(srv, info.name(), || {
                #[cfg(feature = "fault-injection")]
                srv.faults.before_op(srv, opnum);
                handler(&mut c, arg)
            })
            .unwrap_or(Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT))),
        };
        let st = match result {
            Ok(res) => {
                c.apply_stateid_rule(entry.stateid, &res);
                res.encode(&mut out);
                nfsstat4::NFS4_OK
            }
            Err(OpError::Status(s)) => {
                entry.encode_error(&mut out, s);
                s
            }
            Err(OpError::WithBody(s, res)) => {
                res.encode(&mut out);
                s
            }
        };
        done += 1;
        last_op = Some((before, entry));
        // Reply size limits, checked on the real encoding (for ops that modify state
        // this only trips if their table bound is wrong).
        let limit = if cachethis {
            cache_limit.min(c.reply_left_total())
        } else {
            c.reply_left_total()
        };
        if out.len() > limit {
            if info.modifies && st == nfsstat4::NFS4_OK {
                tracing::error!(
                    op = info.name(),
                    "reply exceeds the op table's bound after the op changed state"
                );
            }
            // Too big for the reply itself, or only for the reply cache.
            let whole = out.len();
            out.truncate(before);
            let s = if cachethis && whole <= c.reply_left_total() {
                nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE
            } else {
                nfsstat4::NFS4ERR_REP_TOO_BIG
            };
            entry.encode_error(&mut out, s);
            status = s;
            break;
        }
        c.reply_left = limit.saturating_sub(out.len());
        if st != nfsstat4::NFS4_OK {
            status = st;
            break;
        }
    }

    if status == nfsstat4::NFS4_OK {
        if let Some(e) = refused {
            // SEQUENCE alone: nothing else to fail.
            status = e;
        }
    }
    let span = c.scope.ctx().span;
    if txn_session.is_some() && span.ends() {
        // The last COMPOUND (or ABORT) of a transaction that touched an export ends it
        // there, whether or not its own ops touched the export.
        if let Some(id) = c.scope.txn_export().filter(|id| !c.scope.entered(*id)) {
            if let Some(e) = srv.exports.get(id).cloned() {
                let (creds, client) = (c.creds.clone(), c.client);
                let _ = c.scope.enter(&e, &creds, client);
            }
        }
    }
    let wanted = status == nfsstat4::NFS4_OK && proc != TxnProc::Abort;
    let mut commit = wanted;
    // Durable sessions (ADR 0022): a one-COMPOUND transaction on a persistent session
    // stores its reply, tagged with its COMPOUND id, before it commits; a restart drops
    // the stored reply if recovery rolls the transaction back. No durable reply, no
    // commit.
    let mut stored = None;
    if let (true, true, TxnSpan::Whole, Some((s, slotid)), Some((seqid, hash))) =
        (txn, commit, span, &slot.slot, durable)
    {
        let mut pre = out.clone();
        pre[..4].copy_from_slice(&(status as i32).to_be_bytes());
        pre[count_at..count_at + 4].copy_from_slice(&done.to_be_bytes());
        let pre = pre.freeze();
        let keep = pre.len() <= s.fore.max_response_cached as usize;
        let id = c.scope.ctx().compound;
        match srv.persist_reply(s, *slotid, seqid, hash, id, keep.then(|| pre.clone())) {
            Ok(()) => stored = Some(pre),
            Err(e) => {
                tracing::error!("transaction's reply not durable, rolling back: {e}");
                commit = false;
            }
        }
    }
    // (Before `finish`, which leaves the exports.)
    let txn_export = c.scope.txn_export();
    let finished = c.scope.finish(commit);
    if let Err(e) = &finished {
        tracing::error!("transaction not committed: {e}");
    }
    if finished.is_err() || commit != wanted {
        // Only a transaction asked to commit fails here, and it was rolled back: its
        // last op takes the blame, so the reply says that nothing happened.
        if let Some((at, entry)) = last_op {
            out.truncate(at);
            entry.encode_error(&mut out, nfsstat4::NFS4ERR_IO);
            status = nfsstat4::NFS4ERR_IO;
        }
    }
    if status != nfsstat4::NFS4_OK || proc == TxnProc::Abort {
        // The transaction was rolled back: the opens it made go too.
        close_txn_opens(&mut c);
    }
    if let Some(sid) = txn_session {
        srv.txns
            .finish(&sid, span, status == nfsstat4::NFS4_OK, txn_export);
    }
    out[..4].copy_from_slice(&(status as i32).to_be_bytes());
    out[count_at..count_at + 4].copy_from_slice(&done.to_be_bytes());
    let reply = out.freeze();
    if let Some((s, slotid)) = slot.slot.take() {
        let keep = reply.len() <= s.fore.max_response_cached as usize;
        let cached = keep.then(|| reply.clone());
        if let Some((seqid, hash)) = durable {
            // Durable before it is cached (a retransmission cannot see it earlier)
            // and before it is sent.
            if stored.as_ref() == Some(&reply) {
                srv.settle_reply(&s, slotid);
            } else if let Err(e) = srv.persist_reply(&s, slotid, seqid, hash, 0, cached.clone()) {
                tracing::error!("persistent session's reply not durable: {e}");
            }
        }
        srv.finish_slot(&s, slotid, cached);
    }
    Ok(reply)
}

/// Closes the opens a rolled-back transactional COMPOUND created (OPENs of its earlier
/// COMPOUNDs, in a transaction of several, stay until CLOSE or the lease ends).
fn close_txn_opens(c: &mut Compound) {
    let Ok(client) = c.client() else {
        return;
    };
    for (sid, file) in std::mem::take(&mut c.txn_opens) {
        let released = match c.srv.core() {
            Ok(mut core) => {
                let _ = core.table_mut().close(client, &sid, file);
                c.srv.held.release_closed(&core, Some(file), c.scope.ctx())
            }
            Err(_) => return,
        };
        // Given back after the core's lock, as CLOSE does.
        drop(released);
    }
}

/// The handler of an op that passed the table's checks, or why it may not run:
/// unimplemented or not in this minor version (NOTSUPP, as RFC 8881 asks of the v4.0-only
/// ops), or no current filehandle.
fn runnable(entry: &optable::OpEntry, c: &Compound) -> Result<optable::Handler, nfsstat4> {
    let info = entry.info();
    match entry.handler {
        Some(h) if info.in_minor(c.minor) => {
            if info.needs_fh && c.cfh.is_none() {
                Err(nfsstat4::NFS4ERR_NOFILEHANDLE)
            } else {
                Ok(h)
            }
        }
        _ => Err(nfsstat4::NFS4ERR_NOTSUPP),
    }
}

impl Compound<'_> {
    /// The reply size limit of this compound (negotiated max response or server max).
    fn reply_left_total(&self) -> usize {
        match &self.session {
            Some(s) => s.fore.max_response as usize,
            None => self.srv.limits.max_response as usize,
        }
    }

    /// Apply a successful op's effect on the current stateid (RFC 8881 §16.2.3.1.2).
    pub(crate) fn apply_stateid_rule(&mut self, rule: optable::CurrentStateid, res: &nfs_resop4) {
        use optable::CurrentStateid as S;
        match rule {
            S::Keeps => {}
            S::Clears => self.cur_sid = None,
            S::Sets(returned) => self.cur_sid = returned(res),
            S::Saves => self.saved_sid = self.cur_sid.clone(),
            S::Restores => self.cur_sid = self.saved_sid.clone(),
        }
    }
}

/// How a COMPOUND may wait on storage (`crate::placement` decides where it runs from
/// this): the most of its ops' op-table answers (`may_block`: COMMIT, stable or large
/// WRITEs, truncation, large READs and session creation, which persists the client list,
/// may wait on the disk; namespace changes are quick on a healthy file system). Long
/// COMPOUNDs count as blocking; a malformed one is answered without touching storage.
pub fn blocking(args: &Bytes) -> Blocking {
    const MAX_OPS: u32 = 16;
    let mut src = args.clone();
    let Ok(_tag) = txnfs_xdr::get_opaque(&mut src, MAX_TAG) else {
        return Blocking::Yes;
    };
    let (Ok(_minor), Ok(n)) = (txnfs_xdr::get_u32(&mut src), txnfs_xdr::get_u32(&mut src)) else {
        return Blocking::Yes;
    };
    if n > MAX_OPS {
        return Blocking::Yes;
    }
    let mut most = Blocking::No;
    for _ in 0..n {
        let Ok(op) = nfs_argop4::decode(&mut src) else {
            return most;
        };
        match optable::entry(op.discriminant()) {
            Some(entry) => most = most.max(entry.may_block(&op)),
            None => return Blocking::Yes,
        }
    }
    most
}
