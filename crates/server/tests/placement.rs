//! Where COMPOUNDs run (ADR 0004, ADR 0033): a request that may wait — a transaction,
//! or a plain request while transactions hold locks — never waits on one of the
//! runtime's worker threads, so requests that need no waiting are answered promptly
//! however many others are waiting.

mod common;

use common::*;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;

/// The current stateid (RFC 8881 §16.2.3.1.2).
fn current_sid() -> stateid4 {
    stateid4 {
        seqid: 1,
        other: [0; 12],
    }
}

fn getattr_size() -> nfs_argop4 {
    nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![1 << FATTR4_SIZE],
    })
}

/// Six clients keep sending transactions that wait for a lock another transaction
/// holds (each waits the layer's lock wait, 200 ms, then answers DELAY); the runtime
/// has two workers. A plain GETATTR of another file is still answered within a few
/// milliseconds every time: the waits are on the blocking pool, not on the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_transactions_leave_the_workers_free() {
    let (srv, mut s) = start_with_session(b"placement-holder").await;
    let (_, other_fh) = s.open_new_file("other").await;
    // An open transaction holds the entry "held" of the root and the new file.
    let r = s
        .run_proc(
            txnfs_proto::PROC_TXN_BEGIN,
            vec![
                nfs_argop4::OP_PUTROOTFH,
                open_new("held"),
                write(&current_sid(), 0, b"uncommitted"),
            ],
        )
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    let stop = Instant::now() + Duration::from_millis(1500);
    let mut waiters = Vec::new();
    for i in 0..6 {
        let addr = srv.addr;
        waiters.push(tokio::spawn(async move {
            let mut w = Session::new(addr, format!("placement-waiter-{i}").as_bytes()).await;
            let mut delays = 0;
            while Instant::now() < stop {
                let r = w
                    .run_txn(vec![nfs_argop4::OP_PUTROOTFH, lookup("held")])
                    .await
                    .expect("procedure served");
                assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
                delays += 1;
            }
            delays
        }));
    }
    // Let the waiters start waiting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut worst = Duration::ZERO;
    let mut n = 0;
    while Instant::now() + Duration::from_millis(250) < stop {
        let t = Instant::now();
        let r = s
            .run(vec![
                nfs_argop4::OP_PUTFH(PUTFH4args {
                    object: other_fh.clone(),
                }),
                getattr_size(),
            ])
            .await;
        worst = worst.max(t.elapsed());
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut delays = 0;
    for w in waiters {
        delays += w.await.expect("waiter");
    }
    assert!(delays >= 6, "the waiters really waited: {delays} DELAYs");
    assert!(n >= 10, "only {n} GETATTRs");
    assert!(
        worst < Duration::from_millis(50),
        "a GETATTR took {worst:?} while transactions waited"
    );
    let r = s.run_proc(txnfs_proto::PROC_TXN_ABORT, vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
}

/// Where a COMPOUND of these ops is placed (`Request::blocking`).
fn placed(ops: Vec<nfs_argop4>) -> txnfs_server::placement::Blocking {
    use txnfs_xdr::Encode;
    let args = COMPOUND4args {
        tag: bytes::Bytes::new(),
        minorversion: 1,
        argarray: ops,
    }
    .to_bytes();
    txnfs_server::compound::Request::decode(args)
        .expect("decodes")
        .blocking()
}

/// A batch of small READs (our client's batching, ADR 0044) is a long COMPOUND of quick
/// ops: it runs inline up to 256 ops and 256 KiB of I/O, not on the blocking pool (a
/// batch of eight READs there cost more server CPU per READ than eight COMPOUNDs of one
/// inline). A long COMPOUND with one op that may wait, or past either bound, goes to
/// the pool.
#[test]
fn a_batch_of_small_reads_runs_inline() {
    use bytes::Bytes;
    use txnfs_server::placement::Blocking;
    let fh = Bytes::from_static(b"any handle");
    let reads = |n: usize, count: u32| {
        let mut ops = vec![sequence([0; 16], 0, 1, false)];
        for i in 0..n {
            ops.push(nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }));
            ops.push(nfs_argop4::OP_READ(READ4args {
                stateid: current_sid(),
                offset: i as u64 * u64::from(count),
                count,
            }));
        }
        ops
    };
    assert_eq!(placed(reads(1, 4096)), Blocking::No);
    assert_eq!(placed(reads(8, 4096)), Blocking::No, "17 ops, 32 KiB");
    assert_eq!(placed(reads(64, 4096)), Blocking::No, "129 ops, 256 KiB");
    assert_eq!(placed(reads(65, 4096)), Blocking::Yes, "past 256 KiB");
    assert_eq!(placed(reads(127, 1024)), Blocking::No, "255 ops, 127 KiB");
    assert_eq!(placed(reads(128, 1024)), Blocking::Yes, "257 ops");
    let mut with_commit = reads(8, 4096);
    with_commit.push(nfs_argop4::OP_COMMIT(COMMIT4args {
        offset: 0,
        count: 0,
    }));
    assert_eq!(placed(with_commit), Blocking::Yes);
    let mut with_getattr = reads(8, 4096);
    with_getattr.push(getattr_size());
    assert_eq!(placed(with_getattr), Blocking::No);
}

/// A short COMPOUND whose only wait is the sync of a small stable WRITE is a short sync
/// (ADR 0059: inline when alone on its connection and syncs are quick); a large stable
/// WRITE, or a long COMPOUND with one, goes to the pool as before.
#[test]
fn a_small_stable_write_is_a_short_sync() {
    use bytes::Bytes;
    use txnfs_server::placement::Blocking;
    let fh = Bytes::from_static(b"any handle");
    let writes = |n: usize, size: usize, stable: stable_how4| {
        let mut ops = vec![sequence([0; 16], 0, 1, false)];
        for i in 0..n {
            ops.push(nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }));
            ops.push(nfs_argop4::OP_WRITE(WRITE4args {
                stateid: current_sid(),
                offset: (i * size) as u64,
                stable,
                data: Bytes::from(vec![1u8; size]),
            }));
        }
        ops
    };
    use stable_how4::{DATA_SYNC4, FILE_SYNC4, UNSTABLE4};
    assert_eq!(placed(writes(1, 4096, UNSTABLE4)), Blocking::No);
    assert_eq!(placed(writes(1, 4096, FILE_SYNC4)), Blocking::Sync);
    assert_eq!(placed(writes(2, 64 << 10, DATA_SYNC4)), Blocking::Sync);
    assert_eq!(placed(writes(1, (64 << 10) + 1, FILE_SYNC4)), Blocking::Yes);
    assert_eq!(placed(writes(8, 4096, FILE_SYNC4)), Blocking::Yes, "17 ops");
}
