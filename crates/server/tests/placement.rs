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

/// A short COMPOUND whose only wait is the sync of a small stable WRITE, or a COMMIT, is
/// a short sync (ADR 0059: inline when alone on its connection and syncs are quick); a
/// large stable WRITE, or a long COMPOUND with one, goes to the pool as before.
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
    // A COMMIT is one sync of what the file has unwritten (ADR 0059 addendum).
    let commit = nfs_argop4::OP_COMMIT(COMMIT4args {
        offset: 0,
        count: 0,
    });
    let mut put_commit = vec![sequence([0; 16], 0, 1, false)];
    put_commit.push(nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }));
    put_commit.push(commit.clone());
    assert_eq!(placed(put_commit), Blocking::Sync);
    let mut write_commit = writes(1, 4096, UNSTABLE4);
    write_commit.push(commit);
    assert_eq!(placed(write_commit), Blocking::Sync);
}

/// An OPEN that would truncate an existing non-empty file (UNCHECKED with a size, what
/// `open(O_CREAT | O_TRUNC)` sends) is told from one that creates a new file before it
/// runs (`Request::truncates_a_file`, ADR 0059): with company on its connection the
/// first goes to the pool, where truncations overlap; the second stays inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_that_truncates_a_file_is_told_from_a_create() {
    use bytes::Bytes;
    use txnfs_server::compound::Request;
    use txnfs_server::placement::{with_truncation, Blocking};
    use txnfs_xdr::Encode;
    let (srv, dir) = start_local_server("placement-truncates").await;
    std::fs::write(dir.join("full"), b"some bytes").expect("write full");
    std::fs::write(dir.join("empty"), b"").expect("write empty");
    let mut s = Session::new(srv.addr, b"placement-truncates").await;
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH])
        .await;
    let root = match &r.resarray[..] {
        [_, _, nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(ok))] => ok.object.clone(),
        other => panic!("root handle: {other:?}"),
    };
    let request_after = |between: Vec<nfs_argop4>, name: &str, how: createhow4| {
        let mut ops = vec![
            sequence([0; 16], 0, 1, false),
            nfs_argop4::OP_PUTFH(PUTFH4args {
                object: root.clone(),
            }),
        ];
        ops.extend(between);
        ops.push(nfs_argop4::OP_OPEN(Box::new(OPEN4args {
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_WRITE,
            share_deny: 0,
            owner: Default::default(),
            openhow: openflag4::OPEN4_CREATE(how),
            claim: open_claim4::CLAIM_NULL(Bytes::from(name.to_string())),
        })));
        let args = COMPOUND4args {
            tag: Bytes::new(),
            minorversion: 1,
            argarray: ops,
        }
        .to_bytes();
        Request::decode(args).expect("decodes")
    };
    let request = |name: &str, how| request_after(Vec::new(), name, how);
    let sized = || {
        createhow4::UNCHECKED4(fattr4 {
            attrmask: vec![1 << FATTR4_SIZE],
            attr_vals: Bytes::from_static(&[0; 8]),
        })
    };
    let truncates = |name: &str, how| request(name, how).truncates_a_file(&srv.server);
    // As the Linux client sends it: SAVEFH between the directory's PUTFH and the OPEN.
    let saved = request_after(vec![nfs_argop4::OP_SAVEFH], "full", sized());
    assert!(saved.truncates_a_file(&srv.server));
    // A LOOKUP between: the OPEN is in another directory, not looked at.
    let elsewhere = request_after(vec![lookup("sub")], "full", sized());
    assert!(!elsewhere.truncates_a_file(&srv.server));
    assert!(truncates("full", sized()));
    assert!(!truncates("empty", sized()), "nothing to free");
    assert!(!truncates("new", sized()), "a create");
    assert!(
        !truncates("full", createhow4::UNCHECKED4(Default::default())),
        "no size: no truncation"
    );
    assert!(
        !truncates(
            "full",
            createhow4::GUARDED4(fattr4 {
                attrmask: vec![1 << FATTR4_SIZE],
                attr_vals: Bytes::from_static(&[0; 8]),
            })
        ),
        "GUARDED fails on an existing file"
    );
    // Placement: the pool only with company; alone, the hint is not even asked.
    let full = request("full", sized());
    let b = full.blocking();
    assert_eq!(b, Blocking::Metadata);
    assert_eq!(
        with_truncation(b, false, || full.truncates_a_file(&srv.server)),
        Blocking::Yes
    );
    assert_eq!(
        with_truncation(b, true, || panic!("asked while alone")),
        Blocking::Metadata
    );
    let new = request("new", sized());
    assert_eq!(
        with_truncation(new.blocking(), false, || new.truncates_a_file(&srv.server)),
        Blocking::Metadata
    );
    // NFSv3: CREATE UNCHECKED with a size (procedure 8), by the same hint.
    let create3 = |name: &str, size: txnfs_proto::nfs3::set_size3| {
        use txnfs_proto::nfs3::*;
        CREATE3args {
            r#where: diropargs3 {
                dir: nfs_fh3 { data: root.clone() },
                name: Bytes::from(name.to_string()),
            },
            how: createhow3::UNCHECKED(sattr3 {
                mode: set_mode3::default(false),
                uid: set_uid3::default(false),
                gid: set_gid3::default(false),
                size,
                atime: set_atime::default(time_how::DONT_CHANGE),
                mtime: set_mtime::default(time_how::DONT_CHANGE),
            }),
        }
        .to_bytes()
    };
    use txnfs_proto::nfs3::set_size3;
    use txnfs_server::v3::procs::truncates_a_file as truncates3;
    assert!(truncates3(
        &srv.server,
        8,
        &create3("full", set_size3::TRUE(0))
    ));
    assert!(!truncates3(
        &srv.server,
        8,
        &create3("new", set_size3::TRUE(0))
    ));
    assert!(!truncates3(
        &srv.server,
        8,
        &create3("full", set_size3::default(false))
    ));
    assert!(
        !truncates3(&srv.server, 9, &create3("full", set_size3::TRUE(0))),
        "MKDIR"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
