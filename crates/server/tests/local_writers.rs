//! Local writers recall delegations (issue 22 item 3; ADR 0027): a process on the
//! server's host that opens a delegated file of a local export in a conflicting way
//! (this test process, through `std::fs`, from a thread of its own because the open
//! waits) makes the server recall the delegation; the open proceeds when it is
//! returned, or revoked after the recall wait. A file open for writing elsewhere gets
//! no delegation, and the holder's own I/O through the server never recalls its own
//! delegation by way of the lease.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::*;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_server::Config;

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const BOTH: u32 = OPEN4_SHARE_ACCESS_BOTH;

/// A server of one local export (a fresh directory holding "f" = "x") whose recalls
/// wait `recall_wait_ms`, with a one-second callback timeout.
async fn local_deleg_server(tag: &str, recall_wait_ms: u32) -> (TestServer, PathBuf) {
    let dir = std::env::temp_dir().join(format!("txnfs-lw-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("export dir");
    std::fs::write(dir.join("f"), b"x").expect("f");
    let export = dir.clone();
    let srv = start_server(move |state_dir| Config {
        recall_wait_ms: Some(recall_wait_ms),
        callback_timeout_ms: Some(1000),
        ..local_config(export, state_dir)
    })
    .await;
    (srv, dir)
}

impl Holder {
    /// OPEN "f" (no create) with `share_access`: open stateid, delegation, handle.
    async fn open_f(&mut self, share_access: u32) -> (stateid4, open_delegation4, Bytes) {
        let r = self
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_plain("f", share_access, self.owner),
                nfs_argop4::OP_GETFH,
            ])
            .await;
        let (sid, fh) = opened_stateid_and_fh(&r);
        let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)) = &r.resarray[2] else {
            unreachable!()
        };
        (sid, ok.delegation.clone(), fh)
    }

    async fn read_f(&mut self, fh: &Bytes, sid: &stateid4) -> Bytes {
        let r = self
            .run_ok(vec![
                putfh(fh),
                nfs_argop4::OP_READ(READ4args {
                    stateid: sid.clone(),
                    offset: 0,
                    count: 100,
                }),
            ])
            .await;
        match &r.resarray[2] {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => ok.data.clone(),
            other => panic!("READ {other:?}"),
        }
    }
}

fn deleg_stateid(d: &open_delegation4) -> stateid4 {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r) => r.stateid.clone(),
        open_delegation4::OPEN_DELEGATE_WRITE(w) => w.stateid.clone(),
        other => panic!("no delegation granted: {other:?}"),
    }
}

/// From a thread of its own (the open waits for the server): write `data` over
/// `path`, or (`data` empty) read it. The receiver gets what was read and when the
/// access was done.
fn local_access(path: &Path, data: &'static [u8]) -> mpsc::Receiver<(Vec<u8>, Instant)> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let got = if data.is_empty() {
            std::fs::read(&path).expect("local read")
        } else {
            std::fs::write(&path, data).expect("local write");
            Vec::new()
        };
        let _ = tx.send((got, Instant::now()));
    });
    rx
}

/// Whether the local access has finished (without waiting).
fn finished(rx: &mpsc::Receiver<(Vec<u8>, Instant)>) -> bool {
    rx.try_recv().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_write_recalls_a_read_delegation_and_waits_for_its_return() {
    let (srv, dir) = local_deleg_server("recall", 10_000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (osid, d, fh) = a.open_f(READ).await;
    let dsid = deleg_stateid(&d);
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_READ(_)),
        "{d:?}"
    );
    assert_eq!(&a.read_f(&fh, &osid).await[..], b"x");
    assert_eq!(srv.server.watches.len(), 1);

    let done = local_access(&dir.join("f"), b"local bytes");
    let recall = a
        .next_recall(Duration::from_secs(5))
        .await
        .expect("CB_RECALL");
    assert_eq!(recall.stateid.other, dsid.other);
    // The local writer is still waiting for the delegation.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = done;
    assert!(!finished(&waiting), "the local write did not wait");
    let returned = Instant::now();
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    let (_, at) = tokio::task::spawn_blocking(move || {
        waiting
            .recv_timeout(Duration::from_secs(5))
            .expect("local write done")
    })
    .await
    .unwrap();
    assert!(
        at.saturating_duration_since(returned) < Duration::from_secs(1),
        "the local write took {:?} after DELEGRETURN",
        at.saturating_duration_since(returned)
    );
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"local bytes");
    // The holder reads the new bytes through the server.
    assert_eq!(&a.read_f(&fh, &osid).await[..], b"local bytes");
    assert_eq!(srv.server.watches.len(), 0);
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!((stats.recalled, stats.returned, stats.revoked), (1, 1, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_holder_is_revoked_and_the_local_write_goes_ahead() {
    let (srv, dir) = local_deleg_server("silent", 1500).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_, d, _) = a.open_f(READ).await;
    let dsid = deleg_stateid(&d);
    let start = Instant::now();
    let done = local_access(&dir.join("f"), b"written anyway");
    // The holder answers CB_RECALL but never returns the delegation.
    a.next_recall(Duration::from_secs(5))
        .await
        .expect("CB_RECALL");
    let (_, at) = tokio::task::spawn_blocking(move || {
        done.recv_timeout(Duration::from_secs(10))
            .expect("local write done")
    })
    .await
    .unwrap();
    let took = at.saturating_duration_since(start);
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(5),
        "the local write took {took:?}"
    );
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"written anyway");
    assert_eq!(a.test_stateid(&dsid).await, nfsstat4::NFS4ERR_DELEG_REVOKED);
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!(stats.revoked_timeout, 1);
    assert_eq!(srv.server.watches.len(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_open_for_writing_elsewhere_gets_no_delegation() {
    let (srv, dir) = local_deleg_server("busy", 5000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("f"))
        .unwrap();
    let (_, d, _) = a.open_f(READ).await;
    assert_eq!(d, open_delegation4::OPEN_DELEGATE_NONE);
    // Asked for one: the reason is contention.
    let (_, d, _) = a.open_f(READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG).await;
    assert_eq!(
        d,
        open_delegation4::OPEN_DELEGATE_NONE_EXT(open_none_delegation4::WND4_CONTENTION(false))
    );
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!((stats.granted, stats.outstanding), (0, 0));
    assert_eq!(srv.server.watches.len(), 0);
    // Closed elsewhere: the next OPEN gets one.
    drop(writer);
    let (_, d, _) = a.open_f(READ).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_READ(_)),
        "{d:?}"
    );
    assert_eq!(srv.server.watches.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_delegation_holders_own_io_does_not_recall_it_but_a_local_reader_does() {
    let (srv, dir) = local_deleg_server("own-io", 10_000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (osid, d, fh) = a.open_f(BOTH).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_WRITE(_)),
        "{d:?}"
    );
    let dsid = deleg_stateid(&d);
    // The holder's WRITE and READ through the server (with the open stateid, then the
    // delegation's) do not break the server's own write lease.
    a.run_ok(vec![putfh(&fh), write(&osid, 0, b"abc")]).await;
    a.run_ok(vec![putfh(&fh), write(&dsid, 3, b"def")]).await;
    assert_eq!(&a.read_f(&fh, &dsid).await[..], b"abcdef");
    assert!(
        a.next_recall(Duration::from_millis(500)).await.is_none(),
        "the holder's own I/O recalled its delegation"
    );
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!(stats.recalled, 0);
    // A local reader waits for the write delegation, and sees what was written.
    let done = local_access(&dir.join("f"), b"");
    let recall = a
        .next_recall(Duration::from_secs(5))
        .await
        .expect("CB_RECALL");
    assert_eq!(recall.stateid.other, dsid.other);
    // Flush on recall (still through the lease's descriptor), then return.
    a.run_ok(vec![putfh(&fh), write(&dsid, 6, b"!")]).await;
    assert!(!finished(&done), "the local read did not wait");
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    let (got, _) = tokio::task::spawn_blocking(move || {
        done.recv_timeout(Duration::from_secs(5))
            .expect("local read done")
    })
    .await
    .unwrap();
    assert_eq!(got, b"abcdef!");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_conflict_on_a_watched_file_proceeds_after_the_return() {
    let (srv, dir) = local_deleg_server("nfs-conflict", 10_000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_, d, fh) = a.open_f(READ).await;
    let dsid = deleg_stateid(&d);
    // Another client opens for writing and writes: held for the recall, then done
    // at once, its own open of the file not stopped by the server's lease.
    let mut o = Session::new(srv.addr, b"other-client").await;
    let other = tokio::spawn(async move {
        let r = o
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_plain("f", BOTH, b"o2"),
                nfs_argop4::OP_GETFH,
            ])
            .await;
        let (sid, fh) = opened_stateid_and_fh(&r);
        let w = o.run(vec![putfh(&fh), write(&sid, 0, b"nfs")]).await;
        (w.status, Instant::now())
    });
    a.next_recall(Duration::from_secs(5))
        .await
        .expect("CB_RECALL");
    let returned = Instant::now();
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    let (status, at) = other.await.unwrap();
    assert_eq!(status, nfsstat4::NFS4_OK);
    assert!(at.saturating_duration_since(returned) < Duration::from_secs(1));
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"nfs");
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!((stats.recalled, stats.returned, stats.revoked), (1, 1, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_delegation_holders_own_write_gives_it_up() {
    let (srv, dir) = local_deleg_server("own-write", 10_000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_, d, fh) = a.open_f(READ).await;
    let dsid = deleg_stateid(&d);
    // The holder opens for writing too (no new delegation: one per client and file)
    // and writes: the write is not held up by the server's read lease, but the lease
    // is gone, so the delegation it protected is recalled.
    let (wsid, _, _) = a.open_f(BOTH).await;
    let t = Instant::now();
    a.run_ok(vec![putfh(&fh), write(&wsid, 0, b"mine")]).await;
    assert!(t.elapsed() < Duration::from_secs(1));
    let recall = a
        .next_recall(Duration::from_secs(5))
        .await
        .expect("CB_RECALL");
    assert_eq!(recall.stateid.other, dsid.other);
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"mine");
    assert_eq!(srv.server.watches.len(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
