//! The server side of the layered backend contract, over real TCP: begin/end_compound
//! around every COMPOUND that touches an export, mutations carrying that COMPOUND's
//! context, a layer's `Conflict` reaching the client as NFS4ERR_DELAY, and exact,
//! monotone change_info4 in RENAME/CREATE/REMOVE replies.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use txnfs_backend::layer::Layer;
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::{Backend, BackendError, DirChange, FileKey, OpCtx, Result};
use txnfs_server::nfs::*;
use txnfs_server::{Config, ExportConfig, LayerStack, PrebuiltBackend, Server};

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
    fn end_compound(&self, cx: &OpCtx, ok: bool) {
        self.events
            .lock()
            .unwrap()
            .push(Event::End(cx.compound, ok));
    }
    fn remove(&self, cx: &OpCtx, dir: &FileKey, name: &[u8]) -> Result<DirChange> {
        self.events.lock().unwrap().push(Event::Remove(cx.compound));
        self.lower.remove(cx, dir, name)
    }
}

struct Started {
    addr: std::net::SocketAddr,
    journal: Arc<Journal>,
    task: tokio::task::JoinHandle<()>,
    state_dir: std::path::PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

async fn start() -> Started {
    let journal = Arc::new(Journal {
        lower: Arc::new(MemoryBackend::new()),
        events: Mutex::new(Vec::new()),
        refuse: AtomicBool::new(false),
    });
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let state_dir = std::env::temp_dir().join(format!(
        "txnfs-layers-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let cfg = Config {
        exports: vec![ExportConfig {
            name: "/".into(),
            path: Default::default(),
            backend: LayerStack::Memory,
            read_only: false,
            prebuilt: Some(PrebuiltBackend(journal.clone())),
        }],
        state_dir: Some(state_dir.clone()),
        grace: false,
        ..Config::default()
    };
    let server = Server::new(cfg).expect("server starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = txnfs_server::run(server, listener, std::future::pending()).await;
    });
    Started {
        addr,
        journal,
        task,
        state_dir,
    }
}

fn mkdir(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_CREATE(CREATE4args {
        objtype: createtype4::NF4DIR,
        objname: Bytes::copy_from_slice(name.as_bytes()),
        createattrs: empty_fattr(),
    })
}

fn rename(from: &str, to: &str) -> nfs_argop4 {
    nfs_argop4::OP_RENAME(RENAME4args {
        oldname: Bytes::copy_from_slice(from.as_bytes()),
        newname: Bytes::copy_from_slice(to.as_bytes()),
    })
}

fn remove(name: &str) -> nfs_argop4 {
    nfs_argop4::OP_REMOVE(REMOVE4args {
        target: Bytes::copy_from_slice(name.as_bytes()),
    })
}

#[tokio::test]
async fn hooks_bracket_each_compound_that_touches_the_export() {
    let srv = start().await;
    let mut s = Session::new(srv.addr, b"hooks").await;
    let events = |j: &Journal| std::mem::take(&mut *j.events.lock().unwrap());
    // Session setup touched no export.
    assert_eq!(events(&srv.journal), vec![]);

    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("d"),
            nfs_argop4::OP_PUTROOTFH,
            remove("d"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let ev = events(&srv.journal);
    let Event::Begin(id) = ev[0] else {
        panic!("{ev:?}")
    };
    assert_ne!(id, 0);
    // One begin (the second PUTROOTFH does not begin again), the mutation under the
    // same COMPOUND, one successful end.
    assert_eq!(
        ev,
        vec![Event::Begin(id), Event::Remove(id), Event::End(id, true)]
    );

    // A failing op ends the COMPOUND with ok = false; the next COMPOUND has a new id.
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, remove("nope")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let ev = events(&srv.journal);
    let Event::Begin(id2) = ev[0] else {
        panic!("{ev:?}")
    };
    assert!(id2 > id);
    assert_eq!(
        ev,
        vec![
            Event::Begin(id2),
            Event::Remove(id2),
            Event::End(id2, false)
        ]
    );

    // A COMPOUND that never reaches the export is not announced to it.
    let r = s.run(vec![]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK);
    assert_eq!(events(&srv.journal), vec![]);

    // A layer that cannot take the COMPOUND now makes the client retry later.
    srv.journal.refuse.store(true, Ordering::Relaxed);
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH, mkdir("e")]).await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_DELAY, "{:?}", r.resarray);
    assert_eq!(r.resarray.len(), 2, "PUTROOTFH is the op that fails");
    assert_eq!(events(&srv.journal), vec![], "no begin, so no end either");
}

#[tokio::test]
async fn change_info_is_exact_and_monotone() {
    let srv = start().await;
    let mut s = Session::new(srv.addr, b"cinfo").await;
    let r = s
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            mkdir("a"),
            nfs_argop4::OP_PUTROOTFH,
            mkdir("b"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let nfs_resop4::OP_CREATE(CREATE4res::NFS4_OK(c)) = &r.resarray[4] else {
        panic!("{:?}", r.resarray)
    };
    let mut last = c.cinfo.after;
    assert!(c.cinfo.atomic && c.cinfo.after > c.cinfo.before);
    for (from, to) in [("a", "x"), ("x", "y"), ("b", "z")] {
        let r = s
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                nfs_argop4::OP_SAVEFH,
                rename(from, to),
            ])
            .await;
        assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
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
