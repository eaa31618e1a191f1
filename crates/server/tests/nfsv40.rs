//! NFSv4.0 (RFC 7530) on the same state core as v4.1: SETCLIENTID's case table,
//! OPEN/OPEN_CONFIRM/READ/WRITE/CLOSE, the per-owner seqid replay cache, RENEW and lease
//! expiry, the minor-version rules for ops, delegations over a separate callback
//! connection (CB_NULL probe first, CB_RECALL as a v4.0 CB_COMPOUND), and v4.0 locks
//! against v4.1 locks.

mod common;

use bytes::Bytes;
use common::*;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use txnfs_rpc::{CallInfo, ReplyBody, RpcClient, RpcService, ServerConfig};
use txnfs_server::nfs::*;
use txnfs_xdr::{Decode, Encode};

const CB_PROG: u32 = 0x4000_0123;
const CB_IDENT: u32 = 77;

/// A universal address (RFC 5665) of `a`.
fn uaddr(a: SocketAddr) -> String {
    format!("{}.{}.{}", a.ip(), a.port() >> 8, a.port() & 0xff)
}

fn setclientid_op(owner: &[u8], verifier: [u8; 8], cb: &str) -> nfs_argop4 {
    nfs_argop4::OP_SETCLIENTID(Box::new(SETCLIENTID4args {
        client: nfs_client_id4 {
            verifier,
            id: Bytes::copy_from_slice(owner),
        },
        callback: cb_client4 {
            cb_program: CB_PROG,
            cb_location: netaddr4 {
                na_r_netid: Bytes::from_static(b"tcp"),
                na_r_addr: Bytes::from(cb.to_string()),
            },
        },
        callback_ident: CB_IDENT,
    }))
}

fn confirm_op(clientid: u64, verf: [u8; 8]) -> nfs_argop4 {
    nfs_argop4::OP_SETCLIENTID_CONFIRM(SETCLIENTID_CONFIRM4args {
        clientid,
        setclientid_confirm: verf,
    })
}

fn renew_op(clientid: u64) -> nfs_argop4 {
    nfs_argop4::OP_RENEW(RENEW4args { clientid })
}

async fn run40(cl: &RpcClient, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    let b = call_raw(cl, encode_compound_minor(ops, 0)).await;
    COMPOUND4res::from_bytes(b).expect("reply decodes")
}

/// SETCLIENTID's (client id, confirm verifier), or its status.
async fn setclientid(
    cl: &RpcClient,
    owner: &[u8],
    verifier: [u8; 8],
    cb: &str,
) -> Result<(u64, [u8; 8]), nfsstat4> {
    let r = run40(cl, vec![setclientid_op(owner, verifier, cb)]).await;
    match &r.resarray[..] {
        [nfs_resop4::OP_SETCLIENTID(res)] => match &**res {
            SETCLIENTID4res::NFS4_OK(ok) => Ok((ok.clientid, ok.setclientid_confirm)),
            _ => Err(r.status),
        },
        _ => Err(r.status),
    }
}

async fn status40(cl: &RpcClient, ops: Vec<nfs_argop4>) -> nfsstat4 {
    run40(cl, ops).await.status
}

/// A v4.0 client: its connection, client id and one open-owner's next seqid.
struct V40 {
    cl: RpcClient,
    clientid: u64,
    seq: u32,
}

impl V40 {
    /// SETCLIENTID (callbacks to `cb`) and SETCLIENTID_CONFIRM as `owner`.
    async fn new(addr: SocketAddr, owner: &[u8], cb: &str) -> V40 {
        let cl = connect(addr).await;
        let (clientid, verf) = setclientid(&cl, owner, [1; 8], cb).await.unwrap();
        assert_eq!(
            status40(&cl, vec![confirm_op(clientid, verf)]).await,
            nfsstat4::NFS4_OK
        );
        V40 {
            cl,
            clientid,
            seq: 1,
        }
    }

    fn next_seq(&mut self) -> u32 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn open_op(&mut self, name: &str, access: u32, how: openflag4) -> nfs_argop4 {
        nfs_argop4::OP_OPEN(Box::new(OPEN4args {
            seqid: self.next_seq(),
            share_access: access,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: open_owner4 {
                clientid: self.clientid,
                owner: Bytes::from_static(b"open-owner"),
            },
            openhow: how,
            claim: open_claim4::CLAIM_NULL(Bytes::copy_from_slice(name.as_bytes())),
        }))
    }

    /// OPEN (and OPEN_CONFIRM when asked): the open stateid, file handle, delegation.
    async fn open(
        &mut self,
        name: &str,
        access: u32,
        how: openflag4,
    ) -> (stateid4, Bytes, open_delegation4) {
        let open = self.open_op(name, access, how);
        let r = run40(
            &self.cl,
            vec![nfs_argop4::OP_PUTROOTFH, open, nfs_argop4::OP_GETFH],
        )
        .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
        let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)) = &r.resarray[1] else {
            unreachable!()
        };
        let (mut sid, fh) = opened40(&r);
        if ok.rflags & OPEN4_RESULT_CONFIRM != 0 {
            sid = self.confirm(&fh, &sid).await;
        }
        (sid, fh, ok.delegation.clone())
    }

    async fn confirm(&mut self, fh: &Bytes, sid: &stateid4) -> stateid4 {
        let op = nfs_argop4::OP_OPEN_CONFIRM(OPEN_CONFIRM4args {
            open_stateid: sid.clone(),
            seqid: self.next_seq(),
        });
        let r = run40(&self.cl, vec![putfh(fh), op]).await;
        let nfs_resop4::OP_OPEN_CONFIRM(OPEN_CONFIRM4res::NFS4_OK(ok)) = &r.resarray[1] else {
            panic!("OPEN_CONFIRM {:?}", r.resarray)
        };
        assert_eq!(ok.open_stateid.other, sid.other);
        assert_eq!(ok.open_stateid.seqid, sid.seqid + 1);
        ok.open_stateid.clone()
    }

    fn close_op(&mut self, sid: &stateid4) -> nfs_argop4 {
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: self.next_seq(),
            open_stateid: sid.clone(),
        })
    }

    async fn run(&self, ops: Vec<nfs_argop4>) -> COMPOUND4res {
        run40(&self.cl, ops).await
    }
}

/// The open stateid and file handle of PUTROOTFH, OPEN, GETFH.
fn opened40(r: &COMPOUND4res) -> (stateid4, Bytes) {
    match &r.resarray[..] {
        [_, nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(o)), nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(f))] => {
            (o.stateid.clone(), f.object.clone())
        }
        _ => panic!("OPEN {:?}", r.resarray),
    }
}

fn putfh(fh: &Bytes) -> nfs_argop4 {
    nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() })
}

fn create() -> openflag4 {
    openflag4::OPEN4_CREATE(createhow4::UNCHECKED4(empty_fattr()))
}

fn no_create() -> openflag4 {
    openflag4::default(opentype4::OPEN4_NOCREATE)
}

fn read_op(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_READ(READ4args {
        stateid: sid.clone(),
        offset: 0,
        count: 4096,
    })
}

/// An address nothing listens on.
async fn dead_address() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn setclientid_case_table() {
    let srv = start_memory_server().await;
    let cl = connect(srv.addr).await;
    let cb = uaddr(dead_address().await);
    // A new client: unconfirmed until SETCLIENTID_CONFIRM.
    let (id, verf) = setclientid(&cl, b"host-a", [1; 8], &cb).await.unwrap();
    assert_eq!(
        status40(&cl, vec![renew_op(id)]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    assert_eq!(
        status40(&cl, vec![confirm_op(id, [9; 8])]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    assert_eq!(
        status40(&cl, vec![confirm_op(id, verf)]).await,
        nfsstat4::NFS4_OK
    );
    // A retransmitted confirmation.
    assert_eq!(
        status40(&cl, vec![confirm_op(id, verf)]).await,
        nfsstat4::NFS4_OK
    );
    assert_eq!(status40(&cl, vec![renew_op(id)]).await, nfsstat4::NFS4_OK);
    // Same verifier: a callback update under the same client id, new confirm verifier.
    let (same, verf2) = setclientid(&cl, b"host-a", [1; 8], &cb).await.unwrap();
    assert_eq!(same, id);
    assert_ne!(verf2, verf);
    assert_eq!(
        status40(&cl, vec![confirm_op(id, verf2)]).await,
        nfsstat4::NFS4_OK
    );
    assert_eq!(
        status40(&cl, vec![confirm_op(id, verf)]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    // The client holds state now.
    let mut a = V40 {
        cl,
        clientid: id,
        seq: 1,
    };
    let (sid, _, _) = a.open("held", OPEN4_SHARE_ACCESS_BOTH, create()).await;
    // Another principal with the same owner string: in use.
    let other = RpcClient::connect(srv.addr, sys_cred(1000, 1000))
        .await
        .unwrap();
    assert_eq!(
        setclientid(&other, b"host-a", [1; 8], &cb).await,
        Err(nfsstat4::NFS4ERR_CLID_INUSE)
    );
    // A new verifier: the client restarted. The old incarnation lives until the new one
    // is confirmed, then its state is gone.
    let (new, verf3) = setclientid(&a.cl, b"host-a", [2; 8], &cb).await.unwrap();
    assert_ne!(new, id);
    assert_eq!(status40(&a.cl, vec![renew_op(id)]).await, nfsstat4::NFS4_OK);
    assert_eq!(
        status40(&a.cl, vec![confirm_op(new, verf3)]).await,
        nfsstat4::NFS4_OK
    );
    assert_eq!(
        status40(&a.cl, vec![renew_op(id)]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    let r = a.run(vec![nfs_argop4::OP_PUTROOTFH, read_op(&sid)]).await;
    assert_ne!(
        r.status,
        nfsstat4::NFS4_OK,
        "the old incarnation's open is gone"
    );
    assert_eq!(
        status40(&a.cl, vec![renew_op(new)]).await,
        nfsstat4::NFS4_OK
    );
}

#[tokio::test]
async fn open_confirm_read_write_close() {
    let srv = start_memory_server().await;
    let mut c = V40::new(srv.addr, b"rw", &uaddr(dead_address().await)).await;
    let open = c.open_op("f", OPEN4_SHARE_ACCESS_BOTH, create());
    let r = c
        .run(vec![nfs_argop4::OP_PUTROOTFH, open, nfs_argop4::OP_GETFH])
        .await;
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)) = &r.resarray[1] else {
        panic!("{:?}", r.resarray)
    };
    assert_ne!(ok.rflags & OPEN4_RESULT_CONFIRM, 0, "a new owner confirms");
    let (sid, fh) = opened40(&r);
    let sid = c.confirm(&fh, &sid).await;
    let r = c
        .run(vec![
            putfh(&fh),
            write(&sid, 0, b"hello v4.0"),
            read_op(&sid),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_READ(READ4res::NFS4_OK(rd)) = &r.resarray[2] else {
        unreachable!()
    };
    assert_eq!(&rd.data[..], b"hello v4.0");
    // A confirmed owner's next OPEN needs no confirmation.
    let (sid2, _, _) = c.open("f", OPEN4_SHARE_ACCESS_READ, no_create()).await;
    assert_eq!(sid2.other, sid.other, "an upgrade of the same open");
    let close = c.close_op(&sid2);
    let r = c.run(vec![putfh(&fh), close]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = c.run(vec![putfh(&fh), read_op(&sid2)]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BAD_STATEID);
}

#[tokio::test]
async fn a_replayed_open_gets_the_cached_reply_and_has_one_effect() {
    let srv = start_memory_server().await;
    let mut c = V40::new(srv.addr, b"replay", &uaddr(dead_address().await)).await;
    let (_, fh, _) = c.open("first", OPEN4_SHARE_ACCESS_BOTH, create()).await;
    // GUARDED: run twice, the second would fail NFS4ERR_EXIST.
    let guarded = openflag4::OPEN4_CREATE(createhow4::GUARDED4(empty_fattr()));
    let open = c.open_op("g", OPEN4_SHARE_ACCESS_BOTH, guarded.clone());
    let args = encode_compound_minor(
        vec![nfs_argop4::OP_PUTROOTFH, open, nfs_argop4::OP_GETFH],
        0,
    );
    let first = call_raw(&c.cl, args.clone()).await;
    let again = call_raw(&c.cl, args).await;
    assert_eq!(first, again, "the retransmission gets the cached reply");
    let made = COMPOUND4res::from_bytes(first).unwrap();
    assert_eq!(made.status, nfsstat4::NFS4_OK, "{:?}", made.resarray);
    // The sequence went on by one: the next seqid works, and a real second GUARDED
    // create fails.
    let open = c.open_op("g", OPEN4_SHARE_ACCESS_BOTH, guarded);
    let r = c.run(vec![nfs_argop4::OP_PUTROOTFH, open]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_EXIST);
    // EXIST stepped the sequence too (RFC 7530 §9.1.7). The open of "g" was made
    // once: this upgrade is its second change (the replay changed nothing).
    let (first_sid, _) = opened40(&made);
    let (sid, gfh, _) = c.open("g", OPEN4_SHARE_ACCESS_READ, no_create()).await;
    assert_eq!(sid.other, first_sid.other);
    assert_eq!(sid.seqid, first_sid.seqid + 1);
    assert_ne!(gfh, fh);
    let close = c.close_op(&sid);
    assert_eq!(
        c.run(vec![putfh(&gfh), close]).await.status,
        nfsstat4::NFS4_OK
    );
}

#[tokio::test]
async fn a_wrong_seqid_is_bad_seqid_and_does_not_step_the_sequence() {
    let srv = start_memory_server().await;
    let mut c = V40::new(srv.addr, b"badseq", &uaddr(dead_address().await)).await;
    let (sid, fh, _) = c.open("f", OPEN4_SHARE_ACCESS_BOTH, create()).await;
    for wrong in [c.seq + 1, c.seq + 5, c.seq.wrapping_sub(3)] {
        let op = nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: wrong,
            open_stateid: sid.clone(),
        });
        assert_eq!(
            c.run(vec![putfh(&fh), op]).await.status,
            nfsstat4::NFS4ERR_BAD_SEQID,
            "seqid {wrong}"
        );
    }
    let close = c.close_op(&sid);
    assert_eq!(
        c.run(vec![putfh(&fh), close]).await.status,
        nfsstat4::NFS4_OK
    );
}

#[tokio::test]
async fn a_retransmitted_close_or_lock_gets_its_first_reply() {
    let srv = start_memory_server().await;
    let mut c = V40::new(srv.addr, b"reclose", &uaddr(dead_address().await)).await;
    let (sid, fh, _) = c.open("f", OPEN4_SHARE_ACCESS_BOTH, create()).await;
    // LOCK of a new lock-owner, sent twice: one lock, the same stateid.
    let lock = nfs_argop4::OP_LOCK(Box::new(LOCK4args {
        locktype: nfs_lock_type4::WRITE_LT,
        reclaim: false,
        offset: 0,
        length: 10,
        locker: locker4::TRUE(open_to_lock_owner4 {
            open_seqid: c.next_seq(),
            open_stateid: sid.clone(),
            lock_seqid: 7,
            lock_owner: lock_owner4 {
                clientid: c.clientid,
                owner: Bytes::from_static(b"pid-9"),
            },
        }),
    }));
    let args = encode_compound_minor(vec![putfh(&fh), lock], 0);
    let first = call_raw(&c.cl, args.clone()).await;
    assert_eq!(first, call_raw(&c.cl, args).await);
    let lsid = lock_result(&COMPOUND4res::from_bytes(first).unwrap()).expect("locked");
    assert_eq!(lsid.seqid, 1);
    let unlock = nfs_argop4::OP_LOCKU(LOCKU4args {
        locktype: nfs_lock_type4::WRITE_LT,
        seqid: 8,
        lock_stateid: lsid,
        offset: 0,
        length: 10,
    });
    assert_eq!(
        c.run(vec![putfh(&fh), unlock]).await.status,
        nfsstat4::NFS4_OK
    );
    // CLOSE sent twice: the open is gone after the first, the second is answered from
    // the owner's cache all the same.
    let close = c.close_op(&sid);
    let args = encode_compound_minor(vec![putfh(&fh), close], 0);
    let first = call_raw(&c.cl, args.clone()).await;
    assert_eq!(first, call_raw(&c.cl, args).await);
    assert_eq!(
        COMPOUND4res::from_bytes(first).unwrap().status,
        nfsstat4::NFS4_OK
    );
    let close = c.close_op(&sid);
    assert_eq!(
        c.run(vec![putfh(&fh), close]).await.status,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
}

#[tokio::test]
async fn renew_of_an_unknown_or_expired_client_is_stale_clientid() {
    let srv = start_server(|dir| {
        let mut c = memory_config(dir, false);
        c.lease_time = 1;
        c
    })
    .await;
    let cl = connect(srv.addr).await;
    assert_eq!(
        status40(&cl, vec![renew_op(0xdead_beef)]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    let mut c = V40::new(srv.addr, b"expires", &uaddr(dead_address().await)).await;
    let open = c.open_op("x", OPEN4_SHARE_ACCESS_BOTH, create());
    let r = run40(&cl, vec![nfs_argop4::OP_PUTROOTFH, open]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // Silent for two leases (one courtesy lease): released at the next tick.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    srv.server.tick();
    assert_eq!(
        status40(&cl, vec![renew_op(c.clientid)]).await,
        nfsstat4::NFS4ERR_STALE_CLIENTID
    );
    let open = c.open_op("x", OPEN4_SHARE_ACCESS_BOTH, create());
    let r = run40(&cl, vec![nfs_argop4::OP_PUTROOTFH, open]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_STALE_CLIENTID);
}

#[tokio::test]
async fn ops_of_other_minor_versions() {
    let (srv, mut s) = start_with_session(b"v41").await;
    let cl = connect(srv.addr).await;
    // v4.1 ops are undefined in v4.0: OP_ILLEGAL (RFC 7530 §15.2, RFC 8881 §16.2.3).
    for op in [
        sequence([0; 16], 0, 1, false),
        txnfs_rawclient::exchange_id(b"x"),
    ] {
        let r = run40(&cl, vec![nfs_argop4::OP_PUTROOTFH, op]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_OP_ILLEGAL);
        assert!(
            matches!(r.resarray[1], nfs_resop4::OP_ILLEGAL(_)),
            "{:?}",
            r.resarray
        );
    }
    // v4.0-only ops in v4.1: NOTSUPP (RFC 8881 §18.*).
    for op in [
        renew_op(s.clientid),
        setclientid_op(b"x", [1; 8], "127.0.0.1.0.1"),
    ] {
        let r = s.run(vec![op]).await;
        assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP, "{:?}", r.resarray);
    }
    // And v4.0 COMPOUNDs need no session.
    let r = run40(&cl, vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
}

/// The client's callback service: answers CB_NULL and CB_COMPOUND (CB_RECALL OK) and
/// reports each call.
struct CbService {
    tx: mpsc::UnboundedSender<(u32, Option<CB_COMPOUND4args>)>,
}

impl RpcService for CbService {
    fn programs(&self) -> Vec<(u32, u32, u32)> {
        vec![(CB_PROG, 1, 1)]
    }
    async fn call(&self, info: CallInfo, args: Bytes) -> ReplyBody {
        match info.proc_num {
            0 => {
                let _ = self.tx.send((0, None));
                ReplyBody::Success(Bytes::new())
            }
            1 => {
                let Ok(a) = CB_COMPOUND4args::from_bytes(args) else {
                    return ReplyBody::GarbageArgs;
                };
                let res = CB_COMPOUND4res {
                    status: nfsstat4::NFS4_OK,
                    tag: a.tag.clone(),
                    resarray: vec![nfs_cb_resop4::OP_CB_RECALL(CB_RECALL4res {
                        status: nfsstat4::NFS4_OK,
                    })],
                };
                let _ = self.tx.send((1, Some(a)));
                ReplyBody::Success(res.to_bytes())
            }
            _ => ReplyBody::ProcUnavail,
        }
    }
}

async fn next_cb(
    rx: &mut mpsc::UnboundedReceiver<(u32, Option<CB_COMPOUND4args>)>,
) -> (u32, Option<CB_COMPOUND4args>) {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a callback arrives")
        .expect("callback service runs")
}

#[tokio::test]
async fn a_v40_client_gets_a_delegation_after_its_probe_and_a_v41_write_recalls_it() {
    let srv = start_server(|dir| {
        let mut c = memory_config(dir, false);
        c.recall_wait_ms = Some(0);
        c.callback_timeout_ms = Some(1000);
        c
    })
    .await;
    // The file, made and closed by a v4.1 client.
    let mut w = Session::new(srv.addr, b"v41-writer").await;
    let (sid, fh) = w.open_new_file("shared").await;
    let r = w
        .run(vec![putfh(&fh), write(&sid, 0, b"data"), close_op(&sid)])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);

    // A v4.0 client whose callback address answers nothing: no delegation.
    let mut lost = V40::new(srv.addr, b"v40-unreachable", &uaddr(dead_address().await)).await;
    let (_, _, d) = lost
        .open("shared", OPEN4_SHARE_ACCESS_READ, no_create())
        .await;
    assert!(
        txnfs_rawclient::reply::granted_delegation(&d).is_none(),
        "{d:?}"
    );

    // A v4.0 client with a callback service: probed with CB_NULL on a connection of
    // the server's own, then delegated to.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cb_addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(txnfs_rpc::serve(
        listener,
        Arc::new(CbService { tx }),
        ServerConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let mut h = V40::new(srv.addr, b"v40-holder", &uaddr(cb_addr)).await;
    assert_eq!(next_cb(&mut rx).await.0, 0, "CB_NULL first");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.server.callbacks.v40.up(h.clientid) {
        assert!(Instant::now() < deadline, "the probe's answer is recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, hfh, d) = h.open("shared", OPEN4_SHARE_ACCESS_READ, no_create()).await;
    let (dsid, write_deleg) =
        txnfs_rawclient::reply::granted_delegation(&d).expect("a read delegation");
    assert!(!write_deleg);

    // A v4.1 client opens it for writing: the delegation is recalled over the v4.0
    // client's callback connection, as a v4.0 CB_COMPOUND.
    let open = txnfs_rawclient::open_plain("shared", OPEN4_SHARE_ACCESS_WRITE, b"w1");
    let r = w.run(vec![nfs_argop4::OP_PUTROOTFH, open.clone()]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
    let (proc, args) = next_cb(&mut rx).await;
    assert_eq!(proc, 1);
    let args = args.unwrap();
    assert_eq!(args.minorversion, 0);
    assert_eq!(args.callback_ident, CB_IDENT);
    let [nfs_cb_argop4::OP_CB_RECALL(rc)] = &args.argarray[..] else {
        panic!("not a lone CB_RECALL: {:?}", args.argarray)
    };
    assert_eq!(rc.stateid, dsid);
    assert_eq!(rc.fh, hfh);
    // The holder returns it; the writer goes ahead.
    let r = h.run(vec![putfh(&hfh), delegreturn(&dsid)]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let r = w.run(vec![nfs_argop4::OP_PUTROOTFH, open]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

fn close_op(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_CLOSE(CLOSE4args {
        seqid: 0,
        open_stateid: sid.clone(),
    })
}

fn delegreturn(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_DELEGRETURN(DELEGRETURN4args {
        deleg_stateid: sid.clone(),
    })
}

fn lock_result(r: &COMPOUND4res) -> Option<stateid4> {
    match r.resarray.last() {
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(ok))) => Some(ok.lock_stateid.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn a_v40_lock_conflicts_with_a_v41_lock() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"v41-locker").await;
    let (sid41, fh) = s.open_new_file("locked").await;
    let mut c = V40::new(srv.addr, b"v40-locker", &uaddr(dead_address().await)).await;
    let (sid40, fh40, _) = c.open("locked", OPEN4_SHARE_ACCESS_BOTH, no_create()).await;
    assert_eq!(fh40, fh);
    // v4.0: a new lock-owner, its sequence starting at 0.
    let lock = nfs_argop4::OP_LOCK(Box::new(LOCK4args {
        locktype: nfs_lock_type4::WRITE_LT,
        reclaim: false,
        offset: 0,
        length: 100,
        locker: locker4::TRUE(open_to_lock_owner4 {
            open_seqid: c.next_seq(),
            open_stateid: sid40.clone(),
            lock_seqid: 0,
            lock_owner: lock_owner4 {
                clientid: c.clientid,
                owner: Bytes::from_static(b"pid-1"),
            },
        }),
    }));
    let r = c.run(vec![putfh(&fh), lock]).await;
    let lsid = lock_result(&r).unwrap_or_else(|| panic!("LOCK {:?}", r.resarray));
    // v4.1: the same range is taken.
    let r = s
        .run(vec![
            putfh(&fh),
            txnfs_rawclient::lock_new_owner(true, 50, 10, &sid41, b"t1"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DENIED, "{:?}", r.resarray);
    let r = s
        .run(vec![putfh(&fh), txnfs_rawclient::lockt(false, 0, 1, b"t1")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DENIED);
    // RELEASE_LOCKOWNER while it holds a lock: refused.
    let release = nfs_argop4::OP_RELEASE_LOCKOWNER(RELEASE_LOCKOWNER4args {
        lock_owner: lock_owner4 {
            clientid: c.clientid,
            owner: Bytes::from_static(b"pid-1"),
        },
    });
    assert_eq!(
        c.run(vec![release.clone()]).await.status,
        nfsstat4::NFS4ERR_LOCKS_HELD
    );
    // v4.0 LOCKU with the lock-owner's next seqid; then v4.1 gets the range.
    let unlock = nfs_argop4::OP_LOCKU(LOCKU4args {
        locktype: nfs_lock_type4::WRITE_LT,
        seqid: 1,
        lock_stateid: lsid,
        offset: 0,
        length: 100,
    });
    let r = c.run(vec![putfh(&fh), unlock]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(c.run(vec![release]).await.status, nfsstat4::NFS4_OK);
    let r = s
        .run(vec![
            putfh(&fh),
            txnfs_rawclient::lock_new_owner(true, 50, 10, &sid41, b"t1"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // And now the v4.0 client is refused, with the v4.1 holder named.
    let r = c
        .run(vec![
            putfh(&fh),
            nfs_argop4::OP_LOCKT(LOCKT4args {
                locktype: nfs_lock_type4::READ_LT,
                offset: 0,
                length: 100,
                owner: lock_owner4 {
                    clientid: c.clientid,
                    owner: Bytes::from_static(b"pid-2"),
                },
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DENIED);
}
