//! The layering contract: layers forward what they do not change, see every mutation's
//! context, and are built from names by the registry; plus the memory backend's limits.

use std::sync::{Arc, Mutex};

use txnfs_backend::layer::{parse_size, Layer, LayerRegistry, StackError};
use txnfs_backend::memory::{MemoryBackend, MemoryLimits};
use txnfs_backend::{
    Attrs, Backend, BackendError, CreateMode, Creds, FileKey, OpCtx, Result, SetAttrs,
};

/// Records the COMPOUND of every write and refuses writes of compound 13.
struct Recorder {
    lower: Arc<dyn Backend>,
    writes: Mutex<Vec<u64>>,
}

impl Layer for Recorder {
    fn lower(&self) -> &dyn Backend {
        &*self.lower
    }

    fn write(
        &self,
        cx: &OpCtx,
        key: &FileKey,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<Attrs> {
        if cx.compound == 13 {
            return Err(BackendError::Conflict);
        }
        self.writes.lock().unwrap().push(cx.compound);
        self.lower.write(cx, key, offset, data, sync)
    }
}

/// Creates the new file `name` in the root of `b` on behalf of `cx`.
fn new_file(b: &dyn Backend, cx: &OpCtx, name: &[u8]) -> FileKey {
    let root = b.root().unwrap();
    b.create_file(cx, &root, name, CreateMode::Guarded, &SetAttrs::default())
        .unwrap()
        .key
}

fn ctx(compound: u64) -> OpCtx {
    OpCtx {
        creds: Creds::default(),
        client: Some(7),
        compound,
        txn: false,
        span: Default::default(),
        waited: Default::default(),
    }
}

#[test]
fn a_layer_sees_contexts_and_forwards_the_rest() {
    let rec = Arc::new(Recorder {
        lower: Arc::new(MemoryBackend::new()),
        writes: Mutex::new(Vec::new()),
    });
    let b: Arc<dyn Backend> = rec.clone();
    let f = new_file(&*b, &ctx(1), b"f");
    b.write(&ctx(2), &f, 0, b"abc", false).unwrap();
    assert_eq!(
        b.write(&ctx(13), &f, 0, b"xyz", false).unwrap_err(),
        BackendError::Conflict
    );
    b.write(&ctx(14), &f, 3, b"d", false).unwrap();
    assert_eq!(*rec.writes.lock().unwrap(), vec![2, 14]);
    // Forwarded untouched: the refused write left no trace.
    assert_eq!(
        &b.read(&OpCtx::default(), &f, 0, 10).unwrap().0[..],
        b"abcd"
    );
    // Default hooks forward too (the memory backend accepts every COMPOUND).
    b.begin_compound(&ctx(3)).unwrap();
    b.end_compound(&ctx(3), true).unwrap();
}

#[test]
fn memory_directory_changes_are_atomic() {
    let b = MemoryBackend::new();
    let cx = OpCtx::default();
    let root = b.root().unwrap();
    let d = b
        .make_node(
            &cx,
            &root,
            b"d",
            &txnfs_backend::NodeKind::Directory,
            &SetAttrs::default(),
        )
        .unwrap();
    assert!(d.dir.atomic);
    let f = b
        .create_file(&cx, &d.key, b"f", CreateMode::Guarded, &SetAttrs::default())
        .unwrap();
    let r = b.rename(&cx, &d.key, b"f", &root, b"g").unwrap();
    assert!(r.from.atomic && r.to.atomic);
    assert!(r.to.before >= d.dir.after && r.to.after > r.to.before);
    assert!(r.from.before >= f.dir.after && r.from.after > r.from.before);
}

#[test]
fn registry_builds_stacks_and_names_the_known_layers() {
    let mut reg = LayerRegistry::builtin();
    let tmp = std::path::Path::new("/nonexistent");
    let b = reg.build(&["memory"], tmp).unwrap();
    assert!(b.root().is_ok());
    assert!(reg.build(&["txn", "memory"], tmp).is_ok());
    let e = reg.build(&["zip", "memory"], tmp).err().unwrap();
    assert_eq!(
        e,
        StackError::Unknown {
            name: "zip".into(),
            known: "local, memory, txn".into()
        }
    );
    assert!(e.to_string().contains("known layers: local, memory, txn"));
    assert!(matches!(
        reg.build::<&str>(&[], tmp),
        Err(StackError::Empty { .. })
    ));
    assert!(matches!(
        reg.build(&["memory", "local"], tmp),
        Err(StackError::BaseNotLast { .. })
    ));
    assert!(matches!(
        reg.build(&["local"], tmp),
        Err(StackError::Open { .. })
    ));
    // A wrapping layer registered by the embedder stacks on a base layer.
    reg.register_layer("record", |lower, _| {
        Ok(Arc::new(Recorder {
            lower,
            writes: Mutex::new(Vec::new()),
        }) as Arc<dyn Backend>)
    });
    assert!(matches!(
        reg.build(&["record"], tmp),
        Err(StackError::NothingBelow { .. })
    ));
    let b = reg.build(&["record", "record", "memory"], tmp).unwrap();
    let f = new_file(&*b, &ctx(13), b"f");
    assert_eq!(
        b.write(&ctx(13), &f, 0, b"x", false).unwrap_err(),
        BackendError::Conflict
    );
}

#[test]
fn memory_layer_parameters() {
    assert_eq!(parse_size("1M"), Some(1 << 20));
    assert_eq!(parse_size("3g"), Some(3 << 30));
    assert_eq!(parse_size("12"), Some(12));
    assert_eq!(parse_size("x"), None);
    let reg = LayerRegistry::builtin();
    let p = std::path::Path::new("");
    let b = reg
        .build(&["memory:max_file_size=4K,max_bytes=6K"], p)
        .unwrap();
    let f = new_file(&*b, &OpCtx::default(), b"f");
    let e = b
        .write(&OpCtx::default(), &f, 4096, b"x", false)
        .unwrap_err();
    assert_eq!(e, BackendError::FileTooBig);
    assert!(matches!(
        reg.build(&["memory:max_bytes=lots"], p),
        Err(StackError::Open { .. })
    ));
    assert!(matches!(
        reg.build(&["memory:max_bytes"], p),
        Err(StackError::BadParam { .. })
    ));
}

#[test]
fn memory_limits_bound_files_and_the_total() {
    let b = MemoryBackend::with_limits(MemoryLimits {
        max_file_size: 10_000,
        max_bytes: 25_000,
    });
    let cx = OpCtx::default();
    let root = b.root().unwrap();
    let mk = |name: &[u8]| new_file(&b, &cx, name);
    let (a, c, d) = (mk(b"a"), mk(b"c"), mk(b"d"));
    // One file: 10 000 bytes fit, one more does not (by write or by truncate).
    b.write(&cx, &a, 0, &[1; 10_000], false).unwrap();
    assert_eq!(
        b.write(&cx, &a, 10_000, b"x", false).unwrap_err(),
        BackendError::FileTooBig
    );
    let grow = SetAttrs {
        size: Some(10_001),
        ..Default::default()
    };
    assert_eq!(
        b.setattr(&cx, &a, &grow).unwrap_err(),
        BackendError::FileTooBig
    );
    // The total: 10 000 + 10 000 + 5 000 fit, the next byte does not.
    b.write(&cx, &c, 0, &[2; 10_000], false).unwrap();
    b.write(&cx, &d, 0, &[3; 5_000], false).unwrap();
    assert_eq!(
        b.write(&cx, &d, 5_000, b"x", false).unwrap_err(),
        BackendError::NoSpace
    );
    // Overwriting in place needs no new space.
    b.write(&cx, &d, 0, &[4; 5_000], false).unwrap();
    let st = b.statfs(&OpCtx::default(), &root).unwrap();
    assert_eq!((st.total_bytes, st.free_bytes), (25_000, 0));
    // Removing a file gives its bytes back; so does truncating.
    b.remove(&cx, &root, b"c").unwrap();
    b.write(&cx, &d, 5_000, &[5; 5_000], false).unwrap();
    let shrink = SetAttrs {
        size: Some(0),
        ..Default::default()
    };
    b.setattr(&cx, &a, &shrink).unwrap();
    assert_eq!(
        b.statfs(&OpCtx::default(), &root).unwrap().free_bytes,
        15_000
    );
    // clone_range is bounded too.
    let e = mk(b"e");
    assert_eq!(
        b.clone_range(&cx, &d, 0, &e, 9_000, 2_000).unwrap_err(),
        BackendError::FileTooBig
    );
    // Default limits: 4 GiB per file, 8 GiB in all.
    assert_eq!(
        MemoryLimits::default(),
        MemoryLimits {
            max_file_size: 4 << 30,
            max_bytes: 8 << 30
        }
    );
}
