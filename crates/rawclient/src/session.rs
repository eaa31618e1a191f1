//! COMPOUND framing and session setup, without I/O: the caller sends the bytes and
//! hands the decoded reply back.

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_xdr::Encode;

/// The program number of the callback service a session asks for unless told otherwise.
pub const CB_PROGRAM: u32 = 0x4000_0000;

/// Encoded COMPOUND4args of NFSv4.`minor` with `tag`.
pub fn compound(tag: &'static [u8], minor: u32, ops: Vec<nfs_argop4>) -> Bytes {
    COMPOUND4args {
        tag: Bytes::from_static(tag),
        minorversion: minor,
        argarray: ops,
    }
    .to_bytes()
}

/// SEQUENCE in `slot`, which is also the highest slot the client uses.
pub fn sequence(sid: sessionid4, slot: u32, seqid: u32, cachethis: bool) -> nfs_argop4 {
    sequence_highest(sid, slot, seqid, slot, cachethis)
}

/// SEQUENCE in `slot`, announcing `highest` as the highest slot the client uses.
pub fn sequence_highest(
    sid: sessionid4,
    slot: u32,
    seqid: u32,
    highest: u32,
    cachethis: bool,
) -> nfs_argop4 {
    nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
        sa_sessionid: sid,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: highest,
        sa_cachethis: cachethis,
    })
}

/// A session's slot table as the client keeps it: the last sequence id of each slot.
/// [`Slots::take`] uses the next one at once (a client whose requests on a slot are
/// sequential); [`Slots::frame`] only reads it and [`Slots::confirm`] moves the slot
/// when its reply arrives (a client that retransmits and sends on other slots meanwhile).
#[derive(Debug, Clone)]
pub struct Slots {
    pub sid: sessionid4,
    seqs: Vec<u32>,
}

impl Slots {
    /// A fresh session `sid` with `slots` slots (at least one), none used yet.
    pub fn new(sid: sessionid4, slots: u32) -> Slots {
        Slots {
            sid,
            seqs: vec![0; slots.max(1) as usize],
        }
    }

    /// How many slots the table has.
    pub fn len(&self) -> u32 {
        self.seqs.len() as u32
    }

    /// Never: a table has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The sequence id the next new request on `slot` carries.
    pub fn next_seq(&self, slot: u32) -> u32 {
        self.seqs
            .get(slot as usize)
            .copied()
            .unwrap_or(0)
            .wrapping_add(1)
    }

    /// SEQUENCE (next sequence id of `slot`, highest slot = the table's last) + `ops`,
    /// cached, as COMPOUND args; the slot does not move.
    pub fn frame(&self, tag: &'static [u8], slot: u32, ops: Vec<nfs_argop4>) -> Bytes {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(sequence_highest(
            self.sid,
            slot,
            self.next_seq(slot),
            self.len() - 1,
            true,
        ));
        all.extend(ops);
        compound(tag, 1, all)
    }

    /// As [`Slots::frame`], and `slot` moves on now.
    pub fn take(&mut self, tag: &'static [u8], slot: u32, ops: Vec<nfs_argop4>) -> Bytes {
        let b = self.frame(tag, slot, ops);
        if let Some(s) = self.seqs.get_mut(slot as usize) {
            *s = s.wrapping_add(1);
        }
        b
    }

    /// Moves the slot a successful SEQUENCE reply names to the sequence id it echoes.
    pub fn confirm(&mut self, res: &COMPOUND4res) {
        if let Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok))) = res.resarray.first() {
            if let Some(s) = self.seqs.get_mut(ok.sr_slotid as usize) {
                *s = ok.sr_sequenceid;
            }
        }
    }
}

/// EXCHANGE_ID of the client `owner` with verifier `[1; 8]`.
pub fn exchange_id(owner: &[u8]) -> nfs_argop4 {
    exchange_id_verf(owner, [1; 8])
}

/// EXCHANGE_ID of the client `owner` (this incarnation: `verifier`), no state
/// protection.
pub fn exchange_id_verf(owner: &[u8], verifier: [u8; 8]) -> nfs_argop4 {
    nfs_argop4::OP_EXCHANGE_ID(Box::new(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: verifier,
            co_ownerid: Bytes::copy_from_slice(owner),
        },
        eia_flags: 0,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![],
    }))
}

/// CREATE_SESSION for the client `e` answered EXCHANGE_ID with; a back channel
/// secured with AUTH_NONE.
pub fn create_session(
    e: &EXCHANGE_ID4resok,
    fore: channel_attrs4,
    back: channel_attrs4,
) -> nfs_argop4 {
    create_session_for(e.eir_clientid, e.eir_sequenceid, fore, back, false)
}

/// CREATE_SESSION of `clientid` with its CREATE_SESSION sequence id `seq`, callback
/// program [`CB_PROGRAM`] over AUTH_NONE; with `back_chan` the connection is also the
/// session's back channel (CREATE_SESSION4_FLAG_CONN_BACK_CHAN).
pub fn create_session_for(
    clientid: clientid4,
    seq: u32,
    fore: channel_attrs4,
    back: channel_attrs4,
    back_chan: bool,
) -> nfs_argop4 {
    nfs_argop4::OP_CREATE_SESSION(Box::new(CREATE_SESSION4args {
        csa_clientid: clientid,
        csa_sequence: seq,
        csa_flags: if back_chan {
            CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        },
        csa_fore_chan_attrs: fore,
        csa_back_chan_attrs: back,
        csa_cb_program: CB_PROGRAM,
        csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
    }))
}

/// Channel attributes with 1 MiB requests and replies, 64 KiB cached replies.
pub fn channel(max_operations: u32, max_requests: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 64 << 10,
        ca_maxoperations: max_operations,
        ca_maxrequests: max_requests,
        ca_rdma_ird: vec![],
    }
}

/// RECLAIM_COMPLETE of the whole client: nothing to reclaim, as every client must say
/// before it opens or locks (RFC 8881 §18.51.3).
pub fn reclaim_complete() -> nfs_argop4 {
    nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false })
}

/// BIND_CONN_TO_SESSION of the sending connection for the back channel (or both).
pub fn bind_conn_back(sid: sessionid4) -> nfs_argop4 {
    nfs_argop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4args {
        bctsa_sessid: sid,
        bctsa_dir: channel_dir_from_client4::CDFC4_BACK_OR_BOTH,
        bctsa_use_conn_in_rdma_mode: false,
    })
}

/// The EXCHANGE_ID result of a reply whose first op is EXCHANGE_ID, if it succeeded.
pub fn exchange_id_ok(r: &COMPOUND4res) -> Option<&EXCHANGE_ID4resok> {
    match r.resarray.first() {
        Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) => Some(e),
        _ => None,
    }
}

/// The CREATE_SESSION result of a reply whose first op is CREATE_SESSION, if it
/// succeeded.
pub fn create_session_ok(r: &COMPOUND4res) -> Option<&CREATE_SESSION4resok> {
    match r.resarray.first() {
        Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) => Some(s),
        _ => None,
    }
}

/// The SEQUENCE result of a reply, if SEQUENCE came first and succeeded.
pub fn sequence_ok(r: &COMPOUND4res) -> Option<&SEQUENCE4resok> {
    match r.resarray.first() {
        Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok))) => Some(ok),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_xdr::Decode;

    fn seq_of(b: Bytes) -> SEQUENCE4args {
        let a = COMPOUND4args::from_bytes(b).expect("args decode");
        match a.argarray.first() {
            Some(nfs_argop4::OP_SEQUENCE(s)) => s.clone(),
            other => panic!("SEQUENCE first: {other:?}"),
        }
    }

    #[test]
    fn take_moves_the_slot_frame_does_not() {
        let mut s = Slots::new([7; 16], 4);
        let a = seq_of(s.frame(b"t", 2, vec![]));
        assert_eq!(
            (a.sa_slotid, a.sa_sequenceid, a.sa_highest_slotid),
            (2, 1, 3)
        );
        assert!(a.sa_cachethis);
        assert_eq!(seq_of(s.frame(b"t", 2, vec![])), a, "a retransmission");
        assert_eq!(seq_of(s.take(b"t", 2, vec![])).sa_sequenceid, 1);
        assert_eq!(seq_of(s.take(b"t", 2, vec![])).sa_sequenceid, 2);
        assert_eq!(s.next_seq(0), 1);
    }

    #[test]
    fn confirm_follows_the_reply() {
        let mut s = Slots::new([7; 16], 2);
        let reply = |slot, seq| COMPOUND4res {
            status: nfsstat4::NFS4_OK,
            tag: Bytes::new(),
            resarray: vec![nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(
                SEQUENCE4resok {
                    sr_sessionid: [7; 16],
                    sr_sequenceid: seq,
                    sr_slotid: slot,
                    sr_highest_slotid: 1,
                    sr_target_highest_slotid: 1,
                    sr_status_flags: 0,
                },
            ))],
        };
        s.confirm(&reply(1, 5));
        assert_eq!((s.next_seq(0), s.next_seq(1)), (1, 6));
        s.confirm(&reply(9, 5));
        assert_eq!(s.len(), 2, "a slot out of the table is ignored");
        assert!(sequence_ok(&reply(1, 5)).is_some());
    }
}
