//! The courteous server over TCP (RFC 8881 §8.4.3): client A opens with deny-write and
//! locks a range, then goes silent past its lease (still within the server's courtesy
//! time). Client B's conflicting OPEN or blocking LOCK succeeds, releasing A, whose
//! session and stateids are then refused. Without a conflict, A renewing keeps it all.

mod common;

use bytes::Bytes;
use common::*;
use std::sync::Arc;
use std::time::Duration;
use txnfs_server::nfs::*;
use txnfs_server::{Config, Server};
use txnfs_state::clock::ManualClock;

const LEASE: Duration = Duration::from_secs(60);

struct Fixture {
    addr: std::net::SocketAddr,
    clock: Arc<ManualClock>,
    task: tokio::task::JoinHandle<()>,
    state_dir: std::path::PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

/// A memory server on a ManualClock (its leases run only when the test says so).
async fn start() -> Fixture {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state_dir = std::env::temp_dir().join(format!(
        "txnfs-courtesy-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let clock = Arc::new(ManualClock::new());
    let cfg = Config {
        lease_time: LEASE.as_secs() as u32,
        ..memory_config(&state_dir, false)
    };
    let server = Server::with_clock(cfg, clock.clone()).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = txnfs_server::run(server, listener, std::future::pending()).await;
    });
    Fixture {
        addr,
        clock,
        task,
        state_dir,
    }
}

fn open(s: &Session, owner: &'static [u8], access: u32, deny: u32) -> nfs_argop4 {
    let mut o = open_new("shared");
    if let nfs_argop4::OP_OPEN(ref mut x) = o {
        x.owner.clientid = s.clientid;
        x.owner.owner = Bytes::from_static(owner);
        x.share_access = access;
        x.share_deny = deny;
    }
    o
}

/// SEQUENCE, PUTROOTFH, OPEN, GETFH: the open stateid and the file handle.
async fn open_file(
    s: &mut Session,
    owner: &'static [u8],
    access: u32,
    deny: u32,
) -> Result<(stateid4, Bytes), nfsstat4> {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open(s, owner, access, deny),
            nfs_argop4::OP_GETFH,
        ])
        .await;
    if r.status != nfsstat4::NFS4_OK {
        return Err(r.status);
    }
    Ok(opened_stateid_and_fh(&r))
}

async fn lock(
    s: &mut Session,
    fh: &Bytes,
    open: &stateid4,
    owner: &'static [u8],
    locktype: nfs_lock_type4,
) -> Result<stateid4, nfsstat4> {
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTFH(PUTFH4args { object: fh.clone() }),
            nfs_argop4::OP_LOCK(Box::new(LOCK4args {
                locktype,
                reclaim: false,
                offset: 0,
                length: 100,
                locker: locker4::TRUE(open_to_lock_owner4 {
                    open_seqid: 0,
                    open_stateid: open.clone(),
                    lock_seqid: 0,
                    lock_owner: lock_owner4 {
                        clientid: s.clientid,
                        owner: Bytes::from_static(owner),
                    },
                }),
            })),
        ])
        .await;
    match &r.resarray.get(2) {
        Some(nfs_resop4::OP_LOCK(LOCK4res::NFS4_OK(ok))) => Ok(ok.lock_stateid.clone()),
        _ => Err(r.status),
    }
}

/// TEST_STATEID from `s` for `sids`: one status each.
async fn test_stateids(s: &mut Session, sids: &[stateid4]) -> Vec<nfsstat4> {
    let r = s
        .run(vec![nfs_argop4::OP_TEST_STATEID(TEST_STATEID4args {
            ts_stateids: sids.to_vec(),
        })])
        .await;
    match &r.resarray.get(1) {
        Some(nfs_resop4::OP_TEST_STATEID(TEST_STATEID4res::NFS4_OK(ok))) => {
            ok.tsr_status_codes.clone()
        }
        other => panic!("TEST_STATEID result {other:?}"),
    }
}

/// A: OPEN(both, deny write) + write LOCK of [0, 100); B: a read open (no conflict).
async fn a_holds_b_waits(f: &Fixture) -> (Session, Session, (stateid4, Bytes), stateid4, stateid4) {
    let mut a = Session::new(f.addr, b"client-a").await;
    let mut b = Session::new(f.addr, b"client-b").await;
    let (sa, fh) = open_file(
        &mut a,
        b"oa",
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_WRITE,
    )
    .await
    .expect("A opens");
    let la = lock(&mut a, &fh, &sa, b"la", nfs_lock_type4::WRITE_LT)
        .await
        .expect("A locks");
    let (sb, _) = open_file(&mut b, b"ob", OPEN4_SHARE_ACCESS_READ, 0)
        .await
        .expect("B reads alongside");
    // While A's lease runs, B is refused.
    assert_eq!(
        open_file(&mut b, b"ob-w", OPEN4_SHARE_ACCESS_WRITE, 0).await,
        Err(nfsstat4::NFS4ERR_SHARE_DENIED)
    );
    assert_eq!(
        lock(&mut b, &fh, &sb, b"lb", nfs_lock_type4::READW_LT).await,
        Err(nfsstat4::NFS4ERR_DENIED)
    );
    (a, b, (sa, fh), la, sb)
}

async fn assert_a_released(f: &Fixture, a: &mut Session, sa: &stateid4, la: &stateid4) {
    // A's session went with its state: its next SEQUENCE is refused ...
    let r = a.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BADSESSION, "{:?}", r.resarray);
    // ... and after recovering (a new client id) its old stateids are unknown.
    let mut again = Session::new(f.addr, b"client-a").await;
    assert_eq!(
        test_stateids(&mut again, &[sa.clone(), la.clone()]).await,
        vec![nfsstat4::NFS4ERR_BAD_STATEID, nfsstat4::NFS4ERR_BAD_STATEID]
    );
}

#[tokio::test]
async fn conflicting_open_releases_an_expired_client() {
    let f = start().await;
    let (mut a, mut b, (sa, _fh), la, _sb) = a_holds_b_waits(&f).await;
    f.clock.advance(LEASE + Duration::from_secs(1));
    let (sbw, _) = open_file(&mut b, b"ob-w", OPEN4_SHARE_ACCESS_WRITE, 0)
        .await
        .expect("A's deny-write yields once its lease ran out");
    assert_eq!(test_stateids(&mut b, &[sbw]).await, vec![nfsstat4::NFS4_OK]);
    assert_a_released(&f, &mut a, &sa, &la).await;
}

#[tokio::test]
async fn waiting_blocking_lock_gets_an_expired_clients_range() {
    let f = start().await;
    let (mut a, mut b, (sa, fh), la, sb) = a_holds_b_waits(&f).await;
    // B polls its blocking lock (RFC 8881 §9.6) while A's lease runs out.
    f.clock.advance(LEASE - Duration::from_secs(1));
    assert_eq!(
        lock(&mut b, &fh, &sb, b"lb", nfs_lock_type4::READW_LT).await,
        Err(nfsstat4::NFS4ERR_DENIED)
    );
    f.clock.advance(Duration::from_secs(2));
    lock(&mut b, &fh, &sb, b"lb", nfs_lock_type4::READW_LT)
        .await
        .expect("the waiting lock is granted once A's lease ran out");
    assert_a_released(&f, &mut a, &sa, &la).await;
}

#[tokio::test]
async fn renewing_in_time_keeps_opens_and_locks() {
    let f = start().await;
    let (mut a, mut b, (sa, fh), la, sb) = a_holds_b_waits(&f).await;
    // Silent past its lease, nobody conflicting; then A comes back.
    f.clock.advance(LEASE + LEASE / 2);
    let r = a.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert_eq!(
        open_file(&mut b, b"ob-w", OPEN4_SHARE_ACCESS_WRITE, 0).await,
        Err(nfsstat4::NFS4ERR_SHARE_DENIED)
    );
    assert_eq!(
        lock(&mut b, &fh, &sb, b"lb", nfs_lock_type4::READW_LT).await,
        Err(nfsstat4::NFS4ERR_DENIED)
    );
    assert_eq!(
        test_stateids(&mut a, &[sa, la]).await,
        vec![nfsstat4::NFS4_OK, nfsstat4::NFS4_OK]
    );
}
