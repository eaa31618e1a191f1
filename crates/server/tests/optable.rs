//! The op table's rules over real TCP (ADR 0007): an op that modifies state is refused
//! *before* it runs when its reply cannot fit (REP_TOO_BIG[_TO_CACHE]), the executor
//! carries the current stateid, and the server counts what it ran.

mod common;

use common::*;
use txnfs_server::nfs::*;

const CURRENT_STATEID: stateid4 = stateid4 {
    seqid: 1,
    other: [0; 12],
};

/// COMPOUND4res header (status, empty tag, count) plus the SEQUENCE result.
const HEAD: usize = 12 + 44;
/// PUTROOTFH's result.
const PUTROOTFH: usize = 8;

/// Enough PUTROOTFHs that `limit - 16` bytes of reply are used after `HEAD + used`:
/// room for a failed op's status, not for a CREATE or RENAME result.
fn filler(limit: usize, used: usize) -> Vec<nfs_argop4> {
    let k = (limit - HEAD - used - 16) / PUTROOTFH;
    vec![nfs_argop4::OP_PUTROOTFH; k]
}

#[tokio::test]
async fn create_whose_reply_cannot_be_cached_does_not_run() {
    let srv = start_memory_server().await;
    let (mut t, fore) = Session::with_limits(srv.addr, b"too-big-to-cache", 1 << 20, 1024).await;
    let cached = fore.ca_maxresponsesize_cached as usize;
    assert!(
        cached <= 4096,
        "the server raised the cache limit to {cached}"
    );
    let mut ops = filler(cached, 0);
    let n = ops.len();
    ops.push(mkdir("d"));
    // Session::run sets sa_cachethis.
    let r = t.run(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE);
    assert_eq!(r.resarray.len(), 1 + n + 1);
    assert_eq!(
        status_of(r.resarray.last().unwrap()),
        nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE
    );
    // The client was told CREATE failed: it must not have happened.
    let r = t.run(vec![nfs_argop4::OP_PUTROOTFH, lookup("d")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT, "{:?}", r.resarray);
    // With room, the same CREATE runs.
    let r = t.run(vec![nfs_argop4::OP_PUTROOTFH, mkdir("d")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

#[tokio::test]
async fn rename_whose_reply_is_too_big_does_not_run() {
    let srv = start_memory_server().await;
    let (mut t, fore) = Session::with_limits(srv.addr, b"too-big", 4096, 1024).await;
    let max = fore.ca_maxresponsesize as usize;
    let r = t.run(vec![nfs_argop4::OP_PUTROOTFH, open_new("a")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // PUTROOTFH + SAVEFH + filler + RENAME, without sa_cachethis: the response limit.
    let mut ops = vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_SAVEFH];
    ops.extend(filler(max, 2 * 8));
    ops.push(rename("a", "b"));
    let n = ops.len();
    let r = t.run_uncached(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_REP_TOO_BIG);
    assert_eq!(r.resarray.len(), 1 + n);
    let r = t.run(vec![nfs_argop4::OP_PUTROOTFH, lookup("a")]).await;
    assert_eq!(
        r.status,
        nfsstat4::NFS4_OK,
        "the rename ran: {:?}",
        r.resarray
    );
    let r = t.run(vec![nfs_argop4::OP_PUTROOTFH, lookup("b")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
}

#[tokio::test]
async fn the_executor_carries_the_current_stateid() {
    let (_srv, mut s) = start_with_session(b"current-stateid").await;
    let close_current = || {
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: CURRENT_STATEID,
        })
    };
    // OPEN sets it; SAVEFH keeps it with the saved handle; PUTROOTFH and CREATE replace
    // the current handle and clear it, so CLOSE of "the current stateid" on the new
    // directory has none to use.
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_new("f"),
            nfs_argop4::OP_SAVEFH,
            nfs_argop4::OP_PUTROOTFH,
            mkdir("d"),
            close_current(),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BAD_STATEID, "{:?}", r.resarray);
    assert_eq!(r.resarray.len(), 7);
    // RESTOREFH brings back the file and its stateid: CLOSE then works, once.
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup("f"),
            nfs_argop4::OP_SAVEFH,
            nfs_argop4::OP_PUTROOTFH,
            open_new("g"),
            nfs_argop4::OP_SAVEFH,
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_RESTOREFH,
            close_current(),
            close_current(),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BAD_STATEID, "{:?}", r.resarray);
    assert_eq!(status_of(&r.resarray[9]), nfsstat4::NFS4_OK);
    assert_eq!(r.resarray.len(), 11);
}

#[tokio::test]
async fn unimplemented_and_illegal_ops() {
    let (_srv, mut s) = start_with_session(b"notsupp").await;
    // OPENATTR (named attributes) is an op we do not implement: NOTSUPP.
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_OPENATTR(OPENATTR4args { createdir: false }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
    let r = s.run(vec![nfs_argop4::OP_ILLEGAL]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_OP_ILLEGAL);
    let nfs_resop4::OP_ILLEGAL(_) = &r.resarray[1] else {
        panic!("{:?}", r.resarray)
    };
}

#[tokio::test]
async fn stats_count_compounds_and_ops() {
    let srv = start_memory_server().await;
    let before = srv.server.stats.snapshot();
    let mut s = Session::new(srv.addr, b"stats").await;
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETFH,
            nfs_argop4::OP_PUTROOTFH,
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let after = srv.server.stats.snapshot();
    let count = |name| {
        after
            .ops
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, c)| *c)
    };
    assert_eq!(before.compounds, 0);
    // EXCHANGE_ID, CREATE_SESSION, SEQUENCE + RECLAIM_COMPLETE, then SEQUENCE + 3 ops.
    assert_eq!(after.compounds, 4);
    assert_eq!(count("PUTROOTFH"), 2);
    assert_eq!(count("GETFH"), 1);
    assert_eq!(count("SEQUENCE"), 2);
    assert_eq!(count("RECLAIM_COMPLETE"), 1);
    assert_eq!(count("EXCHANGE_ID"), 1);
    assert_eq!(after.replays, 0);
}
