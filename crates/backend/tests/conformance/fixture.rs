//! The backends the suite runs against, each with whatever must outlive it.

use std::sync::Arc;

use txnfs_backend::layer::Layer;
use txnfs_backend::local::{HandleMode, LocalBackend};
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::Backend;

/// A backend plus whatever must outlive it (the temp dir of the local backend).
pub struct Fixture<B> {
    pub b: B,
    pub _dir: Option<tempfile::TempDir>,
}

pub fn memory() -> Fixture<MemoryBackend> {
    Fixture {
        b: MemoryBackend::new(),
        _dir: None,
    }
}

pub fn local() -> Fixture<LocalBackend> {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = LocalBackend::open(dir.path()).expect("open local backend");
    Fixture { b, _dir: Some(dir) }
}

/// The local backend with keys from its handle table (ADR 0050), kept in the temp
/// dir's `.state` beside the export.
pub fn local_table() -> Fixture<LocalBackend> {
    let dir = tempfile::tempdir().expect("temp dir");
    let export = dir.path().join("export");
    std::fs::create_dir(&export).expect("export dir");
    let state = dir.path().join("state");
    let b = LocalBackend::open_with(&export, HandleMode::Table, Some(&state))
        .expect("open local backend in table mode");
    assert_eq!(b.handle_mode(), HandleMode::Table);
    Fixture { b, _dir: Some(dir) }
}

/// A layer that changes nothing: the suite run through it proves that every call
/// forwards (a layer that dropped or garbled one would fail here).
pub struct Passthrough(Arc<dyn Backend>);

impl Layer for Passthrough {
    fn lower(&self) -> &dyn Backend {
        &*self.0
    }
}

pub fn layered() -> Fixture<Passthrough> {
    let f = local();
    Fixture {
        b: Passthrough(Arc::new(Passthrough(Arc::new(f.b)))),
        _dir: f._dir,
    }
}
