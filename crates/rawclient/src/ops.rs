//! Builders of the operations the tests send. Names are `&str`, owners `&[u8]`.

use bytes::Bytes;
use txnfs_proto::nfs4::*;

/// A file handle as the tests keep it.
pub type Fh = Bytes;

/// The anonymous stateid (all zeros).
pub const ANON: stateid4 = stateid4 {
    seqid: 0,
    other: [0; 12],
};

/// The "current stateid" (RFC 8881 §16.2.3.1.2): the last OPEN's in this COMPOUND.
pub const CURRENT: stateid4 = stateid4 {
    seqid: 1,
    other: [0; 12],
};

/// The bytes of a component name.
pub fn name(n: &str) -> Bytes {
    Bytes::copy_from_slice(n.as_bytes())
}

pub fn empty_fattr() -> fattr4 {
    fattr4 {
        attrmask: vec![],
        attr_vals: Bytes::new(),
    }
}

pub const FATTR4_CHANGE: u32 = 3;
pub const FATTR4_SIZE: u32 = 4;

/// Attributes that set the size.
pub fn size_fattr(size: u64) -> fattr4 {
    fattr4 {
        attrmask: vec![1 << FATTR4_SIZE],
        attr_vals: Bytes::copy_from_slice(&size.to_be_bytes()),
    }
}

pub fn putfh(fh: &Fh) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

pub fn lookup(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_LOOKUP(LOOKUP4args { objname: name(n) })
}

pub fn mkdir(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_CREATE(Box::new(CREATE4args {
        objtype: createtype4::NF4DIR,
        objname: name(n),
        createattrs: empty_fattr(),
    }))
}

pub fn rename(from: &str, to: &str) -> nfs_argop4 {
    nfs_argop4::OP_RENAME(RENAME4args {
        oldname: name(from),
        newname: name(to),
    })
}

pub fn remove(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_REMOVE(REMOVE4args { target: name(n) })
}

/// OPEN of `n` in the current directory by the open owner `owner` (client id 0: the
/// session's), with `how` (create or not).
pub fn open(n: &[u8], owner: &[u8], access: u32, deny: u32, how: openflag4) -> nfs_argop4 {
    nfs_argop4::OP_OPEN(Box::new(OPEN4args {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: open_owner4 {
            clientid: 0,
            owner: Bytes::copy_from_slice(owner),
        },
        openhow: how,
        claim: open_claim4::CLAIM_NULL(Bytes::copy_from_slice(n)),
    }))
}

/// Create with UNCHECKED4 and no attributes if `create`, else open what exists.
pub fn openhow(create: bool) -> openflag4 {
    if create {
        openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(empty_fattr()))
    } else {
        openflag4::default(opentype4::OPEN4_NOCREATE)
    }
}

/// OPEN that creates `n` with `how` for reading and writing, by the owner "owner1".
pub fn open_create(n: &str, how: createhow4) -> nfs_argop4 {
    open(
        n.as_bytes(),
        b"owner1",
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
        openflag4::OPEN4_CREATE(how),
    )
}

/// OPEN that creates `n` (UNCHECKED4, no attributes) for reading and writing.
pub fn open_new(n: &str) -> nfs_argop4 {
    open_create(n, createhow4::UNCHECKED4(empty_fattr()))
}

/// OPEN that creates `n` (GUARDED4: it must not exist) for reading and writing by
/// `owner`.
pub fn open_guarded(n: &str, owner: &[u8]) -> nfs_argop4 {
    open(
        n.as_bytes(),
        owner,
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
        openflag4::OPEN4_CREATE(createhow4::GUARDED4(empty_fattr())),
    )
}

/// OPEN `n` (no create) with `share_access` for the open owner `owner`.
pub fn open_plain(n: &str, share_access: u32, owner: &[u8]) -> nfs_argop4 {
    open(
        n.as_bytes(),
        owner,
        share_access,
        OPEN4_SHARE_DENY_NONE,
        openhow(false),
    )
}

/// CLOSE of the current stateid.
pub fn close_current() -> nfs_argop4 {
    nfs_argop4::OP_CLOSE(CLOSE4args {
        seqid: 0,
        open_stateid: CURRENT,
    })
}

/// WRITE `data` at `offset` with `sid`, FILE_SYNC4.
pub fn write(sid: &stateid4, offset: u64, data: &'static [u8]) -> nfs_argop4 {
    write_with(
        sid,
        offset,
        stable_how4::FILE_SYNC4,
        Bytes::from_static(data),
    )
}

/// WRITE `data` at `offset` with `sid`, as stable as `stable` says.
pub fn write_with(sid: &stateid4, offset: u64, stable: stable_how4, data: Bytes) -> nfs_argop4 {
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

/// SETATTR size with the anonymous stateid.
pub fn truncate(size: u64) -> nfs_argop4 {
    nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
        stateid: ANON,
        obj_attributes: size_fattr(size),
    }))
}

/// GETATTR of change and size (see [`crate::decode_change_size`]).
pub fn getattr_change_size() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![(1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE)],
    })
}

pub fn lock_type(write: bool) -> nfs_lock_type4 {
    if write {
        nfs_lock_type4::WRITE_LT
    } else {
        nfs_lock_type4::READ_LT
    }
}

/// LOCK by a new lock owner `owner` of the open `open_sid`.
pub fn lock_new_owner(
    write: bool,
    offset: u64,
    length: u64,
    open_sid: &stateid4,
    owner: &[u8],
) -> nfs_argop4 {
    nfs_argop4::OP_LOCK(Box::new(LOCK4args {
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
                owner: Bytes::copy_from_slice(owner),
            },
        }),
    }))
}

/// LOCK by the owner of the lock stateid `lock_sid`.
pub fn lock_existing(write: bool, offset: u64, length: u64, lock_sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_LOCK(Box::new(LOCK4args {
        locktype: lock_type(write),
        reclaim: false,
        offset,
        length,
        locker: locker4::FALSE(exist_lock_owner4 {
            lock_stateid: lock_sid.clone(),
            lock_seqid: 0,
        }),
    }))
}

pub fn lockt(write: bool, offset: u64, length: u64, owner: &[u8]) -> nfs_argop4 {
    nfs_argop4::OP_LOCKT(LOCKT4args {
        locktype: lock_type(write),
        offset,
        length,
        owner: lock_owner4 {
            clientid: 0,
            owner: Bytes::copy_from_slice(owner),
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
