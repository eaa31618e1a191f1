//! Issue 17 item 7: a handler that panics while holding the state core's lock is one
//! failed request (NFS4ERR_SERVERFAULT, counted), not a wedged server: the same
//! client's session goes on, a new client works, the core's lock is not left
//! poisoned (ADR 0029). The panic is armed through the test-only `fault-injection`
//! feature.

mod common;

use bytes::Bytes;
use common::*;
use std::sync::atomic::Ordering;
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

fn read(sid: &stateid4, count: u32) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: sid.clone(),
        offset: 0,
        count,
    })
}

/// PUTFH, WRITE `data` at 0, READ it back: the data read.
async fn write_and_read(s: &mut Session, fh: &Bytes, sid: &stateid4, data: &'static [u8]) -> Bytes {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            write(sid, 0, data),
            read(sid, 64),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[3] else {
        panic!("READ result {:?}", r.resarray)
    };
    rd.data.clone()
}

#[tokio::test]
async fn a_handler_panicking_under_the_core_lock_leaves_the_server_serving() {
    let (srv, mut a) = start_with_session(b"panic-victim").await;
    let (sid, fh) = a.open_new_file("before").await;

    // The next GETATTR panics while it holds the state core's lock.
    srv.server
        .faults
        .panic_once_under_core_lock(nfs_opnum4::OP_GETATTR);
    let getattr = nfs_argop4::OP_GETATTR(GETATTR4args {
        attr_request: vec![1 << FATTR4_SIZE],
    });
    let failing = a.next(vec![
        nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
        getattr,
    ]);
    let r = COMPOUND4res::from_bytes(call_raw(&a.cl, failing.clone()).await).expect("decodes");
    assert_eq!(r.status, nfsstat4::NFS4ERR_SERVERFAULT);
    // Well formed: SEQUENCE and PUTFH succeeded, the panicking op is the last result.
    assert_eq!(r.resarray.len(), 3, "{:?}", r.resarray);
    assert_eq!(status_of(&r.resarray[0]), nfsstat4::NFS4_OK);
    assert_eq!(status_of(&r.resarray[1]), nfsstat4::NFS4_OK);
    assert!(matches!(r.resarray[2], nfs_resop4::OP_GETATTR(_)));
    assert_eq!(status_of(&r.resarray[2]), nfsstat4::NFS4ERR_SERVERFAULT);
    assert_eq!(srv.server.stats.snapshot().panics, 1);
    assert_eq!(srv.server.core_faults.load(Ordering::Relaxed), 1);
    assert_eq!(
        srv.server.core_invariant_failures.load(Ordering::Relaxed),
        0
    );

    // The slot kept the answer: a retransmission gets the same SERVERFAULT reply.
    let again = COMPOUND4res::from_bytes(call_raw(&a.cl, failing).await).expect("decodes");
    assert_eq!(again, r);

    // The same client goes on: its open still works, and it opens, writes and reads.
    assert_eq!(
        &write_and_read(&mut a, &fh, &sid, b"still here").await[..],
        b"still here"
    );
    let (sid2, fh2) = a.open_new_file("after").await;
    assert_eq!(
        &write_and_read(&mut a, &fh2, &sid2, b"after").await[..],
        b"after"
    );

    // So does a new client.
    let mut b = Session::new(srv.addr, b"panic-bystander").await;
    let (sid3, fh3) = b.open_new_file("newcomer").await;
    assert_eq!(
        &write_and_read(&mut b, &fh3, &sid3, b"new").await[..],
        b"new"
    );

    // One panic, counted once; the core's lock is usable and not poisoned.
    assert_eq!(srv.server.stats.snapshot().panics, 1);
    assert_eq!(srv.server.core_faults.load(Ordering::Relaxed), 1);
    let core = srv.server.core().expect("core usable");
    assert_eq!(core.check_invariants(), Ok(()));
}
