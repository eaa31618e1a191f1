//! An upper bound on the encoded size of each operation's result (opnum and status
//! included), from its arguments: what a server checks before it runs an op that
//! changes state (NFS4ERR_REP_TOO_BIG[_TO_CACHE], RFC 8881 §2.10.6.4), and what a client
//! checks before it sends a COMPOUND (does its reply fit `ca_maxresponsesize`, may it ask
//! for caching). Both ends read this one function, so they cannot disagree.
//!
//! The bounds are txnfs's: attribute values and delegations as a txnfs server encodes
//! them, and the protocol's limits elsewhere (RFC 8881 §3.3 and the results in §18).

use crate::nfs4::nfs_argop4 as A;
use crate::nfs4::*;

/// Opnum and status.
pub const STATUS: usize = 8;
const STATEID: usize = 16;
const CHANGE_INFO: usize = 20;
/// Attribute numbers below 96: at most three bitmap words.
const BITMAP: usize = 4 + 3 * 4;
const OPAQUE_LIMIT: usize = 4 + 1024;
/// LOCK4denied: offset, length, type, owner (clientid + opaque owner).
const LOCK_DENIED: usize = 8 + 8 + 4 + 8 + OPAQUE_LIMIT;
/// The largest `open_delegation4`: a write delegation (type, stateid, recall, space
/// limit of type + u64, an ACE with an empty `who`).
const OPEN_DELEGATION: usize = 4 + STATEID + 4 + 12 + 16;
/// The count assumed where arguments do not say (they always do for the ops that use
/// it; the table and the decoder agree).
const DEFAULT_COUNT: usize = 64 << 10;
const FHSIZE: usize = NFS4_FHSIZE as usize;
const PATH_MAX: usize = 4096;
/// The largest extended attribute value (Linux's `XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 64 << 10;

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// The bound of the result of `arg`.
pub fn reply_bound(arg: &A) -> usize {
    match arg {
        A::OP_ACCESS(_) => STATUS + 8,
        A::OP_CLOSE(_) | A::OP_OPEN_DOWNGRADE(_) | A::OP_LOCKU(_) => STATUS + STATEID,
        A::OP_COMMIT(_) => STATUS + 8,
        A::OP_CREATE(_) => STATUS + CHANGE_INFO + BITMAP,
        A::OP_GETATTR(g) => getattr(&g.attr_request),
        A::OP_GETFH => STATUS + 4 + FHSIZE,
        A::OP_LINK(_) | A::OP_REMOVE(_) => STATUS + CHANGE_INFO,
        // What a LOCK that changed state sends. A denied LOCK changed nothing, so its
        // LOCK4denied (up to 1 KiB of owner) is checked on the real bytes afterwards;
        // bounding it here would refuse every LOCK on a session with small replies.
        A::OP_LOCK(_) => STATUS + STATEID,
        A::OP_LOCKT(_) => STATUS + LOCK_DENIED,
        A::OP_OPEN(_) => STATUS + STATEID + CHANGE_INFO + 4 + BITMAP + OPEN_DELEGATION,
        A::OP_READ(r) => STATUS + 4 + 4 + pad4(r.count as usize),
        // cookieverf, the entries (at most maxcount), the list end and eof.
        A::OP_READDIR(r) => STATUS + 8 + r.maxcount as usize + 8,
        A::OP_READLINK => STATUS + 4 + PATH_MAX,
        A::OP_RENAME(_) => STATUS + 2 * CHANGE_INFO,
        A::OP_SECINFO(_) | A::OP_SECINFO_NO_NAME(_) => STATUS + 4 + 4 * 4,
        A::OP_SETATTR(_) => STATUS + BITMAP,
        A::OP_WRITE(_) => STATUS + 4 + 4 + 8,
        A::OP_BIND_CONN_TO_SESSION(_) => STATUS + 16 + 4 + 4,
        // clientid, sequenceid, flags, state protection (at most two bitmaps), server
        // owner, server scope, one implementation id.
        A::OP_EXCHANGE_ID(_) => {
            STATUS
                + 8
                + 4
                + 4
                + (4 + 2 * BITMAP)
                + (8 + OPAQUE_LIMIT)
                + OPAQUE_LIMIT
                + (4 + 2 * OPAQUE_LIMIT + 12)
        }
        // session id, sequence, flags, two channels (six counters, one rdma_ird).
        A::OP_CREATE_SESSION(_) => STATUS + 16 + 4 + 4 + 2 * (6 * 4 + 4 + 4),
        // status, GDD4_OK, cookie verifier, stateid, three bitmaps.
        A::OP_GET_DIR_DELEGATION(_) => STATUS + 4 + 8 + STATEID + 3 * BITMAP,
        A::OP_SEQUENCE(_) => STATUS + 16 + 5 * 4,
        A::OP_TEST_STATEID(t) => STATUS + 4 + 4 * t.ts_stateids.len(),
        A::OP_WANT_DELEGATION(_) => STATUS + OPEN_DELEGATION,
        // write_response4 (with a callback id: a copy stateid), copy_requirements4.
        A::OP_COPY(_) => STATUS + 4 + 16 + 8 + 4 + 8 + 8,
        A::OP_IO_ADVISE(_) => STATUS + BITMAP,
        // osr_count, osr_complete<1>.
        A::OP_OFFLOAD_STATUS(_) => STATUS + 8 + 4 + 4,
        // eof, the segment count, and at most `count` bytes of data in segments of at
        // least 20 bytes each besides their data (a server stops when its reply is full).
        A::OP_READ_PLUS(r) => STATUS + 4 + 4 + pad4(r.rpa_count as usize) + 64 * 20,
        A::OP_SEEK(_) => STATUS + 4 + 8,
        A::OP_GETXATTR(_) => STATUS + 4 + XATTR_SIZE_MAX,
        A::OP_SETXATTR(_) | A::OP_REMOVEXATTR(_) => STATUS + CHANGE_INFO,
        // cookie, names (at most `lxa_maxcount` bytes), eof.
        A::OP_LISTXATTRS(l) => STATUS + 8 + 4 + (l.lxa_maxcount as usize).min(DEFAULT_COUNT) + 4,
        // Everything else answers its status alone, or (unimplemented ops) NOTSUPP.
        _ => STATUS,
    }
}

/// The largest encoding of one attribute a txnfs server returns.
fn attr_bound(bit: u32) -> usize {
    match bit {
        FATTR4_OWNER | FATTR4_OWNER_GROUP | FATTR4_MIMETYPE => OPAQUE_LIMIT,
        FATTR4_FILEHANDLE => 4 + FHSIZE,
        // Variable-length attributes the server does not return (ACLs, locations)
        // answer with an empty list; keep room for a small one anyway.
        FATTR4_ACL | FATTR4_FS_LOCATIONS => 1024,
        FATTR4_SUPPORTED_ATTRS | FATTR4_SUPPATTR_EXCLCREAT => BITMAP,
        // Every other attribute is at most a fsid, a time, or a 64-bit value.
        _ => 16,
    }
}

/// GETATTR: the bitmap as asked, the length of the values, the values.
fn getattr(mask: &[u32]) -> usize {
    let values: usize = mask
        .iter()
        .enumerate()
        .flat_map(|(w, bits)| {
            (0..32u32)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| attr_bound(w as u32 * 32 + b))
        })
        .sum();
    STATUS + 4 + 4 * mask.len() + 4 + values
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::nfs_resop4 as R;

    #[test]
    fn reply_bounds_cover_the_largest_results() {
        use txnfs_xdr::Encode;
        let bound = reply_bound;
        let size = |r: &R| {
            let mut b = bytes::BytesMut::new();
            r.encode(&mut b);
            b.len()
        };
        let owner = bytes::Bytes::from(vec![7u8; 1024]);
        let denied = R::OP_LOCK(LOCK4res::NFS4ERR_DENIED(LOCK4denied {
            offset: 0,
            length: u64::MAX,
            locktype: nfs_lock_type4::WRITE_LT,
            owner: lock_owner4 { clientid: 1, owner },
        }));
        let lock = A::OP_LOCK(Box::new(LOCK4args {
            locktype: nfs_lock_type4::WRITE_LT,
            reclaim: false,
            offset: 0,
            length: 1,
            locker: locker4::FALSE(exist_lock_owner4::default()),
        }));
        // LOCK is bounded by what it sends when it changed state; a denied LOCK changed
        // nothing and is checked on its real bytes. LOCKT's bound covers the denial.
        let granted = R::OP_LOCK(LOCK4res::NFS4_OK(LOCK4resok::default()));
        assert!(size(&granted) <= bound(&lock));
        assert!(size(&denied) > bound(&lock));
        let lockt = A::OP_LOCKT(LOCKT4args {
            locktype: nfs_lock_type4::WRITE_LT,
            offset: 0,
            length: 1,
            owner: lock_owner4::default(),
        });
        assert!(size(&denied) <= bound(&lockt));
        let rename = R::OP_RENAME(RENAME4res::NFS4_OK(RENAME4resok::default()));
        assert!(
            size(&rename)
                <= bound(&A::OP_RENAME(RENAME4args {
                    oldname: Default::default(),
                    newname: Default::default(),
                }))
        );
        let read = R::OP_READ(READ4res::NFS4_OK(READ4resok {
            eof: true,
            data: bytes::Bytes::from(vec![0u8; 1001]),
        }));
        let read_args = A::OP_READ(READ4args {
            stateid: Default::default(),
            offset: 0,
            count: 1001,
        });
        assert!(size(&read) <= bound(&read_args));
        let create = R::OP_CREATE(CREATE4res::NFS4_OK(CREATE4resok {
            cinfo: Default::default(),
            attrset: vec![u32::MAX; 3],
        }));
        assert!(
            size(&create)
                <= bound(&A::OP_CREATE(Box::new(CREATE4args {
                    objtype: createtype4::NF4DIR,
                    objname: Default::default(),
                    createattrs: Default::default(),
                })))
        );
        let big = |n| bytes::Bytes::from(vec![b'x'; n]);
        let exchange_id =
            R::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(Box::new(EXCHANGE_ID4resok {
                eir_clientid: 1,
                eir_sequenceid: 1,
                eir_flags: 0,
                eir_state_protect: state_protect4_r::SP4_MACH_CRED(state_protect_ops4 {
                    spo_must_enforce: vec![u32::MAX; 3],
                    spo_must_allow: vec![u32::MAX; 3],
                }),
                eir_server_owner: server_owner4 {
                    so_minor_id: 1,
                    so_major_id: big(1024),
                },
                eir_server_scope: big(1024),
                eir_server_impl_id: vec![nfs_impl_id4 {
                    nii_domain: big(1024),
                    nii_name: big(1024),
                    nii_date: Default::default(),
                }],
            })));
        assert!(
            size(&exchange_id)
                <= bound(&A::OP_EXCHANGE_ID(Box::new(EXCHANGE_ID4args {
                    eia_clientowner: Default::default(),
                    eia_flags: 0,
                    eia_state_protect: state_protect4_a::SP4_NONE,
                    eia_client_impl_id: vec![],
                })))
        );
        let chan = channel_attrs4 {
            ca_rdma_ird: vec![1],
            ..Default::default()
        };
        let create_session = R::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(Box::new(
            CREATE_SESSION4resok {
                csr_sessionid: [1; 16],
                csr_sequence: 1,
                csr_flags: 0,
                csr_fore_chan_attrs: chan.clone(),
                csr_back_chan_attrs: chan,
            },
        )));
        assert!(size(&create_session) <= bound(&A::OP_CREATE_SESSION(Default::default())));
        let open = R::OP_OPEN(OPEN4res::NFS4_OK(Box::new(OPEN4resok {
            stateid: Default::default(),
            cinfo: Default::default(),
            rflags: 0,
            attrset: vec![u32::MAX; 3],
            delegation: open_delegation4::OPEN_DELEGATE_NONE,
        })));
        assert!(
            size(&open)
                <= bound(&A::OP_OPEN(Box::new(OPEN4args {
                    seqid: 0,
                    share_access: 0,
                    share_deny: 0,
                    owner: Default::default(),
                    openhow: openflag4::default(opentype4::OPEN4_NOCREATE),
                    claim: open_claim4::CLAIM_FH,
                })))
        );
        let getattr = A::OP_GETATTR(GETATTR4args {
            attr_request: vec![u32::MAX, u32::MAX, u32::MAX],
        });
        assert!(bound(&getattr) > 3 * OPAQUE_LIMIT);
    }
}
