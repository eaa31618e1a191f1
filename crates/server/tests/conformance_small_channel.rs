//! A session negotiated with small replies (RFC 8881 §18.36, issue 8) can still take
//! byte-range locks: LOCK is checked before it runs against the reply it sends when it
//! succeeds, and a denied LOCK, which changes nothing, against its real reply.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_rpc::RpcClient;
use txnfs_server::nfs::*;

/// A client whose one session has 300-byte replies (all cacheable), after
/// RECLAIM_COMPLETE: its connection, client id and session.
async fn small_session(addr: std::net::SocketAddr) -> (RpcClient, clientid4, sessionid4) {
    let cl = connect(addr).await;
    let r = call(&cl, vec![exchange_id(b"small-locker")]).await;
    let nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    let fore = channel_attrs4 {
        ca_maxresponsesize: 300,
        ca_maxresponsesize_cached: 300,
        ..channel(64, 1)
    };
    let r = call(&cl, vec![create_session(e, fore, channel(16, 1))]).await;
    let nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(s.csr_fore_chan_attrs.ca_maxresponsesize, 300);
    let r = call(
        &cl,
        vec![
            sequence(s.csr_sessionid, 0, 1, false),
            nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args { rca_one_fs: false }),
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    (cl, e.eir_clientid, s.csr_sessionid)
}

fn open_for(clientid: clientid4, name: &str) -> nfs_argop4 {
    let mut o = open_new(name);
    if let nfs_argop4::OP_OPEN(ref mut x) = o {
        x.owner.clientid = clientid;
    }
    o
}

fn lock(
    clientid: clientid4,
    fh: &Bytes,
    open: &stateid4,
    owner: &[u8],
    offset: u64,
) -> Vec<nfs_argop4> {
    vec![
        nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
        nfs_argop4::OP_LOCK(Box::new(LOCK4args {
            locktype: nfs_lock_type4::WRITE_LT,
            reclaim: false,
            offset,
            length: 10,
            locker: locker4::TRUE(open_to_lock_owner4 {
                open_seqid: 0,
                open_stateid: open.clone(),
                lock_seqid: 0,
                lock_owner: lock_owner4 {
                    clientid,
                    owner: Bytes::copy_from_slice(owner),
                },
            }),
        })),
    ]
}

#[tokio::test]
async fn lock_works_on_a_session_with_small_replies() {
    let srv = start_memory_server().await;
    let (cl, cid, sid) = small_session(srv.addr).await;
    let mut seq = 1;
    let mut run = async |ops: Vec<nfs_argop4>| {
        seq += 1;
        let mut all = vec![sequence(sid, 0, seq, true)];
        all.extend(ops);
        call(&cl, all).await
    };
    let r = run(vec![
        nfs_argop4::OP_PUTROOTFH,
        open_for(cid, "locked"),
        nfs_argop4::OP_GETFH,
    ])
    .await;
    let (open, fh) = opened_stateid_and_fh(&r);
    let r = run(lock(cid, &fh, &open, b"small", 0)).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    // Another client holds bytes 100..110 under a 600-byte lock owner.
    let mut other = Session::new(srv.addr, b"big-owner").await;
    let r = other
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_for(other.clientid, "locked"),
            nfs_argop4::OP_GETFH,
        ])
        .await;
    let (other_open, _) = opened_stateid_and_fh(&r);
    let r = other
        .run(lock(other.clientid, &fh, &other_open, &[7; 600], 100))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = other
        .run(lock(other.clientid, &fh, &other_open, b"short", 200))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    // Denied by the short owner: the LOCK4denied fits.
    let r = run(lock(cid, &fh, &open, b"small", 200)).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DENIED);
    // Denied by the long owner: the LOCK4denied does not fit in the reply (and so
    // not in the cache either); nothing changed, so the reply may say so.
    let r = run(lock(cid, &fh, &open, b"small", 100)).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG);
    assert_eq!(status_of(&r.resarray[2]), nfsstat4::NFS4ERR_REP_TOO_BIG);
}
