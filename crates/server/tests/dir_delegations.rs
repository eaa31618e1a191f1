//! Directory delegations over real TCP (RFC 8881 §10.9, §18.39, §20.4; ADR 0019):
//! GET_DIR_DELEGATION grants and GDD4_UNAVAIL, the CB_NOTIFY each kind of namespace
//! change by another client sends (ADD for OPEN-create, CREATE and LINK, REMOVE,
//! RENAME within a directory, REMOVE + ADD between directories), none for the holder's
//! own changes, batching, recall-and-wait for a change the holder asked not to hear
//! of, recall and revocation when the holder stops answering, and the directory
//! delegation's stateid (DELEGRETURN, TEST_STATEID, FREE_STATEID).
//!
//! The holder is a test peer answering callbacks on its fore connection; the other
//! client is a plain session without a back channel. Multi-threaded runtimes: a held
//! request blocks its thread.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::peer::*;
use common::*;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

const ADD: u32 = 1 << 3;
const REMOVE: u32 = 1 << 2;
const RENAME: u32 = 1 << 4;
const CHILD_ATTRS: u32 = 1 << 0;
const DIR_ATTRS: u32 = 1 << 1;
/// FATTR4_SIZE.
const SIZE: u32 = 1 << 4;
/// FATTR4_TYPE and FATTR4_FILEID.
const TYPE_AND_FILEID: u32 = (1 << 1) | (1 << 20);

impl Holder {
    /// GET_DIR_DELEGATION of the directory `fh` asking for `types` with a delay of
    /// `delay`: its result.
    async fn gdd(
        &mut self,
        fh: &Bytes,
        types: u32,
        delay: Duration,
    ) -> GET_DIR_DELEGATION4res_non_fatal {
        let r = self.run(vec![putfh(fh), gdd_args(types, delay)]).await;
        let nfs_resop4::OP_GET_DIR_DELEGATION(GET_DIR_DELEGATION4res::NFS4_OK(g)) = &r.resarray[2]
        else {
            panic!("GET_DIR_DELEGATION {:?}", r.resarray)
        };
        g.clone()
    }

    /// Runs the GET_DIR_DELEGATION `gdd` on the directory `fh`: the delegation it
    /// must have granted.
    async fn granted_by(&mut self, fh: &Bytes, gdd: nfs_argop4) -> GET_DIR_DELEGATION4resok {
        let r = self.run(vec![putfh(fh), gdd]).await;
        let nfs_resop4::OP_GET_DIR_DELEGATION(GET_DIR_DELEGATION4res::NFS4_OK(
            GET_DIR_DELEGATION4res_non_fatal::GDD4_OK(g),
        )) = &r.resarray[2]
        else {
            panic!("{:?}", r.resarray)
        };
        GET_DIR_DELEGATION4resok::clone(g)
    }

    async fn granted(
        &mut self,
        fh: &Bytes,
        types: u32,
        delay: Duration,
    ) -> GET_DIR_DELEGATION4resok {
        match self.gdd(fh, types, delay).await {
            GET_DIR_DELEGATION4res_non_fatal::GDD4_OK(ok) => *ok,
            other => panic!("not granted: {other:?}"),
        }
    }
}

fn gdd_args(types: u32, delay: Duration) -> nfs_argop4 {
    gdd_args_with(types, delay, TYPE_AND_FILEID, 0)
}

/// GET_DIR_DELEGATION asking for `child` attributes with entries and `dir`
/// attributes with directory changes (first bitmap words).
fn gdd_args_with(types: u32, delay: Duration, child: u32, dir: u32) -> nfs_argop4 {
    let t = nfstime4 {
        seconds: delay.as_secs() as i64,
        nseconds: delay.subsec_nanos(),
    };
    nfs_argop4::OP_GET_DIR_DELEGATION(Box::new(GET_DIR_DELEGATION4args {
        gdda_signal_deleg_avail: false,
        gdda_notification_types: vec![types],
        gdda_child_attr_delay: t.clone(),
        gdda_dir_attr_delay: t,
        gdda_child_attributes: vec![child],
        gdda_dir_attributes: if dir == 0 { vec![] } else { vec![dir] },
    }))
}

fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The other client, with the directories `dirs` made in the root: their handles.
async fn other_with_dirs(srv: &TestServer, dirs: &[&str]) -> (Session, Vec<Bytes>) {
    let mut o = Session::new(srv.addr, b"other-client").await;
    let mut fhs = Vec::new();
    for d in dirs {
        let r = o
            .run_ok(vec![
                nfs_argop4::OP_PUTROOTFH,
                mkdir(d),
                nfs_argop4::OP_GETFH,
            ])
            .await;
        let nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh)) = &r.resarray[3] else {
            unreachable!()
        };
        fhs.push(fh.object.clone());
    }
    (o, fhs)
}

/// The one notification of a CB_NOTIFY: (type bit, value).
fn single(n: &CB_NOTIFY4args) -> (u32, Bytes) {
    assert_eq!(n.cna_changes.len(), 1, "{:?}", n.cna_changes);
    let c = &n.cna_changes[0];
    assert_eq!(c.notify_mask.len(), 1, "one bitmap word");
    (c.notify_mask[0], c.notify_vals.clone())
}

fn as_add(v: Bytes) -> notify_add4 {
    notify_add4::from_bytes(v).expect("notify_add4")
}

fn as_remove(v: Bytes) -> notify_remove4 {
    notify_remove4::from_bytes(v).expect("notify_remove4")
}

fn as_rename(v: Bytes) -> notify_rename4 {
    notify_rename4::from_bytes(v).expect("notify_rename4")
}

/// FATTR4_TYPE of an entry's attributes (the first value: type precedes fileid).
fn entry_type(a: &fattr4) -> u32 {
    assert_eq!(
        a.attrmask,
        vec![TYPE_AND_FILEID],
        "the attributes asked for"
    );
    u32::from_be_bytes(a.attr_vals[..4].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_unavail_and_the_stateid() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    // No back channel: GDD4_UNAVAIL, never signalled later.
    let r = o
        .run_ok(vec![putfh(&fhs[0]), gdd_args(ADD, Duration::ZERO)])
        .await;
    assert_eq!(
        r.resarray[2],
        nfs_resop4::OP_GET_DIR_DELEGATION(GET_DIR_DELEGATION4res::NFS4_OK(
            GET_DIR_DELEGATION4res_non_fatal::GDD4_UNAVAIL(false)
        ))
    );
    let mut a = Holder::new(&srv, b"holder-a").await;
    // txnfs's cookie verifiers never change: CHANGE_COOKIE_VERIFIER is not granted.
    let all = ADD | REMOVE | RENAME | CHILD_ATTRS | DIR_ATTRS;
    let g = a.granted(&fhs[0], all | (1 << 5), Duration::ZERO).await;
    assert_eq!(g.gddr_notification, vec![all]);
    assert_eq!(g.gddr_child_attributes, vec![TYPE_AND_FILEID]);
    assert_eq!(g.gddr_dir_attributes, Vec::<u32>::new());
    let r = a
        .run(vec![
            putfh(&fhs[0]),
            nfs_argop4::OP_READDIR(READDIR4args {
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 1000,
                maxcount: 4000,
                attr_request: vec![],
            }),
        ])
        .await;
    let nfs_resop4::OP_READDIR(READDIR4res::NFS4_OK(rd)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(
        g.gddr_cookieverf, rd.cookieverf,
        "READDIR's cookie verifier"
    );
    // One per client and directory.
    assert_eq!(
        a.gdd(&fhs[0], ADD, Duration::ZERO).await,
        GET_DIR_DELEGATION4res_non_fatal::GDD4_UNAVAIL(false)
    );
    // Not a directory: NOTDIR.
    let (_, ffh) = o.open_new_file("f").await;
    let r = a
        .run(vec![putfh(&ffh), gdd_args(ADD, Duration::ZERO)])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTDIR);
    let dsid = g.gddr_stateid.clone();
    // TEST_STATEID: valid; FREE_STATEID of a live delegation: LOCKS_HELD; the stateid is
    // no good for I/O.
    assert_eq!(a.test_stateid(&dsid).await, nfsstat4::NFS4_OK);
    assert_eq!(a.free_stateid(&dsid).await, nfsstat4::NFS4ERR_LOCKS_HELD);
    let r = a
        .run(vec![
            putfh(&ffh),
            nfs_argop4::OP_READ(READ4args {
                stateid: dsid.clone(),
                offset: 0,
                count: 1,
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_BAD_STATEID);
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.granted, s.outstanding), (1, 1));
    // DELEGRETURN on the directory; a second one is BAD_STATEID.
    assert_eq!(a.delegreturn(&fhs[0], &dsid).await, nfsstat4::NFS4_OK);
    assert_eq!(
        a.delegreturn(&fhs[0], &dsid).await,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.returned, s.outstanding), (1, 0));
    // Returned, it can be had again.
    a.granted(&fhs[0], ADD, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cb_notify_for_each_directory_change() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d", "e"]).await;
    let (d, e) = (&fhs[0], &fhs[1]);
    let mut a = Holder::new(&srv, b"holder-a").await;
    let g = a.granted(d, ADD | REMOVE | RENAME, Duration::ZERO).await;
    let expect = |n: CB_NOTIFY4args| {
        assert_eq!(n.cna_stateid, g.gddr_stateid, "the directory delegation");
        assert_eq!(&n.cna_fh, d, "the delegated directory");
        single(&n)
    };

    // OPEN with create: ADD with the attributes asked for.
    o.run_ok(vec![putfh(d), open_new("f1"), nfs_argop4::OP_GETFH])
        .await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for OPEN"));
    assert_eq!(bit, ADD);
    let add = as_add(v);
    assert_eq!(add.nad_new_entry.ne_file, name("f1"));
    assert_eq!(entry_type(&add.nad_new_entry.ne_attrs), 1, "NF4REG");
    assert!(add.nad_old_entry.is_empty());

    // OPEN of an existing file creates nothing: no notification (checked below: the
    // next one is CREATE's).
    o.run_ok(vec![putfh(d), open_new("f1")]).await;

    // CREATE (a directory): ADD.
    o.run_ok(vec![putfh(d), mkdir("sub")]).await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for CREATE"));
    assert_eq!(bit, ADD);
    let add = as_add(v);
    assert_eq!(add.nad_new_entry.ne_file, name("sub"));
    assert_eq!(entry_type(&add.nad_new_entry.ne_attrs), 2, "NF4DIR");

    // LINK: ADD.
    o.run_ok(vec![
        putfh(d),
        lookup("f1"),
        nfs_argop4::OP_SAVEFH,
        putfh(d),
        nfs_argop4::OP_LINK(LINK4args {
            newname: name("l1"),
        }),
    ])
    .await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for LINK"));
    assert_eq!(bit, ADD);
    assert_eq!(as_add(v).nad_new_entry.ne_file, name("l1"));

    // REMOVE: REMOVE.
    o.run_ok(vec![putfh(d), remove("l1")]).await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for REMOVE"));
    assert_eq!(bit, REMOVE);
    assert_eq!(as_remove(v).nrm_old_entry.ne_file, name("l1"));

    // RENAME within the directory: RENAME, old and new entries.
    o.run_ok(vec![putfh(d), nfs_argop4::OP_SAVEFH, rename("f1", "f2")])
        .await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for RENAME"));
    assert_eq!(bit, RENAME);
    let rn = as_rename(v);
    assert_eq!(rn.nrn_old_entry.nrm_old_entry.ne_file, name("f1"));
    assert_eq!(rn.nrn_new_entry.nad_new_entry.ne_file, name("f2"));
    assert_eq!(entry_type(&rn.nrn_new_entry.nad_new_entry.ne_attrs), 1);
    assert!(rn.nrn_new_entry.nad_old_entry.is_empty());

    // RENAME within the directory over an existing name: the replaced entry goes with
    // the new one.
    o.run_ok(vec![putfh(d), open_new("victim")]).await;
    let (bit, _) = expect(a.next_notify(T).await.expect("CB_NOTIFY for OPEN"));
    assert_eq!(bit, ADD);
    o.run_ok(vec![
        putfh(d),
        nfs_argop4::OP_SAVEFH,
        rename("f2", "victim"),
    ])
    .await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for RENAME over"));
    assert_eq!(bit, RENAME);
    let rn = as_rename(v);
    assert_eq!(rn.nrn_old_entry.nrm_old_entry.ne_file, name("f2"));
    assert_eq!(rn.nrn_new_entry.nad_new_entry.ne_file, name("victim"));
    assert_eq!(rn.nrn_new_entry.nad_old_entry.len(), 1);
    assert_eq!(
        rn.nrn_new_entry.nad_old_entry[0].nrm_old_entry.ne_file,
        name("victim")
    );

    // RENAME out of the directory: REMOVE here (e is not delegated).
    o.run_ok(rename_between(d, e, "victim", "f3")).await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for RENAME out"));
    assert_eq!(bit, REMOVE);
    assert_eq!(as_remove(v).nrm_old_entry.ne_file, name("victim"));

    // RENAME into the directory: ADD here.
    o.run_ok(rename_between(e, d, "f3", "f4")).await;
    let (bit, v) = expect(a.next_notify(T).await.expect("CB_NOTIFY for RENAME in"));
    assert_eq!(bit, ADD);
    let add = as_add(v);
    assert_eq!(add.nad_new_entry.ne_file, name("f4"));
    assert_eq!(entry_type(&add.nad_new_entry.ne_attrs), 1);

    // Changes elsewhere say nothing.
    o.run_ok(vec![putfh(e), open_new("elsewhere")]).await;
    assert!(a.next_notify(Duration::from_millis(300)).await.is_none());
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.revoked, s.outstanding), (0, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_of_a_rename_between_delegated_directories_are_notified() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d", "e"]).await;
    let (d, e) = (&fhs[0], &fhs[1]);
    o.run_ok(vec![putfh(d), open_new("f")]).await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let gd = a.granted(d, ADD | REMOVE | RENAME, Duration::ZERO).await;
    let ge = a.granted(e, ADD | REMOVE | RENAME, Duration::ZERO).await;
    o.run_ok(rename_between(d, e, "f", "g")).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let n = a.next_notify(T).await.expect("CB_NOTIFY");
        let (bit, v) = single(&n);
        if n.cna_stateid == gd.gddr_stateid {
            assert_eq!((&n.cna_fh, bit), (d, REMOVE));
            assert_eq!(as_remove(v).nrm_old_entry.ne_file, name("f"));
        } else {
            assert_eq!(n.cna_stateid, ge.gddr_stateid);
            assert_eq!((&n.cna_fh, bit), (e, ADD));
            assert_eq!(as_add(v).nad_new_entry.ne_file, name("g"));
        }
        seen.push(bit);
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![REMOVE, ADD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_own_changes_are_not_notified() {
    let srv = deleg_server(5000).await;
    let (_o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    // Even without notifications asked for: its own changes never recall it.
    a.granted(d, 0, Duration::ZERO).await;
    a.run_ok(vec![
        putfh(d),
        mkdir("mine"),
        putfh(d),
        nfs_argop4::OP_SAVEFH,
        rename("mine", "still-mine"),
        putfh(d),
        remove("still-mine"),
    ])
    .await;
    assert!(a.p.next_call(Duration::from_millis(300)).await.is_none());
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.outstanding), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_in_quick_succession_share_one_cb_notify() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    // A second asked for; the server waits at most 50 ms.
    a.granted(d, ADD | REMOVE, Duration::from_secs(1)).await;
    let t0 = Instant::now();
    o.run_ok(vec![
        putfh(d),
        mkdir("a"),
        putfh(d),
        mkdir("b"),
        putfh(d),
        remove("a"),
    ])
    .await;
    let n = a.next_notify(T).await.expect("CB_NOTIFY");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(50) && waited < Duration::from_secs(1),
        "sent after the bounded delay, not the one asked for: {waited:?}"
    );
    let kinds: Vec<u32> = n.cna_changes.iter().map(|c| c.notify_mask[0]).collect();
    assert_eq!(kinds, vec![ADD, ADD, REMOVE], "in order, in one CB_NOTIFY");
    let names: Vec<Bytes> = n
        .cna_changes
        .iter()
        .map(|c| match c.notify_mask[0] {
            ADD => as_add(c.notify_vals.clone()).nad_new_entry.ne_file,
            _ => as_remove(c.notify_vals.clone()).nrm_old_entry.ne_file,
        })
        .collect();
    assert_eq!(names, vec![name("a"), name("b"), name("a")]);
    assert!(a.next_notify(Duration::from_millis(200)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_holder_did_not_ask_to_hear_of_recalls_and_waits() {
    let srv = deleg_server(10_000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = fhs[0].clone();
    let mut a = Holder::new(&srv, b"holder-a").await;
    // Told of additions only: a removal recalls.
    let g = a.granted(&d, ADD, Duration::ZERO).await;
    o.run_ok(vec![putfh(&d), open_new("f")]).await;
    let (bit, _) = single(&a.next_notify(T).await.expect("CB_NOTIFY"));
    assert_eq!(bit, ADD);
    let delay = Duration::from_millis(300);
    let dsid = g.gddr_stateid.clone();
    let dfh = d.clone();
    let holder = tokio::spawn(async move {
        let recall = a.next_recall(T).await.expect("CB_RECALL");
        tokio::time::sleep(delay).await;
        let st = a.delegreturn(&dfh, &recall.stateid).await;
        (recall, st)
    });
    let t0 = Instant::now();
    let r = o.run(vec![putfh(&d), remove("f")]).await;
    let held_for = t0.elapsed();
    let (recall, st) = holder.await.unwrap();
    assert_eq!(recall.stateid, dsid);
    assert_eq!(recall.fh, d, "the directory is recalled");
    assert_eq!(st, nfsstat4::NFS4_OK, "DELEGRETURN");
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(held_for >= delay, "answered after {held_for:?}");
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_stops_answering_is_recalled_then_revoked() {
    let srv = deleg_server(400).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    let g = a.granted(d, ADD, Duration::ZERO).await;
    // From now on the holder reads nothing: CB_NOTIFY times out (1 s).
    let r = o.run(vec![putfh(d), mkdir("x")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "the change is not held");
    let deadline = Instant::now() + T;
    loop {
        let s = srv.server.core().unwrap().delegations().stats();
        if s.revoked == 1 {
            assert_eq!((s.recalled, s.outstanding), (1, 0));
            break;
        }
        assert!(Instant::now() < deadline, "not revoked: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.p.answer = false;
    let r = a.run(vec![]).await;
    let nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)) = &r.resarray[0] else {
        panic!("{:?}", r.resarray)
    };
    assert_ne!(
        ok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
        0,
        "{:#x}",
        ok.sr_status_flags
    );
    // What reached the peer: the CB_NOTIFY, then the CB_RECALL of the directory.
    let notify = a.p.calls.iter().position(|c| cb_notify_of(c).is_some());
    let recall = a.p.calls.iter().position(|c| cb_recall_of(c).is_some());
    assert!(
        matches!((notify, recall), (Some(n), Some(r)) if n < r),
        "{notify:?} {recall:?}"
    );
    let rc = cb_recall_of(&a.p.calls[recall.unwrap()]).unwrap();
    assert_eq!((&rc.stateid, &rc.fh), (&g.gddr_stateid, d));
    assert_eq!(
        a.delegreturn(d, &g.gddr_stateid).await,
        nfsstat4::NFS4ERR_DELEG_REVOKED
    );
    assert_eq!(a.free_stateid(&g.gddr_stateid).await, nfsstat4::NFS4_OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_notification_recalls_the_delegation() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    let g = a.granted(d, ADD, Duration::ZERO).await;
    a.p.notify_status = nfsstat4::NFS4ERR_RESOURCE;
    let r = o.run(vec![putfh(d), mkdir("x")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    a.next_notify(T).await.expect("CB_NOTIFY");
    let recall = a.next_recall(T).await.expect("CB_RECALL");
    assert_eq!(recall.stateid, g.gddr_stateid);
    assert_eq!(a.delegreturn(d, &recall.stateid).await, nfsstat4::NFS4_OK);
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0));
}

/// The size in an attribute list of FATTR4_SIZE alone.
fn size_of(a: &fattr4) -> u64 {
    assert_eq!(a.attrmask, vec![SIZE], "the attributes asked for");
    u64::from_be_bytes(a.attr_vals[..8].try_into().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_attribute_changes_are_notified_with_the_attributes_asked_for() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    // "old" exists before the grant (found by listing the directory).
    let r = o
        .run(vec![putfh(d), open_new("old"), nfs_argop4::OP_GETFH])
        .await;
    let (osid, _) = opened_stateid_and_fh(&r);
    let mut a = Holder::new(&srv, b"holder-a").await;
    let g = &a
        .granted_by(
            d,
            gdd_args_with(CHILD_ATTRS | REMOVE, Duration::from_millis(40), SIZE, 0),
        )
        .await;
    assert_eq!(g.gddr_notification, vec![CHILD_ATTRS | REMOVE]);
    assert_eq!(g.gddr_child_attributes, vec![SIZE]);

    // Two WRITEs within the delay: one notice, with the size after both.
    o.run_ok(vec![
        putfh(d),
        lookup("old"),
        write(&osid, 0, b"12345"),
        write(&osid, 5, b"678"),
    ])
    .await;
    let n = a.next_notify(T).await.expect("CB_NOTIFY for WRITE");
    assert_eq!(n.cna_stateid, g.gddr_stateid);
    let (bit, v) = single(&n);
    assert_eq!(bit, CHILD_ATTRS);
    let na = notify_attr4::from_bytes(v).expect("notify_attr4");
    assert_eq!(na.na_changed_entry.ne_file, name("old"));
    assert_eq!(size_of(&na.na_changed_entry.ne_attrs), 8);

    // A file the holder made itself (not notified to it) is followed as well: another
    // client's SETATTR of its size is.
    // (Without a file delegation, which the SETATTR would recall.)
    let nfs_argop4::OP_OPEN(mut open) = open_new("mine") else {
        unreachable!()
    };
    open.share_access |= OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
    a.run_ok(vec![putfh(d), nfs_argop4::OP_OPEN(open)]).await;
    let r = o
        .run(vec![
            putfh(d),
            lookup("mine"),
            nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                stateid: stateid4 {
                    seqid: 0,
                    other: [0; 12],
                },
                obj_attributes: fattr4 {
                    attrmask: vec![SIZE],
                    attr_vals: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 7]),
                },
            })),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let (bit, v) = single(&a.next_notify(T).await.expect("CB_NOTIFY for SETATTR"));
    assert_eq!(bit, CHILD_ATTRS);
    let na = notify_attr4::from_bytes(v).expect("notify_attr4");
    assert_eq!(na.na_changed_entry.ne_file, name("mine"));
    assert_eq!(size_of(&na.na_changed_entry.ne_attrs), 7);

    // Renamed out of the directory (a REMOVE here), the file is no longer followed.
    let root = srv_root(&mut o).await;
    o.run_ok(rename_between(d, &root, "old", "gone")).await;
    let (bit, v) = single(&a.next_notify(T).await.expect("CB_NOTIFY for RENAME"));
    assert_eq!(bit, REMOVE);
    assert_eq!(as_remove(v).nrm_old_entry.ne_file, name("old"));
    o.run_ok(vec![
        nfs_argop4::OP_PUTROOTFH,
        lookup("gone"),
        write(&osid, 0, b"x"),
    ])
    .await;
    assert!(a.next_notify(Duration::from_millis(300)).await.is_none());
}

/// The root's file handle.
async fn srv_root(o: &mut Session) -> Bytes {
    let r = o
        .run(vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH])
        .await;
    let nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(fh)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    fh.object.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_attribute_changes_are_notified() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    // FATTR4_MODE (33): the second bitmap word.
    let g = &a
        .granted_by(
            d,
            nfs_argop4::OP_GET_DIR_DELEGATION(Box::new(GET_DIR_DELEGATION4args {
                gdda_signal_deleg_avail: false,
                gdda_notification_types: vec![ADD | DIR_ATTRS],
                gdda_child_attr_delay: nfstime4 {
                    seconds: 0,
                    nseconds: 40_000_000,
                },
                gdda_dir_attr_delay: nfstime4 {
                    seconds: 0,
                    nseconds: 40_000_000,
                },
                gdda_child_attributes: vec![],
                gdda_dir_attributes: vec![0, 1 << 1],
            })),
        )
        .await;
    assert_eq!(g.gddr_notification, vec![ADD | DIR_ATTRS]);
    assert_eq!(g.gddr_dir_attributes, vec![0, 1 << 1]);
    // SETATTR of the directory's mode: CHANGE_DIR_ATTRS, no name, the mode.
    let r = o
        .run(vec![
            putfh(d),
            nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                stateid: stateid4 {
                    seqid: 0,
                    other: [0; 12],
                },
                obj_attributes: fattr4 {
                    attrmask: vec![0, 1 << 1],
                    attr_vals: Bytes::from_static(&[0, 0, 0o7, 0o50]),
                },
            })),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let (bit, v) = single(&a.next_notify(T).await.expect("CB_NOTIFY for SETATTR"));
    assert_eq!(bit, DIR_ATTRS);
    let na = notify_attr4::from_bytes(v).expect("notify_attr4");
    assert!(na.na_changed_entry.ne_file.is_empty());
    assert_eq!(na.na_changed_entry.ne_attrs.attrmask, vec![0, 1 << 1]);
    assert_eq!(
        &na.na_changed_entry.ne_attrs.attr_vals[..],
        &[0, 0, 0o7, 0o50]
    );
    // An entry added: the ADD, then the directory's new attributes, in one CB_NOTIFY.
    o.run_ok(vec![putfh(d), mkdir("x")]).await;
    let n = a.next_notify(T).await.expect("CB_NOTIFY for CREATE");
    let kinds: Vec<u32> = n.cna_changes.iter().map(|c| c.notify_mask[0]).collect();
    assert_eq!(kinds, vec![ADD, DIR_ATTRS]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_is_split_into_cb_notifys_that_fit_one_page() {
    let srv = deleg_server(5000).await;
    let (mut o, fhs) = other_with_dirs(&srv, &["d"]).await;
    let d = &fhs[0];
    let mut a = Holder::new(&srv, b"holder-a").await;
    a.granted(d, ADD, Duration::from_secs(1)).await;
    let names: Vec<String> = (0..60).map(|i| format!("entry-{i:02}")).collect();
    let mut ops = Vec::new();
    for n in &names {
        ops.push(putfh(d));
        ops.push(mkdir(n));
    }
    let r = o.run(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let mut seen = Vec::new();
    let mut calls = 0;
    while seen.len() < names.len() {
        let call = a.p.next_call(T).await.expect("a CB_NOTIFY");
        let Some(n) = cb_notify_of(&call) else {
            continue;
        };
        calls += 1;
        // RPC call header (with the AUTH_SYS credential) under 200 bytes.
        assert!(call.args.len() + 200 <= 4096, "{} bytes", call.args.len());
        for c in &n.cna_changes {
            assert_eq!(c.notify_mask, vec![ADD]);
            let add = as_add(c.notify_vals.clone());
            seen.push(String::from_utf8(add.nad_new_entry.ne_file.to_vec()).unwrap());
        }
    }
    assert_eq!(seen, names, "every entry, in order");
    assert!(calls > 1, "split into several CB_NOTIFYs");
}
