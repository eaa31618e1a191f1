//! Transactional COMPOUNDs over TCP (ADR 0021): procedure `PROC_TXN_COMPOUND` runs the
//! COMPOUND all or nothing; a failing op leaves no trace of the ops before it, a
//! committed one is all there, a retransmission is answered from the reply cache, and a
//! server with transactions off answers PROC_UNAVAIL.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_server::nfs::*;
use txnfs_server::{BackendKind, Config, ExportConfig};

/// The "current stateid" (RFC 8881 §16.2.3.1.2): the OPEN's, inside one COMPOUND.
fn current_sid() -> stateid4 {
    stateid4 {
        seqid: 1,
        other: [0; 12],
    }
}

fn read(sid: &stateid4, count: u32) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: sid.clone(),
        offset: 0,
        count,
    })
}

/// fattr4 setting `size` (FATTR4_SIZE is bit 4).
fn size_attr(size: u64) -> fattr4 {
    fattr4 {
        attrmask: vec![1 << 4],
        attr_vals: Bytes::copy_from_slice(&size.to_be_bytes()),
    }
}

fn anon() -> stateid4 {
    stateid4 {
        seqid: 0,
        other: [0; 12],
    }
}

/// Does `path` (components from the root) exist, as a plain COMPOUND sees it?
async fn exists(s: &mut Session, path: &[&str]) -> bool {
    let mut ops = vec![nfs_argop4::OP_PUTROOTFH];
    ops.extend(path.iter().map(|c| lookup(c)));
    let r = s.run(ops).await;
    match r.status {
        nfsstat4::NFS4_OK => true,
        nfsstat4::NFS4ERR_NOENT => false,
        other => panic!("lookup {path:?}: {other:?}"),
    }
}

async fn contents(s: &mut Session, name: &str) -> Bytes {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup(name),
            read(&anon(), 1 << 16),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let Some(nfs_resop4::OP_READ(READ4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("{:?}", r.resarray)
    };
    ok.data.clone()
}

/// Ops of every kind, in one COMPOUND: a directory made and filled, a file written,
/// one renamed, one removed, one truncated.
fn heterogeneous() -> Vec<nfs_argop4> {
    vec![
        nfs_argop4::OP_PUTROOTFH,
        mkdir("dir"),
        open_new("inside"),
        write(&current_sid(), 0, b"fresh"),
        nfs_argop4::OP_PUTROOTFH,
        nfs_argop4::OP_SAVEFH,
        rename("keep", "kept"),
        nfs_argop4::OP_PUTROOTFH,
        remove("gone"),
        nfs_argop4::OP_PUTROOTFH,
        lookup("big"),
        nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
            stateid: anon(),
            obj_attributes: size_attr(2),
        })),
    ]
}

async fn setup(s: &mut Session) {
    for (name, data) in [
        ("keep", &b"old bytes"[..]),
        ("gone", b"removed"),
        ("big", b"0123456789"),
    ] {
        let (sid, _) = s.open_new_file(name).await;
        let r = s
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                lookup(name),
                write(&sid, 0, Box::leak(data.to_vec().into_boxed_slice())),
            ])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK);
    }
}

async fn rolled_back_then_committed(s: &mut Session) {
    setup(s).await;
    // The last op fails: everything before it is undone.
    let mut ops = heterogeneous();
    ops.extend([nfs_argop4::OP_PUTROOTFH, remove("no-such-name")]);
    let n = ops.len() + 1;
    let r = s.run_txn(ops).await.expect("transactions are on");
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    assert_eq!(r.resarray.len(), n, "every op ran up to the failing one");
    assert!(r.resarray[..n - 1]
        .iter()
        .all(|o| status_of(o) == nfsstat4::NFS4_OK));
    assert!(!exists(s, &["dir"]).await, "mkdir not undone");
    assert!(exists(s, &["keep"]).await && !exists(s, &["kept"]).await);
    assert!(exists(s, &["gone"]).await, "remove not undone");
    assert_eq!(&contents(s, "gone").await[..], b"removed");
    assert_eq!(&contents(s, "keep").await[..], b"old bytes");
    assert_eq!(&contents(s, "big").await[..], b"0123456789");

    // The same without the failing op: all of it is there.
    let r = s.run_txn(heterogeneous()).await.expect("txn");
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(exists(s, &["dir", "inside"]).await);
    assert!(!exists(s, &["keep"]).await && exists(s, &["kept"]).await);
    assert!(!exists(s, &["gone"]).await);
    assert_eq!(&contents(s, "big").await[..], b"01");
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("dir"),
            lookup("inside"),
            read(&anon(), 100),
        ])
        .await;
    let Some(nfs_resop4::OP_READ(READ4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(&ok.data[..], b"fresh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_op_undoes_the_whole_compound_on_memory() {
    let (_srv, mut s) = start_with_session(b"txn-mem").await;
    rolled_back_then_committed(&mut s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_op_undoes_the_whole_compound_on_a_local_export() {
    let (srv, dir) = start_local_server("txn-local").await;
    let mut s = Session::new(srv.addr, b"txn-local").await;
    rolled_back_then_committed(&mut s).await;
    // The backup area stays out of sight and is emptied after the transactions.
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, lookup(".txnfs")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let backups = dir.join(".txnfs/backup");
    for _ in 0..100 {
        if std::fs::read_dir(&backups).unwrap().next().is_none() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(std::fs::read_dir(&backups).unwrap().next().is_none());
    assert_eq!(std::fs::read(dir.join("dir/inside")).unwrap(), b"fresh");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ops whose effects the layer could not take back are refused inside a transaction,
/// and what ran before them is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_outside_the_backend_are_refused_in_a_transaction() {
    let (_srv, mut s) = start_with_session(b"txn-refuse").await;
    let r = s
        .run_txn(vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("made"),
            nfs_argop4::OP_FREE_STATEID(FREE_STATEID4args {
                fsa_stateid: anon(),
            }),
        ])
        .await
        .expect("txn");
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
    assert!(!exists(&mut s, &["made"]).await);
}

/// A retransmission of a committed transaction (same slot and sequence id) gets the
/// cached reply: it does not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_transaction_is_answered_from_the_reply_cache() {
    let (_srv, mut s) = start_with_session(b"txn-replay").await;
    let args = s.next(vec![nfs_argop4::OP_PUTROOTFH, mkdir("once")]);
    let first = s.call_txn(args.clone()).await.expect("txn");
    assert_eq!(first.status, nfsstat4::NFS4_OK);
    let again = s.call_txn(args).await.expect("txn");
    assert_eq!(
        again.status,
        nfsstat4::NFS4_OK,
        "ran twice: {:?}",
        again.resarray
    );
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, mkdir("once")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_EXIST);
}

/// `--no-txn`: the procedure is unknown (PROC_UNAVAIL), plain COMPOUNDs work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_off_answer_proc_unavail() {
    let srv = start_server(|state_dir| Config {
        txn: false,
        ..memory_config(state_dir, false)
    })
    .await;
    let mut s = Session::new(srv.addr, b"txn-off").await;
    let e = s
        .run_txn(vec![nfs_argop4::OP_PUTROOTFH, mkdir("x")])
        .await
        .unwrap_err();
    assert!(matches!(e, txnfs_rpc::RpcError::ProcUnavail), "{e}");
    // The slot never saw that sequence id.
    s.seq -= 1;
    assert!(!exists(&mut s, &["x"]).await);
}

/// A stack without the `txn` layer refuses a transaction on its first op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_without_the_layer_refuses_a_transaction() {
    let srv = start_server(|state_dir| Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: BackendKind::Memory,
            read_only: false,
            clients: Vec::new(),
            prebuilt: Some(txnfs_server::PrebuiltBackend(std::sync::Arc::new(
                txnfs_backend::memory::MemoryBackend::new(),
            ))),
        }],
        ..memory_config(state_dir, false)
    })
    .await;
    let mut s = Session::new(srv.addr, b"txn-nolayer").await;
    let r = s
        .run_txn(vec![nfs_argop4::OP_PUTROOTFH, mkdir("x")])
        .await
        .expect("procedure served");
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
    assert!(!exists(&mut s, &["x"]).await);
}

/// A transaction of several COMPOUNDs (BEGIN, CONTINUE, COMMIT / ABORT): nobody sees
/// its changes before COMMIT, ABORT takes them all back, misuse is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spans_several_compounds() {
    use txnfs_proto::{PROC_TXN_ABORT, PROC_TXN_BEGIN, PROC_TXN_COMMIT, PROC_TXN_CONTINUE};
    let (srv, mut s) = start_with_session(b"txn-span").await;
    let mut other = Session::new(srv.addr, b"txn-span-other").await;
    for commit in [false, true] {
        let r = s
            .run_proc(
                PROC_TXN_BEGIN,
                vec![nfs_argop4::OP_PUTROOTFH, mkdir("tree")],
            )
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        // One open per session.
        let r = s
            .run_proc(PROC_TXN_BEGIN, vec![nfs_argop4::OP_PUTROOTFH])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
        for name in ["a", "b"] {
            let r = s
                .run_proc(
                    PROC_TXN_CONTINUE,
                    vec![
                        nfs_argop4::OP_PUTROOTFH,
                        lookup("tree"),
                        open_new(name),
                        write(&current_sid(), 0, b"part of the tree"),
                    ],
                )
                .await;
            assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        }
        // Invisible to others while open: they are told to retry.
        let r = other
            .run(vec![nfs_argop4::OP_PUTROOTFH, lookup("tree")])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY);
        let proc = if commit {
            PROC_TXN_COMMIT
        } else {
            PROC_TXN_ABORT
        };
        let r = s.run_proc(proc, vec![]).await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        assert_eq!(exists(&mut other, &["tree", "b"]).await, commit);
        assert_eq!(srv.server.txns.len(), 0);
    }
    // Nothing open: CONTINUE, COMMIT and ABORT are refused.
    for proc in [PROC_TXN_CONTINUE, PROC_TXN_COMMIT, PROC_TXN_ABORT] {
        let r = s.run_proc(proc, vec![nfs_argop4::OP_PUTROOTFH]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
    }
    // A failing op ends the transaction and takes back its earlier COMPOUNDs.
    s.run_proc(
        PROC_TXN_BEGIN,
        vec![nfs_argop4::OP_PUTROOTFH, mkdir("doomed")],
    )
    .await;
    let r = s
        .run_proc(
            PROC_TXN_CONTINUE,
            vec![nfs_argop4::OP_PUTROOTFH, remove("no-such-name")],
        )
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    assert!(!exists(&mut s, &["doomed"]).await);
    let r = s.run_proc(PROC_TXN_COMMIT, vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
}

/// A transaction left open past `txn_timeout` is rolled back by the housekeeping tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_transaction_is_rolled_back() {
    let srv = start_server(|state_dir| Config {
        txn_timeout: Some(1),
        ..memory_config(state_dir, false)
    })
    .await;
    let mut s = Session::new(srv.addr, b"txn-abandoned").await;
    let r = s
        .run_proc(
            txnfs_proto::PROC_TXN_BEGIN,
            vec![nfs_argop4::OP_PUTROOTFH, mkdir("left-open")],
        )
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let server = srv.server.clone();
    tokio::task::spawn_blocking(move || server.tick())
        .await
        .unwrap();
    assert_eq!(srv.server.txns.len(), 0);
    assert!(!exists(&mut s, &["left-open"]).await);
    let r = s.run_proc(txnfs_proto::PROC_TXN_COMMIT, vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
}

/// A transaction whose session loses its last connection is rolled back at once (ADR
/// 0036), not after `txn_timeout` or the lease: another client may use the names it
/// locked right away, with no housekeeping tick in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_whose_connection_drops_is_rolled_back_at_once() {
    let (srv, mut other) = start_with_session(b"txn-observer").await;
    let mut s = Session::new(srv.addr, b"txn-dropped").await;
    let r = s
        .run_proc(
            txnfs_proto::PROC_TXN_BEGIN,
            vec![nfs_argop4::OP_PUTROOTFH, mkdir("dropped-txn")],
        )
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    assert_eq!(srv.server.txns.len(), 1);
    let cut = std::time::Instant::now();
    s.cl.abort();
    // The rollback runs as the server sees the socket close; poll briefly for it.
    while !srv.server.txns.is_empty() && cut.elapsed() < std::time::Duration::from_secs(2) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        srv.server.txns.len(),
        0,
        "still open {:?} after the cut",
        cut.elapsed()
    );
    // Neither the name nor its lock is left: another client creates it at once.
    let made = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        other.run(vec![nfs_argop4::OP_PUTROOTFH, mkdir("dropped-txn")]),
    )
    .await
    .expect("the name is not locked");
    assert_eq!(made.status, nfsstat4::NFS4_OK);
    assert!(
        cut.elapsed() < std::time::Duration::from_secs(1),
        "took {:?}",
        cut.elapsed()
    );
}

/// A session with a second connection keeps its transaction when one of them closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_survives_the_close_of_one_of_two_connections() {
    let (srv, mut s) = start_with_session(b"txn-two-conns").await;
    let r = s
        .run_proc(
            txnfs_proto::PROC_TXN_BEGIN,
            vec![nfs_argop4::OP_PUTROOTFH, mkdir("kept-txn")],
        )
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    // A second connection used by the session (SEQUENCE binds it, SP4_NONE).
    let second = connect(srv.addr).await;
    s.seq += 1;
    let mut ops = vec![s.sequence(0, s.seq)];
    ops.push(nfs_argop4::OP_PUTROOTFH);
    let reply = call_raw(&second, encode_compound(ops)).await;
    let r = <COMPOUND4res as txnfs_proto::Decode>::from_bytes(reply).expect("decodes");
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    second.abort();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(srv.server.txns.len(), 1);
    let r = s.run_proc(txnfs_proto::PROC_TXN_COMMIT, vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    assert!(exists(&mut s, &["kept-txn"]).await);
}

/// The open an OPEN of a rolled-back transaction created is closed with it: its
/// stateid is no longer valid (TEST_STATEID), so nothing leaks per retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_open_is_closed() {
    let (_srv, mut s) = start_with_session(b"txn-open").await;
    let r = s
        .run_txn(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_new("temp"),
            nfs_argop4::OP_PUTROOTFH,
            remove("no-such-name"),
        ])
        .await
        .expect("txn");
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(open)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    let r = s
        .run(vec![nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
            ts_stateids: vec![open.stateid.clone()],
        })])
        .await;
    let nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(t)) = &r.resarray[1] else {
        panic!("{:?}", r.resarray)
    };
    assert_ne!(t.tsr_status_codes[0], nfsstat4::NFS4_OK, "the open leaked");
    assert!(!exists(&mut s, &["temp"]).await);
}
