//! Changes made outside the server in a delegated directory of a local export (issue
//! 22 item 3, directories; ADR 0047): this test process creating, removing or
//! renaming an entry directly in the exported directory sends the holder of a
//! directory delegation a CB_NOTIFY describing it, or a CB_RECALL when the holder did
//! not ask for that kind of notification; an NFS client's change is notified exactly
//! once (the server's own change is not seen again through the watch); the watch
//! goes with the delegation; the counters count.
//!
//! The holder is a test peer answering callbacks on its fore connection; the other
//! client is a plain session. Multi-threaded runtimes, as the other delegation tests.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::*;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

const ADD: u32 = 1 << 3;
const REMOVE: u32 = 1 << 2;
const RENAME: u32 = 1 << 4;
/// FATTR4_TYPE and FATTR4_FILEID.
const TYPE_AND_FILEID: u32 = (1 << 1) | (1 << 20);
/// How soon an outside change must reach the holder.
const PROMPT: Duration = Duration::from_secs(1);

/// A server of one local export (a fresh directory holding the directory "d"),
/// recalls waiting `recall_wait_ms`, a one-second callback timeout.
async fn local_server(tag: &str, recall_wait_ms: u32) -> (TestServer, PathBuf) {
    let dir = std::env::temp_dir().join(format!("txnfs-ldc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("d")).expect("export dir");
    let export = dir.clone();
    let srv = start_server(move |state_dir| txnfs_server::Config {
        recall_wait_ms: Some(recall_wait_ms),
        callback_timeout_ms: Some(1000),
        ..local_config(export, state_dir)
    })
    .await;
    (srv, dir)
}

fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// GET_DIR_DELEGATION asking for `types` without delay, with type and fileid of
/// entries.
fn gdd(types: u32) -> nfs_argop4 {
    let none = nfstime4 {
        seconds: 0,
        nseconds: 0,
    };
    nfs_argop4::OP_GET_DIR_DELEGATION(Box::new(GET_DIR_DELEGATION4args {
        gdda_signal_deleg_avail: false,
        gdda_notification_types: vec![types],
        gdda_child_attr_delay: none.clone(),
        gdda_dir_attr_delay: none,
        gdda_child_attributes: vec![TYPE_AND_FILEID],
        gdda_dir_attributes: vec![],
    }))
}

impl Holder {
    /// The handle of "d" and a directory delegation of it asking for `types`.
    async fn delegate_d(&mut self, types: u32) -> (Bytes, GET_DIR_DELEGATION4resok) {
        let r = self
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                lookup("d"),
                nfs_argop4::OP_GETFH,
                gdd(types),
            ])
            .await;
        let nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh)) = &r.resarray[3] else {
            panic!("{:?}", r.resarray)
        };
        let nfs_resop4::OP_GET_DIR_DELEGATION(GET_DIR_DELEGATION4res::NFS4_OK(
            GET_DIR_DELEGATION4res_non_fatal::GDD4_OK(g),
        )) = &r.resarray[4]
        else {
            panic!("not granted: {:?}", r.resarray)
        };
        (fh.object.clone(), GET_DIR_DELEGATION4resok::clone(g))
    }
}

/// The notifications of a CB_NOTIFY as (type bit, value).
fn changes(n: &CB_NOTIFY4args) -> Vec<(u32, Bytes)> {
    n.cna_changes
        .iter()
        .map(|c| {
            assert_eq!(c.notify_mask.len(), 1, "one bitmap word");
            (c.notify_mask[0], c.notify_vals.clone())
        })
        .collect()
}

/// The one notification of a CB_NOTIFY (type bit, value).
fn single(n: &CB_NOTIFY4args) -> (u32, Bytes) {
    let c = changes(n);
    assert_eq!(c.len(), 1, "{c:?}");
    c.into_iter().next().unwrap()
}

/// FATTR4_TYPE of an entry's attributes (type precedes fileid).
fn entry_type(a: &fattr4) -> u32 {
    assert_eq!(a.attrmask, vec![TYPE_AND_FILEID]);
    u32::from_be_bytes(a.attr_vals[..4].try_into().unwrap())
}

/// The next CB_NOTIFY within `PROMPT` of `since`, or a failure naming `what`.
async fn prompt_notify(a: &mut Holder, since: Instant, what: &str) -> CB_NOTIFY4args {
    let n = a
        .next_notify(PROMPT.saturating_sub(since.elapsed()))
        .await
        .unwrap_or_else(|| panic!("no CB_NOTIFY within {PROMPT:?} of {what}"));
    assert!(since.elapsed() <= PROMPT, "{what}: {:?}", since.elapsed());
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_create_rename_and_remove_are_notified() {
    let (srv, dir) = local_server("notify", 5000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (d, g) = a.delegate_d(ADD | REMOVE | RENAME).await;
    assert_eq!(srv.server.dir_watches.len(), 1, "the directory is watched");
    let dp = dir.join("d");
    let expect = |n: &CB_NOTIFY4args| {
        assert_eq!(n.cna_stateid, g.gddr_stateid, "the directory delegation");
        assert_eq!(n.cna_fh, d, "the delegated directory");
    };

    let t = Instant::now();
    std::fs::File::create(dp.join("made-here")).unwrap();
    let n = prompt_notify(&mut a, t, "a local create").await;
    expect(&n);
    let (bit, v) = single(&n);
    assert_eq!(bit, ADD);
    let add = notify_add4::from_bytes(v).unwrap();
    assert_eq!(add.nad_new_entry.ne_file, name("made-here"));
    assert_eq!(entry_type(&add.nad_new_entry.ne_attrs), 1, "NF4REG");

    let t = Instant::now();
    std::fs::rename(dp.join("made-here"), dp.join("renamed-here")).unwrap();
    let n = prompt_notify(&mut a, t, "a local rename").await;
    expect(&n);
    let (bit, v) = single(&n);
    assert_eq!(bit, RENAME);
    let rn = notify_rename4::from_bytes(v).unwrap();
    assert_eq!(rn.nrn_old_entry.nrm_old_entry.ne_file, name("made-here"));
    assert_eq!(rn.nrn_new_entry.nad_new_entry.ne_file, name("renamed-here"));
    assert_eq!(entry_type(&rn.nrn_new_entry.nad_new_entry.ne_attrs), 1);

    let t = Instant::now();
    std::fs::remove_file(dp.join("renamed-here")).unwrap();
    let n = prompt_notify(&mut a, t, "a local remove").await;
    expect(&n);
    let (bit, v) = single(&n);
    assert_eq!(bit, REMOVE);
    let rm = notify_remove4::from_bytes(v).unwrap();
    assert_eq!(rm.nrm_old_entry.ne_file, name("renamed-here"));

    // A directory made here: an ADD of a directory.
    let t = Instant::now();
    std::fs::create_dir(dp.join("subdir")).unwrap();
    let (bit, v) = single(&prompt_notify(&mut a, t, "a local mkdir").await);
    assert_eq!(bit, ADD);
    let add = notify_add4::from_bytes(v).unwrap();
    assert_eq!(add.nad_new_entry.ne_file, name("subdir"));
    assert_eq!(entry_type(&add.nad_new_entry.ne_attrs), 2, "NF4DIR");

    // Changes elsewhere say nothing.
    std::fs::File::create(dir.join("elsewhere")).unwrap();
    assert!(a.next_notify(Duration::from_millis(300)).await.is_none());

    // Four changes, four notifications, no recall.
    let st = &srv.server.dir_watches.stats;
    assert_eq!(st.changes.load(Ordering::Relaxed), 4);
    assert_eq!(st.notified.load(Ordering::Relaxed), 4);
    assert_eq!(st.recalled.load(Ordering::Relaxed), 0);
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.outstanding), (0, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_change_the_holder_did_not_ask_to_hear_of_recalls() {
    let (srv, dir) = local_server("recall", 400).await;
    std::fs::File::create(dir.join("d/old")).unwrap();
    let mut a = Holder::new(&srv, b"holder-a").await;
    // Told of additions only: a local removal recalls.
    let (d, g) = a.delegate_d(ADD).await;
    let t = Instant::now();
    std::fs::remove_file(dir.join("d/old")).unwrap();
    let recall = a
        .next_recall(PROMPT)
        .await
        .expect("CB_RECALL within a second of the local remove");
    assert!(t.elapsed() <= PROMPT, "{:?}", t.elapsed());
    assert_eq!(recall.stateid, g.gddr_stateid);
    assert_eq!(recall.fh, d, "the directory is recalled");
    let st = &srv.server.dir_watches.stats;
    assert_eq!(st.changes.load(Ordering::Relaxed), 1);
    assert_eq!(st.notified.load(Ordering::Relaxed), 0);
    assert_eq!(st.recalled.load(Ordering::Relaxed), 1);
    // The administrator sees the same counts.
    let text = txnfs_server::report::render::prometheus(&srv.server, None);
    for line in [
        "txnfs_outside_dir_changes_total{event=\"seen\"} 1",
        "txnfs_outside_dir_changes_total{event=\"notified\"} 0",
        "txnfs_outside_dir_changes_total{event=\"recalled\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing");
    }
    // Not returned: revoked after the recall wait; the watch goes with it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = srv.server.core().unwrap().delegations().stats();
        if s.revoked == 1 {
            assert_eq!((s.recalled, s.outstanding), (1, 0));
            break;
        }
        assert!(Instant::now() < deadline, "not revoked: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(srv.server.dir_watches.len(), 0, "the watch went with it");
    assert_eq!(
        a.delegreturn(&d, &g.gddr_stateid).await,
        nfsstat4::NFS4ERR_DELEG_REVOKED
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_changes_are_notified_once_not_again_through_the_watch() {
    let (srv, dir) = local_server("once", 5000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (d, _) = a.delegate_d(ADD | REMOVE | RENAME).await;
    let mut o = Session::new(srv.addr, b"other-client").await;
    // Another client's CREATE, OPEN-create, LINK, RENAME and REMOVE: one notification
    // each, as without the watch.
    o.run_ok(vec![putfh(&d), mkdir("nfs-dir")]).await;
    o.run_ok(vec![putfh(&d), open_new("nfs-file")]).await;
    o.run_ok(vec![
        putfh(&d),
        lookup("nfs-file"),
        nfs_argop4::OP_SAVEFH,
        putfh(&d),
        nfs_argop4::OP_LINK(LINK4args {
            newname: name("nfs-link"),
        }),
    ])
    .await;
    o.run_ok(vec![
        putfh(&d),
        nfs_argop4::OP_SAVEFH,
        rename("nfs-link", "nfs-moved"),
    ])
    .await;
    o.run_ok(vec![putfh(&d), remove("nfs-moved")]).await;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while let Some(n) = a
        .next_notify(deadline.saturating_duration_since(Instant::now()))
        .await
    {
        seen.extend(changes(&n).into_iter().map(|(bit, _)| bit));
    }
    assert_eq!(seen, vec![ADD, ADD, ADD, RENAME, REMOVE], "exactly these");
    // The holder's own change: nothing at all.
    a.run_ok(vec![putfh(&d), mkdir("mine")]).await;
    assert!(a.p.next_call(Duration::from_millis(500)).await.is_none());
    let st = &srv.server.dir_watches.stats;
    assert_eq!(
        st.changes.load(Ordering::Relaxed),
        0,
        "the watch saw none of the server's own changes"
    );
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.outstanding), (0, 1));
    // Nothing of it happened outside: the entries are there as NFS left them.
    assert!(dir.join("d/nfs-dir").is_dir() && dir.join("d/mine").is_dir());
    assert!(dir.join("d/nfs-file").is_file() && !dir.join("d/nfs-moved").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_goes_with_the_delegation() {
    let (srv, dir) = local_server("return", 5000).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (d, g) = a.delegate_d(ADD).await;
    assert_eq!(srv.server.dir_watches.len(), 1);
    // A second holder shares the watch.
    let mut b = Holder::new(&srv, b"holder-b").await;
    let (_, gb) = b.delegate_d(ADD).await;
    assert_eq!(srv.server.dir_watches.len(), 1);
    assert_eq!(a.delegreturn(&d, &g.gddr_stateid).await, nfsstat4::NFS4_OK);
    assert_eq!(srv.server.dir_watches.len(), 1, "b's delegation keeps it");
    let t = Instant::now();
    std::fs::File::create(dir.join("d/for-b")).unwrap();
    let (bit, _) = single(&prompt_notify(&mut b, t, "a local create").await);
    assert_eq!(bit, ADD);
    assert!(a.next_notify(Duration::from_millis(200)).await.is_none());
    assert_eq!(b.delegreturn(&d, &gb.gddr_stateid).await, nfsstat4::NFS4_OK);
    assert_eq!(srv.server.dir_watches.len(), 0, "the last return drops it");
    std::fs::File::create(dir.join("d/for-nobody")).unwrap();
    assert!(a.p.next_call(Duration::from_millis(300)).await.is_none());
    assert!(b.p.next_call(Duration::from_millis(300)).await.is_none());
    let st = &srv.server.dir_watches.stats;
    assert_eq!(
        st.changes.load(Ordering::Relaxed),
        1,
        "only the watched one"
    );
    assert_eq!(st.notified.load(Ordering::Relaxed), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
