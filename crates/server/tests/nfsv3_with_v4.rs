//! NFSv3 and NFSv4 on one server see one file system (ADR 0038): the same object has
//! the same handle through both, bytes written through one are read through the
//! other, and a v3 change that conflicts with a v4 client's delegation recalls it and
//! is answered after the holder returned it, as a conflicting v4 client's would be
//! (RFC 8881 §10.4.4). The v4 side is the raw v4 client: a plain session, and a holder
//! that answers callbacks.
//!
//! Multi-threaded runtimes: a held request blocks its thread.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::peer::T;
use common::*;
use std::time::{Duration, Instant};
use txnfs_proto::nfs3::*;
use txnfs_rawclient::v3::{dirop, proc3, sattr_none, V3Client};
use txnfs_server::nfs::*;

fn deleg_stateid(d: &open_delegation4) -> stateid4 {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r) => r.stateid.clone(),
        open_delegation4::OPEN_DELEGATE_WRITE(w) => w.stateid.clone(),
        other => panic!("no delegation granted: {other:?}"),
    }
}

async fn v3_lookup(c: &V3Client, dir: &nfs_fh3, name: &str) -> nfs_fh3 {
    match c.lookup(dir, name).await.unwrap() {
        LOOKUP3res::NFS3_OK(ok) => ok.object,
        other => panic!("LOOKUP {name}: {other:?}"),
    }
}

async fn v3_read(c: &V3Client, fh: &nfs_fh3) -> Bytes {
    match c.read(fh, 0, 4096).await.unwrap() {
        READ3res::NFS3_OK(ok) => ok.data,
        other => panic!("READ: {other:?}"),
    }
}

/// The bytes of `name` read through v4 with the anonymous stateid.
async fn v4_read(s: &mut Session, name: &str) -> Bytes {
    let anonymous = stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    let r = s
        .run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup(name),
            txnfs_rawclient::read(&anonymous, 0, 4096),
        ])
        .await;
    match &r.resarray[3] {
        nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => ok.data.clone(),
        other => panic!("READ: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_file_through_v3_and_v4() {
    let srv = start_memory_server().await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;
    let mut s = Session::new(srv.addr, b"v4-client").await;

    // Made through v4, written through v3, read through v4.
    let (sid, v4_fh) = s.open_new_file("from-v4").await;
    s.run_ok(vec![
        nfs_argop4::OP_PUTFH(PUTFH4args {
            object: v4_fh.clone(),
        }),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: sid,
        }),
    ])
    .await;
    let f = v3_lookup(&c, &root, "from-v4").await;
    assert_eq!(f.data, v4_fh, "one object, one handle");
    assert!(matches!(
        c.write(&f, 0, b"written by v3", stable_how::FILE_SYNC)
            .await
            .unwrap(),
        WRITE3res::NFS3_OK(_)
    ));
    assert_eq!(&v4_read(&mut s, "from-v4").await[..], b"written by v3");

    // Made through v3, written through v4, read through v3.
    let r: CREATE3res = c
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "from-v3"),
                how: createhow3::GUARDED(sattr_none()),
            },
        )
        .await
        .unwrap();
    let CREATE3res::NFS3_OK(ok) = r else {
        panic!("CREATE: {r:?}")
    };
    let post_op_fh3::TRUE(g) = ok.obj else {
        panic!("no handle")
    };
    let anonymous = stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    s.run_ok(vec![
        nfs_argop4::OP_PUTROOTFH,
        lookup("from-v3"),
        nfs_argop4::OP_GETFH,
        write(&anonymous, 0, b"written by v4"),
    ])
    .await;
    assert_eq!(&v3_read(&c, &g).await[..], b"written by v4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v3_write_recalls_a_v4_read_delegation_and_waits_for_its_return() {
    let srv = deleg_server(10_000).await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;
    let r: CREATE3res = c
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "f"),
                how: createhow3::GUARDED(sattr_none()),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, CREATE3res::NFS3_OK(_)), "{r:?}");
    let f = v3_lookup(&c, &root, "f").await;

    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_osid, d, fh) = a.open("f", OPEN4_SHARE_ACCESS_READ).await;
    let dsid = deleg_stateid(&d);
    assert_eq!(fh, f.data);
    let delay = Duration::from_millis(300);
    let holder = tokio::spawn(async move {
        let recall = a.next_recall(T).await.expect("CB_RECALL");
        tokio::time::sleep(delay).await;
        let st = a.delegreturn(&fh, &recall.stateid).await;
        (recall, st)
    });
    let t0 = Instant::now();
    let w = c
        .write(&f, 0, b"v3 data", stable_how::FILE_SYNC)
        .await
        .unwrap();
    let held_for = t0.elapsed();
    let (recall, st) = holder.await.unwrap();
    assert_eq!(recall.stateid, dsid, "the recalled delegation");
    assert_eq!(st, nfsstat4::NFS4_OK, "DELEGRETURN");
    assert!(matches!(w, WRITE3res::NFS3_OK(_)), "{w:?}");
    assert!(
        held_for >= delay,
        "the WRITE was answered after {held_for:?}, before the delegation came back"
    );
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0));
    assert_eq!(&v3_read(&c, &f).await[..], b"v3 data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_namespace_changes_recall_v4_delegations_a_v3_read_does_not() {
    let srv = deleg_server(10_000).await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;
    for name in ["r", "m", "x"] {
        let r: CREATE3res = c
            .nfs(
                proc3::CREATE,
                &CREATE3args {
                    r#where: dirop(&root, name),
                    how: createhow3::GUARDED(sattr_none()),
                },
            )
            .await
            .unwrap();
        assert!(matches!(r, CREATE3res::NFS3_OK(_)), "{r:?}");
    }
    let mut a = Holder::new(&srv, b"holder-b").await;

    // A v3 READ leaves a read delegation alone.
    let (_, d, _) = a.open("x", OPEN4_SHARE_ACCESS_READ).await;
    deleg_stateid(&d);
    let x = v3_lookup(&c, &root, "x").await;
    v3_read(&c, &x).await;
    assert_eq!(srv.server.core().unwrap().delegations().stats().recalled, 0);

    // REMOVE and RENAME each recall the delegation of the file they name.
    let remove = REMOVE3args {
        object: dirop(&root, "r"),
    };
    let rename = RENAME3args {
        fromfile: dirop(&root, "m"),
        tofile: dirop(&root, "m2"),
    };
    for (name, proc_num, args) in [
        ("r", proc3::REMOVE, txnfs_xdr::Encode::to_bytes(&remove)),
        ("m", proc3::RENAME, txnfs_xdr::Encode::to_bytes(&rename)),
    ] {
        let (_, d, fh) = a.open(name, OPEN4_SHARE_ACCESS_READ).await;
        let dsid = deleg_stateid(&d);
        let holder = tokio::spawn(async move {
            let recall = a.next_recall(T).await.expect("CB_RECALL");
            let st = a.delegreturn(&fh, &recall.stateid).await;
            (a, recall, st)
        });
        let reply = c
            .call_raw(c.rpc.next_xid(), 100003, 3, proc_num, &args)
            .await
            .unwrap();
        let (back, recall, st) = holder.await.unwrap();
        a = back;
        assert_eq!((recall.stateid, st), (dsid, nfsstat4::NFS4_OK), "{name}");
        assert_eq!(
            txnfs_rawclient::v3::status3(&reply),
            Some(nfsstat3::NFS3_OK),
            "{name}"
        );
    }
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.returned), (2, 2));
}

/// The reply cache's in-progress rule (ADR 0039): a v3 REMOVE held while the v4
/// delegation of its file is recalled is still running when the client retransmits
/// it, so the retransmission gets no reply; once the first is answered, a further
/// retransmission gets that reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retransmission_of_a_running_call_is_dropped() {
    use txnfs_rawclient::tcp::CallError;
    use txnfs_xdr::Encode;
    let srv = deleg_server(10_000).await;
    let c = std::sync::Arc::new(V3Client::connect(srv.addr, root_cred()).await.unwrap());
    let root = c.root("/").await;
    let r: CREATE3res = c
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "f"),
                how: createhow3::GUARDED(sattr_none()),
            },
        )
        .await
        .unwrap();
    assert!(matches!(r, CREATE3res::NFS3_OK(_)), "{r:?}");
    let mut a = Holder::new(&srv, b"holder-c").await;
    let (_, d, fh) = a.open("f", OPEN4_SHARE_ACCESS_READ).await;
    deleg_stateid(&d);

    let args = REMOVE3args {
        object: dirop(&root, "f"),
    }
    .to_bytes();
    let xid = 0x0dd0_0001;
    let first = {
        let (c, args) = (c.clone(), args.clone());
        tokio::spawn(async move { c.call_raw(xid, 100003, 3, proc3::REMOVE, &args).await })
    };
    // The REMOVE is held: the holder has the recall.
    let recall = a.next_recall(T).await.expect("CB_RECALL");
    // Retransmitted (from a second connection, as after a reconnect) while it runs.
    let mut again = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    again.timeout = Duration::from_millis(500);
    let dropped = again.call_raw(xid, 100003, 3, proc3::REMOVE, &args).await;
    assert!(
        matches!(dropped, Err(CallError::Timeout(_))),
        "a retransmission of a running call gets no reply: {dropped:?}"
    );
    assert_eq!(a.delegreturn(&fh, &recall.stateid).await, nfsstat4::NFS4_OK);
    let first = first.await.unwrap().unwrap();
    assert_eq!(
        txnfs_rawclient::v3::status3(&first),
        Some(nfsstat3::NFS3_OK)
    );
    again.timeout = Duration::from_secs(10);
    let replayed = again
        .call_raw(xid, 100003, 3, proc3::REMOVE, &args)
        .await
        .unwrap();
    assert_eq!(replayed, first, "the first reply, not NOENT");
}

/// A v3 GETATTR of a file a v4 client holds a write delegation on asks the holder
/// (CB_GETATTR, RFC 8881 §10.4.3) and reports the size the holder wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v3_getattr_of_a_write_delegated_file_asks_the_holder() {
    use txnfs_xdr::Decode;
    let srv = deleg_server(10_000).await;
    let c = V3Client::connect(srv.addr, root_cred()).await.unwrap();
    let root = c.root("/").await;
    let r: CREATE3res = c
        .nfs(
            proc3::CREATE,
            &CREATE3args {
                r#where: dirop(&root, "w"),
                how: createhow3::GUARDED(sattr_none()),
            },
        )
        .await
        .unwrap();
    let CREATE3res::NFS3_OK(ok) = r else {
        panic!("CREATE: {r:?}")
    };
    let post_op_fh3::TRUE(f) = ok.obj else {
        panic!("no handle")
    };
    let mut a = Holder::new(&srv, b"holder-w").await;
    let (_, d, _) = a.open("w", OPEN4_SHARE_ACCESS_BOTH).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_WRITE(_)),
        "{d:?}"
    );
    a.p.getattr_answer = Some((12_345, u64::MAX));
    let holder = tokio::spawn(async move {
        let call = a.p.next_call(T).await.expect("a CB_COMPOUND");
        (a, call)
    });
    let r: GETATTR3res = c
        .nfs(proc3::GETATTR, &GETATTR3args { object: f })
        .await
        .unwrap();
    let (_a, call) = holder.await.unwrap();
    let cb = CB_COMPOUND4args::from_bytes(call.args).expect("CB args");
    assert!(
        matches!(cb.argarray.get(1), Some(nfs_cb_argop4::OP_CB_GETATTR(_))),
        "{:?}",
        cb.argarray
    );
    match r {
        GETATTR3res::NFS3_OK(ok) => assert_eq!(ok.obj_attributes.size, 12_345),
        other => panic!("GETATTR: {other:?}"),
    }
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.outstanding), (0, 1), "no recall needed");
}
