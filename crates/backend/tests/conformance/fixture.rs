//! The backends the suite runs against, each with whatever must outlive it.

use std::sync::Arc;

use txnfs_backend::layer::Layer;
use txnfs_backend::local::LocalBackend;
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
