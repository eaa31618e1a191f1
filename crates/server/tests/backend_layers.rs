//! The server side of the layered backend contract, over real TCP: begin/end_compound
//! around every COMPOUND that touches an export, mutations carrying that COMPOUND's
//! context, a layer's `Conflict` reaching the client as NFS4ERR_DELAY, and exact,
//! monotone change_info4 in RENAME/CREATE/REMOVE replies.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use txnfs_backend::layer::Layer;
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::{Backend, BackendError, DirChange, FileKey, OpCtx, Result};
use txnfs_server::nfs::*;
use txnfs_server::PrebuiltBackend;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Begin(u64),
    End(u64, bool),
    Remove(u64),
}

/// Logs the hooks and the COMPOUND of every REMOVE; refuses to begin while `refuse`.
struct Journal {
    lower: Arc<dyn Backend>,
    events: Mutex<Vec<Event>>,
    refuse: AtomicBool,
}

impl Layer for Journal {
    fn lower(&self) -> &dyn Backend {
        &*self.lower
    }
    fn begin_compound(&self, cx: &OpCtx) -> Result<()> {
        if self.refuse.load(Ordering::Relaxed) {
            return Err(BackendError::Conflict);
        }
        assert!(cx.client.is_some(), "the session's client is known");
        self.events.lock().unwrap().push(Event::Begin(cx.compound));
        Ok(())
    }
    fn end_compound(&self, cx: &OpCtx, ok: bool) -> Result<()> {
        self.events
            .lock()
            .unwrap()
            .push(Event::End(cx.compound, ok));
        Ok(())
    }
    fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> {
        self.events.lock().unwrap().push(Event::Remove(cx.compound));
        self.lower.remove(cx, dir, name)
    }
}

/// Checks that `ev` is one COMPOUND: its begin, one REMOVE under it and its end with `ok`;
/// returns the COMPOUND's id.
fn one_remove_compound(ev: &[Event], ok: bool) -> u64 {
    let Some(&Event::Begin(id)) = ev.first() else {
        panic!("{ev:?}")
    };
    assert_eq!(
        ev,
        [Event::Begin(id), Event::Remove(id), Event::End(id, ok)]
    );
    id
}

/// Runs `ops` in the session and checks that the whole COMPOUND succeeded.
async fn run_ok(s: &mut Session, ops: Vec<nfs_argop4>) -> COMPOUND4res {
    let r = s.run(ops).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    r
}

/// A memory server whose export is the `Journal` over a memory backend, and a session
/// of the client `owner` on it.
async fn start(owner: &[u8]) -> (TestServer, Arc<Journal>, Session) {
    let journal = Arc::new(Journal {
        lower: Arc::new(MemoryBackend::new()),
        events: Mutex::new(Vec::new()),
        refuse: AtomicBool::new(false),
    });
    let prebuilt = PrebuiltBackend(journal.clone());
    let srv = start_server(|state_dir| {
        let mut cfg = memory_config(state_dir, false);
        cfg.exports[0].prebuilt = Some(prebuilt);
        cfg
    })
    .await;
    let s = Session::new(srv.addr, owner).await;
    (srv, journal, s)
}

#[tokio::test]
async fn hooks_bracket_each_compound_that_touches_the_export() {
    let (_srv, journal, mut s) = start(b"hooks").await;
    let events = |j: &Journal| std::mem::take(&mut *j.events.lock().unwrap());
    // Session setup touched no export.
    assert_eq!(events(&journal), vec![]);

    run_ok(
        &mut s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("d"),
            nfs_argop4::OP_PUTROOTFH,
            remove("d"),
        ],
    )
    .await;
    // One begin (the second PUTROOTFH does not begin again), the mutation under the
    // same COMPOUND, one successful end.
    let id = one_remove_compound(&events(&journal), true);
    assert_ne!(id, 0);

    // A failing op ends the COMPOUND with ok = false; the next COMPOUND has a new id.
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, remove("nope")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let id2 = one_remove_compound(&events(&journal), false);
    assert!(id2 > id);

    // A COMPOUND that never reaches the export is not announced to it.
    let r = s.run(vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    assert_eq!(events(&journal), vec![]);

    // A layer that cannot take the COMPOUND now makes the client retry later.
    journal.refuse.store(true, Ordering::Relaxed);
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, mkdir("e")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
    assert_eq!(r.resarray.len(), 2, "PUTROOTFH is the op that fails");
    assert_eq!(events(&journal), vec![], "no begin, so no end either");
}

#[tokio::test]
async fn change_info_is_exact_and_monotone() {
    let (_srv, _journal, mut s) = start(b"cinfo").await;
    let r = run_ok(
        &mut s,
        vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("a"),
            nfs_argop4::OP_PUTROOTFH,
            mkdir("b"),
        ],
    )
    .await;
    let nfs_resop4::OP_CREATE(CREATE4res::NFS4_OK(c)) = &r.resarray[4] else {
        panic!("{:?}", r.resarray)
    };
    let mut last = c.cinfo.after;
    assert!(c.cinfo.atomic && c.cinfo.after > c.cinfo.before);
    for (from, to) in [("a", "x"), ("x", "y"), ("b", "z")] {
        let r = run_ok(
            &mut s,
            vec![
                nfs_argop4::OP_PUTROOTFH,
                nfs_argop4::OP_SAVEFH,
                rename(from, to),
            ],
        )
        .await;
        let nfs_resop4::OP_RENAME(RENAME4res::NFS4_OK(rn)) = &r.resarray[3] else {
            panic!("{:?}", r.resarray)
        };
        for ci in [&rn.source_cinfo, &rn.target_cinfo] {
            // The memory backend reads both values under the mutation's lock.
            assert!(ci.atomic, "{ci:?}");
            assert!(
                ci.after > ci.before && ci.before >= last,
                "{ci:?} after {last}"
            );
        }
        last = rn.target_cinfo.after;
    }
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, remove("y")]).await;
    let nfs_resop4::OP_REMOVE(REMOVE4res::NFS4_OK(rm)) = &r.resarray[2] else {
        panic!("{:?}", r.resarray)
    };
    assert!(rm.cinfo.atomic && rm.cinfo.before >= last && rm.cinfo.after > rm.cinfo.before);
}
