//! Protocol-level tests over real TCP: sessions, exactly-once semantics, the COMPOUND
//! executor's rules, and hostile input.

mod common;

use bytes::Bytes;
use common::*;
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

const GETATTR_TYPE_SIZE: [u32; 1] = [(1 << 1) | (1 << 4)];

#[tokio::test]
async fn create_write_read_rename_remove() {
    let (_srv, mut s) = start_with_session(b"basic").await;
    let (sid, fh) = s.open_new_file("a.txt").await;
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: sid.clone(),
                offset: 3,
                stable: stable_how4::FILE_SYNC4,
                data: Bytes::from_static(b"hello"),
            }),
            nfs_argop4::OP_READ(READ4args {
                stateid: sid.clone(),
                offset: 0,
                count: 100,
            }),
            nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: sid.clone(),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[3] else {
        panic!()
    };
    assert_eq!(&rd.data[..], b"\0\0\0hello");
    assert!(rd.eof);

    // rename, then the old name is gone and the new one has the bytes
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_SAVEFH,
            rename("a.txt", "b.txt"),
            lookup("b.txt"),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: GETATTR_TYPE_SIZE.to_vec(),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, lookup("a.txt")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, remove("b.txt")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    // the handle of the removed file is now stale
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh }),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: GETATTR_TYPE_SIZE.to_vec(),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_STALE);
}

/// Send a non-idempotent COMPOUND, cut the connection, and retransmit the same bytes on
/// a new connection in the same slot: the reply comes from the cache and the operation
/// does not run twice.
async fn exactly_once(setup: Vec<nfs_argop4>, op: Vec<nfs_argop4>, check: Vec<nfs_argop4>) {
    let (srv, mut s) = start_with_session(b"eos").await;
    let r = s.run(setup).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "setup: {:?}", r.resarray);
    let request = s.next(op);
    let first = call_raw(&s.cl, request.clone()).await;
    let first_res = COMPOUND4res::from_bytes(first.clone()).unwrap();
    assert_eq!(
        first_res.status,
        nfsstat4::NFS4_OK,
        "{:?}",
        first_res.resarray
    );
    let replays_before = srv
        .server
        .stats
        .replays
        .load(std::sync::atomic::Ordering::Relaxed);
    // Cut the connection, reconnect, retransmit in the same slot with the same seqid.
    let sess = Session {
        cl: connect(srv.addr).await,
        clientid: s.clientid,
        sid: s.sid,
        seq: s.seq,
    };
    drop(std::mem::replace(&mut s, sess));
    let again = call_raw(&s.cl, request).await;
    assert_eq!(
        again, first,
        "the retry gets the cached reply, byte for byte"
    );
    assert_eq!(
        srv.server
            .stats
            .replays
            .load(std::sync::atomic::Ordering::Relaxed),
        replays_before + 1
    );
    let r = s.run(check).await;
    assert_eq!(
        r.status,
        nfsstat4::NFS4_OK,
        "state after retry: {:?}",
        r.resarray
    );
}

#[tokio::test]
async fn exactly_once_rename() {
    exactly_once(
        vec![nfs_argop4::OP_PUTROOTFH, mkdir("src")],
        vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_SAVEFH,
            rename("src", "dst"),
        ],
        vec![nfs_argop4::OP_PUTROOTFH, lookup("dst")],
    )
    .await;
}

#[tokio::test]
async fn exactly_once_remove() {
    exactly_once(
        vec![nfs_argop4::OP_PUTROOTFH, mkdir("victim")],
        vec![nfs_argop4::OP_PUTROOTFH, remove("victim")],
        vec![nfs_argop4::OP_PUTROOTFH],
    )
    .await;
}

#[tokio::test]
async fn exactly_once_exclusive_create() {
    exactly_once(
        vec![nfs_argop4::OP_PUTROOTFH],
        vec![
            nfs_argop4::OP_PUTROOTFH,
            open_create(
                "excl",
                createhow4::EXCLUSIVE4_1(creatverfattr {
                    cva_verf: [9; 8],
                    cva_attrs: empty_fattr(),
                }),
            ),
        ],
        vec![nfs_argop4::OP_PUTROOTFH, lookup("excl")],
    )
    .await;
}

/// A COMPOUND that changes nothing keeps its reply for a retransmission only when its
/// client set `sa_cachethis` (ADR 0003 addendum): else the retransmission gets
/// NFS4ERR_RETRY_UNCACHED_REP (RFC 8881 §2.10.6.1.3). One that changes something is
/// kept either way.
#[tokio::test]
async fn read_only_replies_are_kept_only_when_asked() {
    let (_srv, s) = start_with_session(b"keep").await;
    let getattr = || {
        nfs_argop4::OP_GETATTR(GETATTR4args {
            attr_request: GETATTR_TYPE_SIZE.to_vec(),
        })
    };
    let read_only = |slot, cache| {
        encode_compound(vec![
            sequence(s.sid, slot, 1, cache),
            nfs_argop4::OP_PUTROOTFH,
            getattr(),
        ])
    };
    // Asked: the retransmission is the reply, byte for byte.
    let first = call_raw(&s.cl, read_only(1, true)).await;
    assert_eq!(call_raw(&s.cl, read_only(1, true)).await, first);
    // Not asked: refused as uncached, in SEQUENCE's place (nothing ran again).
    let first = COMPOUND4res::from_bytes(call_raw(&s.cl, read_only(2, false)).await).unwrap();
    assert_eq!(first.status, nfsstat4::NFS4_OK);
    let again = COMPOUND4res::from_bytes(call_raw(&s.cl, read_only(2, false)).await).unwrap();
    assert_eq!(again.status, nfsstat4::NFS4ERR_RETRY_UNCACHED_REP);
    // A change without cachethis is kept all the same.
    let change = encode_compound(vec![
        sequence(s.sid, 3, 1, false),
        nfs_argop4::OP_PUTROOTFH,
        mkdir("kept"),
    ]);
    let first = call_raw(&s.cl, change.clone()).await;
    assert_eq!(
        COMPOUND4res::from_bytes(first.clone()).unwrap().status,
        nfsstat4::NFS4_OK
    );
    assert_eq!(call_raw(&s.cl, change).await, first, "from the cache");
}

/// A request of reads alone whose client did not ask for its reply to be kept is not
/// hashed (ADR 0064 addendum): another request on its slot and sequence id gets
/// NFS4ERR_RETRY_UNCACHED_REP, as its retransmission does. A request that could have
/// been kept is still told apart (NFS4ERR_SEQ_FALSE_RETRY).
#[tokio::test]
async fn an_uncached_request_of_reads_is_compared_only_by_kind() {
    let (_srv, s) = start_with_session(b"unhashed").await;
    let r = call(
        &s.cl,
        vec![sequence(s.sid, 0, 1, false), nfs_argop4::OP_PUTROOTFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let r = call(
        &s.cl,
        vec![sequence(s.sid, 0, 1, false), nfs_argop4::OP_PUTROOTFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_RETRY_UNCACHED_REP);
    let r = call(
        &s.cl,
        vec![sequence(s.sid, 0, 1, false), nfs_argop4::OP_PUTPUBFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_RETRY_UNCACHED_REP);
    // Asking for the reply to be kept, or an op that changes state: hashed, and so a
    // false retry.
    let r = call(
        &s.cl,
        vec![sequence(s.sid, 0, 1, true), nfs_argop4::OP_PUTPUBFH],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
    let commit = nfs_argop4::OP_COMMIT(COMMIT4args {
        offset: 0,
        count: 0,
    });
    let r = call(
        &s.cl,
        vec![
            sequence(s.sid, 0, 1, false),
            nfs_argop4::OP_PUTROOTFH,
            commit,
        ],
    )
    .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
}

#[tokio::test]
async fn slot_rules() {
    let (_srv, s) = start_with_session(b"slots").await;
    // first use of a slot must be seqid 1
    let r = call(&s.cl, vec![s.sequence(0, 5)]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SEQ_MISORDERED);
    let r = call(&s.cl, vec![s.sequence(0, 1), nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    // same slot+seqid, different request: false retry
    let r = call(&s.cl, vec![s.sequence(0, 1), nfs_argop4::OP_PUTPUBFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
    // slot beyond the table
    let r = call(&s.cl, vec![s.sequence(100_000, 1)]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADSLOT);
    // a large slot id inside the granted table works (the table grows lazily)
    let r = call(&s.cl, vec![s.sequence(63, 1), nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(seq)) = &r.resarray[0] else {
        panic!()
    };
    assert_eq!(seq.sr_highest_slotid, 63);
    // unknown session
    let mut bad = s.sid;
    bad[15] ^= 0xff;
    let r = call(&s.cl, vec![sequence(bad, 0, 1, false)]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADSESSION);
}

#[tokio::test]
async fn executor_rules() {
    let (_srv, mut s) = start_with_session(b"rules").await;
    // no SEQUENCE first
    let r = call(&s.cl, vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
    // SEQUENCE not first
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, s.sequence(1, 1)])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SEQUENCE_POS);
    assert_eq!(r.resarray.len(), 3);
    // no current filehandle
    let r = s.run(vec![nfs_argop4::OP_GETFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOFILEHANDLE);
    // v4.0-only op
    let r = s
        .run(vec![nfs_argop4::OP_RENEW(RENEW4args { clientid: 1 })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
    // too many ops for the negotiated 1000
    let mut ops = vec![nfs_argop4::OP_PUTROOTFH; 1000];
    ops.push(nfs_argop4::OP_GETFH);
    let r = s.run(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_TOO_MANY_OPS);
    // a failed SEQUENCE does not consume the sequence id
    s.seq -= 1;
    // but large compounds within the limit run: 500 LOOKUPs of missing names stop at
    // the first; 900 PUTROOTFH+GETFH pairs are fine
    let mut ops = Vec::new();
    for _ in 0..450 {
        ops.push(nfs_argop4::OP_PUTROOTFH);
        ops.push(nfs_argop4::OP_GETFH);
    }
    let r = s.run(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    assert_eq!(r.resarray.len(), 901);
    // minor version 3 is not served (0 is: tests/nfsv40.rs)
    let mut b = encode_compound(vec![nfs_argop4::OP_PUTROOTFH]).to_vec();
    b[8..12].copy_from_slice(&3u32.to_be_bytes());
    let r = COMPOUND4res::from_bytes(call_raw(&s.cl, Bytes::from(b)).await).unwrap();
    assert_eq!(r.status, nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
}

#[tokio::test]
async fn hostile_handles_names_and_ops() {
    let (_srv, mut s) = start_with_session(b"hostile").await;
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH])
        .await;
    let nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(root)) = &r.resarray[2] else {
        panic!()
    };
    // a forged handle: flip a byte of a real one
    let mut forged = root.object.to_vec();
    forged[5] ^= 0x40;
    let r = s
        .run(vec![nfs_argop4::OP_PUTFH(PUTFH4args {
            object: Bytes::from(forged),
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADHANDLE);
    let r = s
        .run(vec![nfs_argop4::OP_PUTFH(PUTFH4args {
            object: Bytes::from_static(b"garbage"),
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADHANDLE);
    // escaping names
    for (name, want) in [
        ("..", nfsstat4::NFS4ERR_BADNAME),
        ("a/../../etc", nfsstat4::NFS4ERR_BADNAME),
        ("", nfsstat4::NFS4ERR_INVAL),
    ] {
        let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, lookup(name)]).await;
        assert_eq!(r.status, want, "name {name:?}");
    }
    // LOOKUPP above the root
    let r = s
        .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_LOOKUPP])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    // an unknown op number: OP_ILLEGAL after the ops before it ran
    let mut b = s.next(vec![nfs_argop4::OP_PUTROOTFH]).to_vec();
    let n = u32::from_be_bytes([b[12], b[13], b[14], b[15]]);
    b[12..16].copy_from_slice(&(n + 1).to_be_bytes());
    b.extend_from_slice(&9999u32.to_be_bytes());
    let r = COMPOUND4res::from_bytes(call_raw(&s.cl, Bytes::from(b)).await).unwrap();
    assert_eq!(r.status, nfsstat4::NFS4ERR_OP_ILLEGAL);
    assert_eq!(r.resarray.len(), 3);
    // a truncated op: BADXDR
    let mut b = s
        .next(vec![nfs_argop4::OP_PUTROOTFH, lookup("abc")])
        .to_vec();
    b.truncate(b.len() - 4);
    let r = COMPOUND4res::from_bytes(call_raw(&s.cl, Bytes::from(b)).await).unwrap();
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADXDR);
    // garbage COMPOUND header: GARBAGE_ARGS at the RPC level, and the server keeps going
    let e =
        s.cl.call(100003, 4, 1, Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]))
            .await;
    assert!(matches!(e, Err(txnfs_rpc::RpcError::GarbageArgs)), "{e:?}");
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
}

#[tokio::test]
async fn locks_conflict_across_clients() {
    let srv = start_memory_server().await;
    let mut a = Session::new(srv.addr, b"client-a").await;
    let mut b = Session::new(srv.addr, b"client-b").await;
    let open = |s: &Session| {
        let mut o = open_new("locked");
        if let nfs_argop4::OP_OPEN(ref mut x) = o {
            x.owner.clientid = s.clientid;
        }
        o
    };
    let mut sids = Vec::new();
    for s in [&mut a, &mut b] {
        let o = open(s);
        let r = s
            .run(vec![nfs_argop4::OP_PUTROOTFH, o, nfs_argop4::OP_GETFH])
            .await;
        sids.push(opened_stateid_and_fh(&r));
    }
    let lock = |cid: u64, sid: &stateid4, fh: &Bytes, owner: &'static [u8]| {
        vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            nfs_argop4::OP_LOCK(Box::new(LOCK4args {
                locktype: nfs_lock_type4::WRITE_LT,
                reclaim: false,
                offset: 0,
                length: 100,
                locker: locker4::TRUE(open_to_lock_owner4 {
                    open_seqid: 0,
                    open_stateid: sid.clone(),
                    lock_seqid: 0,
                    lock_owner: lock_owner4 {
                        clientid: cid,
                        owner: Bytes::from_static(owner),
                    },
                }),
            })),
        ]
    };
    let r = a.run(lock(a.clientid, &sids[0].0, &sids[0].1, b"la")).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(la)) = &r.resarray[2] else {
        panic!()
    };
    let la = la.lock_stateid.clone();
    let r = b.run(lock(b.clientid, &sids[1].0, &sids[1].1, b"lb")).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DENIED);
    let nfs_resop4::OP_LOCK(LOCK4res::NFS4ERR_DENIED(d)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!((d.offset, d.length), (0, 100));
    // unlock, then B gets it
    let r = a
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args {
                object: sids[0].1.clone(),
            }),
            nfs_argop4::OP_LOCKU(LOCKU4args {
                locktype: nfs_lock_type4::WRITE_LT,
                seqid: 0,
                lock_stateid: la,
                offset: 0,
                length: 100,
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = b.run(lock(b.clientid, &sids[1].0, &sids[1].1, b"lb")).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

#[tokio::test]
async fn hostile_records_do_not_disturb_other_clients() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let srv = start_memory_server().await;
    let mut good = Session::new(srv.addr, b"good").await;
    let hostile: Vec<Vec<u8>> = vec![
        // a record mark announcing 1 GiB (above the maximum record size)
        vec![0xc0, 0, 0, 0, 1, 2, 3, 4],
        // a complete record of garbage
        vec![0x80, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 9],
        // a truncated record: mark says 100 bytes, then the connection closes
        vec![0x80, 0, 0, 100, 0, 0, 0, 1],
    ];
    for bytes in hostile {
        let mut t = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        t.write_all(&bytes).await.unwrap();
        let _ = t.shutdown().await;
        let mut buf = Vec::new();
        // The server answers what it can (GARBAGE_ARGS or nothing) and closes; it must
        // not hang: the read ends within the timeout.
        let r =
            tokio::time::timeout(std::time::Duration::from_secs(5), t.read_to_end(&mut buf)).await;
        assert!(r.is_ok(), "server kept a hostile connection open");
        let r = good
            .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK);
    }
}

#[tokio::test]
async fn reply_size_limits() {
    let srv = start_memory_server().await;
    // A second session on the same client with a 4 KiB response limit.
    let (mut t, fore) = Session::with_limits(srv.addr, b"sizes", 4096, 1024).await;
    assert_eq!(fore.ca_maxresponsesize, 4096);
    let mut ops = Vec::new();
    for _ in 0..100 {
        ops.push(nfs_argop4::OP_PUTROOTFH);
        ops.push(nfs_argop4::OP_GETFH);
    }
    // cachethis is set by Session::sequence: the 1 KiB cache limit trips first
    let r = t.run(ops.clone()).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
    // without cachethis the 4 KiB response limit applies
    let r = t.run_uncached(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG);
    let last = r.resarray.last().unwrap();
    assert_eq!(status_of(last), nfsstat4::NFS4ERR_REP_TOO_BIG);
    assert!(r.resarray.len() > 10 && r.resarray.len() < 201);

    // A READ's data is a part of the reply of its own. Ops after it that do not fit
    // cut the reply back behind that data, and the COMPOUND's status and result count
    // are still set in its head.
    static DATA: [u8; 3000] = [5; 3000];
    let (sid, fh) = t.open_new_file("read-then-more").await;
    let putfh = nfs_argop4::OP_PUTFH(PUTFH4args { object: fh });
    let r = t.run(vec![putfh.clone(), write(&sid, 0, &DATA)]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let mut ops = vec![putfh, read(&sid, 0, 3000)];
    for _ in 0..100 {
        ops.push(nfs_argop4::OP_PUTROOTFH);
        ops.push(nfs_argop4::OP_GETFH);
    }
    let r = t.run_uncached(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG);
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(read_ok)) = &r.resarray[2] else {
        panic!("the READ: {:?}", r.resarray[2]);
    };
    assert_eq!(&read_ok.data[..], &DATA[..]);
    let last = r.resarray.last().unwrap();
    assert_eq!(status_of(last), nfsstat4::NFS4ERR_REP_TOO_BIG);
    assert!(r.resarray.len() > 4 && r.resarray.len() < 203);
}

#[tokio::test]
async fn share_deny_downgrade_and_stateids() {
    let srv = start_memory_server().await;
    let mut a = Session::new(srv.addr, b"share-a").await;
    let mut b = Session::new(srv.addr, b"share-b").await;
    // OPEN of "shared" at the root by client `cid`.
    let open = |cid: u64, access: u32, deny: u32| {
        vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_OPEN(Box::new(OPEN4args {
                seqid: 0,
                share_access: access,
                share_deny: deny,
                owner: open_owner4 {
                    clientid: cid,
                    owner: Bytes::from_static(b"o"),
                },
                openhow: openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(empty_fattr())),
                claim: open_claim4::CLAIM_NULL(Bytes::from_static(b"shared")),
            })),
        ]
    };
    let on_shared = |op: nfs_argop4| vec![nfs_argop4::OP_PUTROOTFH, lookup("shared"), op];
    let r = a
        .run(open(
            a.clientid,
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_WRITE,
        ))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(oa)) = &r.resarray[2] else {
        panic!()
    };
    let sid = oa.stateid.clone();
    // B may not open for writing while A denies writes
    let b_writes = open(b.clientid, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_NONE);
    let r = b.run(b_writes.clone()).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_SHARE_DENIED);
    // A downgrades to read/deny-none: now B can
    let r = a
        .run(on_shared(nfs_argop4::OP_OPEN_DOWNGRADE(
            OPEN_DOWNGRADE4args {
                open_stateid: sid.clone(),
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: OPEN4_SHARE_DENY_NONE,
            },
        )))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = b.run(b_writes).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    // TEST_STATEID: A's open is valid (current seqid), an old seqid is reported old,
    // a made-up one bad
    let mut old = sid.clone();
    old.seqid = 1;
    let mut cur = sid.clone();
    cur.seqid = 0;
    let mut bogus = sid.clone();
    bogus.other[11] ^= 0x55;
    let r = a
        .run(vec![nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
            ts_stateids: vec![cur, bogus],
        })])
        .await;
    let nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(t)) = &r.resarray[1] else {
        panic!()
    };
    assert_eq!(
        t.tsr_status_codes,
        vec![nfsstat4::NFS4_OK, nfsstat4::NFS4ERR_BAD_STATEID]
    );
    // FREE_STATEID on an open stateid: LOCKS_HELD (RFC 8881 §18.38.3)
    let r = a
        .run(vec![nfs_argop4::OP_FREE_STATEID(FREE_STATEID4args {
            fsa_stateid: stateid4 { seqid: 0, ..sid },
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_LOCKS_HELD);
    // READ with the old seqid: OLD_STATEID
    let r = a
        .run(on_shared(nfs_argop4::OP_READ(READ4args {
            stateid: old,
            offset: 0,
            count: 10,
        })))
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_OLD_STATEID);
}

#[tokio::test]
async fn io_without_open_checks_the_callers_permissions() {
    let srv = start_memory_server().await;
    let mut root = Session::new(srv.addr, b"root").await;
    let mode600 = {
        let mut v = bytes::BytesMut::new();
        txnfs_xdr::put_u32(&mut v, 0o600);
        fattr4 {
            attrmask: vec![0, 1 << (33 - 32)],
            attr_vals: v.freeze(),
        }
    };
    let r = root
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_create("private", createhow4::UNCHECKED4(mode600)),
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: stateid4 {
                    seqid: 1,
                    other: [0; 12],
                },
                offset: 0,
                stable: stable_how4::FILE_SYNC4,
                data: Bytes::from_static(b"secret"),
            }),
            nfs_argop4::OP_GETFH,
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh)) = &r.resarray[4] else {
        panic!()
    };
    // Same session, another user's credentials on a new connection.
    let user = txnfs_rpc::RpcClient::connect(srv.addr, sys_cred(1000, 1000))
        .await
        .unwrap();
    let anon = stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    let read = nfs_argop4::OP_READ(READ4args {
        stateid: anon.clone(),
        offset: 0,
        count: 10,
    });
    let write = nfs_argop4::OP_WRITE(WRITE4args {
        stateid: anon,
        offset: 0,
        stable: stable_how4::FILE_SYNC4,
        data: Bytes::from_static(b"x"),
    });
    for op in [read, write] {
        root.seq += 1;
        let putfh = nfs_argop4::OP_PUTFH(PUTFH4args {
            object: fh.object.clone(),
        });
        let r = call(&user, vec![root.sequence(0, root.seq), putfh, op]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_ACCESS);
    }
}

#[tokio::test]
async fn setattr_size_with_the_open_stateid() {
    let (_srv, mut s) = start_with_session(b"truncate").await;
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, open_new("t")]).await;
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    let size7 = {
        let mut v = bytes::BytesMut::new();
        txnfs_xdr::put_u64(&mut v, 7);
        fattr4 {
            attrmask: vec![1 << 4],
            attr_vals: v.freeze(),
        }
    };
    // seqid 0 = "the current seqid of this stateid", as the Linux client sends it
    let sid = stateid4 {
        seqid: 0,
        ..o.stateid.clone()
    };
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("t"),
            nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                stateid: sid,
                obj_attributes: size7,
            })),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: GETATTR_TYPE_SIZE.to_vec(),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = &r.resarray[4] else {
        panic!()
    };
    // TYPE (4 bytes) then SIZE (8 bytes)
    assert_eq!(&g.obj_attributes.attr_vals[4..12], &7u64.to_be_bytes());
}
