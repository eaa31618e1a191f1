//! Durable sessions (ADR 0022): CREATE_SESSION4_FLAG_PERSIST is granted when the
//! server is configured for it and the client asks; such a session, its slots and its
//! cached replies survive a crash, so a transaction retried on the old session after
//! the server was killed (`kill -9`) and restarted gets its original reply, byte for
//! byte, and is not executed again. A transaction the crash cut off before its commit
//! is rolled back by recovery and its stored reply dropped: the retry executes it.
//!
//! The crashing server is this test binary run again as a child process (the ignored
//! test `child_server`, driven by environment variables): the parent kills it with
//! SIGKILL, or the `txn` layer's fault hook (`TXNFS_TXN_FAULT`) aborts it at a chosen
//! point, and a new child serves the same state directory and export directory.

mod common;

use bytes::Bytes;
use common::*;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use txnfs_rpc::RpcClient;
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig, Server};
use txnfs_xdr::Decode;

const CHILD_ENV: &str = "TXNFS_DURABLE_CHILD";

/// The server side of the crash tests: runs only as a child process (with
/// `TXNFS_DURABLE_CHILD=<export dir>|<state dir>|<persistent 0/1>|<grace 0/1>`),
/// prints `PORT <n>` and serves until killed.
#[test]
#[ignore = "the crash tests run it as their server process"]
fn child_server() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let cfg = Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: PathBuf::from(parts[0]),
            backend: BackendKind::Local,
            read_only: false,
            clients: Vec::new(),
            prebuilt: None,
        }],
        state_dir: Some(PathBuf::from(parts[1])),
        persistent_sessions: parts[2] == "1",
        grace: parts[3] == "1",
        ..Config::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let server = Server::new(cfg).expect("server starts");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("PORT {}", listener.local_addr().unwrap().port());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        let _ = txnfs_server::run(server, listener, std::future::pending()).await;
    });
}

/// A server process (this binary's `child_server`), killed with SIGKILL when dropped.
struct Proc {
    child: Child,
    addr: SocketAddr,
}

impl Proc {
    fn start(dirs: &Dirs, persistent: bool, grace: bool, fault: Option<&str>) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["child_server", "--exact", "--ignored", "--nocapture"])
            .env(
                CHILD_ENV,
                format!(
                    "{}|{}|{}|{}",
                    dirs.export.display(),
                    dirs.state.display(),
                    u8::from(persistent),
                    u8::from(grace)
                ),
            )
            .env_remove("TXNFS_TXN_FAULT")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(f) = fault {
            cmd.env("TXNFS_TXN_FAULT", f);
        }
        let mut child = cmd.spawn().expect("child server");
        let out = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(out).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("child prints its port")
                .expect("child stdout");
            if let Some(p) = line.strip_prefix("PORT ") {
                break p.trim().parse::<u16>().unwrap();
            }
        };
        Proc {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// `kill -9`.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to die by itself (a fault point aborts it).
    fn wait_dead(mut self) {
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "the fault point aborts the server");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An export directory and a state directory that outlive the server processes.
struct Dirs {
    export: PathBuf,
    state: PathBuf,
}

impl Dirs {
    fn new(tag: &str) -> Dirs {
        let base = std::env::temp_dir().join(format!("txnfs-durable-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let d = Dirs {
            export: base.join("export"),
            state: base.join("state"),
        };
        std::fs::create_dir_all(&d.export).unwrap();
        d
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        if let Some(base) = self.export.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

/// A raw session whose CREATE_SESSION carried `flags`: (client, session, granted flags).
async fn session_with_flags(cl: RpcClient, owner: &[u8], flags: u32) -> (Session, u32) {
    let r = call(&cl, vec![exchange_id(owner)]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("EXCHANGE_ID {:?}", r.resarray)
    };
    let mut op = create_session(e, channel(1000, 8), channel(16, 1));
    if let nfs_argop4::OP_CREATE_SESSION(a) = &mut op {
        a.csa_flags = flags;
    }
    let r = call(&cl, vec![op]).await;
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("CREATE_SESSION {:?}", r.resarray)
    };
    reclaim_complete(&cl, s.csr_sessionid).await;
    let sess = Session {
        cl,
        clientid: e.eir_clientid,
        sid: s.csr_sessionid,
        seq: 0,
    };
    (sess, s.csr_flags)
}

async fn persistent_session(addr: SocketAddr, owner: &[u8]) -> Session {
    let cl = connect(addr).await;
    let (s, flags) = session_with_flags(cl, owner, CREATE_SESSION4_FLAG_PERSIST).await;
    assert_eq!(
        flags & CREATE_SESSION4_FLAG_PERSIST,
        CREATE_SESSION4_FLAG_PERSIST
    );
    s
}

/// The "current stateid" (RFC 8881 §16.2.3.1.2).
fn current_sid() -> stateid4 {
    stateid4 {
        seqid: 1,
        other: [0; 12],
    }
}

/// A transaction that can run only once: CREATE of directory `d` (NFS4ERR_EXIST the
/// second time), a GUARDED OPEN that creates `d/f`, a WRITE and a CLOSE.
fn mkdir_and_write(d: &str) -> Vec<nfs_argop4> {
    vec![
        nfs_argop4::OP_PUTROOTFH,
        mkdir(d),
        open_create("f", createhow4::GUARDED4(empty_fattr())),
        nfs_argop4::OP_WRITE(WRITE4args {
            stateid: current_sid(),
            offset: 0,
            stable: stable_how4::FILE_SYNC4,
            data: Bytes::from_static(b"written once"),
        }),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: current_sid(),
        }),
    ]
}

async fn call_txn_raw(cl: &RpcClient, args: Bytes) -> Result<Bytes, txnfs_rpc::RpcError> {
    cl.call(100003, 4, txnfs_proto::PROC_TXN_COMPOUND, args)
        .await
}

/// The test of issue 10 item 4: exactly once across a crash. A committed transaction
/// retried on the same session after the server was killed and restarted returns the
/// original reply and is not executed again; so does a plain COMPOUND's reply; the
/// session goes on with the next sequence id and tells the client to reclaim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_transaction_retried_after_a_crash_is_answered_not_rerun() {
    let dirs = Dirs::new("once");
    let server = Proc::start(&dirs, true, true, None);
    let mut s = persistent_session(server.addr, b"durable-once").await;
    let txn_args = s.next(mkdir_and_write("d"));
    let original = call_txn_raw(&s.cl, txn_args.clone()).await.expect("txn");
    let r = COMPOUND4res::from_bytes(original.clone()).unwrap();
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // A plain COMPOUND in another slot: its reply is durable too.
    let plain_args = encode_compound(vec![
        s.sequence(2, 1),
        nfs_argop4::OP_PUTROOTFH,
        mkdir("plain"),
    ]);
    let plain = call_raw(&s.cl, plain_args.clone()).await;
    assert_eq!(
        COMPOUND4res::from_bytes(plain.clone()).unwrap().status,
        nfsstat4::NFS4_OK
    );

    server.kill();
    assert_eq!(
        std::fs::read(dirs.export.join("d/f")).unwrap(),
        b"written once"
    );
    let server = Proc::start(&dirs, true, true, None);
    // The client reconnects and retransmits the identical requests on its old session.
    let cl = connect(server.addr).await;
    let again = call_txn_raw(&cl, txn_args).await.expect("txn retry");
    assert_eq!(again, original, "the original reply, byte for byte");
    assert_eq!(call_raw(&cl, plain_args).await, plain);
    assert_eq!(
        std::fs::read(dirs.export.join("d/f")).unwrap(),
        b"written once"
    );

    // The session goes on: the next sequence id executes (in grace, a LOOKUP is
    // fine), and SEQUENCE says the client must reclaim its state.
    let mut s = Session { cl, ..s };
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("d"), lookup("f")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(seq)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    assert_ne!(
        seq.sr_status_flags & SEQ4_STATUS_RESTART_RECLAIM_NEEDED,
        0,
        "the client learns that it must reclaim"
    );
    // Re-running the transaction now (a new request) finds the directory.
    let r = s.run_txn(mkdir_and_write("d")).await.expect("txn");
    assert_eq!(r.status, nfsstat4::NFS4ERR_EXIST);
    // RECLAIM_COMPLETE ends the reclaim flag.
    let r = s
        .run(vec![nfs_argop4::OP_RECLAIM_COMPLETE(
            RECLAIM_COMPLETE4args { rca_one_fs: false },
        )])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = s.run(vec![]).await;
    let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(seq)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(seq.sr_status_flags & SEQ4_STATUS_RESTART_RECLAIM_NEEDED, 0);
    server.kill();
}

/// Sessions without PERSIST are gone after a restart (NFS4ERR_BADSESSION) even when
/// the server grants persistence; with persistence off nothing survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_without_persist_are_gone_after_a_restart() {
    let dirs = Dirs::new("badsession");
    for persistent in [true, false] {
        let server = Proc::start(&dirs, persistent, false, None);
        let cl = connect(server.addr).await;
        let owner = format!("plain-{persistent}");
        let (mut s, flags) = session_with_flags(cl, owner.as_bytes(), 0).await;
        assert_eq!(flags & CREATE_SESSION4_FLAG_PERSIST, 0);
        let args = s.next(vec![nfs_argop4::OP_PUTROOTFH]);
        let first = call_raw(&s.cl, args.clone()).await;
        assert_eq!(
            COMPOUND4res::from_bytes(first).unwrap().status,
            nfsstat4::NFS4_OK
        );
        server.kill();
        let server = Proc::start(&dirs, persistent, false, None);
        let cl = connect(server.addr).await;
        let r = COMPOUND4res::from_bytes(call_raw(&cl, args).await).unwrap();
        assert_eq!(r.status, nfsstat4::NFS4ERR_BADSESSION);
        server.kill();
    }
}

/// A persistent session destroyed (DESTROY_SESSION), or whose client was destroyed
/// (DESTROY_CLIENTID), before the crash stays gone after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroyed_persistent_sessions_and_clients_stay_gone() {
    let dirs = Dirs::new("destroyed");
    let server = Proc::start(&dirs, true, false, None);
    let mut kept = persistent_session(server.addr, b"kept").await;
    let kept_args = kept.next(vec![nfs_argop4::OP_PUTROOTFH]);
    let kept_reply = call_raw(&kept.cl, kept_args.clone()).await;
    let mut gone = persistent_session(server.addr, b"session-destroyed").await;
    let gone_args = gone.next(vec![nfs_argop4::OP_PUTROOTFH]);
    call_raw(&gone.cl, gone_args.clone()).await;
    let r = call(
        &gone.cl,
        vec![nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: gone.sid,
        })],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let mut client_gone = persistent_session(server.addr, b"client-destroyed").await;
    let client_args = client_gone.next(vec![nfs_argop4::OP_PUTROOTFH]);
    call_raw(&client_gone.cl, client_args.clone()).await;
    for op in [
        nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: client_gone.sid,
        }),
        nfs_argop4::OP_DESTROY_CLIENTID(DESTROY_CLIENTID4args {
            dca_clientid: client_gone.clientid,
        }),
    ] {
        let r = call(&client_gone.cl, vec![op]).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    }
    // Another persistent session's reply makes the drops durable before the crash
    // (they are not waited for themselves, ADR 0022).
    let mut last = persistent_session(server.addr, b"last").await;
    last.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    server.kill();

    let server = Proc::start(&dirs, true, false, None);
    let cl = connect(server.addr).await;
    assert_eq!(call_raw(&cl, kept_args).await, kept_reply);
    for args in [gone_args, client_args] {
        let r = COMPOUND4res::from_bytes(call_raw(&cl, args).await).unwrap();
        assert_eq!(r.status, nfsstat4::NFS4ERR_BADSESSION);
    }
    server.kill();
}

/// The crash cuts a transaction off after its reply was stored but before its commit
/// record (`TXNFS_TXN_FAULT=before-commit`): recovery rolls it back, the stored reply
/// is dropped, and the client's retry executes it (once). Cut off after the commit
/// (`after-commit`), the retry gets the stored reply and nothing runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_cut_off_by_the_crash_runs_on_retry_a_committed_one_does_not() {
    for (fault, committed) in [("before-commit", false), ("after-commit", true)] {
        let dirs = Dirs::new(fault);
        let server = Proc::start(&dirs, true, false, Some(fault));
        let mut s = persistent_session(server.addr, fault.as_bytes()).await;
        let args = s.next(mkdir_and_write("t"));
        assert!(
            call_txn_raw(&s.cl, args.clone()).await.is_err(),
            "{fault}: the server dies before replying"
        );
        server.wait_dead();
        let server = Proc::start(&dirs, true, false, None);
        assert_eq!(
            dirs.export.join("t/f").exists(),
            committed,
            "{fault}: recovery keeps exactly the committed transaction"
        );
        let cl = connect(server.addr).await;
        // The restored client has nothing to reclaim: it says so (on slot 1) before
        // its retry opens a file, as RFC 8881 §18.51.3 asks of every client.
        let r = call(
            &cl,
            vec![
                sequence(s.sid, 1, 2, false),
                nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false }),
            ],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let r = COMPOUND4res::from_bytes(call_txn_raw(&cl, args).await.expect("retry")).unwrap();
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{fault}: {:?}", r.resarray);
        assert_eq!(
            std::fs::read(dirs.export.join("t/f")).unwrap(),
            b"written once",
            "{fault}"
        );
        server.kill();
    }
}

/// PERSIST is granted only when the server is configured for it and the client asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist_is_granted_only_when_configured_and_asked() {
    for configured in [false, true] {
        let srv = start_server(|d| Config {
            persistent_sessions: configured,
            ..memory_config(d, false)
        })
        .await;
        for asked in [false, true] {
            let cl = connect(srv.addr).await;
            let owner = format!("grant-{configured}-{asked}");
            let want = if asked {
                CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
            } else {
                CREATE_SESSION4_FLAG_CONN_BACK_CHAN
            };
            let (_, flags) = session_with_flags(cl, owner.as_bytes(), want).await;
            assert_eq!(
                flags & CREATE_SESSION4_FLAG_PERSIST != 0,
                configured && asked,
                "configured {configured}, asked {asked}"
            );
        }
        assert_eq!(
            srv.server.session_store.is_some(),
            configured,
            "no store (and no cost) unless configured"
        );
        assert_eq!(
            txnfs_server::statedir::sessionstore::SessionStore::exists(&srv.state_dir),
            configured
        );
    }
}

/// Only the replies of persistent sessions go to the store, each before it is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_persistent_sessions_pay_for_durability() {
    let srv = start_server(|d| Config {
        persistent_sessions: true,
        ..memory_config(d, false)
    })
    .await;
    let store = srv.server.session_store.as_ref().unwrap();
    let records = || {
        store
            .stats
            .records
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let cl = connect(srv.addr).await;
    let (mut plain, _) = session_with_flags(cl, b"cost-plain", 0).await;
    let before = records();
    for _ in 0..5 {
        plain.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    }
    assert_eq!(records(), before, "a plain session writes nothing");
    let mut p = persistent_session(srv.addr, b"cost-persist").await;
    let before = records();
    for _ in 0..5 {
        p.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    }
    assert_eq!(records(), before + 5, "one record per reply");
}
