//! The callback service on the session's back channel (RFC 8881 §20): CB_NULL and
//! CB_COMPOUND with CB_SEQUENCE first (its own slot table with replay detection,
//! §2.10.6), then CB_RECALL, CB_GETATTR, CB_NOTIFY, CB_RECALL_ANY and CB_RECALL_SLOT;
//! every other callback op is NFS4ERR_NOTSUPP, an unknown op OP_CB_ILLEGAL.
//!
//! The service is sans-IO: `CallbackService::handle` takes the decoded CALL and returns
//! the reply; what a callback asks of the cache (recall, attributes, notifications) goes
//! through `CallbackOps`, which answers at once and does any network work (flush,
//! DELEGRETURN) in a task of its own.

use bytes::{Bytes, BytesMut};
use std::sync::{Arc, Mutex};
use txnfs_proto::nfs4::*;
use txnfs_rpc::{CallReply, IncomingCall};
use txnfs_xdr::{Decode, Encode};

/// The callback program number this client registers in CREATE_SESSION.
pub const CB_PROGRAM: u32 = 0x4000_0000;
/// NFSv4.1 callback program version.
pub const CB_VERSION: u32 = 1;
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;

/// Back-channel limits this client offers in CREATE_SESSION.
pub(crate) fn back_channel_attrs() -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 64 << 10,
        ca_maxresponsesize: 16 << 10,
        ca_maxresponsesize_cached: MAX_CACHED_REPLY as u32,
        ca_maxoperations: 64,
        ca_maxrequests: 4,
        ca_rdma_ird: vec![],
    }
}

/// Largest CB_COMPOUND reply kept for a retransmission.
const MAX_CACHED_REPLY: usize = 8 << 10;
/// Longest tag accepted in a CB_COMPOUND.
const MAX_TAG: usize = 1024;

/// What the callbacks ask of the delegation cache. Every method answers at once.
pub(crate) trait CallbackOps: Send + Sync {
    /// CB_RECALL: start returning the delegation (flush, DELEGRETURN) in the background.
    fn recall(&self, stateid: &stateid4, fh: &Bytes, truncate: bool) -> nfsstat4;
    /// CB_GETATTR: the attributes (of `request`) of a write-delegated file.
    fn getattr(&self, fh: &Bytes, request: &[u32]) -> Result<fattr4, nfsstat4>;
    /// CB_NOTIFY: apply directory changes to the directory cache.
    fn notify(&self, stateid: &stateid4, fh: &Bytes, changes: &[notify4]) -> nfsstat4;
    /// CB_RECALL_ANY: return delegations until at most `keep` of the masked types remain.
    fn recall_any(&self, keep: u32, mask: &[u32]) -> nfsstat4;
}

/// One back-channel slot (RFC 8881 §2.10.6.1): the last sequence id seen and the reply
/// sent for it, when it was small enough to keep.
#[derive(Debug, Clone, Default)]
struct Slot {
    seq: u32,
    reply: Option<Bytes>,
}

/// The verdict of CB_SEQUENCE's slot check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotCheck {
    /// A new request: execute it.
    New,
    /// A retransmission of the last request: send this reply again.
    Replay(Bytes),
    /// Refuse CB_SEQUENCE with this status.
    Refuse(nfsstat4),
}

/// The back-channel slot table of one session.
#[derive(Debug, Clone)]
pub(crate) struct CbSlots {
    slots: Vec<Slot>,
}

impl CbSlots {
    pub(crate) fn new(n: u32) -> Self {
        CbSlots {
            slots: vec![Slot::default(); n.clamp(1, 64) as usize],
        }
    }

    /// RFC 8881 §2.10.6.1: a sequence id one more than the slot's is a new request, the
    /// same one a retransmission (its kept reply, else NFS4ERR_RETRY_UNCACHED_REP), any
    /// other NFS4ERR_SEQ_MISORDERED; a slot beyond the table NFS4ERR_BADSLOT. Slots start
    /// at sequence id 0, so the first request of a slot carries 1.
    pub(crate) fn check(&self, slot: u32, seq: u32) -> SlotCheck {
        let Some(s) = self.slots.get(slot as usize) else {
            return SlotCheck::Refuse(nfsstat4::NFS4ERR_BADSLOT);
        };
        if seq == s.seq.wrapping_add(1) {
            SlotCheck::New
        } else if seq == s.seq && seq != 0 {
            match &s.reply {
                Some(r) => SlotCheck::Replay(r.clone()),
                None => SlotCheck::Refuse(nfsstat4::NFS4ERR_RETRY_UNCACHED_REP),
            }
        } else {
            SlotCheck::Refuse(nfsstat4::NFS4ERR_SEQ_MISORDERED)
        }
    }

    /// Record that `seq` ran in `slot` and what it answered. Every reply that fits is
    /// kept whatever `csa_cachethis` said (the replier may keep more, §2.10.6.1.3): a
    /// retransmitted CB_RECALL then gets its first answer again, not an error.
    pub(crate) fn done(&mut self, slot: u32, seq: u32, reply: &Bytes) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.seq = seq;
            s.reply = (reply.len() <= MAX_CACHED_REPLY).then(|| reply.clone());
        }
    }

    fn highest(&self) -> u32 {
        self.slots.len() as u32 - 1
    }
}

struct SessionCb {
    id: sessionid4,
    /// The minor version of the session: the server's callbacks carry it too.
    minor: u32,
    slots: CbSlots,
    max_ops: u32,
}

/// Counters of the callbacks this client received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallbackStats {
    pub cb_null: u64,
    pub cb_compound: u64,
    /// Callback ops received per op name (CB_SEQUENCE included).
    pub ops: std::collections::BTreeMap<&'static str, u64>,
    /// CB_COMPOUNDs answered from the slot's kept reply.
    pub replays: u64,
}

/// The callback service of one client: the current session's back-channel slots and
/// the cache the callbacks act on.
pub(crate) struct CallbackService {
    session: Mutex<Option<SessionCb>>,
    ops: Arc<dyn CallbackOps>,
    stats: Mutex<CallbackStats>,
    /// Outcomes of background COPYs the server reported with CB_OFFLOAD, by the
    /// `other` field of the copy's stateid: the status and the bytes copied.
    offloads: Mutex<std::collections::HashMap<[u8; 12], (nfsstat4, u64)>>,
}

pub(crate) fn cb_op_name(op: u32) -> &'static str {
    match op {
        3 => "CB_GETATTR",
        4 => "CB_RECALL",
        5 => "CB_LAYOUTRECALL",
        6 => "CB_NOTIFY",
        7 => "CB_PUSH_DELEG",
        8 => "CB_RECALL_ANY",
        9 => "CB_RECALLABLE_OBJ_AVAIL",
        10 => "CB_RECALL_SLOT",
        11 => "CB_SEQUENCE",
        12 => "CB_WANTS_CANCELLED",
        13 => "CB_NOTIFY_LOCK",
        14 => "CB_NOTIFY_DEVICEID",
        15 => "CB_OFFLOAD",
        _ => "CB_ILLEGAL",
    }
}

/// The result of op `opcode` carrying only `status` (the error arm of every callback
/// op); an opcode outside the callback program is OP_CB_ILLEGAL.
pub(crate) fn status_result(opcode: u32, status: nfsstat4) -> nfs_cb_resop4 {
    use nfs_cb_resop4 as R;
    match opcode {
        3 => R::OP_CB_GETATTR(CB_GETATTR4res::default(status)),
        4 => R::OP_CB_RECALL(CB_RECALL4res { status }),
        5 => R::OP_CB_LAYOUTRECALL(CB_LAYOUTRECALL4res {
            clorr_status: status,
        }),
        6 => R::OP_CB_NOTIFY(CB_NOTIFY4res { cnr_status: status }),
        7 => R::OP_CB_PUSH_DELEG(CB_PUSH_DELEG4res {
            cpdr_status: status,
        }),
        8 => R::OP_CB_RECALL_ANY(CB_RECALL_ANY4res {
            crar_status: status,
        }),
        9 => R::OP_CB_RECALLABLE_OBJ_AVAIL(CB_RECALLABLE_OBJ_AVAIL4res {
            croa_status: status,
        }),
        10 => R::OP_CB_RECALL_SLOT(CB_RECALL_SLOT4res { rsr_status: status }),
        11 => R::OP_CB_SEQUENCE(CB_SEQUENCE4res::default(status)),
        12 => R::OP_CB_WANTS_CANCELLED(CB_WANTS_CANCELLED4res {
            cwcr_status: status,
        }),
        13 => R::OP_CB_NOTIFY_LOCK(CB_NOTIFY_LOCK4res {
            cnlr_status: status,
        }),
        14 => R::OP_CB_NOTIFY_DEVICEID(CB_NOTIFY_DEVICEID4res {
            cndr_status: status,
        }),
        15 => R::OP_CB_OFFLOAD(CB_OFFLOAD4res { cor_status: status }),
        _ => R::OP_CB_ILLEGAL(CB_ILLEGAL4res {
            status: nfsstat4::NFS4ERR_OP_ILLEGAL,
        }),
    }
}

fn encode_res(status: nfsstat4, tag: &Bytes, resarray: Vec<nfs_cb_resop4>) -> Bytes {
    CB_COMPOUND4res {
        status,
        tag: tag.clone(),
        resarray,
    }
    .to_bytes()
}

impl CallbackService {
    pub(crate) fn new(ops: Arc<dyn CallbackOps>) -> Self {
        CallbackService {
            session: Mutex::new(None),
            ops,
            stats: Mutex::new(CallbackStats::default()),
            offloads: Mutex::default(),
        }
    }

    /// The outcome CB_OFFLOAD reported for the background copy `id`, taken.
    pub(crate) fn take_offload(&self, id: &stateid4) -> Option<(nfsstat4, u64)> {
        self.offloads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id.other)
    }

    /// A new session's back channel: fresh slots (`attrs` as the server granted them).
    pub(crate) fn set_session(&self, id: sessionid4, minor: u32, attrs: &channel_attrs4) {
        *self.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(SessionCb {
            id,
            minor,
            slots: CbSlots::new(attrs.ca_maxrequests),
            max_ops: attrs.ca_maxoperations.max(1),
        });
    }

    pub(crate) fn stats(&self) -> CallbackStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Answer one CALL of the callback program.
    pub(crate) fn handle(&self, call: &IncomingCall) -> CallReply {
        if call.prog != CB_PROGRAM {
            return CallReply::ProgUnavail;
        }
        if call.vers != CB_VERSION {
            return CallReply::ProgMismatch {
                low: CB_VERSION,
                high: CB_VERSION,
            };
        }
        match call.proc_num {
            CB_NULL => {
                self.stats.lock().unwrap_or_else(|e| e.into_inner()).cb_null += 1;
                CallReply::Success(Bytes::new())
            }
            CB_COMPOUND => match self.compound(call.args.clone()) {
                Some(b) => CallReply::Success(b),
                None => CallReply::GarbageArgs,
            },
            _ => CallReply::ProcUnavail,
        }
    }

    fn count(&self, opcode: u32) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        *s.ops.entry(cb_op_name(opcode)).or_default() += 1;
    }

    /// CB_COMPOUND: the encoded CB_COMPOUND4res, or None when the header is garbage.
    pub(crate) fn compound(&self, mut args: Bytes) -> Option<Bytes> {
        let tag = txnfs_xdr::get_opaque(&mut args, MAX_TAG).ok()?;
        let minorversion = txnfs_xdr::get_u32(&mut args).ok()?;
        let _callback_ident = txnfs_xdr::get_u32(&mut args).ok()?;
        let count = txnfs_xdr::get_u32(&mut args).ok()?;
        self.stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cb_compound += 1;
        // The server calls back in the minor version of our session (RFC 8881 §20,
        // RFC 7862 §1); another one is not a session of ours.
        let session_minor = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.minor);
        let known = match session_minor {
            Some(m) => minorversion == m,
            None => crate::client::MINOR_VERSIONS.contains(&minorversion),
        };
        if !known {
            return Some(encode_res(
                nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH,
                &tag,
                vec![],
            ));
        }
        if count == 0 {
            return Some(encode_res(nfsstat4::NFS4_OK, &tag, vec![]));
        }
        // The first op must be CB_SEQUENCE.
        let first = match decode_op(&mut args) {
            Ok(op) => op,
            Err((opcode, st)) => {
                self.count(opcode);
                return Some(encode_res(st, &tag, vec![status_result(opcode, st)]));
            }
        };
        self.count(first.discriminant());
        let nfs_cb_argop4::OP_CB_SEQUENCE(seq) = first else {
            let st = nfsstat4::NFS4ERR_OP_NOT_IN_SESSION;
            return Some(encode_res(
                st,
                &tag,
                vec![status_result(first.discriminant(), st)],
            ));
        };
        let mut guard = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let refuse = |st: nfsstat4| Some(encode_res(st, &tag, vec![status_result(11, st)]));
        let Some(sess) = guard.as_mut() else {
            return refuse(nfsstat4::NFS4ERR_BADSESSION);
        };
        if sess.id != seq.csa_sessionid {
            return refuse(nfsstat4::NFS4ERR_BADSESSION);
        }
        if count > sess.max_ops {
            return refuse(nfsstat4::NFS4ERR_TOO_MANY_OPS);
        }
        match sess.slots.check(seq.csa_slotid, seq.csa_sequenceid) {
            SlotCheck::Refuse(st) => return refuse(st),
            SlotCheck::Replay(r) => {
                self.stats.lock().unwrap_or_else(|e| e.into_inner()).replays += 1;
                return Some(r);
            }
            SlotCheck::New => {}
        }
        let highest = sess.slots.highest();
        let mut results = vec![nfs_cb_resop4::OP_CB_SEQUENCE(CB_SEQUENCE4res::NFS4_OK(
            CB_SEQUENCE4resok {
                csr_sessionid: seq.csa_sessionid,
                csr_sequenceid: seq.csa_sequenceid,
                csr_slotid: seq.csa_slotid,
                csr_highest_slotid: highest,
                csr_target_highest_slotid: highest,
            },
        ))];
        let mut status = nfsstat4::NFS4_OK;
        for _ in 1..count {
            let r = match decode_op(&mut args) {
                Ok(op) => {
                    self.count(op.discriminant());
                    self.run_op(op)
                }
                Err((opcode, st)) => {
                    self.count(opcode);
                    status_result(opcode, st)
                }
            };
            let st = result_status(&r);
            results.push(r);
            if st != nfsstat4::NFS4_OK {
                status = st;
                break;
            }
        }
        let reply = encode_res(status, &tag, results);
        sess.slots.done(seq.csa_slotid, seq.csa_sequenceid, &reply);
        Some(reply)
    }

    fn run_op(&self, op: nfs_cb_argop4) -> nfs_cb_resop4 {
        use nfs_cb_argop4 as A;
        use nfs_cb_resop4 as R;
        match op {
            A::OP_CB_SEQUENCE(_) => status_result(11, nfsstat4::NFS4ERR_SEQUENCE_POS),
            A::OP_CB_RECALL(a) => R::OP_CB_RECALL(CB_RECALL4res {
                status: self.ops.recall(&a.stateid, &a.fh, a.truncate),
            }),
            A::OP_CB_GETATTR(a) => {
                R::OP_CB_GETATTR(match self.ops.getattr(&a.fh, &a.attr_request) {
                    Ok(f) => CB_GETATTR4res::NFS4_OK(CB_GETATTR4resok { obj_attributes: f }),
                    Err(st) => CB_GETATTR4res::default(st),
                })
            }
            A::OP_CB_NOTIFY(a) => R::OP_CB_NOTIFY(CB_NOTIFY4res {
                cnr_status: self.ops.notify(&a.cna_stateid, &a.cna_fh, &a.cna_changes),
            }),
            A::OP_CB_RECALL_ANY(a) => R::OP_CB_RECALL_ANY(CB_RECALL_ANY4res {
                crar_status: self
                    .ops
                    .recall_any(a.craa_objects_to_keep, &a.craa_type_mask),
            }),
            // Our slot table is already as small as the server may want it.
            A::OP_CB_RECALL_SLOT(_) => R::OP_CB_RECALL_SLOT(CB_RECALL_SLOT4res {
                rsr_status: nfsstat4::NFS4_OK,
            }),
            // A background COPY finished (RFC 7862 §16.1): kept for the copier, which
            // also asks OFFLOAD_STATUS in case this notice never comes.
            A::OP_CB_OFFLOAD(a) => {
                let outcome = match &a.coa_offload_info {
                    offload_info4::NFS4_OK(w) => (nfsstat4::NFS4_OK, w.wr_count),
                    offload_info4::default(s, n) => (*s, *n),
                };
                let mut known = self.offloads.lock().unwrap_or_else(|e| e.into_inner());
                // A bound on what a server can make us keep.
                if known.len() < 4096 {
                    known.insert(a.coa_stateid.other, outcome);
                }
                R::OP_CB_OFFLOAD(CB_OFFLOAD4res {
                    cor_status: nfsstat4::NFS4_OK,
                })
            }
            A::OP_CB_ILLEGAL => status_result(10044, nfsstat4::NFS4ERR_OP_ILLEGAL),
            other => status_result(other.discriminant(), nfsstat4::NFS4ERR_NOTSUPP),
        }
    }
}

/// Decode one callback op: its arguments, or (opcode, status) for an op that is not in
/// the callback program (OP_CB_ILLEGAL) or whose arguments do not decode (BADXDR).
fn decode_op(args: &mut Bytes) -> Result<nfs_cb_argop4, (u32, nfsstat4)> {
    let mut peek = args.clone();
    let Ok(opcode) = txnfs_xdr::get_u32(&mut peek) else {
        return Err((10044, nfsstat4::NFS4ERR_BADXDR));
    };
    if !(3..=15).contains(&opcode) && opcode != 10044 {
        return Err((10044, nfsstat4::NFS4ERR_OP_ILLEGAL));
    }
    nfs_cb_argop4::decode(args).map_err(|_| (opcode, nfsstat4::NFS4ERR_BADXDR))
}

/// The status of a callback op's result.
pub(crate) fn result_status(r: &nfs_cb_resop4) -> nfsstat4 {
    use nfs_cb_resop4 as R;
    match r {
        R::OP_CB_GETATTR(CB_GETATTR4res::NFS4_OK(_)) => nfsstat4::NFS4_OK,
        R::OP_CB_GETATTR(CB_GETATTR4res::default(s)) => *s,
        R::OP_CB_RECALL(x) => x.status,
        R::OP_CB_LAYOUTRECALL(x) => x.clorr_status,
        R::OP_CB_NOTIFY(x) => x.cnr_status,
        R::OP_CB_PUSH_DELEG(x) => x.cpdr_status,
        R::OP_CB_RECALL_ANY(x) => x.crar_status,
        R::OP_CB_RECALLABLE_OBJ_AVAIL(x) => x.croa_status,
        R::OP_CB_RECALL_SLOT(x) => x.rsr_status,
        R::OP_CB_SEQUENCE(CB_SEQUENCE4res::NFS4_OK(_)) => nfsstat4::NFS4_OK,
        R::OP_CB_SEQUENCE(CB_SEQUENCE4res::default(s)) => *s,
        R::OP_CB_WANTS_CANCELLED(x) => x.cwcr_status,
        R::OP_CB_NOTIFY_LOCK(x) => x.cnlr_status,
        R::OP_CB_NOTIFY_DEVICEID(x) => x.cndr_status,
        R::OP_CB_OFFLOAD(x) => x.cor_status,
        R::OP_CB_ILLEGAL(x) => x.status,
    }
}

/// Encode a CB_COMPOUND's arguments (tests, and tools that drive a client's back channel).
pub fn encode_cb_compound(tag: &[u8], minorversion: u32, ops: &[nfs_cb_argop4]) -> Bytes {
    let mut out = BytesMut::new();
    txnfs_xdr::put_opaque(&mut out, tag);
    txnfs_xdr::put_u32(&mut out, minorversion);
    txnfs_xdr::put_u32(&mut out, 0);
    txnfs_xdr::put_array(&mut out, ops);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        recalls: Mutex<Vec<(stateid4, Bytes)>>,
        notifies: Mutex<usize>,
    }

    impl CallbackOps for Fake {
        fn recall(&self, stateid: &stateid4, fh: &Bytes, _t: bool) -> nfsstat4 {
            self.recalls
                .lock()
                .unwrap()
                .push((stateid.clone(), fh.clone()));
            nfsstat4::NFS4_OK
        }
        fn getattr(&self, fh: &Bytes, _r: &[u32]) -> Result<fattr4, nfsstat4> {
            if fh.as_ref() == b"known" {
                Ok(fattr4 {
                    attrmask: vec![1 << 4],
                    attr_vals: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 42]),
                })
            } else {
                Err(nfsstat4::NFS4ERR_BADHANDLE)
            }
        }
        fn notify(&self, _s: &stateid4, _fh: &Bytes, c: &[notify4]) -> nfsstat4 {
            *self.notifies.lock().unwrap() += c.len();
            nfsstat4::NFS4_OK
        }
        fn recall_any(&self, _k: u32, _m: &[u32]) -> nfsstat4 {
            nfsstat4::NFS4_OK
        }
    }

    const SID: sessionid4 = [7; 16];

    fn service() -> (Arc<Fake>, CallbackService) {
        let fake = Arc::new(Fake::default());
        let s = CallbackService::new(fake.clone());
        s.set_session(SID, 1, &back_channel_attrs());
        (fake, s)
    }

    fn seq(slot: u32, seqid: u32) -> nfs_cb_argop4 {
        nfs_cb_argop4::OP_CB_SEQUENCE(CB_SEQUENCE4args {
            csa_sessionid: SID,
            csa_sequenceid: seqid,
            csa_slotid: slot,
            csa_highest_slotid: 0,
            csa_cachethis: false,
            csa_referring_call_lists: vec![],
        })
    }

    fn recall(n: u8) -> nfs_cb_argop4 {
        nfs_cb_argop4::OP_CB_RECALL(CB_RECALL4args {
            stateid: stateid4 {
                seqid: 1,
                other: [n; 12],
            },
            truncate: false,
            fh: Bytes::from_static(b"fh"),
        })
    }

    fn run(s: &CallbackService, ops: &[nfs_cb_argop4]) -> CB_COMPOUND4res {
        let b = s.compound(encode_cb_compound(b"t", 1, ops)).expect("reply");
        CB_COMPOUND4res::from_bytes(b).expect("decodes")
    }

    fn statuses(r: &CB_COMPOUND4res) -> Vec<nfsstat4> {
        r.resarray.iter().map(result_status).collect()
    }

    #[test]
    fn slot_rules() {
        let mut t = CbSlots::new(2);
        assert_eq!(t.check(0, 1), SlotCheck::New);
        assert_eq!(
            t.check(0, 0),
            SlotCheck::Refuse(nfsstat4::NFS4ERR_SEQ_MISORDERED)
        );
        assert_eq!(
            t.check(0, 2),
            SlotCheck::Refuse(nfsstat4::NFS4ERR_SEQ_MISORDERED)
        );
        assert_eq!(t.check(2, 1), SlotCheck::Refuse(nfsstat4::NFS4ERR_BADSLOT));
        let reply = Bytes::from_static(b"reply-1");
        t.done(0, 1, &reply);
        assert_eq!(t.check(0, 1), SlotCheck::Replay(reply));
        assert_eq!(t.check(0, 2), SlotCheck::New);
        assert_eq!(
            t.check(0, 3),
            SlotCheck::Refuse(nfsstat4::NFS4ERR_SEQ_MISORDERED)
        );
        // A reply too large to keep: its retransmission is RETRY_UNCACHED_REP.
        t.done(1, 1, &Bytes::from(vec![0u8; MAX_CACHED_REPLY + 1]));
        assert_eq!(
            t.check(1, 1),
            SlotCheck::Refuse(nfsstat4::NFS4ERR_RETRY_UNCACHED_REP)
        );
        // Sequence ids wrap.
        t.done(1, u32::MAX, &Bytes::new());
        assert_eq!(t.check(1, 0), SlotCheck::New);
    }

    #[test]
    fn recall_runs_once_and_its_retransmission_gets_the_same_reply() {
        let (fake, s) = service();
        let r = run(&s, &[seq(0, 1), recall(1)]);
        assert_eq!(r.status, nfsstat4::NFS4_OK);
        assert_eq!(statuses(&r), vec![nfsstat4::NFS4_OK; 2]);
        assert_eq!(r.tag, Bytes::from_static(b"t"));
        let again = run(&s, &[seq(0, 1), recall(1)]);
        assert_eq!(again, r);
        assert_eq!(fake.recalls.lock().unwrap().len(), 1, "executed once");
        assert_eq!(s.stats().replays, 1);
        let next = run(&s, &[seq(0, 2), recall(2)]);
        assert_eq!(next.status, nfsstat4::NFS4_OK);
        assert_eq!(fake.recalls.lock().unwrap().len(), 2);
        let r = run(&s, &[seq(0, 4), recall(3)]);
        assert_eq!(r.status, nfsstat4::NFS4ERR_SEQ_MISORDERED);
        assert_eq!(r.resarray.len(), 1);
    }

    #[test]
    fn compound_rules() {
        let (_, s) = service();
        // CB_SEQUENCE must come first.
        let r = run(&s, &[recall(1)]);
        assert_eq!(r.status, nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
        assert!(matches!(r.resarray[0], nfs_cb_resop4::OP_CB_RECALL(_)));
        // ... and only first.
        let r = run(&s, &[seq(0, 1), seq(0, 2)]);
        assert_eq!(
            statuses(&r),
            vec![nfsstat4::NFS4_OK, nfsstat4::NFS4ERR_SEQUENCE_POS]
        );
        // Another session's CB_SEQUENCE.
        let mut other = seq(0, 2);
        if let nfs_cb_argop4::OP_CB_SEQUENCE(a) = &mut other {
            a.csa_sessionid = [9; 16];
        }
        assert_eq!(run(&s, &[other]).status, nfsstat4::NFS4ERR_BADSESSION);
        // Minor version 0 has no CB_SEQUENCE: mismatch, no results.
        let b = s
            .compound(encode_cb_compound(b"", 0, &[seq(0, 2)]))
            .expect("reply");
        let r = CB_COMPOUND4res::from_bytes(b).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(r.resarray.is_empty());
        // An unsupported op: NOTSUPP in its own result arm, and processing stops there.
        let push = nfs_cb_argop4::OP_CB_PUSH_DELEG(CB_PUSH_DELEG4args {
            cpda_fh: Bytes::new(),
            cpda_delegation: open_delegation4::OPEN_DELEGATE_NONE,
        });
        let r = run(&s, &[seq(0, 2), push, recall(1)]);
        assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
        assert_eq!(r.resarray.len(), 2);
        assert!(matches!(r.resarray[1], nfs_cb_resop4::OP_CB_PUSH_DELEG(_)));
        // An opcode outside the program: OP_CB_ILLEGAL.
        let mut raw = BytesMut::from(&encode_cb_compound(b"", 1, &[seq(0, 3)])[..]);
        raw[12..16].copy_from_slice(&2u32.to_be_bytes()); // two ops
        raw.extend_from_slice(&99u32.to_be_bytes());
        let r =
            CB_COMPOUND4res::from_bytes(s.compound(raw.freeze()).expect("reply")).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4ERR_OP_ILLEGAL);
        assert!(matches!(r.resarray[1], nfs_cb_resop4::OP_CB_ILLEGAL(_)));
        // CB_GETATTR answers from the cache or BADHANDLE.
        let ga = |fh: &'static [u8]| {
            nfs_cb_argop4::OP_CB_GETATTR(CB_GETATTR4args {
                fh: Bytes::from_static(fh),
                attr_request: vec![1 << 4],
            })
        };
        let r = run(&s, &[seq(0, 4), ga(b"known")]);
        assert_eq!(r.status, nfsstat4::NFS4_OK);
        let r = run(&s, &[seq(0, 5), ga(b"unknown")]);
        assert_eq!(r.status, nfsstat4::NFS4ERR_BADHANDLE);
        // A garbage header is GARBAGE_ARGS at the RPC level.
        assert!(s.compound(Bytes::from_static(&[0, 0])).is_none());
        // A 4.2 session takes callbacks in 4.2 only (RFC 8881 §20), and CB_OFFLOAD's
        // outcome is kept for the copier.
        s.set_session(SID, 2, &back_channel_attrs());
        let mismatch = s
            .compound(encode_cb_compound(b"", 1, &[seq(0, 1)]))
            .expect("reply");
        let r = CB_COMPOUND4res::from_bytes(mismatch).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
        let copy = stateid4 {
            seqid: 1,
            other: [7; 12],
        };
        let offload = nfs_cb_argop4::OP_CB_OFFLOAD(CB_OFFLOAD4args {
            coa_fh: Bytes::from_static(b"fh"),
            coa_stateid: copy.clone(),
            coa_offload_info: offload_info4::NFS4_OK(write_response4 {
                wr_callback_id: vec![],
                wr_count: 42,
                wr_committed: stable_how4::FILE_SYNC4,
                wr_writeverf: [0; 8],
            }),
        });
        let b = s
            .compound(encode_cb_compound(b"", 2, &[seq(0, 1), offload]))
            .expect("reply");
        let r = CB_COMPOUND4res::from_bytes(b).expect("decodes");
        assert_eq!(r.status, nfsstat4::NFS4_OK);
        assert_eq!(s.take_offload(&copy), Some((nfsstat4::NFS4_OK, 42)));
        assert_eq!(s.take_offload(&copy), None);
    }

    #[test]
    fn null_and_program_checks() {
        let (_, s) = service();
        let call = |prog, vers, proc_num| IncomingCall {
            xid: 1,
            prog,
            vers,
            proc_num,
            cred: txnfs_rpc::OpaqueAuth::none(),
            args: Bytes::new(),
        };
        assert_eq!(
            s.handle(&call(CB_PROGRAM, 1, 0)),
            CallReply::Success(Bytes::new())
        );
        assert_eq!(s.handle(&call(5, 1, 0)), CallReply::ProgUnavail);
        assert_eq!(
            s.handle(&call(CB_PROGRAM, 4, 0)),
            CallReply::ProgMismatch { low: 1, high: 1 }
        );
        assert_eq!(s.handle(&call(CB_PROGRAM, 1, 7)), CallReply::ProcUnavail);
        assert_eq!(s.stats().cb_null, 1);
    }
}
