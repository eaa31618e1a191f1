//! Asynchronous COPY over real TCP (RFC 7862 §4.4-4.6, §15.2, §15.8, §15.9, §16.1;
//! ADR 0026): a large COPY the client lets run asynchronously is answered with a copy
//! stateid and reported by CB_OFFLOAD on the client's back channel; OFFLOAD_STATUS
//! follows it, OFFLOAD_CANCEL stops it, and the copies that must stay synchronous do.
//! A local export (the bytes are checked on the host), a test peer that answers
//! callbacks as the Linux client does, NFSv4.2 COMPOUNDs.
//!
//! Multi-threaded runtimes: a copy's recalls and the server's held requests block
//! threads, as in `txnfs serve`.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::peer::T;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_server::Config;
use txnfs_xdr::Decode;

const MIB: u64 = 1 << 20;
/// The large copy: four times the default threshold.
const BIG: u64 = 64 * MIB;
const STEP: u64 = 4 * MIB;

/// A server of one local export (a fresh directory, returned) whose asynchronous
/// copies move `STEP` bytes per step and pause `pause` after each.
async fn offload_server(tag: &str, pause: Duration) -> (TestServer, PathBuf) {
    offload_server_until(tag, pause, |_| {}, std::future::pending()).await
}

/// As [`offload_server`], with `tweak` applied to the configuration, serving until
/// `shutdown` resolves.
async fn offload_server_until(
    tag: &str,
    pause: Duration,
    tweak: impl FnOnce(&mut Config),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (TestServer, PathBuf) {
    let dir = std::env::temp_dir().join(format!("txnfs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("export dir");
    let export = dir.clone();
    let srv = start_server_until(
        move |state_dir| {
            let mut c = Config {
                callback_timeout_ms: Some(1000),
                async_copy_chunk: STEP,
                async_copy_pause: Some(pause),
                ..local_config(export, state_dir)
            };
            tweak(&mut c);
            c
        },
        shutdown,
    )
    .await;
    (srv, dir)
}

/// `len` bytes no two MiB of which are alike.
fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / MIB) % 251) as u8).collect()
}

/// Writes `src` (`len` bytes of [`pattern`]) and an empty `dst` on the host.
fn host_files(dir: &Path, len: u64) -> Vec<u8> {
    let data = pattern(len);
    std::fs::write(dir.join("src"), &data).expect("write src");
    std::fs::write(dir.join("dst"), b"").expect("write dst");
    data
}

fn host_size(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).expect("stat").len()
}

/// OPEN `name` (existing) with `access` for `owner` in the root: (stateid, handle).
fn open_ops(name: &str, access: u32, owner: &'static [u8]) -> Vec<nfs_argop4> {
    vec![
        nfs_argop4::OP_PUTROOTFH,
        open_plain(name, access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG, owner),
        nfs_argop4::OP_GETFH,
    ]
}

async fn holder_open(h: &mut Holder, name: &str, access: u32) -> (stateid4, Bytes) {
    let r = h.run(open_ops(name, access, h.owner)).await;
    opened_stateid_and_fh(&r)
}

/// COPY of `count` bytes (0: to the end) from offset 0 to offset 0.
fn copy_op(src: &stateid4, dst: &stateid4, count: u64, synchronous: bool) -> nfs_argop4 {
    nfs_argop4::OP_COPY(Box::new(COPY4args {
        ca_src_stateid: src.clone(),
        ca_dst_stateid: dst.clone(),
        ca_src_offset: 0,
        ca_dst_offset: 0,
        ca_count: count,
        ca_consecutive: true,
        ca_synchronous: synchronous,
        ca_source_server: vec![],
    }))
}

/// PUTFH(src) SAVEFH PUTFH(dst) COPY.
fn copy_ops(sfh: &Bytes, dfh: &Bytes, op: nfs_argop4) -> Vec<nfs_argop4> {
    vec![putfh(sfh), nfs_argop4::OP_SAVEFH, putfh(dfh), op]
}

fn copy_result(r: &COMPOUND4res) -> COPY4resok {
    let nfs_resop4::OP_COPY(COPY4res::NFS4_OK(ok)) = &r.resarray[4] else {
        panic!("COPY {:?}", r.resarray)
    };
    ok.clone()
}

fn offload_status(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4args {
        osa_stateid: sid.clone(),
    })
}

fn offload_cancel(sid: &stateid4) -> nfs_argop4 {
    nfs_argop4::OP_OFFLOAD_CANCEL(OFFLOAD_CANCEL4args {
        oca_stateid: sid.clone(),
    })
}

/// OFFLOAD_STATUS of `sid` for the file `fh`: (count, complete) or the error.
async fn status(
    h: &mut Holder,
    fh: &Bytes,
    sid: &stateid4,
) -> Result<(u64, Vec<nfsstat4>), nfsstat4> {
    let r = h.run(vec![putfh(fh), offload_status(sid)]).await;
    match &r.resarray[2] {
        nfs_resop4::OP_OFFLOAD_STATUS(OFFLOAD_STATUS4res::NFS4_OK(ok)) => {
            Ok((ok.osr_count, ok.osr_complete.clone()))
        }
        other => Err(status_of(other)),
    }
}

async fn cancel(h: &mut Holder, fh: &Bytes, sid: &stateid4) -> nfsstat4 {
    let r = h.run(vec![putfh(fh), offload_cancel(sid)]).await;
    status_of(&r.resarray[2])
}

/// A 4.2 holder (back channel up) with `src` open for reading and `dst` for writing.
async fn copier(srv: &TestServer, owner: &'static [u8]) -> (Holder, [(stateid4, Bytes); 2]) {
    let mut h = Holder::with_minor(srv, owner, 2).await;
    let src = holder_open(&mut h, "src", OPEN4_SHARE_ACCESS_READ).await;
    let dst = holder_open(&mut h, "dst", OPEN4_SHARE_ACCESS_BOTH).await;
    (h, [src, dst])
}

/// Waits until no copy thread runs.
async fn copies_stopped(srv: &TestServer) {
    let deadline = Instant::now() + T;
    while srv.server.offloads.running() > 0 {
        assert!(Instant::now() < deadline, "a copy keeps running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_asynchronous_copy_is_reported_by_cb_offload_and_offload_status() {
    let (srv, dir) = offload_server("offload-async", Duration::from_millis(40)).await;
    let data = host_files(&dir, BIG);
    let (mut h, [(ssid, sfh), (dsid, dfh)]) = copier(&srv, b"async-copier").await;
    // Count 0: to the source's end of file.
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, 0, false)))
        .await;
    let ok = copy_result(&r);
    assert!(!ok.cr_requirements.cr_synchronous, "{ok:?}");
    assert_eq!(ok.cr_response.wr_callback_id.len(), 1, "{ok:?}");
    assert_eq!(ok.cr_response.wr_count, 0, "the bytes follow in CB_OFFLOAD");
    let copy_sid = ok.cr_response.wr_callback_id[0].clone();
    // Under way: 16 steps of 40 ms at least.
    let (count, complete) = status(&mut h, &dfh, &copy_sid).await.expect("status");
    assert!(
        complete.is_empty(),
        "finished already: {count} {complete:?}"
    );
    assert!(count < BIG, "{count}");
    // The status names the copy by its stateid and its destination, for its client.
    let mut forged = copy_sid.clone();
    forged.other[11] ^= 1;
    assert_eq!(
        status(&mut h, &dfh, &forged).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID)
    );
    assert_eq!(
        status(&mut h, &sfh, &copy_sid).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID),
        "not the copy's destination"
    );
    assert_eq!(
        status(&mut h, &dfh, &dsid).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID),
        "an open stateid names no copy"
    );
    let mut other = Holder::with_minor(&srv, b"other-client", 2).await;
    assert_eq!(
        status(&mut other, &dfh, &copy_sid).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID),
        "another client's copy"
    );
    assert_eq!(
        cancel(&mut other, &dfh, &copy_sid).await,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
    // Done: CB_OFFLOAD with the whole count, on the copier's back channel.
    let cb = h.next_offload(T).await.expect("CB_OFFLOAD");
    assert_eq!(cb.coa_stateid, copy_sid);
    assert_eq!(cb.coa_fh, dfh);
    let offload_info4::NFS4_OK(wr) = &cb.coa_offload_info else {
        panic!("the copy failed: {:?}", cb.coa_offload_info)
    };
    assert_eq!(wr.wr_count, BIG);
    assert_eq!(wr.wr_writeverf, ok.cr_response.wr_writeverf);
    assert!(wr.wr_callback_id.is_empty());
    // OFFLOAD_STATUS still knows it, finished.
    assert_eq!(
        status(&mut h, &dfh, &copy_sid).await,
        Ok((BIG, vec![nfsstat4::NFS4_OK]))
    );
    let got = std::fs::read(dir.join("dst")).expect("read dst");
    assert_eq!(got.len() as u64, BIG);
    assert!(got == data, "the destination differs from the source");
    // The other client was never told.
    assert!(other
        .next_offload(Duration::from_millis(200))
        .await
        .is_none());
    // Cancelling a finished copy forgets it (as knfsd).
    assert_eq!(cancel(&mut h, &dfh, &copy_sid).await, nfsstat4::NFS4_OK);
    assert_eq!(
        status(&mut h, &dfh, &copy_sid).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID)
    );
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offload_cancel_stops_a_running_copy_without_cb_offload() {
    let (srv, dir) = offload_server("offload-cancel", Duration::from_millis(150)).await;
    host_files(&dir, BIG);
    let (mut h, [(ssid, sfh), (dsid, dfh)]) = copier(&srv, b"cancelling-copier").await;
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, BIG, false)))
        .await;
    let ok = copy_result(&r);
    let copy_sid = ok.cr_response.wr_callback_id[0].clone();
    // Wait for the first step.
    let deadline = Instant::now() + T;
    loop {
        let (count, complete) = status(&mut h, &dfh, &copy_sid).await.expect("status");
        assert!(complete.is_empty(), "finished before it was cancelled");
        if count > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(cancel(&mut h, &dfh, &copy_sid).await, nfsstat4::NFS4_OK);
    copies_stopped(&srv).await;
    let size = host_size(&dir, "dst");
    assert!(size < BIG, "the copy ran to its end: {size}");
    assert!(h.next_offload(Duration::from_millis(500)).await.is_none());
    assert_eq!(host_size(&dir, "dst"), size, "the copy went on");
    // The stateid is gone.
    assert_eq!(
        status(&mut h, &dfh, &copy_sid).await,
        Err(nfsstat4::NFS4ERR_BAD_STATEID)
    );
    assert_eq!(
        cancel(&mut h, &dfh, &copy_sid).await,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
    assert_eq!(srv.server.offloads.tracked(), 0);
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

/// SEQUENCE + `ops` as a 4.2 COMPOUND of a plain session (no back channel).
async fn run42(s: &mut Session, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    s.seq += 1;
    let mut all = vec![s.sequence(0, s.seq)];
    all.extend(ops);
    let b = call_raw(&s.cl, encode_compound_minor(all, 2)).await;
    COMPOUND4res::from_bytes(b).expect("reply decodes")
}

/// The synchronous answer to a whole-file COPY of `len` bytes.
fn assert_synchronous(r: &COMPOUND4res, len: u64, why: &str) {
    let ok = copy_result(r);
    assert!(ok.cr_requirements.cr_synchronous, "{why}: {ok:?}");
    assert!(ok.cr_response.wr_callback_id.is_empty(), "{why}: {ok:?}");
    assert_eq!(ok.cr_response.wr_count, len, "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_stay_synchronous_without_back_channel_when_small_asked_or_in_a_transaction() {
    let (srv, dir) = offload_server("offload-sync", Duration::ZERO).await;
    let data = host_files(&dir, BIG);
    // A client without a back channel: CB_OFFLOAD could never reach it.
    let mut s = Session::new(srv.addr, b"no-back-channel").await;
    let r = run42(&mut s, open_ops("src", OPEN4_SHARE_ACCESS_READ, b"o1")).await;
    let (ssid, sfh) = opened_stateid_and_fh(&r);
    let r = run42(&mut s, open_ops("dst", OPEN4_SHARE_ACCESS_BOTH, b"o1")).await;
    let (dsid, dfh) = opened_stateid_and_fh(&r);
    let r = run42(
        &mut s,
        copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, 0, false)),
    )
    .await;
    assert_synchronous(&r, BIG, "no back channel");
    assert!(std::fs::read(dir.join("dst")).expect("dst") == data);
    assert_eq!(srv.server.offloads.tracked(), 0);
    // A client with one: below the threshold, or asking for a synchronous copy.
    std::fs::write(dir.join("dst"), b"").expect("truncate dst");
    let (mut h, [(ssid, sfh), (dsid, dfh)]) = copier(&srv, b"sync-copier").await;
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, MIB, false)))
        .await;
    assert_synchronous(&r, MIB, "1 MiB");
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, BIG, true)))
        .await;
    assert_synchronous(&r, BIG, "ca_synchronous");
    // In a transaction: its changes must be undoable and end with the COMPOUND.
    let r = h
        .run_proc(
            txnfs_proto::PROC_TXN_COMPOUND,
            copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, 0, false)),
        )
        .await;
    assert_synchronous(&r, BIG, "transaction");
    assert_eq!(srv.server.offloads.tracked(), 0);
    assert!(h.next_offload(Duration::from_millis(200)).await.is_none());
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_stops_running_copies() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async {
        let _ = rx.await;
    };
    let (mut srv, dir) =
        offload_server_until("offload-stop", Duration::from_secs(2), |_| {}, stop).await;
    host_files(&dir, BIG);
    let (mut h, [(ssid, sfh), (dsid, dfh)]) = copier(&srv, b"stopped-copier").await;
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, 0, false)))
        .await;
    assert!(!copy_result(&r).cr_requirements.cr_synchronous);
    assert_eq!(srv.server.offloads.running(), 1);
    // 16 steps of two seconds would take half a minute.
    let stopped = Instant::now();
    let _ = tx.send(());
    tokio::time::timeout(Duration::from_secs(8), &mut srv.task)
        .await
        .expect("the server stops without waiting for the copy")
        .expect("serving task");
    assert!(stopped.elapsed() < Duration::from_secs(8));
    assert_eq!(srv.server.offloads.running(), 0);
    assert!(host_size(&dir, "dst") < BIG);
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_copies_of_an_expired_client_stop() {
    // A one-second lease: a client silent for two is released at the next tick.
    let (srv, dir) = offload_server_until(
        "offload-expire",
        Duration::from_millis(400),
        |c| c.lease_time = 1,
        std::future::pending(),
    )
    .await;
    host_files(&dir, BIG);
    let (mut h, [(ssid, sfh), (dsid, dfh)]) = copier(&srv, b"expiring-copier").await;
    let r = h
        .run(copy_ops(&sfh, &dfh, copy_op(&ssid, &dsid, 0, false)))
        .await;
    assert!(!copy_result(&r).cr_requirements.cr_synchronous);
    assert_eq!(srv.server.offloads.tracked(), 1);
    // 16 steps of 400 ms: the client goes silent well before the copy could end.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    srv.server.tick();
    copies_stopped(&srv).await;
    assert_eq!(
        srv.server.offloads.tracked(),
        0,
        "the expired client's copy is forgotten"
    );
    assert!(host_size(&dir, "dst") < BIG, "the copy ran to its end");
    drop(h);
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}
