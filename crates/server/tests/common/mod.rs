//! A raw NFSv4.1 session over real TCP for protocol-level tests: every byte of every
//! COMPOUND is under the test's control (slots, sequence ids, retransmissions).
#![allow(dead_code)]

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use txnfs_rpc::{AuthSys, Credential, RpcClient};
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig, Server};
use txnfs_xdr::{Decode, Encode};

pub struct TestServer {
    pub addr: SocketAddr,
    pub server: Arc<Server>,
    pub state_dir: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

pub async fn start_memory_server() -> TestServer {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state_dir = std::env::temp_dir().join(format!(
        "txnfs-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let cfg = Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            prebuilt: None,
        }],
        state_dir: Some(state_dir.clone()),
        grace: false,
        ..Config::default()
    };
    let server = Server::new(cfg).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s2 = server.clone();
    let task = tokio::spawn(async move {
        let _ = txnfs_server::run(s2, listener, std::future::pending()).await;
    });
    TestServer {
        addr,
        server,
        state_dir,
        task,
    }
}

pub fn root_cred() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(b"test"),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

pub fn encode_compound(ops: Vec<nfs_argop4>) -> Bytes {
    COMPOUND4args {
        tag: Bytes::from_static(b"t"),
        minorversion: 1,
        argarray: ops,
    }
    .to_bytes()
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

pub fn channel(max_requests: u32) -> channel_attrs4 {
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

pub async fn connect(addr: SocketAddr) -> RpcClient {
    RpcClient::connect(addr, root_cred())
        .await
        .expect("connect")
}

impl Session {
    pub async fn new(addr: SocketAddr, owner: &[u8]) -> Session {
        let cl = connect(addr).await;
        let r = call(
            &cl,
            vec![nfs_argop4::OP_EXCHANGE_ID(EXCHANGE_ID4args {
                eia_clientowner: client_owner4 {
                    co_verifier: [1; 8],
                    co_ownerid: Bytes::copy_from_slice(owner),
                },
                eia_flags: 0,
                eia_state_protect: state_protect4_a::SP4_NONE,
                eia_client_impl_id: vec![],
            })],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK);
        let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
            panic!("EXCHANGE_ID result {:?}", r.resarray)
        };
        let r = call(
            &cl,
            vec![nfs_argop4::OP_CREATE_SESSION(CREATE_SESSION4args {
                csa_clientid: e.eir_clientid,
                csa_sequence: e.eir_sequenceid,
                csa_flags: 0,
                csa_fore_chan_attrs: channel(64),
                csa_back_chan_attrs: channel(1),
                csa_cb_program: 0x40000000,
                csa_sec_parms: vec![callback_sec_parms4::AUTH_NONE],
            })],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
            panic!()
        };
        Session {
            cl,
            clientid: e.eir_clientid,
            sid: s.csr_sessionid,
            seq: 0,
        }
    }

    pub fn sequence(&self, slot: u32, seq: u32) -> nfs_argop4 {
        nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
            sa_sessionid: self.sid,
            sa_sequenceid: seq,
            sa_slotid: slot,
            sa_highest_slotid: slot,
            sa_cachethis: true,
        })
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
}

pub fn empty_fattr() -> fattr4 {
    fattr4 {
        attrmask: vec![],
        attr_vals: Bytes::new(),
    }
}

pub fn open_create(name: &str, how: createhow4) -> nfs_argop4 {
    nfs_argop4::OP_OPEN(OPEN4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: open_owner4 {
            clientid: 0,
            owner: Bytes::from_static(b"owner1"),
        },
        openhow: openflag4::OPEN4_CREATE(how),
        claim: open_claim4::CLAIM_NULL(Bytes::copy_from_slice(name.as_bytes())),
    })
}

pub fn lookup(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_LOOKUP(LOOKUP4args {
        objname: Bytes::copy_from_slice(name.as_bytes()),
    })
}

pub fn status_of(r: &nfs_resop4) -> nfsstat4 {
    // Every result starts with its status: re-encode and read it back.
    let b = r.to_bytes();
    let v = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    nfsstat4::from_i32(v).expect("status")
}
