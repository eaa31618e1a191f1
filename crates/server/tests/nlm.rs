//! NFSv3 byte-range locks (NLM v4, NSM v1; ADR 0041) over the wire: an NLM lock and an
//! NFSv4 lock conflict in both directions and TEST names the holder; a blocking lock
//! is answered BLOCKED and granted by an NLM4_GRANTED callback to the client's lockd
//! (a fake client machine here: its portmapper, lockd and statd in one RPC service)
//! when the holder unlocks, NLM or v4; after a restart the NLM hosts are told
//! (SM_NOTIFY) and only reclaims are granted in the grace period; SM_NOTIFY and
//! FREE_ALL from a rebooted client release its locks.
//!
//! Multi-threaded runtimes: NLM procedures run on the blocking pool.

mod common;

use bytes::Bytes;
use common::peer::T;
use common::*;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use txnfs_proto::nlm4::*;
use txnfs_proto::sm::*;
use txnfs_rpc::{CallInfo, ReplyBody, RpcClient, RpcService};
use txnfs_server::nfs::*;
use txnfs_xdr::{Decode, Encode};

const NLM: u32 = 100021;
const NSM: u32 = 100024;
const TEST: u32 = 1;
const LOCK: u32 = 2;
const CANCEL: u32 = 3;
const UNLOCK: u32 = 4;
const GRANTED: u32 = 5;
const FREE_ALL: u32 = 23;
const SM_NOTIFY: u32 = 6;

async fn nlm_call<R: Decode>(cl: &RpcClient, proc_num: u32, args: impl Encode) -> R {
    let reply = cl.call(NLM, 4, proc_num, args.to_bytes()).await.unwrap();
    R::from_bytes(reply).unwrap()
}

fn alock(host: &str, fh: &Bytes, svid: i32, offset: u64, len: u64) -> nlm4_lock {
    nlm4_lock {
        caller_name: Bytes::from(host.to_string()),
        fh: fh.clone(),
        oh: Bytes::from(format!("{svid}@{host}")),
        svid,
        l_offset: offset,
        l_len: len,
    }
}

async fn lock(cl: &RpcClient, l: nlm4_lock, block: bool, reclaim: bool) -> nlm4_stats {
    let r: nlm4_res = nlm_call(
        cl,
        LOCK,
        nlm4_lockargs {
            cookie: Bytes::from(format!("cookie-{}", l.svid)),
            block,
            exclusive: true,
            alock: l,
            reclaim,
            state: 1,
        },
    )
    .await;
    r.stat.stat
}

async fn unlock(cl: &RpcClient, l: nlm4_lock) -> nlm4_stats {
    let r: nlm4_res = nlm_call(
        cl,
        UNLOCK,
        nlm4_unlockargs {
            cookie: Bytes::from_static(b"u"),
            alock: l,
        },
    )
    .await;
    r.stat.stat
}

async fn test(cl: &RpcClient, l: nlm4_lock) -> nlm4_testrply {
    let r: nlm4_testres = nlm_call(
        cl,
        TEST,
        nlm4_testargs {
            cookie: Bytes::from_static(b"t"),
            exclusive: true,
            alock: l,
        },
    )
    .await;
    r.stat
}

/// A v4 LOCK of `[offset, offset + length)` by a new lock-owner of the open `osid`:
/// the lock stateid, or the LOCK4denied.
async fn v4_lock(
    s: &mut Session,
    fh: &Bytes,
    osid: &stateid4,
    owner: &[u8],
    offset: u64,
    length: u64,
) -> Result<stateid4, LOCK4denied> {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            txnfs_rawclient::lock_new_owner(true, offset, length, osid, owner),
        ])
        .await;
    match &r.resarray[2] {
        nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(ok)) => Ok(ok.lock_stateid.clone()),
        nfs_resop4::OP_LOCK(LOCK4res::NFS4ERR_DENIED(d)) => Err(d.clone()),
        other => panic!("LOCK: {other:?}"),
    }
}

async fn v4_locku(s: &mut Session, fh: &Bytes, lsid: &stateid4, offset: u64, length: u64) {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            txnfs_rawclient::locku(true, offset, length, lsid),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "LOCKU: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nlm_and_v4_locks_conflict_both_ways() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"v4-locker").await;
    let (osid, fh) = s.open_new_file("f").await;
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();
    let a = |off, len| alock("host-a", &fh, 11, off, len);

    // An NLM lock first: v4 LOCK and LOCKT are denied and see it.
    assert_eq!(
        lock(&cl, a(0, 100), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    let d = v4_lock(&mut s, &fh, &osid, b"v4-owner", 50, 10)
        .await
        .expect_err("a v4 LOCK over an NLM lock");
    assert_eq!((d.offset, d.length), (0, 100));
    assert_eq!(d.locktype, nfs_lock_type4::WRITE_LT);
    // Another NLM host's TEST names the holder as it sent itself.
    match test(&cl, alock("host-b", &fh, 22, 99, 1)).await {
        nlm4_testrply::NLM4_DENIED(h) => {
            assert_eq!((h.svid, &h.oh[..]), (11, &b"11@host-a"[..]));
            assert_eq!((h.l_offset, h.l_len, h.exclusive), (0, 100, true));
        }
        other => panic!("TEST: {other:?}"),
    }
    // Beyond the range: free.
    assert!(matches!(
        test(&cl, alock("host-b", &fh, 22, 100, 0)).await,
        nlm4_testrply::default(nlm4_stats::NLM4_GRANTED)
    ));

    // UNLOCK: the v4 LOCK goes through; now NLM is denied and TEST names the v4 owner.
    assert_eq!(unlock(&cl, a(0, 100)).await, nlm4_stats::NLM4_GRANTED);
    let lsid = v4_lock(&mut s, &fh, &osid, b"v4-owner", 50, 10)
        .await
        .expect("the v4 LOCK after the NLM UNLOCK");
    assert_eq!(
        lock(&cl, a(0, 0), false, false).await,
        nlm4_stats::NLM4_DENIED
    );
    match test(&cl, a(0, 0)).await {
        nlm4_testrply::NLM4_DENIED(h) => {
            assert_eq!((h.svid, &h.oh[..]), (0, &b"v4-owner"[..]));
            assert_eq!((h.l_offset, h.l_len), (50, 10));
        }
        other => panic!("TEST: {other:?}"),
    }
    // Ranges that do not overlap do not conflict.
    assert_eq!(
        lock(&cl, a(0, 50), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    v4_locku(&mut s, &fh, &lsid, 50, 10).await;
    assert_eq!(
        lock(&cl, a(0, 0), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    // A stale handle is said so.
    let mut bad = fh.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(
        lock(
            &cl,
            alock("host-a", &Bytes::from(bad), 11, 0, 1),
            false,
            false
        )
        .await,
        nlm4_stats::NLM4_STALE_FH
    );
}

/// A fake client machine: its portmapper answers every GETPORT with the port of this
/// same service, which is also its lockd (NLM4_GRANTED answered `granted_answer`)
/// and its statd (SM_NOTIFY); every call that reaches lockd or statd is sent on.
struct FakeClient {
    port: Mutex<u16>,
    granted_answer: nlm4_stats,
    calls: mpsc::UnboundedSender<(u32, u32, Bytes)>,
}

impl RpcService for FakeClient {
    fn programs(&self) -> Vec<(u32, u32, u32)> {
        vec![(100000, 2, 2), (NLM, 4, 4), (NSM, 1, 1)]
    }

    fn call(&self, info: CallInfo, args: Bytes) -> impl Future<Output = ReplyBody> + Send {
        let port = *self.port.lock().unwrap();
        let reply = match (info.prog, info.proc_num) {
            (100000, 3) => ReplyBody::Success(u32::from(port).to_bytes()),
            (NLM, GRANTED) => {
                let a = nlm4_testargs::from_bytes(args.clone()).unwrap();
                let _ = self.calls.send((NLM, GRANTED, args));
                ReplyBody::Success(
                    nlm4_res {
                        cookie: a.cookie,
                        stat: nlm4_stat {
                            stat: self.granted_answer,
                        },
                    }
                    .to_bytes(),
                )
            }
            (NSM, SM_NOTIFY) => {
                let _ = self.calls.send((NSM, SM_NOTIFY, args));
                ReplyBody::Success(Bytes::new())
            }
            _ => ReplyBody::ProcUnavail,
        };
        std::future::ready(reply)
    }
}

/// Starts a fake client machine on 127.0.0.1; its port and the calls it gets.
async fn fake_client(
    granted_answer: nlm4_stats,
) -> (u16, mpsc::UnboundedReceiver<(u32, u32, Bytes)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = Arc::new(FakeClient {
        port: Mutex::new(port),
        granted_answer,
        calls: tx,
    });
    tokio::spawn(txnfs_rpc::serve(
        listener,
        svc,
        Default::default(),
        std::future::pending(),
    ));
    (port, rx)
}

async fn next_granted(rx: &mut mpsc::UnboundedReceiver<(u32, u32, Bytes)>) -> nlm4_testargs {
    let (prog, p, args) = tokio::time::timeout(T, rx.recv())
        .await
        .expect("NLM4_GRANTED arrives in time")
        .expect("the fake client runs");
    assert_eq!((prog, p), (NLM, GRANTED));
    nlm4_testargs::from_bytes(args).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_lock_is_granted_by_callback_when_the_holder_unlocks() {
    let srv = start_memory_server().await;
    let (port, mut calls) = fake_client(nlm4_stats::NLM4_GRANTED).await;
    srv.server.nlm.set_client_rpcbind_port(port);
    let mut s = Session::new(srv.addr, b"v4-locker").await;
    let (osid, fh) = s.open_new_file("f").await;
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();

    // NLM holder, NLM waiter: the waiter's host gets GRANTED as soon as it unlocks.
    let holder = alock("host-a", &fh, 1, 0, 0);
    let waiter = alock("host-b", &fh, 2, 10, 5);
    assert_eq!(
        lock(&cl, holder.clone(), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert_eq!(
        lock(&cl, waiter.clone(), true, false).await,
        nlm4_stats::NLM4_BLOCKED
    );
    assert_eq!(srv.server.nlm.blocked.len(), 1);
    // A retransmission is one waiter still.
    assert_eq!(
        lock(&cl, waiter.clone(), true, false).await,
        nlm4_stats::NLM4_BLOCKED
    );
    assert_eq!(srv.server.nlm.blocked.len(), 1);
    assert!(calls.try_recv().is_err(), "nothing granted while held");
    let t0 = Instant::now();
    assert_eq!(unlock(&cl, holder.clone()).await, nlm4_stats::NLM4_GRANTED);
    let g = next_granted(&mut calls).await;
    let took = t0.elapsed();
    assert_eq!(&g.cookie[..], b"cookie-2", "the LOCK's cookie");
    assert_eq!((g.alock.svid, g.alock.l_offset, g.alock.l_len), (2, 10, 5));
    assert_eq!(g.alock.fh, fh);
    assert!(g.exclusive);
    assert!(
        took < Duration::from_millis(900),
        "granted after {took:?}: an UNLOCK wakes the waiters"
    );
    // The lock is the waiter's now: the v4 client is denied by it, and the waiter's
    // retransmitted LOCK finds it granted.
    let d = v4_lock(&mut s, &fh, &osid, b"v4-owner", 12, 1)
        .await
        .expect_err("the granted lock holds");
    assert_eq!((d.offset, d.length), (10, 5));
    assert_eq!(
        lock(&cl, waiter.clone(), true, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert!(srv.server.nlm.blocked.is_empty());
    assert_eq!(unlock(&cl, waiter.clone()).await, nlm4_stats::NLM4_GRANTED);

    // v4 holder, NLM waiter: a v4 LOCKU wakes the waiter too (not the 1 s poll).
    let lsid = v4_lock(&mut s, &fh, &osid, b"v4-owner", 0, 100)
        .await
        .unwrap();
    let third = alock("host-c", &fh, 3, 0, 1);
    assert_eq!(
        lock(&cl, third.clone(), true, false).await,
        nlm4_stats::NLM4_BLOCKED
    );
    let t0 = Instant::now();
    v4_locku(&mut s, &fh, &lsid, 0, 100).await;
    let g = next_granted(&mut calls).await;
    let took = t0.elapsed();
    assert_eq!((g.alock.svid, &g.cookie[..]), (3, &b"cookie-3"[..]));
    // Without the wake-up the 1 s poll finds it after 0-1 s: 400 ms fails most runs.
    assert!(
        took < Duration::from_millis(400),
        "granted after {took:?}: a v4 LOCKU wakes the waiters"
    );

    // CANCEL: a waiter that gave up is never granted.
    let fourth = alock("host-d", &fh, 4, 0, 1);
    assert_eq!(
        lock(&cl, fourth.clone(), true, false).await,
        nlm4_stats::NLM4_BLOCKED
    );
    let r: nlm4_res = nlm_call(
        &cl,
        CANCEL,
        nlm4_cancargs {
            cookie: Bytes::from_static(b"c"),
            block: true,
            exclusive: true,
            alock: fourth.clone(),
        },
    )
    .await;
    assert_eq!(r.stat.stat, nlm4_stats::NLM4_GRANTED);
    assert!(srv.server.nlm.blocked.is_empty());
    assert_eq!(unlock(&cl, third).await, nlm4_stats::NLM4_GRANTED);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(calls.try_recv().is_err(), "a cancelled lock was granted");
    assert_eq!(
        lock(&cl, alock("host-e", &fh, 5, 0, 0), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_lock_the_client_no_longer_wants_is_released() {
    let srv = start_memory_server().await;
    let (port, mut calls) = fake_client(nlm4_stats::NLM4_DENIED).await;
    srv.server.nlm.set_client_rpcbind_port(port);
    let mut s = Session::new(srv.addr, b"v4-locker").await;
    let (_osid, fh) = s.open_new_file("f").await;
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();
    let holder = alock("host-a", &fh, 1, 0, 0);
    let waiter = alock("host-b", &fh, 2, 0, 0);
    assert_eq!(
        lock(&cl, holder.clone(), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert_eq!(
        lock(&cl, waiter.clone(), true, false).await,
        nlm4_stats::NLM4_BLOCKED
    );
    assert_eq!(unlock(&cl, holder.clone()).await, nlm4_stats::NLM4_GRANTED);
    next_granted(&mut calls).await;
    // The waiter's host answered DENIED: the range is free again.
    let deadline = Instant::now() + T;
    loop {
        if lock(&cl, holder.clone(), false, false).await == nlm4_stats::NLM4_GRANTED {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the refused grant was never released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SM_NOTIFY from a client's statd (the client rebooted) and FREE_ALL release its locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sm_notify_and_free_all_release_a_hosts_locks() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"v4-locker").await;
    let (osid, fh) = s.open_new_file("f").await;
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();
    assert_eq!(
        lock(&cl, alock("rebooter", &fh, 1, 0, 10), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert_eq!(
        lock(&cl, alock("freer", &fh, 1, 10, 10), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert!(v4_lock(&mut s, &fh, &osid, b"o", 0, 20).await.is_err());

    let notify = stat_chge {
        mon_name: Bytes::from_static(b"rebooter"),
        state: 3,
    };
    cl.call(NSM, 1, SM_NOTIFY, notify.to_bytes()).await.unwrap();
    let d = v4_lock(&mut s, &fh, &osid, b"o", 0, 20).await.unwrap_err();
    assert_eq!(d.offset, 10, "only the other host's lock is left");
    assert!(
        v4_lock(&mut s, &fh, &osid, b"o", 0, 10).await.is_ok(),
        "the rebooted host's range is free"
    );

    let free = nlm4_notify {
        name: Bytes::from_static(b"freer"),
        state: 5,
    };
    cl.call(NLM, 4, FREE_ALL, free.to_bytes()).await.unwrap();
    assert!(v4_lock(&mut s, &fh, &osid, b"o", 10, 10).await.is_ok());

    // SM_STAT answers this server's (odd) state number.
    let r = cl
        .call(
            NSM,
            1,
            1,
            sm_name {
                mon_name: Bytes::from_static(b"x"),
            }
            .to_bytes(),
        )
        .await
        .unwrap();
    let st = sm_stat_res::from_bytes(r).unwrap();
    assert_eq!(st.res_stat, sm_res::STAT_SUCC);
    assert_eq!(st.state % 2, 1);
}

/// A server of one local export, grace period on (as long as the lease: 3 s).
async fn serve_graced(
    export: &std::path::Path,
    state: &std::path::Path,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> TestServer {
    let (export, state) = (export.to_path_buf(), state.to_path_buf());
    start_server_until(
        move |_| txnfs_server::Config {
            grace: true,
            lease_time: 3,
            ..local_config(export, &state)
        },
        async move {
            let _ = stop.await;
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_hosts_are_notified_and_only_reclaims_are_granted_in_grace() {
    let base = std::env::temp_dir().join(format!("txnfs-nlm-grace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (export, state) = (base.join("export"), base.join("state"));
    std::fs::create_dir_all(&export).unwrap();
    std::fs::write(export.join("f"), b"").unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let mut srv = serve_graced(&export, &state, stopped).await;
    let v3 = txnfs_rawclient::v3::V3Client::connect(srv.addr, root_cred())
        .await
        .unwrap();
    let root = v3.root("/").await;
    let fh = match v3
        .nfs(
            txnfs_rawclient::v3::proc3::LOOKUP,
            &txnfs_proto::nfs3::LOOKUP3args {
                what: txnfs_rawclient::v3::dirop(&root, "f"),
            },
        )
        .await
        .unwrap()
    {
        txnfs_proto::nfs3::LOOKUP3res::NFS3_OK(ok) => ok.object.data,
        other => panic!("LOOKUP: {other:?}"),
    };
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();
    // A fresh start has nobody to wait for: no grace period.
    assert_eq!(
        lock(&cl, alock("old-host", &fh, 1, 0, 10), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert!(
        std::fs::read_to_string(state.join("nsm"))
            .unwrap()
            .contains("127.0.0.1"),
        "the host is recorded before its lock is granted"
    );
    drop((cl, v3));

    stop.send(()).unwrap();
    (&mut srv.task).await.unwrap();
    let server = Arc::downgrade(&srv.server);
    drop(srv);
    for _ in 0..100 {
        if server.strong_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (port, mut calls) = fake_client(nlm4_stats::NLM4_GRANTED).await;
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let srv = serve_graced(&export, &state, stopped).await;
    srv.server.nlm.set_client_rpcbind_port(port);
    let cl = RpcClient::connect(srv.addr, root_cred()).await.unwrap();

    // In grace: new locks and tests wait, the old host's reclaim is granted.
    assert_eq!(
        lock(&cl, alock("new-host", &fh, 2, 20, 10), false, false).await,
        nlm4_stats::NLM4_DENIED_GRACE_PERIOD
    );
    assert!(matches!(
        test(&cl, alock("new-host", &fh, 2, 0, 10)).await,
        nlm4_testrply::default(nlm4_stats::NLM4_DENIED_GRACE_PERIOD)
    ));
    assert_eq!(
        lock(&cl, alock("old-host", &fh, 1, 0, 10), false, true).await,
        nlm4_stats::NLM4_GRANTED
    );

    // The old host's statd was told of the restart with the new (odd) state number.
    let (prog, p, args) = tokio::time::timeout(T, calls.recv())
        .await
        .expect("SM_NOTIFY in time")
        .unwrap();
    assert_eq!((prog, p), (NSM, SM_NOTIFY));
    let n = stat_chge::from_bytes(args).unwrap();
    assert_eq!(
        &n.mon_name[..],
        b"127.0.0.1",
        "the address the client reaches us by"
    );
    assert_eq!(n.state % 2, 1);

    // After the grace period: reclaims are refused, new locks granted, the reclaimed
    // one still in the way.
    let deadline = Instant::now() + T;
    while srv.server.core().unwrap().in_grace(Instant::now()) {
        assert!(Instant::now() < deadline, "grace did not end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        lock(&cl, alock("new-host", &fh, 2, 20, 10), false, true).await,
        nlm4_stats::NLM4_DENIED_GRACE_PERIOD
    );
    assert_eq!(
        lock(&cl, alock("new-host", &fh, 2, 20, 10), false, false).await,
        nlm4_stats::NLM4_GRANTED
    );
    assert_eq!(
        lock(&cl, alock("new-host", &fh, 2, 0, 10), false, false).await,
        nlm4_stats::NLM4_DENIED
    );
    drop(srv);
    let _ = std::fs::remove_dir_all(&base);
}
