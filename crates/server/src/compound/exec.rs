//! One COMPOUND, decoded once ([`Request`]) and run as a short sequence of named steps
//! ([`Exec`]): the slot and SEQUENCE, the transaction span, each op's admission and run,
//! the end of a transaction, and the reply's completion (caching, durability).

use super::optable::{self, OpEntry};
use super::{Compound, CompoundError, OpError, MAX_TAG};
use crate::nfs::{nfs_argop4, nfs_opnum4, nfs_resop4, nfsstat4, open_claim4};
use crate::ops::session::SeqFail;
use crate::placement::{Blocking, WaitClock};
use crate::server::Server;
use crate::session::Session;
use crate::txnspan::TxnProc;
use bytes::{BufMut, Bytes};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use txnfs_backend::{Creds, TxnSpan};
use txnfs_state::session::SessionId;
use txnfs_xdr::{Decode, Encode, GatherBuf, Gathered};

mod v40;

/// A COMPOUND's arguments, decoded once: placement reads them, the executor runs them.
pub struct Request {
    /// The request as received (the reply cache hashes it).
    args: Bytes,
    tag: Bytes,
    minor: u32,
    /// How many ops the request announced.
    nops: u32,
    /// The ops that decoded, in order.
    ops: Vec<nfs_argop4>,
    /// Why decoding stopped before `nops` ops, if it did.
    tail: Tail,
}

/// How the ops of a request end.
#[derive(Clone, Copy)]
enum Tail {
    /// All announced ops decoded.
    Complete,
    /// Fewer ops than announced: the COMPOUND fails NFS4ERR_BADXDR after the last one.
    Missing,
    /// An opnum the specification does not define, or OP_ILLEGAL itself.
    Illegal,
    /// A known op whose arguments do not decode.
    Garbled(&'static OpEntry),
}

impl Request {
    /// Decodes the header (an error here is GARBAGE_ARGS at the RPC level) and every op
    /// up to the first that does not decode.
    pub fn decode(args: Bytes) -> Result<Request, CompoundError> {
        let mut src = args.clone();
        let tag = txnfs_xdr::get_opaque(&mut src, MAX_TAG)?;
        let minor = txnfs_xdr::get_u32(&mut src)?;
        let nops = txnfs_xdr::get_u32(&mut src)?;
        let mut ops = Vec::with_capacity(nops.min(64) as usize);
        let mut tail = Tail::Complete;
        for _ in 0..nops {
            let Ok(opnum) = txnfs_xdr::get_u32(&mut src.clone()) else {
                tail = Tail::Missing;
                break;
            };
            // An opnum the specification does not define (or only a later minor
            // version does: RFC 8881 §15.2, knfsd's `nfsd4_opnum_in_range`), and
            // OP_ILLEGAL itself, get NFS4ERR_OP_ILLEGAL wherever they stand.
            let Some(entry) = known(opnum).filter(|e| !e.info().defined_after(minor)) else {
                tail = Tail::Illegal;
                break;
            };
            match nfs_argop4::decode(&mut src) {
                Ok(op) => ops.push(op),
                Err(_) => {
                    tail = Tail::Garbled(entry);
                    break;
                }
            }
        }
        Ok(Request {
            args,
            tag,
            minor,
            nops,
            ops,
            tail,
        })
    }

    /// The tag, echoed in the reply.
    pub fn tag(&self) -> &Bytes {
        &self.tag
    }

    /// How this COMPOUND may wait on storage (`crate::placement` decides where it runs
    /// from this): the most of its ops' op-table answers (`may_block`: COMMIT, stable or
    /// large WRITEs, truncation, large READs and session creation, which persists the
    /// client list, may wait on the disk; namespace changes are quick on a healthy file
    /// system). Long COMPOUNDs count as blocking; a malformed one is answered without
    /// touching storage beyond its ops that decoded.
    pub fn blocking(&self) -> Blocking {
        const MAX_OPS: u32 = 16;
        // A long COMPOUND of quick ops only (a batch of small READs or GETATTRs, ADR
        // 0044) runs inline up to these bounds: 64 READs of 4 KiB take about 100 µs,
        // less than a handoff to the pool and back costs.
        const MAX_QUICK_OPS: u32 = 256;
        const MAX_QUICK_IO_BYTES: u64 = 256 << 10;
        if self.nops > MAX_QUICK_OPS {
            return Blocking::Yes;
        }
        let most = self
            .ops
            .iter()
            .filter_map(|op| optable::entry(op.discriminant()).map(|e| e.may_block(op)))
            .max()
            .unwrap_or(Blocking::No);
        if self.nops > MAX_OPS && (most != Blocking::No || self.io_bytes() > MAX_QUICK_IO_BYTES) {
            return Blocking::Yes;
        }
        most
    }

    /// Whether a retransmission of this request could be answered from the reply cache:
    /// it has an op that changes state (whose reply is kept), or one that did not
    /// decode, or it is a transaction's. Only then does SEQUENCE hash it
    /// ([`request_hash`]); a request of reads alone whose client did not ask for its
    /// reply to be kept is answered NFS4ERR_RETRY_UNCACHED_REP on a retransmission
    /// whatever it holds (ADR 0064 addendum).
    fn may_be_kept(&self, proc: TxnProc) -> bool {
        proc != TxnProc::Plain
            || self.ops.len() < self.nops as usize
            || self
                .ops
                .iter()
                .any(|op| optable::entry(op.discriminant()).is_none_or(|e| e.info().modifies))
    }

    /// Whether an OPEN of this COMPOUND would truncate an existing non-empty file: an
    /// UNCHECKED create with a size, in the directory a PUTFH set (ops that keep the
    /// current filehandle may come between, as SAVEFH in the Linux client's OPEN), of a
    /// name that is such a file now (`Backend::peek_size`, a hint: the file may change
    /// before the OPEN runs). Only the first few such OPENs are looked at.
    pub fn truncates_a_file(&self, srv: &Server) -> bool {
        use crate::nfs::{createhow4, openflag4};
        const SIZE_BIT: u32 = 1 << txnfs_attr::fattr::SIZE;
        const MAX_PEEKS: usize = 4;
        let mut peeks = 0;
        let mut dir: Option<&Bytes> = None;
        for op in &self.ops {
            let open = match op {
                nfs_argop4::OP_PUTFH(a) => {
                    dir = Some(&a.object);
                    continue;
                }
                nfs_argop4::OP_SEQUENCE(_)
                | nfs_argop4::OP_SAVEFH
                | nfs_argop4::OP_GETFH
                | nfs_argop4::OP_GETATTR(_)
                | nfs_argop4::OP_ACCESS(_) => continue,
                nfs_argop4::OP_OPEN(open) => open,
                _ => {
                    dir = None;
                    continue;
                }
            };
            // The OPEN makes the file the current filehandle.
            let Some(wire) = dir.take() else { continue };
            let openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(attrs)) = &open.openhow else {
                continue;
            };
            let open_claim4::CLAIM_NULL(name) = &open.claim else {
                continue;
            };
            if attrs.attrmask.first().is_none_or(|w| w & SIZE_BIT == 0) {
                continue;
            }
            if peeks == MAX_PEEKS {
                break;
            }
            peeks += 1;
            if crate::placement::names_a_non_empty_file(srv, wire, name) {
                return true;
            }
        }
        false
    }

    /// The bytes its READs ask for and its WRITEs carry.
    fn io_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                nfs_argop4::OP_READ(r) => u64::from(r.count),
                nfs_argop4::OP_WRITE(w) => w.data.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

/// The table entry of a defined opnum other than OP_ILLEGAL.
fn known(opnum: u32) -> Option<&'static OpEntry> {
    nfs_opnum4::from_i32(opnum as i32)
        .filter(|op| *op != nfs_opnum4::OP_ILLEGAL)
        .and_then(optable::entry)
}

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

/// The reply's head: status and result count (patched at the end, in place:
/// `GatherBuf::set_u32s`) around the tag. Returns where the count is.
fn reply_head(out: &mut GatherBuf, tag: &Bytes) -> usize {
    let head = out.tail();
    head.put_u32(0);
    txnfs_xdr::put_opaque(head, tag);
    let count_at = head.len();
    head.put_u32(0);
    count_at
}

/// Runs `req` as procedure `proc` and returns the encoded COMPOUND4res.
pub(super) fn run(
    srv: &Server,
    caller: crate::exportrules::Caller,
    creds: Creds,
    conn: u64,
    req: Request,
    proc: TxnProc,
    waited: &WaitClock,
) -> Gathered {
    if req.minor == 0 && proc == TxnProc::Plain {
        // NFSv4.0: no sessions, per-owner sequence ids (`v40`).
        return v40::run(srv, creds, conn, req, waited);
    }
    let mut out = GatherBuf::in_thread_buffer(256);
    let count_at = reply_head(&mut out, &req.tag);
    if req.minor == 0 || req.minor > 2 {
        let set = out.set_u32s(&[(0, nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH as u32)]);
        assert!(set, "the COMPOUND head is in the first part");
        return out.finish();
    }
    let txn = proc.is_txn();
    let mut x = Exec {
        c: Compound::start(srv, creds, conn, req.minor, txn, waited),
        proc,
        out,
        count_at,
        status: nfsstat4::NFS4_OK,
        done: 0,
        slot: OpenSlot { srv, slot: None },
        cache_limit: usize::MAX,
        cachethis: false,
        durable: None,
        last_op: None,
        txn_session: None,
        refused: None,
        stored: None,
        op_ended: None,
        modifies: false,
    };
    x.c.caller = caller;
    let nops = req.nops;
    let hashed = req.may_be_kept(proc);
    let (args, tail) = (req.args, req.tail);
    let mut ops = req.ops.into_iter().peekable();
    for i in 0..nops {
        let Some(arg) = ops.next() else {
            x.stop_at(tail);
            break;
        };
        x.c.next_defers_wrongsec = defers_wrongsec(ops.peek());
        if i == 0 {
            if let nfs_argop4::OP_SEQUENCE(sa) = &arg {
                match x.sequence(sa, nops, &args, hashed) {
                    Step::Next => continue,
                    Step::Replay(bytes) => return bytes,
                    Step::Failed(s) => {
                        x.fail_op(&arg, s);
                        break;
                    }
                }
            }
        }
        if !x.op(i, nops, arg) {
            break;
        }
    }
    x.end_transaction();
    x.complete()
}

/// What the SEQUENCE step leaves the loop to do.
enum Step {
    Next,
    /// A retransmission answered from the slot's reply cache.
    Replay(Gathered),
    /// SEQUENCE failed: the COMPOUND ends with this status.
    Failed(nfsstat4),
}

/// The executor's state for one COMPOUND: the ops' context and the reply being built.
struct Exec<'a> {
    c: Compound<'a>,
    proc: TxnProc,
    /// The reply; file data is a part of its own (`super::payload`).
    out: GatherBuf,
    /// Where the result count is patched in.
    count_at: usize,
    status: nfsstat4,
    done: u32,
    /// The (session, slot) whose reply cache entry must be completed.
    slot: OpenSlot<'a>,
    cache_limit: usize,
    cachethis: bool,
    /// A persistent session's (sequence id, request hash): its reply is made durable
    /// before it is sent (ADR 0022).
    durable: Option<(u32, u64)>,
    /// Where the last op's result starts, and its table entry: a transaction that fails
    /// to commit is reported as that op failing with NFS4ERR_IO.
    last_op: Option<(usize, &'static OpEntry)>,
    /// A COMPOUND of a transaction of several: its session.
    txn_session: Option<SessionId>,
    /// Why this COMPOUND of a transaction may not run (the op after SEQUENCE fails
    /// with that).
    refused: Option<nfsstat4>,
    /// The reply a one-COMPOUND transaction stored before it committed.
    stored: Option<Gathered>,
    /// When the last op ended (`op`): the next one's start, for its latency metric.
    op_ended: Option<std::time::Instant>,
    /// An op that changes state ran (or was tried): the reply is kept for a
    /// retransmission even without `sa_cachethis`.
    modifies: bool,
}

impl Exec<'_> {
    /// The ops ended early (`tail`): the answer the last one gets.
    fn stop_at(&mut self, tail: Tail) {
        match tail {
            Tail::Complete | Tail::Missing => self.status = nfsstat4::NFS4ERR_BADXDR,
            // (RFC 8881 §15.2, §16.2.3: the result opcode is OP_ILLEGAL.)
            Tail::Illegal => self.illegal(),
            Tail::Garbled(entry) => {
                entry.encode_error(self.out.tail(), nfsstat4::NFS4ERR_BADXDR);
                self.done += 1;
                self.status = nfsstat4::NFS4ERR_BADXDR;
            }
        }
    }

    fn illegal(&mut self) {
        optable::encode_status(
            self.out.tail(),
            nfs_opnum4::OP_ILLEGAL as u32,
            nfsstat4::NFS4ERR_OP_ILLEGAL,
        );
        self.done += 1;
        self.status = nfsstat4::NFS4ERR_OP_ILLEGAL;
    }

    /// SEQUENCE as the first op: the slot, the reply limits, and (for a COMPOUND of a
    /// transaction of several) the transaction's span.
    /// `hashed`: whether the request must be told from another one with the same slot
    /// and sequence id ([`Request::may_be_kept`], or the client asks for its reply to be
    /// kept); the others all hash to 0, so a retransmission of one is answered
    /// NFS4ERR_RETRY_UNCACHED_REP, never NFS4ERR_SEQ_FALSE_RETRY.
    fn sequence(
        &mut self,
        sa: &crate::nfs::SEQUENCE4args,
        nops: u32,
        args: &Bytes,
        hashed: bool,
    ) -> Step {
        let srv = self.c.srv;
        srv.stats.count(nfs_opnum4::OP_SEQUENCE as u32);
        let hash = if hashed || sa.sa_cachethis {
            request_hash(args)
        } else {
            0
        };
        let (res, s) = match crate::ops::session::sequence(
            &mut self.c,
            sa,
            nops,
            args.len(),
            hash,
            self.out.len(),
        ) {
            Ok(r) => r,
            Err(SeqFail::Replay(bytes)) => return Step::Replay(bytes),
            Err(SeqFail::Status(s)) => return Step::Failed(s),
        };
        if !matches!(self.proc, TxnProc::Plain | TxnProc::Whole) {
            self.start_span(&s);
        }
        self.cachethis = sa.sa_cachethis;
        self.durable = s.persistent.then_some((sa.sa_sequenceid, hash));
        self.cache_limit = s.fore.max_response_cached as usize;
        self.c.reply_left = s.fore.max_response as usize;
        self.slot.slot = Some((s, sa.sa_slotid));
        nfs_resop4::OP_SEQUENCE(crate::nfs::SEQUENCE4res::NFS4_OK(res)).encode(self.out.tail());
        self.done += 1;
        Step::Next
    }

    /// Places this COMPOUND in its session's transaction of several (`crate::txnspan`).
    fn start_span(&mut self, s: &Arc<Session>) {
        let srv = self.c.srv;
        match srv.txns.start(
            &s.id,
            self.proc,
            self.c.scope.ctx().compound,
            self.c.now,
            srv.cfg.max_txn_compounds,
        ) {
            Ok(st) => {
                self.c.scope.set_span(st.span, st.export);
                self.txn_session = Some(s.id);
            }
            Err(e) => self.refused = Some(e),
        }
    }

    /// A first op that failed before it ran (SEQUENCE): its error result ends the
    /// COMPOUND.
    fn fail_op(&mut self, arg: &nfs_argop4, s: nfsstat4) {
        if let Some(entry) = optable::entry(arg.discriminant()) {
            entry.encode_error(self.out.tail(), s);
        }
        self.done += 1;
        self.status = s;
    }

    /// Op `i` of `nops`: admitted, run, and its result encoded. False when the
    /// COMPOUND ends here.
    fn op(&mut self, i: u32, nops: u32, arg: nfs_argop4) -> bool {
        let srv = self.c.srv;
        let Some(entry) = optable::entry(arg.discriminant()) else {
            // (Decoding let only defined ops through: a table without the op is a bug.)
            self.illegal();
            return false;
        };
        let opnum = entry.op as u32;
        srv.stats.count(opnum);
        let info = entry.info();
        self.modifies |= info.modifies;
        let before = self.out.len();
        // One clock read per op: this op starts when the one before it ended.
        let started = self.op_ended.unwrap_or_else(std::time::Instant::now);
        self.c.may_pipe = i + 1 == nops && !self.cachethis && !self.modifies && !self.proc.is_txn();
        let result = match self.admit(i, nops, entry, &arg) {
            Err(s) => Err(OpError::Status(s)),
            // A panic fails this op with SERVERFAULT (`crate::panics`, ADR 0029).
            Ok(handler) => {
                let c = &mut self.c;
                crate::panics::catch(
                    srv,
                    || info.name(),
                    || {
                        #[cfg(feature = "fault-injection")]
                        srv.faults.before_op(srv, opnum);
                        handler(c, arg)
                    },
                )
                .unwrap_or(Err(OpError::Status(nfsstat4::NFS4ERR_SERVERFAULT)))
            }
        };
        let st = match result {
            Ok(res) => {
                self.c.apply_stateid_rule(entry.stateid, &res);
                super::payload::encode_v4(&res, self.c.piped.take(), &mut self.out);
                nfsstat4::NFS4_OK
            }
            Err(OpError::Status(s)) => {
                entry.encode_error(self.out.tail(), s);
                s
            }
            Err(OpError::WithBody(s, res)) => {
                super::payload::encode_v4(&res, None, &mut self.out);
                s
            }
        };
        // (An op that failed after piping its data drops the pipe.)
        self.c.piped = None;
        let ended = std::time::Instant::now();
        srv.metrics.v4_op(opnum, ended - started, st as i32);
        self.op_ended = Some(ended);
        if let Some(s) = &self.c.session {
            s.activity
                .ops
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.done += 1;
        self.last_op = Some((before, entry));
        if !self.reply_fits(before, entry, st) {
            return false;
        }
        if st != nfsstat4::NFS4_OK {
            self.status = st;
            return false;
        }
        true
    }

    /// Whether op `i` may run: the position rules for SEQUENCE and the session-less
    /// ops, the table's flags, and for an op that changes state, that its result surely
    /// fits (afterwards it could not be reported as failed without lying about what
    /// happened).
    fn admit(
        &self,
        i: u32,
        nops: u32,
        entry: &'static OpEntry,
        arg: &nfs_argop4,
    ) -> Result<optable::Handler, nfsstat4> {
        let info = entry.info();
        let handler = if i == 0 {
            if !info.sessionless {
                Err(nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
            } else if nops != 1 {
                Err(nfsstat4::NFS4ERR_NOT_ONLY_OP)
            } else {
                runnable(entry, &self.c)
            }
        } else if let Some(e) = self.refused {
            Err(e)
        } else if matches!(arg, nfs_argop4::OP_SEQUENCE(_)) {
            Err(nfsstat4::NFS4ERR_SEQUENCE_POS)
        } else if self.proc.is_txn() && !info.in_txn {
            Err(nfsstat4::NFS4ERR_NOTSUPP)
        } else {
            runnable(entry, &self.c)
        }?;
        if !info.modifies {
            return Ok(handler);
        }
        let need = self.out.len() + entry.reply_bound(arg);
        if need > self.c.reply_left_total() {
            Err(nfsstat4::NFS4ERR_REP_TOO_BIG)
        } else if self.cachethis && need > self.cache_limit {
            Err(nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)
        } else {
            Ok(handler)
        }
    }

    /// The reply size limits, checked on the real encoding of the op whose result
    /// starts at `before` (for ops that modify state this only trips if their bound is
    /// wrong). Too big: the result becomes REP_TOO_BIG[_TO_CACHE] and the COMPOUND ends.
    fn reply_fits(&mut self, before: usize, entry: &'static OpEntry, st: nfsstat4) -> bool {
        let total = self.c.reply_left_total();
        let limit = if self.cachethis {
            self.cache_limit.min(total)
        } else {
            total
        };
        if self.out.len() <= limit {
            self.c.reply_left = limit.saturating_sub(self.out.len());
            return true;
        }
        let info = entry.info();
        if info.modifies && st == nfsstat4::NFS4_OK {
            tracing::error!(
                op = info.name(),
                "reply exceeds the op table's bound after the op changed state"
            );
        }
        // Too big for the reply itself, or only for the reply cache.
        let whole = self.out.len();
        self.out.truncate(before);
        let s = if self.cachethis && whole <= total {
            nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE
        } else {
            nfsstat4::NFS4ERR_REP_TOO_BIG
        };
        entry.encode_error(self.out.tail(), s);
        self.status = s;
        false
    }

    /// The reply as it stands, status and result count patched in: only the first
    /// part is copied, the results after it are shared.
    fn patched(&mut self) -> Gathered {
        self.out.seal();
        self.patch();
        self.out.snapshot()
    }

    /// Status and result count set in the reply's head, in place: the head starts the
    /// reply's first part, which the buffer keeps writable until it is finished.
    fn patch(&mut self) {
        let set = self
            .out
            .set_u32s(&[(0, self.status as i32 as u32), (self.count_at, self.done)]);
        // `reply_head` wrote status and count into the first part.
        assert!(set, "the COMPOUND head is in the first part");
    }

    /// The end of the backend side: a transaction commits (its reply made durable first
    /// on a persistent session) or rolls back, and the exports are left.
    fn end_transaction(&mut self) {
        let srv = self.c.srv;
        if self.status == nfsstat4::NFS4_OK {
            if let Some(e) = self.refused {
                // SEQUENCE alone: nothing else to fail.
                self.status = e;
            }
        }
        let span = self.c.scope.ctx().span;
        if self.txn_session.is_some() && span.ends() {
            // The last COMPOUND (or ABORT) of a transaction that touched an export ends
            // it there, whether or not its own ops touched the export.
            let c = &mut self.c;
            if let Some(id) = c.scope.txn_export().filter(|id| !c.scope.entered(*id)) {
                if let Some(e) = srv.exports.get(id) {
                    let (creds, client) = (c.creds.clone(), c.client);
                    let _ = c.scope.enter(&e, &creds, client);
                }
            }
        }
        let wanted = self.status == nfsstat4::NFS4_OK && self.proc != TxnProc::Abort;
        let commit = wanted && self.durable_before_commit(span);
        // (Before `finish`, which leaves the exports.)
        let txn_export = self.c.scope.txn_export();
        let finished = self.c.scope.finish(commit);
        if let Err(e) = &finished {
            tracing::error!("transaction not committed: {e}");
        }
        if finished.is_err() || commit != wanted {
            // Only a transaction asked to commit fails here, and it was rolled back: its
            // last op takes the blame, so the reply says that nothing happened.
            if let Some((at, entry)) = self.last_op {
                self.out.truncate(at);
                entry.encode_error(self.out.tail(), nfsstat4::NFS4ERR_IO);
                self.status = nfsstat4::NFS4ERR_IO;
            }
        }
        if self.status != nfsstat4::NFS4_OK || self.proc == TxnProc::Abort {
            // The transaction was rolled back: the opens it made go too.
            close_txn_opens(&mut self.c);
        }
        if let Some(sid) = self.txn_session {
            let orphaned =
                srv.txns
                    .finish(&sid, span, self.status == nfsstat4::NFS4_OK, txn_export);
            if let Some(t) = orphaned {
                // Its session lost its last connection while this COMPOUND ran.
                srv.roll_back(vec![t], "its session's last connection closed");
            }
        }
    }

    /// Durable sessions (ADR 0022): a one-COMPOUND transaction on a persistent session
    /// stores its reply, tagged with its COMPOUND id, before it commits; a restart drops
    /// the stored reply if recovery rolls the transaction back. False when the reply
    /// could not be stored: no durable reply, no commit.
    fn durable_before_commit(&mut self, span: TxnSpan) -> bool {
        let (true, TxnSpan::Whole, Some((s, slotid)), Some((seqid, hash))) = (
            self.proc.is_txn(),
            span,
            self.slot.slot.clone(),
            self.durable,
        ) else {
            return true;
        };
        let pre = self.patched();
        let keep = pre.len() <= s.fore.max_response_cached as usize;
        let id = self.c.scope.ctx().compound;
        match self
            .c
            .srv
            .persist_reply(&s, slotid, seqid, hash, id, keep.then(|| pre.to_bytes()))
        {
            Ok(()) => {
                self.stored = Some(pre);
                true
            }
            Err(e) => {
                tracing::error!("transaction's reply not durable, rolling back: {e}");
                false
            }
        }
    }

    /// The reply: made durable (persistent session) and cached in the slot, then sent.
    /// The cache shares the reply's parts; a durable reply is copied whole to be
    /// written to the session store.
    /// (By reference: moving the executor here copied it, about 1.5 KB, per COMPOUND.)
    fn complete(&mut self) -> Gathered {
        let srv = self.c.srv;
        // The last use of the reply buffer: its parts move, no snapshot.
        self.patch();
        let reply = std::mem::take(&mut self.out).finish();
        if let Some((s, slotid)) = self.slot.slot.take() {
            // A COMPOUND that changed nothing and whose client did not ask for its reply
            // to be kept is not kept (RFC 8881 §2.10.6.1.3): a retransmission gets
            // NFS4ERR_RETRY_UNCACHED_REP and is sent again, which is harmless for reads.
            // Keeping every READ reply held its data until the slot's next request (up
            // to 64 KiB per slot) and cost a copy of the reply's part list per call.
            let wanted = self.cachethis || self.modifies;
            let keep = wanted && reply.len() <= s.fore.max_response_cached as usize;
            // (Detached: a kept reply must not pin the thread's buffer of heads.)
            let cached = keep.then(|| reply.detached());
            if let Some((seqid, hash)) = self.durable {
                // Durable before it is cached (a retransmission cannot see it earlier)
                // and before it is sent.
                if self.stored.as_ref() == Some(&reply) {
                    srv.settle_reply(&s, slotid);
                } else if let Err(e) = srv.persist_reply(
                    &s,
                    slotid,
                    seqid,
                    hash,
                    0,
                    cached.as_ref().map(Gathered::to_bytes),
                ) {
                    tracing::error!("persistent session's reply not durable: {e}");
                }
            }
            srv.finish_slot(&s, slotid, cached);
        }
        reply
    }
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

/// Whether the op after a put-filehandle op lets it defer NFS4ERR_WRONGSEC (RFC 8881
/// §2.6.3.1.1; Linux's `OP_HANDLES_WRONGSEC`): none (§2.6.3.1.1.6), another
/// put-filehandle op (.2), SAVEFH (.1), LOOKUP or OPEN of a name (.3), LOOKUPP (.4),
/// SECINFO or SECINFO_NO_NAME (.5). Any other op (.7) makes the put-filehandle op fail.
fn defers_wrongsec(next: Option<&nfs_argop4>) -> bool {
    use nfs_argop4::*;
    match next {
        None => true,
        Some(OP_OPEN(a)) => matches!(
            a.claim,
            open_claim4::CLAIM_NULL(_)
                | open_claim4::CLAIM_DELEGATE_CUR(_)
                | open_claim4::CLAIM_DELEGATE_PREV(_)
        ),
        Some(
            OP_PUTFH(_)
            | OP_PUTROOTFH
            | OP_PUTPUBFH
            | OP_RESTOREFH
            | OP_SAVEFH
            | OP_LOOKUP(_)
            | OP_LOOKUPP
            | OP_SECINFO(_)
            | OP_SECINFO_NO_NAME(_),
        ) => true,
        Some(_) => false,
    }
}

/// The ops that may run while the current filehandle is one the caller was not
/// admitted to (`Compound::cfh_wrongsec`): they put another one, save it, or ask about
/// flavours or the parent (and check the export's rules themselves).
fn handles_wrongsec(op: nfs_opnum4) -> bool {
    use nfs_opnum4::*;
    matches!(
        op,
        OP_PUTFH
            | OP_PUTROOTFH
            | OP_PUTPUBFH
            | OP_RESTOREFH
            | OP_SAVEFH
            | OP_LOOKUPP
            | OP_SECINFO
            | OP_SECINFO_NO_NAME
    )
}

/// The ops that use the saved filehandle besides RESTOREFH (which checks it again).
fn uses_saved_fh(op: nfs_opnum4) -> bool {
    use nfs_opnum4::*;
    matches!(op, OP_RENAME | OP_LINK | OP_COPY | OP_CLONE)
}

/// The handler of an op that passed the table's checks, or why it may not run:
/// unimplemented or not in this minor version (NOTSUPP, as RFC 8881 asks of the v4.0-only
/// ops), no current filehandle, or a filehandle of an export whose rules refuse the
/// caller's flavour (NFS4ERR_WRONGSEC deferred by a put-filehandle op).
fn runnable(entry: &OpEntry, c: &Compound) -> Result<optable::Handler, nfsstat4> {
    let info = entry.info();
    match entry.handler {
        Some(h) if info.in_minor(c.minor) => {
            if info.needs_fh && c.cfh.is_none() {
                Err(nfsstat4::NFS4ERR_NOFILEHANDLE)
            } else if (c.cfh_wrongsec && info.needs_fh && !handles_wrongsec(entry.op))
                || (c.sfh_wrongsec && uses_saved_fh(entry.op))
            {
                Err(nfsstat4::NFS4ERR_WRONGSEC)
            } else {
                Ok(h)
            }
        }
        _ => Err(nfsstat4::NFS4ERR_NOTSUPP),
    }
}
