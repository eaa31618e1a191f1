//! A raw NFSv4.1 session over real TCP for protocol-level tests: every byte of every
//! COMPOUND is under the test's control (slots, sequence ids, retransmissions). The
//! framing, builders and transport are the shared raw client's (`txnfs_rawclient`,
//! ADR 0034); this module adds the servers the tests start and assertions.
#![allow(dead_code)]

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use txnfs_rawclient::tcp::{self, CallError, Options};
#[allow(unused_imports)] // each test uses some
pub use txnfs_rawclient::{
    empty_fattr, lookup, mkdir, open_create, open_new, read, remove, rename, write,
};
use txnfs_rpc::{Credential, RpcClient};
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig, Server};
use txnfs_xdr::Decode;

mod args;
pub use args::*;
pub mod deleg;
pub mod peer;

pub struct TestServer {
    pub addr: SocketAddr,
    pub server: Arc<Server>,
    pub state_dir: std::path::PathBuf,
    /// The serving task (`txnfs_server::run`).
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

pub async fn start_memory_server() -> TestServer {
    start_server(|state_dir| memory_config(state_dir, false)).await
}

/// Serves the configuration `config` builds around a fresh state directory on a free
/// port of 127.0.0.1.
pub async fn start_server(config: impl FnOnce(&std::path::Path) -> Config) -> TestServer {
    start_server_until(config, std::future::pending()).await
}

/// As [`start_server`], serving until `shutdown` resolves.
pub async fn start_server_until(
    config: impl FnOnce(&std::path::Path) -> Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> TestServer {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state_dir = std::env::temp_dir().join(format!(
        "txnfs-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let server = Server::new(config(&state_dir)).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s2 = server.clone();
    let task = tokio::spawn(async move {
        let _ = txnfs_server::run(s2, listener, shutdown).await;
    });
    TestServer {
        addr,
        server,
        state_dir,
        task,
    }
}

/// A server of one read-write local export `/` of a fresh directory under the temp dir
/// (named after `tag` and this process), no grace period. Returns the directory too, so
/// the test can read the files from the host; the caller removes it.
pub async fn start_local_server(tag: &str) -> (TestServer, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("txnfs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("export dir");
    let export = dir.clone();
    let srv = start_server(move |state_dir| local_config(export, state_dir)).await;
    (srv, dir)
}

/// The configuration of one read-write local export `/` of `export`, state in
/// `state_dir`, no grace period; tests change what else they need.
pub fn local_config(export: std::path::PathBuf, state_dir: &std::path::Path) -> Config {
    Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: export,
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        }],
        state_dir: Some(state_dir.to_path_buf()),
        grace: false,
        ..Config::default()
    }
}

/// A memory server and one session on it.
pub async fn start_with_session(owner: &[u8]) -> (TestServer, Session) {
    let srv = start_memory_server().await;
    let s = Session::new(srv.addr, owner).await;
    (srv, s)
}

pub fn root_cred() -> Credential {
    sys_cred(0, 0)
}

/// AUTH_SYS credentials of the user `uid` in the group `gid`, from the machine "test".
pub fn sys_cred(uid: u32, gid: u32) -> Credential {
    tcp::auth_sys(b"test", uid, gid)
}

/// The COMPOUND tag of the tests' requests.
pub const TAG: &[u8] = b"t";

pub fn encode_compound(ops: Vec<nfs_argop4>) -> Bytes {
    encode_compound_minor(ops, 1)
}

pub fn encode_compound_minor(ops: Vec<nfs_argop4>, minorversion: u32) -> Bytes {
    txnfs_rawclient::compound(TAG, minorversion, ops)
}

pub async fn call_raw(cl: &RpcClient, args: Bytes) -> Bytes {
    cl.call(100003, 4, 1, args).await.expect("rpc call")
}

pub async fn call(cl: &RpcClient, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    let b = call_raw(cl, encode_compound(ops)).await;
    COMPOUND4res::from_bytes(b).expect("reply decodes")
}

pub struct Session {
    pub cl: RpcClient,
    pub clientid: u64,
    pub sid: sessionid4,
    pub seq: u32,
}

/// RECLAIM_COMPLETE on the new session `sid`: nothing to reclaim, as every client must
/// say before it opens or locks (RFC 8881 §18.51.3). On slot 1 (the session needs two),
/// so that slot 0, which the tests drive, starts unused.
pub async fn reclaim_complete(cl: &RpcClient, sid: sessionid4) {
    let r = call(
        cl,
        vec![
            sequence(sid, 1, 1, false),
            txnfs_rawclient::reclaim_complete(),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

pub async fn connect(addr: SocketAddr) -> RpcClient {
    RpcClient::connect(addr, root_cred())
        .await
        .expect("connect")
}

impl Session {
    pub async fn new(addr: SocketAddr, owner: &[u8]) -> Session {
        Session::on(connect(addr).await, owner).await
    }

    /// A session of the client `owner` on the connection `cl` (made as the test needs
    /// it: from another local address, with other credentials).
    pub async fn on(cl: RpcClient, owner: &[u8]) -> Session {
        let (clientid, s) = new_session(&cl, owner, channel(1000, 64)).await;
        reclaim_complete(&cl, s.csr_sessionid).await;
        Session {
            cl,
            clientid,
            sid: s.csr_sessionid,
            seq: 0,
        }
    }

    /// A second session of the client `owner` (made here) whose fore channel has the
    /// given reply limits, on a connection of its own; with the fore channel the server
    /// granted.
    pub async fn with_limits(
        addr: SocketAddr,
        owner: &[u8],
        max_response: u32,
        max_cached: u32,
    ) -> (Session, channel_attrs4) {
        let first = Session::new(addr, owner).await;
        let mut fore = channel(1000, 4);
        fore.ca_maxresponsesize = max_response;
        fore.ca_maxresponsesize_cached = max_cached;
        let (clientid, s) = new_session(&first.cl, owner, fore).await;
        let second = Session {
            cl: connect(addr).await,
            clientid,
            sid: s.csr_sessionid,
            seq: 0,
        };
        (second, s.csr_fore_chan_attrs)
    }

    pub fn sequence(&self, slot: u32, seq: u32) -> nfs_argop4 {
        sequence(self.sid, slot, seq, true)
    }

    /// Encode SEQUENCE(slot 0, next seqid) + ops; returns the bytes so a test can
    /// retransmit them verbatim.
    pub fn next(&mut self, ops: Vec<nfs_argop4>) -> Bytes {
        self.seq += 1;
        let mut all = vec![self.sequence(0, self.seq)];
        all.extend(ops);
        encode_compound(all)
    }

    pub async fn run(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let b = self.next(ops);
        COMPOUND4res::from_bytes(call_raw(&self.cl, b).await).expect("decodes")
    }

    /// Create `name` in the root with OPEN: its open stateid and file handle.
    pub async fn open_new_file(&mut self, name: &str) -> (stateid4, Bytes) {
        let r = self
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_new(name),
                nfs_argop4::OP_GETFH,
            ])
            .await;
        opened_stateid_and_fh(&r)
    }

    /// Like `run`, as a transactional COMPOUND (procedure `PROC_TXN_COMPOUND`): the RPC
    /// outcome, so a test can see PROC_UNAVAIL.
    pub async fn run_txn(
        &mut self,
        ops: Vec<nfs_argop4>,
    ) -> Result<COMPOUND4res, txnfs_rpc::RpcError> {
        let b = self.next(ops);
        self.call_txn(b).await
    }

    /// Sends encoded COMPOUND args as a transactional COMPOUND (retransmissions too).
    pub async fn call_txn(&self, args: Bytes) -> Result<COMPOUND4res, txnfs_rpc::RpcError> {
        self.call_proc(txnfs_proto::PROC_TXN_COMPOUND, args).await
    }

    /// Like `run`, with RPC procedure `proc` (`txnfs_proto::PROC_TXN_BEGIN`, ...).
    pub async fn run_proc(&mut self, proc: u32, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        let b = self.next(ops);
        self.call_proc(proc, b).await.expect("procedure served")
    }

    /// Sends encoded COMPOUND args with RPC procedure `proc`.
    pub async fn call_proc(
        &self,
        proc: u32,
        args: Bytes,
    ) -> Result<COMPOUND4res, txnfs_rpc::RpcError> {
        match tcp::call_proc(&self.cl, proc, args, None).await {
            Ok(r) => Ok(r),
            Err(CallError::Rpc(e)) => Err(e),
            Err(e) => panic!("reply decodes: {e}"),
        }
    }

    /// Like `run`, but SEQUENCE asks the server not to cache the reply.
    pub async fn run_uncached(&mut self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        self.seq += 1;
        let mut all = vec![sequence(self.sid, 0, self.seq, false)];
        all.extend(ops);
        call(&self.cl, all).await
    }
}

/// EXCHANGE_ID then CREATE_SESSION over `cl`: the client id and the new session.
async fn new_session(
    cl: &RpcClient,
    owner: &[u8],
    fore: channel_attrs4,
) -> (clientid4, CREATE_SESSION4resok) {
    let opts = Options {
        tag: TAG,
        cred: root_cred(),
        timeout: None,
        fore,
        back: channel(1000, 1),
    };
    tcp::establish(cl, owner, &opts)
        .await
        .unwrap_or_else(|e| panic!("session setup: {e}"))
}

/// The open stateid and the file handle in the reply to SEQUENCE, PUTROOTFH, OPEN, GETFH.
pub fn opened_stateid_and_fh(r: &COMPOUND4res) -> (stateid4, Bytes) {
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        matches!(r.resarray.get(2), Some(nfs_resop4::OP_OPEN(_))),
        "OPEN third: {:?}",
        r.resarray
    );
    txnfs_rawclient::opened(r).unwrap_or_else(|| panic!("OPEN, GETFH results {:?}", r.resarray))
}

/// The status of one op result (panics if it is none this protocol knows).
pub fn status_of(r: &nfs_resop4) -> nfsstat4 {
    txnfs_rawclient::status(r).expect("status")
}
