//! The TCP transport: COMPOUNDs over `txnfs_rpc::RpcClient`, errors returned (a server
//! under torture dies on purpose), and a sequential session on slot 0.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use txnfs_proto::nfs4::*;
use txnfs_rpc::{AuthSys, Credential, RpcClient, RpcError};
use txnfs_xdr::Decode;

use crate::session::{compound, create_session, exchange_id, reclaim_complete, Slots};

/// The NFS program, version 4.
pub const NFS_PROGRAM: u32 = 100003;

/// AUTH_SYS credentials of `uid` in the group `gid` from the machine `machine`.
pub fn auth_sys(machine: &'static [u8], uid: u32, gid: u32) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(machine),
        uid,
        gid,
        gids: vec![],
    })
}

/// Why a call got no COMPOUND reply.
#[derive(Debug)]
pub enum CallError {
    Rpc(RpcError),
    Timeout(Duration),
    Decode(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc(e) => write!(f, "rpc: {e}"),
            CallError::Timeout(t) => write!(f, "no reply in {t:?}"),
            CallError::Decode(e) => write!(f, "reply does not decode: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// Encoded COMPOUND args sent as RPC procedure `proc_num` (1, or a transactional
/// procedure such as `txnfs_proto::PROC_TXN_COMPOUND`), within `timeout` if given.
pub async fn call_proc(
    cl: &RpcClient,
    proc_num: u32,
    args: Bytes,
    timeout: Option<Duration>,
) -> Result<COMPOUND4res, CallError> {
    let call = cl.call(NFS_PROGRAM, 4, proc_num, args);
    let b = match timeout {
        Some(t) => tokio::time::timeout(t, call)
            .await
            .map_err(|_| CallError::Timeout(t))?,
        None => call.await,
    }
    .map_err(CallError::Rpc)?;
    COMPOUND4res::from_bytes(b).map_err(|e| CallError::Decode(e.to_string()))
}

/// How a [`Session`] is made and how it calls.
#[derive(Debug, Clone)]
pub struct Options {
    /// The COMPOUND tag of every request.
    pub tag: &'static [u8],
    pub cred: Credential,
    /// The bound of connecting and of each call.
    pub timeout: Option<Duration>,
    pub fore: channel_attrs4,
    pub back: channel_attrs4,
}

/// EXCHANGE_ID (as `owner`) then CREATE_SESSION over `cl`: the client id and the new
/// session.
pub async fn establish(
    cl: &RpcClient,
    owner: &[u8],
    o: &Options,
) -> Result<(clientid4, CREATE_SESSION4resok), String> {
    let r = call_proc(
        cl,
        1,
        compound(o.tag, 1, vec![exchange_id(owner)]),
        o.timeout,
    )
    .await
    .map_err(|e| format!("EXCHANGE_ID: {e}"))?;
    let Some(e) = crate::exchange_id_ok(&r) else {
        return Err(format!("EXCHANGE_ID: {:?} {:?}", r.status, r.resarray));
    };
    let cs = create_session(e, o.fore.clone(), o.back.clone());
    let r = call_proc(cl, 1, compound(o.tag, 1, vec![cs]), o.timeout)
        .await
        .map_err(|e| format!("CREATE_SESSION: {e}"))?;
    let Some(s) = crate::create_session_ok(&r) else {
        return Err(format!("CREATE_SESSION: {:?} {:?}", r.status, r.resarray));
    };
    Ok((e.eir_clientid, s.clone()))
}

/// One NFSv4.1 client with one session, used by one task at a time (slot 0).
pub struct Session {
    pub cl: RpcClient,
    pub clientid: clientid4,
    pub slots: Slots,
    opts: Options,
}

impl Session {
    /// Connects, EXCHANGE_ID (as `owner`), CREATE_SESSION, RECLAIM_COMPLETE.
    pub async fn new(addr: SocketAddr, owner: &[u8], opts: Options) -> Result<Session, String> {
        let connect = RpcClient::connect(addr, opts.cred.clone());
        let cl = match opts.timeout {
            Some(t) => tokio::time::timeout(t, connect)
                .await
                .map_err(|_| "connect timed out".to_string())?,
            None => connect.await,
        }
        .map_err(|e| format!("connect: {e}"))?;
        let (clientid, s) = establish(&cl, owner, &opts).await?;
        let mut session = Session {
            cl,
            clientid,
            slots: Slots::new(s.csr_sessionid, 1),
            opts,
        };
        let r = session
            .plain(vec![reclaim_complete()])
            .await
            .map_err(|e| format!("RECLAIM_COMPLETE: {e}"))?;
        if r.status != nfsstat4::NFS4_OK {
            return Err(format!("RECLAIM_COMPLETE: {:?}", r.status));
        }
        Ok(session)
    }

    /// SEQUENCE (slot 0, next sequence id) + `ops` as RPC procedure `proc_num`.
    pub async fn call(
        &mut self,
        proc_num: u32,
        ops: Vec<nfs_argop4>,
    ) -> Result<COMPOUND4res, CallError> {
        let b = self.slots.take(self.opts.tag, 0, ops);
        call_proc(&self.cl, proc_num, b, self.opts.timeout).await
    }

    /// A plain COMPOUND of SEQUENCE + `ops`.
    pub async fn plain(&mut self, ops: Vec<nfs_argop4>) -> Result<COMPOUND4res, CallError> {
        self.call(1, ops).await
    }

    /// A transactional COMPOUND (`PROC_TXN_COMPOUND`) of SEQUENCE + `ops`.
    pub async fn txn(&mut self, ops: Vec<nfs_argop4>) -> Result<COMPOUND4res, CallError> {
        self.call(txnfs_proto::PROC_TXN_COMPOUND, ops).await
    }
}
