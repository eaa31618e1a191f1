//! A minimal raw NFSv4.1 session (slot 0, sequential) and the op builders the torture
//! and isolation runs send; a trimmed copy of `crates/server/tests/common`, returning
//! errors instead of panicking because the server under test dies on purpose.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_rpc::{AuthSys, Credential, RpcClient, RpcError};
use txnfs_xdr::{Decode, Encode};

/// Upper bound of one call: a server that is alive answers much sooner.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call got no COMPOUND reply.
#[derive(Debug)]
pub enum CallError {
    Rpc(RpcError),
    Timeout,
    Decode(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "rpc: {e}"),
            CallError::Timeout => write!(f, "no reply in {CALL_TIMEOUT:?}"),
            CallError::Decode(e) => write!(f, "reply does not decode: {e}"),
        }
    }
}

fn root_cred() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(b"torture"),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

fn encode_compound(ops: Vec<nfs_argop4>) -> Bytes {
    COMPOUND4args {
        tag: Bytes::from_static(b"torture"),
        minorversion: 1,
        argarray: ops,
    }
    .to_bytes()
}

async fn call_proc(cl: &RpcClient, proc_num: u32, args: Bytes) -> Result<COMPOUND4res, CallError> {
    let b = tokio::time::timeout(CALL_TIMEOUT, cl.call(100003, 4, proc_num, args))
        .await
        .map_err(|_| CallError::Timeout)?
        .map_err(CallError::Rpc)?;
    COMPOUND4res::from_bytes(b).map_err(|e| CallError::Decode(e.to_string()))
}

fn channel(max_requests: u32) -> channel_attrs4 {
    channel_attrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: 1 << 20,
        ca_maxresponsesize: 1 << 20,
        ca_maxresponsesize_cached: 64 << 10,
        ca_maxoperations: 1000,
        ca_maxrequests: max_requests,
        ca_rdma_ird: vec![],
    }
}

fn sequence(sid: sessionid4, slot: u32, seqid: u32) -> nfs_argop4 {
    nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
        sa_sessionid: sid,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: slot,
        sa_cachethis: true,
    })
}

/// One NFSv4.1 client with one session, used by one task at a time (slot 0).
pub struct Session {
    cl: RpcClient,
    sid: sessionid4,
    seq: u32,
}

impl Session {
    /// EXCHANGE_ID (as `owner`), CREATE_SESSION, RECLAIM_COMPLETE.
    pub async fn new(addr: SocketAddr, owner: &[u8]) -> Result<Session, String> {
        let cl = tokio::time::timeout(CALL_TIMEOUT, RpcClient::connect(addr, root_cred()))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| format!("connect: {e}"))?;
        let exid = nfs_argop4::OP_EXCHANGE_ID(EXCHANGE_ID4args {
            eia_clientowner: client_owner4 {
                co_verifier: [1; 8],
                co_ownerid: Bytes::copy_from_slice(owner),
            },
            eia_flags: 0,
            eia_state_protect: state_protect4_a::SP4_NONE,
            eia_client_impl_id: vec![],
        });
        let r = call_proc(&cl, 1, encode_compound(vec![exid]))
            .await
            .map_err(|e| format!("EXCHANGE_ID: {e}"))?;
        let Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) = r.resarray.first()
        else {
            return Err(format!("EXCHANGE_ID: {:?}", r.status));
        };
        let cs = nfs_argop4::OP_CREATE_SESSION(CREATE_SESSION4args {
            csa_clientid: e.eir_clientid,
            csa_sequence: e.eir_sequenceid,
            csa_flags: 0,
            csa_fore_chan_attrs: channel(8),
            csa_back_chan_attrs: channel(1),
            csa_cb_program: 0x4000_0000,
            csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
        });
        let r = call_proc(&cl, 1, encode_compound(vec![cs]))
            .await
            .map_err(|e| format!("CREATE_SESSION: {e}"))?;
        let Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) =
            r.resarray.first()
        else {
            return Err(format!("CREATE_SESSION: {:?}", r.status));
        };
        let mut session = Session {
            cl,
            sid: s.csr_sessionid,
            seq: 0,
        };
        let r = session
            .plain(vec![nfs_argop4::OP_RECLAIM_COMPLETE(
                RECLAIM_COMPLETE4args { rca_one_fs: false },
            )])
            .await
            .map_err(|e| format!("RECLAIM_COMPLETE: {e}"))?;
        if r.status != nfsstat4::NFS4_OK {
            return Err(format!("RECLAIM_COMPLETE: {:?}", r.status));
        }
        Ok(session)
    }

    fn next(&mut self, ops: Vec<nfs_argop4>) -> Bytes {
        self.seq += 1;
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(sequence(self.sid, 0, self.seq));
        all.extend(ops);
        encode_compound(all)
    }

    /// A plain COMPOUND of SEQUENCE + `ops`.
    pub async fn plain(&mut self, ops: Vec<nfs_argop4>) -> Result<COMPOUND4res, CallError> {
        let b = self.next(ops);
        call_proc(&self.cl, 1, b).await
    }

    /// A transactional COMPOUND (`PROC_TXN_COMPOUND`) of SEQUENCE + `ops`.
    pub async fn txn(&mut self, ops: Vec<nfs_argop4>) -> Result<COMPOUND4res, CallError> {
        let b = self.next(ops);
        call_proc(&self.cl, txnfs_proto::PROC_TXN_COMPOUND, b).await
    }
}

fn name(n: &str) -> Bytes {
    Bytes::copy_from_slice(n.as_bytes())
}

pub fn empty_fattr() -> fattr4 {
    fattr4 {
        attrmask: vec![],
        attr_vals: Bytes::new(),
    }
}

/// The anonymous stateid (all zeros).
pub fn anon() -> stateid4 {
    stateid4 {
        seqid: 0,
        other: [0; 12],
    }
}

/// The "current stateid" (RFC 8881 §16.2.3.1.2): the last OPEN's in this COMPOUND.
pub fn current_sid() -> stateid4 {
    stateid4 {
        seqid: 1,
        other: [0; 12],
    }
}

pub fn lookup(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_LOOKUP(LOOKUP4args { objname: name(n) })
}

pub fn mkdir(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_CREATE(CREATE4args {
        objtype: createtype4::NF4DIR,
        objname: name(n),
        createattrs: empty_fattr(),
    })
}

/// OPEN that creates `n` (GUARDED4: it must not exist) for reading and writing.
pub fn open_create(n: &str) -> nfs_argop4 {
    nfs_argop4::OP_OPEN(OPEN4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: open_owner4 {
            clientid: 0,
            owner: Bytes::from_static(b"torture"),
        },
        openhow: openflag4::OPEN4_CREATE(createhow4::GUARDED4(empty_fattr())),
        claim: open_claim4::CLAIM_NULL(name(n)),
    })
}

/// CLOSE of the current stateid.
pub fn close_current() -> nfs_argop4 {
    nfs_argop4::OP_CLOSE(CLOSE4args {
        seqid: 0,
        open_stateid: current_sid(),
    })
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

/// WRITE `data` at `offset` with `sid`, FILE_SYNC4.
pub fn write(sid: stateid4, offset: u64, data: Bytes) -> nfs_argop4 {
    nfs_argop4::OP_WRITE(WRITE4args {
        stateid: sid,
        offset,
        stable: stable_how4::FILE_SYNC4,
        data,
    })
}

pub fn read(offset: u64, count: u32) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: anon(),
        offset,
        count,
    })
}

/// SETATTR size (FATTR4_SIZE is bit 4) with the anonymous stateid.
pub fn truncate(size: u64) -> nfs_argop4 {
    nfs_argop4::OP_SETATTR(SETATTR4args {
        stateid: anon(),
        obj_attributes: fattr4 {
            attrmask: vec![1 << 4],
            attr_vals: Bytes::copy_from_slice(&size.to_be_bytes()),
        },
    })
}

/// The status of one op's result.
pub fn status_of(r: &nfs_resop4) -> nfsstat4 {
    // Every result starts with its status: re-encode and read it back.
    let b = r.to_bytes();
    let v = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    nfsstat4::from_i32(v).unwrap_or(nfsstat4::NFS4ERR_SERVERFAULT)
}

/// The data of every READ in a reply, in order.
pub fn read_results(r: &COMPOUND4res) -> Vec<Bytes> {
    r.resarray
        .iter()
        .filter_map(|o| match o {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => Some(ok.data.clone()),
            _ => None,
        })
        .collect()
}
