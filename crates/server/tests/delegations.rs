//! Delegations over real TCP (RFC 8881 §10.2, §10.4, §18.6, §18.16.3, §20.1, §20.2):
//! grants and the WANT flags, recall-and-wait on each kind of conflict (the held
//! request is answered after DELEGRETURN, not with NFS4ERR_DELAY), revocation of a
//! silent holder, CB_GETATTR under a write delegation, and the delegation stateid's
//! own rules. The holder is a test peer that answers callbacks on its fore
//! connection; the other client is a plain session without a back channel.
//!
//! Multi-threaded runtimes: a held request blocks its thread (as it does in
//! `txnfs serve`), which a current-thread runtime cannot afford.

mod common;

use bytes::Bytes;
use common::deleg::*;
use common::peer::*;
use common::*;
use std::time::{Duration, Instant};
use txnfs_server::nfs::*;
use txnfs_xdr::Decode;

fn deleg_stateid(d: &open_delegation4) -> stateid4 {
    match d {
        open_delegation4::OPEN_DELEGATE_READ(r) => r.stateid.clone(),
        open_delegation4::OPEN_DELEGATE_WRITE(w) => w.stateid.clone(),
        other => panic!("no delegation granted: {other:?}"),
    }
}

/// A plain client (no back channel: it never gets a delegation) that made `names`,
/// each holding `data`, and closed them.
async fn other_client(srv: &TestServer, names: &[&str], data: &[u8]) -> Session {
    let mut s = Session::new(srv.addr, b"other-client").await;
    for name in names {
        let (sid, _) = s.open_new_file(name).await;
        s.run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            lookup(name),
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: sid.clone(),
                offset: 0,
                stable: stable_how4::FILE_SYNC4,
                data: Bytes::copy_from_slice(data),
            }),
            nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    }
    s
}

/// What most tests start from: a server whose recalls wait `recall_wait_ms`, the
/// other client (which made "f" holding "x"), and holder-a's open of "f" with
/// `share_access`, which must have got a delegation: (server, other client, holder,
/// open stateid, delegation stateid, handle of "f").
async fn holder_of_f(
    recall_wait_ms: u32,
    share_access: u32,
) -> (TestServer, Session, Holder, stateid4, stateid4, Bytes) {
    let srv = deleg_server(recall_wait_ms).await;
    let o = other_client(&srv, &["f"], b"x").await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (osid, d, fh) = a.open("f", share_access).await;
    let dsid = deleg_stateid(&d);
    (srv, o, a, osid, dsid, fh)
}

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const BOTH: u32 = OPEN4_SHARE_ACCESS_BOTH;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_open_gets_a_read_delegation_and_write_open_a_write_one() {
    let srv = deleg_server(5000).await;
    let _o = other_client(&srv, &["r", "w"], b"x").await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_, d, _) = a.open("r", READ).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_READ(ref r) if !r.recall),
        "{d:?}"
    );
    let (_, d, _) = a.open("w", BOTH).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_WRITE(_)),
        "{d:?}"
    );
    let stats = srv.server.core().unwrap().delegations().stats();
    assert_eq!((stats.granted, stats.outstanding), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn want_flags_and_no_back_channel_refuse_with_the_reason() {
    let srv = deleg_server(5000).await;
    let mut o = other_client(&srv, &["f"], b"x").await;
    // No back channel: no delegation; asked for one, the reason is RESOURCE.
    let r = o
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_plain("f", READ | OPEN4_SHARE_ACCESS_WANT_ANY_DELEG, b"o2"),
        ])
        .await;
    let nfs_resop4::OP_OPEN(OPEN4res::NFS4_OK(ok)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert_eq!(
        ok.delegation,
        open_delegation4::OPEN_DELEGATE_NONE_EXT(open_none_delegation4::WND4_RESOURCE(false))
    );
    let mut a = Holder::new(&srv, b"holder-a").await;
    let (_, d, _) = a.open("f", READ | OPEN4_SHARE_ACCESS_WANT_NO_DELEG).await;
    assert_eq!(
        d,
        open_delegation4::OPEN_DELEGATE_NONE_EXT(open_none_delegation4::default(
            why_no_delegation4::WND4_NOT_WANTED
        ))
    );
    let (_, d, _) = a.open("f", READ | OPEN4_SHARE_ACCESS_WANT_CANCEL).await;
    assert_eq!(
        d,
        open_delegation4::OPEN_DELEGATE_NONE_EXT(open_none_delegation4::default(
            why_no_delegation4::WND4_CANCELLED
        ))
    );
    // WANT_READ on a read-write open: a read delegation, not a write one.
    let (_, d, _) = a.open("f", BOTH | OPEN4_SHARE_ACCESS_WANT_READ_DELEG).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_READ(_)),
        "{d:?}"
    );
    // An undefined want value is INVAL.
    let r = a
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_plain("f", READ | 0x0600, b"holder-a"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_INVAL);
    // DELEGPURGE exists for CLAIM_DELEGATE_PREV only, which txnfs does not support.
    let r = a
        .run(vec![nfs_argop4::OP_DELEGPURGE(DELEGPURGE4args {
            clientid: 0,
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOTSUPP);
}

/// The conflicting ops of another client, each on a file the holder has delegated
/// (write delegation: every access conflicts).
fn conflicts(name: &str, stateid: &stateid4) -> Vec<(&'static str, Vec<nfs_argop4>)> {
    let n = Bytes::copy_from_slice(name.as_bytes());
    vec![
        (
            "OPEN",
            vec![nfs_argop4::OP_PUTROOTFH, open_plain(name, READ, b"o2")],
        ),
        ("REMOVE", vec![nfs_argop4::OP_PUTROOTFH, remove(name)]),
        (
            "RENAME",
            vec![
                nfs_argop4::OP_PUTROOTFH,
                nfs_argop4::OP_SAVEFH,
                rename(name, &format!("{name}.moved")),
            ],
        ),
        (
            "SETATTR",
            vec![
                nfs_argop4::OP_PUTROOTFH,
                lookup(name),
                nfs_argop4::OP_SETATTR(Box::new(SETATTR4args {
                    stateid: stateid.clone(),
                    obj_attributes: fattr4 {
                        attrmask: vec![1 << 4],
                        attr_vals: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1]),
                    },
                })),
            ],
        ),
        (
            "WRITE",
            vec![
                nfs_argop4::OP_PUTROOTFH,
                nfs_argop4::OP_LOOKUP(LOOKUP4args { objname: n }),
                nfs_argop4::OP_WRITE(WRITE4args {
                    stateid: stateid.clone(),
                    offset: 0,
                    stable: stable_how4::FILE_SYNC4,
                    data: Bytes::from_static(b"y"),
                }),
            ],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_conflict_is_held_until_delegreturn_then_answered() {
    let srv = deleg_server(10_000).await;
    let names = ["c0", "c1", "c2", "c3", "c4"];
    let mut o = other_client(&srv, &names, b"x").await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let anonymous = stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    for (i, name) in names.iter().enumerate() {
        let (kind, ops) = conflicts(name, &anonymous).swap_remove(i);
        let (_, d, fh) = a.open(name, BOTH).await;
        let dsid = deleg_stateid(&d);
        let delay = Duration::from_millis(300);
        // The holder answers the recall, waits a little (flushing), then returns.
        let holder = tokio::spawn(async move {
            let recall = a.next_recall(T).await.expect("CB_RECALL");
            tokio::time::sleep(delay).await;
            let st = a.delegreturn(&fh, &recall.stateid).await;
            (a, recall, st, fh)
        });
        let t0 = Instant::now();
        let r = o.run(ops).await;
        let held_for = t0.elapsed();
        let (back, recall, st, fh) = holder.await.unwrap();
        a = back;
        assert_eq!(st, nfsstat4::NFS4_OK, "{kind}: DELEGRETURN");
        assert_eq!(recall.stateid, dsid, "{kind}: the recalled delegation");
        assert_eq!(recall.fh, fh, "{kind}: the recalled file");
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{kind}: {:?}", r.resarray);
        assert!(
            held_for >= delay,
            "{kind}: answered after {held_for:?}, before the delegation came back"
        );
    }
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.returned, s.revoked), (5, 5, 0));
    assert_eq!(s.recall_returns, 5);
    assert!(s.recall_latency_us_sum >= 5 * 300_000, "{s:?}");
    assert_eq!(
        (s.held_returned, s.held_unreachable, s.held_timeout),
        (5, 0, 0)
    );
    assert!(s.held_us_max >= 300_000, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_does_not_recall_a_read_delegation_and_the_holder_never_recalls_its_own() {
    let (srv, mut o, mut a, _, dsid, fh) = holder_of_f(10_000, READ).await;
    let r = o
        .run(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", READ, b"o2")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    // The holder writes through its own write open and reads with the delegation.
    let (wsid, _, _) = a.open("f", BOTH).await;
    a.run_ok(vec![
        putfh(&fh),
        nfs_argop4::OP_WRITE(WRITE4args {
            stateid: wsid,
            offset: 0,
            stable: stable_how4::FILE_SYNC4,
            data: Bytes::from_static(b"mine"),
        }),
        nfs_argop4::OP_READ(READ4args {
            stateid: dsid.clone(),
            offset: 0,
            count: 4,
        }),
    ])
    .await;
    // A read delegation's stateid does not allow WRITE.
    let r = a
        .run(vec![
            putfh(&fh),
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: dsid,
                offset: 0,
                stable: stable_how4::FILE_SYNC4,
                data: Bytes::from_static(b"x"),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_OPENMODE);
    assert!(a.next_recall(Duration::from_millis(200)).await.is_none());
    assert_eq!(srv.server.core().unwrap().delegations().stats().recalled, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_holder_is_revoked_and_the_request_gets_delay() {
    let (srv, mut o, mut a, _, dsid, fh) = holder_of_f(400, BOTH).await;
    // From now on the holder reads nothing: the recall goes unanswered.
    let t0 = Instant::now();
    let r = o
        .run(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", READ, b"o2")])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
    assert!(t0.elapsed() >= Duration::from_millis(400));
    // The retry goes through: the delegation is gone.
    o.run_ok(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", READ, b"o2")])
        .await;
    a.p.answer = false;
    let flags = a.flags().await;
    assert_ne!(
        flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED,
        0,
        "{flags:#x}"
    );
    assert_eq!(
        a.delegreturn(&fh, &dsid).await,
        nfsstat4::NFS4ERR_DELEG_REVOKED
    );
    assert_eq!(a.test_stateid(&dsid).await, nfsstat4::NFS4ERR_DELEG_REVOKED);
    assert_eq!(a.free_stateid(&dsid).await, nfsstat4::NFS4_OK);
    assert_eq!(a.flags().await & SEQ4_STATUS_RECALLABLE_STATE_REVOKED, 0);
    assert_eq!(srv.server.core().unwrap().delegations().stats().revoked, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getattr_of_a_write_delegated_file_asks_the_holder() {
    let (srv, mut o, mut a, _, _, fh) = holder_of_f(10_000, BOTH).await;
    // The holder says it wrote 12,345 bytes (its change moved past the granted one).
    a.p.getattr_answer = Some((12_345, u64::MAX));
    let holder = tokio::spawn(async move {
        let call = a.p.next_call(T).await.expect("a CB_COMPOUND");
        (a, call)
    });
    let r = o
        .run(vec![
            putfh(&fh),
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![(1 << 3) | (1 << 4)],
            }),
        ])
        .await;
    let (_a, call) = holder.await.unwrap();
    let cb = CB_COMPOUND4args::from_bytes(call.args).expect("CB args");
    assert!(
        matches!(cb.argarray.get(1), Some(nfs_cb_argop4::OP_CB_GETATTR(_))),
        "{:?}",
        cb.argarray
    );
    let nfs_resop4::OP_GETATTR(GETATTR4res::NFS4_OK(g)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    let v = &g.obj_attributes.attr_vals;
    let size = u64::from_be_bytes(v[8..16].try_into().unwrap());
    assert_eq!(size, 12_345, "the holder's size, not the server's 1 byte");
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.outstanding), (0, 1), "no recall needed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_opens_under_its_delegation_before_returning_it() {
    let (_srv, _o, mut a, _, dsid, fh) = holder_of_f(10_000, READ).await;
    let under = |share_access: u32| {
        vec![
            putfh(&fh),
            nfs_argop4::OP_OPEN(Box::new(OPEN4args {
                seqid: 0,
                share_access,
                share_deny: 0,
                owner: open_owner4 {
                    clientid: 0,
                    owner: Bytes::from_static(b"local-open"),
                },
                openhow: openflag4::default(opentype4::OPEN4_NOCREATE),
                claim: open_claim4::CLAIM_DELEG_CUR_FH(dsid.clone()),
            })),
        ]
    };
    a.run_ok(under(READ)).await;
    // A write open under a read delegation is refused.
    let r = a.run(under(BOTH)).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_OPENMODE);
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    assert_eq!(
        a.delegreturn(&fh, &dsid).await,
        nfsstat4::NFS4ERR_BAD_STATEID
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_on_a_file_its_holder_removed_can_still_be_returned() {
    let (srv, _o, mut a, osid, dsid, fh) = holder_of_f(10_000, BOTH).await;
    a.run_ok(vec![
        putfh(&fh),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: osid,
        }),
        nfs_argop4::OP_PUTROOTFH,
        remove("f"),
    ])
    .await;
    // The handle is stale now; the delegation goes back by its stateid.
    assert_eq!(a.delegreturn(&fh, &dsid).await, nfsstat4::NFS4_OK);
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.returned, s.outstanding), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_that_denies_reading_recalls_a_read_delegation() {
    let (_srv, mut o, mut a, osid, dsid, fh) = holder_of_f(10_000, READ).await;
    // The holder's own open would deny the other client's open anyway; without it,
    // only the delegation (the holder's right to open for reading locally) stands in
    // the way.
    let r = a
        .run(vec![
            putfh(&fh),
            nfs_argop4::OP_CLOSE(CLOSE4args {
                seqid: 0,
                open_stateid: osid,
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    let holder = tokio::spawn(async move {
        let recall = a.next_recall(T).await.expect("CB_RECALL");
        let st = a.delegreturn(&fh, &recall.stateid).await;
        (recall, st)
    });
    let mut deny_read = open_plain("f", READ, b"o2");
    if let nfs_argop4::OP_OPEN(o) = &mut deny_read {
        o.share_deny = OPEN4_SHARE_DENY_READ;
    }
    let r = o.run(vec![nfs_argop4::OP_PUTROOTFH, deny_read]).await;
    let (recall, st) = holder.await.unwrap();
    assert_eq!(recall.stateid, dsid);
    assert_eq!(st, nfsstat4::NFS4_OK);
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
}

/// A client on NFSv4.1 and one on NFSv4.2 (what Linux mounts by default) each get
/// their recall in their own minor version (RFC 8881 §20, RFC 7862 §1): the holder's
/// callback service, like Linux's, refuses a CB_COMPOUND of another minor version
/// with BADSESSION, so a recall in the wrong version is never answered and the writer
/// waits the whole recall wait while the holder keeps reading stale cached bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recalls_carry_the_minor_version_of_the_holders_session() {
    for minor in [1, 2] {
        let srv = deleg_server(10_000).await;
        let mut o = other_client(&srv, &["f"], b"x").await;
        let mut a = Holder::with_minor(&srv, b"holder-a", minor).await;
        let (_, d, fh) = a.open("f", READ).await;
        let dsid = deleg_stateid(&d);
        let holder = tokio::spawn(async move {
            let recall = a.next_recall(T).await;
            let st = match &recall {
                Some(r) => a.delegreturn(&fh, &r.stateid).await,
                None => nfsstat4::NFS4ERR_NOENT,
            };
            (a, recall, st)
        });
        let anonymous = stateid4 {
            seqid: 0,
            other: [0; 12],
        };
        let (_, ops) = conflicts("f", &anonymous).swap_remove(4);
        let t0 = Instant::now();
        let r = o.run(ops).await;
        let held_for = t0.elapsed();
        let (a, recall, st) = holder.await.unwrap();
        assert_eq!(r.status, nfsstat4::NFS4_OK, "4.{minor}: {:?}", r.resarray);
        let recall = recall.unwrap_or_else(|| panic!("4.{minor}: no CB_RECALL answered"));
        assert_eq!(recall.stateid, dsid, "4.{minor}: the recalled delegation");
        assert_eq!(st, nfsstat4::NFS4_OK, "4.{minor}: DELEGRETURN");
        let versions: Vec<u32> =
            a.p.calls
                .iter()
                .filter(|c| c.proc_num == 1)
                .map(|c| {
                    CB_COMPOUND4args::from_bytes(c.args.clone())
                        .unwrap()
                        .minorversion
                })
                .collect();
        assert!(
            !versions.is_empty() && versions.iter().all(|&v| v == minor),
            "4.{minor}: CB_COMPOUND minor versions {versions:?}"
        );
        assert!(
            held_for < Duration::from_secs(1),
            "4.{minor}: the write waited {held_for:?} (recall not answered?)"
        );
        let s = srv.server.core().unwrap().delegations().stats();
        assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0), "4.{minor}");
    }
}

// ---- holders that cannot answer (issue 22) -------------------------------------------
//
// A recall wait of 10 s: a request answered within a second was not held for it.

const LONG_WAIT_MS: u32 = 10_000;

/// The other client's conflicting OPEN of "f" for writing, started now: its result and
/// how long it took, from a task (the caller meanwhile acts as the holder).
fn conflicting_open(mut o: Session) -> tokio::task::JoinHandle<(Session, COMPOUND4res, Duration)> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let r = o
            .run(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", BOTH, b"o2")])
            .await;
        (o, r, t0.elapsed())
    })
}

fn recall_outcomes(srv: &TestServer) -> (u64, u64, u64, u64) {
    let s = srv.server.core().unwrap().delegations().stats();
    (
        s.recall_returns,
        s.revoked_unreachable,
        s.revoked_timeout,
        s.released,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_connection_closed_is_revoked_at_once() {
    let (srv, mut o, a, _, _, _) = holder_of_f(LONG_WAIT_MS, READ).await;
    drop(a);
    // The server notices the close in the background.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let r = o
        .run(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", BOTH, b"o2")])
        .await;
    let took = t0.elapsed();
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        took < Duration::from_secs(1),
        "held {took:?} for a gone holder"
    );
    assert_eq!(recall_outcomes(&srv), (0, 1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_for_a_holder_wakes_when_its_connection_closes() {
    let (srv, o, mut a, _, _, _) = holder_of_f(LONG_WAIT_MS, READ).await;
    // The holder reads nothing from now on: the recall goes unanswered ...
    a.p.answer = false;
    let held = conflicting_open(o);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "held while the holder is connected");
    // ... until its process dies: its connection closes.
    let closed = Instant::now();
    drop(a);
    let (_o, r, _) = held.await.unwrap();
    let after_close = closed.elapsed();
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        after_close < Duration::from_secs(1),
        "answered {after_close:?} after the holder's connection closed"
    );
    assert_eq!(recall_outcomes(&srv), (0, 1, 0, 0));
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!(s.recalled, 1);
    assert_eq!(
        (s.held_returned, s.held_unreachable, s.held_timeout),
        (0, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_refusing_the_callback_session_is_revoked_at_once() {
    let (srv, o, mut a, _, dsid, _) = holder_of_f(LONG_WAIT_MS, READ).await;
    // Its callback service no longer knows the session: CB_SEQUENCE answers
    // NFS4ERR_BADSESSION (the peer refuses a minor version it does not speak).
    a.p.minor = 2;
    let held = conflicting_open(o);
    let recall = tokio::spawn(async move {
        let call = a.p.next_call(T).await;
        (a, call)
    });
    let (_o, r, took) = held.await.unwrap();
    let (mut a, call) = recall.await.unwrap();
    assert!(
        call.is_some_and(|c| cb_recall_of(&c).is_some()),
        "a CB_RECALL was sent"
    );
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        took < Duration::from_secs(1),
        "held {took:?} for a BADSESSION holder"
    );
    assert_eq!(recall_outcomes(&srv), (0, 1, 0, 0));
    // Its back channel just failed: no new delegation for it, and it learns of the
    // revocation.
    a.p.minor = 1;
    a.p.answer = false;
    let (_, d, _) = a.open("f", READ).await;
    assert!(
        !matches!(
            d,
            open_delegation4::OPEN_DELEGATE_READ(_) | open_delegation4::OPEN_DELEGATE_WRITE(_)
        ),
        "{d:?}"
    );
    assert_eq!(a.test_stateid(&dsid).await, nfsstat4::NFS4ERR_DELEG_REVOKED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_destroyed_its_session_is_revoked_at_once() {
    // Without returning its delegation first (a client that skips DELEGRETURN): its
    // DESTROY_SESSION makes it unreachable, and the held request proceeds at once.
    let (srv, o, mut a, osid, _, fh) = holder_of_f(LONG_WAIT_MS, READ).await;
    let clientid = srv
        .server
        .core()
        .unwrap()
        .sessions()
        .session(&a.sid)
        .map(|s| s.client)
        .expect("the holder's session");
    a.run_ok(vec![
        putfh(&fh),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: osid,
        }),
    ])
    .await;
    a.p.answer = false;
    let held = conflicting_open(o);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "held while the holder has its session");
    let destroyed = Instant::now();
    let r =
        a.p.compound(vec![nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: a.sid,
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let _ = clientid;
    let (mut o, r, _) = held.await.unwrap();
    let after = destroyed.elapsed();
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    assert!(
        after < Duration::from_secs(1),
        "answered {after:?} after the DESTROY"
    );
    let (returned, unreachable, timeout, released) = recall_outcomes(&srv);
    assert_eq!((returned, timeout), (0, 0));
    assert_eq!(
        (unreachable, released),
        (1, 0),
        "{:?}",
        recall_outcomes(&srv)
    );
    assert_eq!(
        srv.server.core().unwrap().delegations().stats().outstanding,
        0
    );
    // A later conflicting open finds nothing in its way.
    let t0 = Instant::now();
    o.run_ok(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", BOTH, b"o3")])
        .await;
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_clientid_with_a_delegation_is_busy_and_a_conflict_revokes_it_at_once() {
    let (srv, mut o, mut a, osid, _, fh) = holder_of_f(LONG_WAIT_MS, READ).await;
    let clientid = srv
        .server
        .core()
        .unwrap()
        .sessions()
        .session(&a.sid)
        .map(|s| s.client)
        .expect("the holder's session");
    a.run_ok(vec![
        putfh(&fh),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: osid,
        }),
    ])
    .await;
    let r =
        a.p.compound(vec![nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: a.sid,
        })])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // RFC 8881 §18.50.3: a client ID with delegations is busy.
    let r =
        a.p.compound(vec![nfs_argop4::OP_DESTROY_CLIENTID(
            DESTROY_CLIENTID4args {
                dca_clientid: clientid,
            },
        )])
        .await;
    assert_eq!(
        r.status,
        nfsstat4::NFS4ERR_CLIENTID_BUSY,
        "{:?}",
        r.resarray
    );
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.released, s.revoked, s.outstanding), (0, 0, 1), "{s:?}");
    // Its holder has no session left to be called back on: the first conflict
    // revokes the delegation at once.
    let t0 = Instant::now();
    o.run_ok(vec![nfs_argop4::OP_PUTROOTFH, open_plain("f", BOTH, b"o2")])
        .await;
    assert!(t0.elapsed() < Duration::from_secs(1));
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.revoked_unreachable, s.outstanding), (1, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_silent_holder_gets_the_whole_recall_wait() {
    // Reachable (its connection is open) but it never answers: the recall times out
    // again and again, and only the recall wait ends it.
    let (srv, o, mut a, _, _, _) = holder_of_f(2500, READ).await;
    a.p.answer = false;
    let (_o, r, took) = conflicting_open(o).await.unwrap();
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
    assert!(
        took >= Duration::from_millis(2500),
        "answered after {took:?}"
    );
    assert_eq!(recall_outcomes(&srv), (0, 0, 1, 0));
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!(
        (s.held_returned, s.held_unreachable, s.held_timeout),
        (0, 0, 1)
    );
    assert!(s.held_us_max >= 2_500_000, "{s:?}");
    drop(a);
}

/// Two holders whose requests each conflict with the other's delegation, both held on
/// their connections' readers, where neither DELEGRETURN could be read: each request
/// gives way (NFS4ERR_DELAY, at once, nothing revoked) as soon as its own client's
/// delegation is recalled. Both return, and their retries go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_waiting_for_each_other_give_way() {
    let srv = deleg_server(LONG_WAIT_MS).await;
    let _o = other_client(&srv, &["f1", "f2"], b"x").await;
    let mut a = Holder::new(&srv, b"holder-a").await;
    let mut b = Holder::new(&srv, b"holder-b").await;
    let (_, da, fh1) = a.open("f1", BOTH).await;
    let (_, db, fh2) = b.open("f2", BOTH).await;
    let (da, db) = (deleg_stateid(&da), deleg_stateid(&db));
    let a_open = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = a
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                open_plain("f2", BOTH, b"holder-a"),
            ])
            .await;
        (a, r, t0.elapsed())
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.server.core().unwrap().delegations().stats().recalled == 0 {
        assert!(Instant::now() < deadline, "a's open recalled nothing");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let t0 = Instant::now();
    let r = b
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            open_plain("f1", BOTH, b"holder-b"),
        ])
        .await;
    let b_took = t0.elapsed();
    let (mut a, ra, a_took) = a_open.await.unwrap();
    assert_eq!(ra.status, nfsstat4::NFS4ERR_DELAY, "a: {:?}", ra.resarray);
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "b: {:?}", r.resarray);
    assert!(
        b_took < Duration::from_secs(2),
        "b's open answered after {b_took:?} (a's after {a_took:?})"
    );
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.recalled, s.revoked, s.held_gave_way), (2, 0, 2), "{s:?}");
    // Their connections read again: the returns come in, the retries go through.
    assert_eq!(a.delegreturn(&fh1, &da).await, nfsstat4::NFS4_OK);
    assert_eq!(b.delegreturn(&fh2, &db).await, nfsstat4::NFS4_OK);
    a.run_ok(vec![
        nfs_argop4::OP_PUTROOTFH,
        open_plain("f2", BOTH, b"holder-a"),
    ])
    .await;
    b.run_ok(vec![
        nfs_argop4::OP_PUTROOTFH,
        open_plain("f1", BOTH, b"holder-b"),
    ])
    .await;
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.returned, s.revoked), (2, 0), "{s:?}");
}

/// Holder `b`'s OPEN of "f" for both access (slot 0) and a GETATTR (slot 2).
fn open_then_getattr(b: &Holder) -> Vec<Vec<nfs_argop4>> {
    vec![
        vec![
            sequence(b.sid, 0, b.seq, false),
            nfs_argop4::OP_PUTROOTFH,
            open_plain("f", BOTH, b"holder-b"),
        ],
        vec![
            sequence(b.sid, 2, 1, false),
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_GETATTR(GETATTR4args {
                attr_request: vec![1 << FATTR4_TYPE],
            }),
        ],
    ]
}

/// `f` read-delegated to a holder that no longer answers recalls, and a second client
/// (its sequence id advanced past its setup) about to open `f`; the session that wrote
/// `f` stays open with them.
async fn silent_holder_and_opener() -> (TestServer, (Session, Holder), Holder) {
    let (srv, o, mut a, _, _, _) = holder_of_f(LONG_WAIT_MS, READ).await;
    a.p.answer = false;
    let mut b = Holder::new(&srv, b"holder-b").await;
    b.seq += 1;
    (srv, (o, a), b)
}

/// The OPEN of `open_then_getattr` got DELAY and the GETATTR its answer, one held
/// request gave way and nothing was revoked; how long each took.
fn gave_way_once(srv: &TestServer, replies: &[(COMPOUND4res, Duration)]) -> (Duration, Duration) {
    let (open, open_took) = &replies[0];
    let (getattr, getattr_took) = &replies[1];
    assert_eq!(open.status, nfsstat4::NFS4ERR_DELAY, "{:?}", open.resarray);
    assert_eq!(getattr.status, nfsstat4::NFS4_OK, "{:?}", getattr.resarray);
    let s = srv.server.core().unwrap().delegations().stats();
    assert_eq!((s.held_gave_way, s.revoked), (1, 0), "{s:?}");
    (*open_took, *getattr_took)
}

/// A request held on its connection's reader keeps the calls behind it unread: when the
/// connection had other calls lately it gives way after a short wait (NFS4ERR_DELAY,
/// nothing revoked) instead of holding them for the whole recall wait of a silent
/// holder. Two COMPOUNDs written in one go: an OPEN that conflicts, and a GETATTR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_with_calls_behind_it_gives_way() {
    let (srv, a, mut b) = silent_holder_and_opener().await;
    let replies =
        b.p.compounds_pipelined(open_then_getattr(&b), Duration::from_secs(15))
            .await;
    let (open_took, getattr_took) = gave_way_once(&srv, &replies);
    assert!(
        open_took < Duration::from_secs(2) && getattr_took < Duration::from_secs(2),
        "answered after {open_took:?} and {getattr_took:?}"
    );
    drop(a);
}

/// A request that arrived alone and is held on its connection's reader gives way too
/// once another call of that connection arrives behind it (ADR 0062 addendum): the
/// OPEN is sent alone, the GETATTR 200 ms later. Without the look at the socket both
/// were answered after the whole 10 s wait, and the delegation was revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_gives_way_to_a_call_that_arrives_behind_it() {
    let (srv, a, mut b) = silent_holder_and_opener().await;
    let gap = Duration::from_millis(200);
    let replies =
        b.p.compounds_spaced(open_then_getattr(&b), gap, Duration::from_secs(15))
            .await;
    let (open_took, getattr_took) = gave_way_once(&srv, &replies);
    assert!(
        open_took >= gap && getattr_took < gap + Duration::from_secs(1),
        "the OPEN answered after {open_took:?} (it waited alone first), the GETATTR \
         after {getattr_took:?}"
    );
    drop(a);
}
