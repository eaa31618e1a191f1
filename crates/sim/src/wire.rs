//! Building COMPOUND requests and reading replies with the generated XDR types.

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_xdr::{Decode, Encode};

pub type Fh = Bytes;

pub const ANON: stateid4 = stateid4 {
    seqid: 0,
    other: [0; 12],
};

pub fn compound(ops: Vec<nfs_argop4>) -> Bytes {
    COMPOUND4args {
        tag: Bytes::from_static(b"sim"),
        minorversion: 1,
        argarray: ops,
    }
    .to_bytes()
}

pub fn decode(reply: &Bytes) -> Option<COMPOUND4res> {
    COMPOUND4res::from_bytes(reply.clone()).ok()
}

/// The status of one op result (every result starts with its status).
pub fn status_of(r: &nfs_resop4) -> nfsstat4 {
    let b = r.to_bytes();
    if b.len() < 8 {
        return nfsstat4::NFS4ERR_SERVERFAULT;
    }
    let v = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    nfsstat4::from_i32(v).unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT)
}

pub fn sequence(sid: sessionid4, slot: u32, seq: u32, highest: u32) -> nfs_argop4 {
    nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
        sa_sessionid: sid,
        sa_sequenceid: seq,
        sa_slotid: slot,
        sa_highest_slotid: highest,
        sa_cachethis: true,
    })
}

pub fn exchange_id(owner: &Bytes, verifier: [u8; 8]) -> nfs_argop4 {
    nfs_argop4::OP_EXCHANGE_ID(EXCHANGE_ID4args {
        eia_clientowner: client_owner4 {
            co_verifier: verifier,
            co_ownerid: owner.clone(),
        },
        eia_flags: 0,
        eia_state_protect: state_protect4_a::SP4_NONE,
        eia_client_impl_id: vec![],
    })
}

fn channel(max_requests: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 64 << 10,
        ca_maxoperations: 64,
        ca_maxrequests: max_requests,
        ca_rdma_ird: vec![],
    }
}

/// CREATE_SESSION; with `back_chan` the connection is also the session's back
/// channel (CREATE_SESSION4_FLAG_CONN_BACK_CHAN).
pub fn create_session(clientid: u64, seq: u32, slots: u32, back_chan: bool) -> nfs_argop4 {
    nfs_argop4::OP_CREATE_SESSION(CREATE_SESSION4args {
        csa_clientid: clientid,
        csa_sequence: seq,
        csa_flags: if back_chan {
            CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        },
        csa_fore_chan_attrs: channel(slots),
        csa_back_chan_attrs: channel(1),
        csa_cb_program: 0x4000_0000,
        csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
    })
}

pub fn putfh(fh: &Fh) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

pub fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub fn open(name: &Bytes, owner: &Bytes, access: u32, deny: u32, create: bool) -> nfs_argop4 {
    nfs_argop4::OP_OPEN(OPEN4args {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: open_owner4 {
            clientid: 0,
            owner: owner.clone(),
        },
        openhow: if create {
            openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(empty_fattr()))
        } else {
            openflag4::default(opentype4::OPEN4_NOCREATE)
        },
        claim: open_claim4::CLAIM_NULL(name.clone()),
    })
}

pub fn empty_fattr() -> fattr4 {
    fattr4 {
        attrmask: vec![],
        attr_vals: Bytes::new(),
    }
}

pub const FATTR4_CHANGE: u32 = 3;
pub const FATTR4_SIZE: u32 = 4;

pub fn size_fattr(size: u64) -> fattr4 {
    fattr4 {
        attrmask: vec![1 << FATTR4_SIZE],
        attr_vals: Bytes::copy_from_slice(&size.to_be_bytes()),
    }
}

/// GETATTR of change and size, decoded as (change, size).
pub fn getattr_change_size() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![(1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE)],
    })
}

pub fn decode_change_size(f: &fattr4) -> Option<(u64, u64)> {
    let want = (1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE);
    if f.attrmask.first().copied().unwrap_or(0) & want != want || f.attr_vals.len() < 16 {
        return None;
    }
    let v = &f.attr_vals;
    let change = u64::from_be_bytes(v[..8].try_into().ok()?);
    let size = u64::from_be_bytes(v[8..16].try_into().ok()?);
    Some((change, size))
}

pub fn write(sid: &stateid4, offset: u64, stable: stable_how4, data: Bytes) -> nfs_argop4 {
    nfs_argop4::OP_WRITE(WRITE4args {
        stateid: sid.clone(),
        offset,
        stable,
        data,
    })
}

pub fn read(sid: &stateid4, offset: u64, count: u32) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: sid.clone(),
        offset,
        count,
    })
}

pub fn lock_type(write: bool) -> nfs_lock_type4 {
    if write {
        nfs_lock_type4::WRITE_LT
    } else {
        nfs_lock_type4::READ_LT
    }
}

pub fn lock_new_owner(
    write: bool,
    offset: u64,
    length: u64,
    open_sid: &stateid4,
    owner: &Bytes,
) -> nfs_argop4 {
    nfs_argop4::OP_LOCK(LOCK4args {
        locktype: lock_type(write),
        reclaim: false,
        offset,
        length,
        locker: locker4::TRUE(open_to_lock_owner4 {
            open_seqid: 0,
            open_stateid: open_sid.clone(),
            lock_seqid: 0,
            lock_owner: lock_owner4 {
                clientid: 0,
                owner: owner.clone(),
            },
        }),
    })
}

pub fn lock_existing(write: bool, offset: u64, length: u64, lock_sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_LOCK(LOCK4args {
        locktype: lock_type(write),
        reclaim: false,
        offset,
        length,
        locker: locker4::FALSE(exist_lock_owner4 {
            lock_stateid: lock_sid.clone(),
            lock_seqid: 0,
        }),
    })
}

pub fn lockt(write: bool, offset: u64, length: u64, owner: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_LOCKT(LOCKT4args {
        locktype: lock_type(write),
        offset,
        length,
        owner: lock_owner4 {
            clientid: 0,
            owner: owner.clone(),
        },
    })
}

pub fn locku(write: bool, offset: u64, length: u64, lock_sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_LOCKU(LOCKU4args {
        locktype: lock_type(write),
        seqid: 0,
        lock_stateid: lock_sid.clone(),
        offset,
        length,
    })
}

pub fn delegreturn(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_DELEGRETURN(DELEGRETURN4args {
        deleg_stateid: sid.clone(),
    })
}

pub fn free_stateid(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_FREE_STATEID(FREE_STATEID4args {
        fsa_stateid: sid.clone(),
    })
}

pub fn test_stateid(sids: &[stateid4]) -> nfs_argop4 {
    nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
        ts_stateids: sids.to_vec(),
    })
}

/// The delegation an OPEN reply grants: (stateid, write).
pub fn granted_delegation(d: &open_delegation4) -> Option<(stateid4, bool)> {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r)
        | open_delegation4::OPEN_DELEGATE_READ_ATTRS_DELEG(r) => Some((r.stateid.clone(), false)),
        open_delegation4::OPEN_DELEGATE_WRITE(w)
        | open_delegation4::OPEN_DELEGATE_WRITE_ATTRS_DELEG(w) => Some((w.stateid.clone(), true)),
        open_delegation4::OPEN_DELEGATE_NONE | open_delegation4::OPEN_DELEGATE_NONE_EXT(_) => None,
    }
}

/// BIND_CONN_TO_SESSION of the sending connection for the back channel (or both).
pub fn bind_conn_back(sid: sessionid4) -> nfs_argop4 {
    nfs_argop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4args {
        bctsa_sessid: sid,
        bctsa_dir: channel_dir_from_client4::CDFC4_BACK_OR_BOTH,
        bctsa_use_conn_in_rdma_mode: false,
    })
}
