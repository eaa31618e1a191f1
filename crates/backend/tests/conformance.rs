//! One conformance suite run against every backend: each `check_*` function takes a fresh
//! backend and asserts outcomes; `conformance!` instantiates all of them per backend.

use std::collections::HashSet;

use bytes::Bytes;
use txnfs_backend::local::LocalBackend;
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::{
    Backend, BackendError, CreateMode, Creds, FileKey, FileType, NodeKind, OpCtx, SetAttrs,
    SetTime, Timestamp,
};

// ---------------------------------------------------------------------------------------
// Fixtures

/// A backend plus whatever must outlive it (the temp dir of the local backend).
pub struct Fixture<B> {
    pub b: B,
    pub _dir: Option<tempfile::TempDir>,
}

fn memory() -> Fixture<MemoryBackend> {
    Fixture {
        b: MemoryBackend::new(),
        _dir: None,
    }
}

fn local() -> Fixture<LocalBackend> {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = LocalBackend::open(dir.path()).expect("open local backend");
    Fixture { b, _dir: Some(dir) }
}

/// A layer that changes nothing: the suite run through it proves that every call
/// forwards (a layer that dropped or garbled one would fail here).
pub struct Passthrough(std::sync::Arc<dyn Backend>);

impl txnfs_backend::layer::Layer for Passthrough {
    fn lower(&self) -> &dyn Backend {
        &*self.0
    }
}

fn layered() -> Fixture<Passthrough> {
    let f = local();
    Fixture {
        b: Passthrough(std::sync::Arc::new(Passthrough(std::sync::Arc::new(f.b)))),
        _dir: f._dir,
    }
}

fn creds() -> Creds {
    Creds {
        uid: 1234,
        gid: 5678,
        gids: vec![5678],
    }
}

fn create<B: Backend>(b: &B, dir: &FileKey, name: &str) -> FileKey {
    let txnfs_backend::Created {
        key: k,
        attrs: a,
        created,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            dir,
            name.as_bytes(),
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .expect("create");
    assert!(created);
    assert_eq!(a.ftype, FileType::Regular);
    k
}

fn mkdir<B: Backend>(b: &B, dir: &FileKey, name: &str) -> FileKey {
    b.make_node(
        &OpCtx::for_creds(creds()),
        dir,
        name.as_bytes(),
        &NodeKind::Directory,
        &SetAttrs::default(),
    )
    .expect("mkdir")
    .key
}

// ---------------------------------------------------------------------------------------
// Checks

pub fn check_root<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    assert!(!root.is_empty() && root.len() <= txnfs_backend::MAX_KEY_LEN);
    let a = b.getattr(&root).unwrap();
    assert_eq!(a.ftype, FileType::Directory);
    assert_eq!(b.lookup_parent(&root).unwrap_err(), BackendError::NotFound);
    assert_eq!(b.root().unwrap(), root, "root key is stable");
}

pub fn check_create_write_read<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let txnfs_backend::Created {
        key: k,
        attrs: a,
        created,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"f",
            CreateMode::Unchecked,
            &SetAttrs {
                mode: Some(0o640),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(created);
    assert_eq!(a.mode, 0o640);
    assert_eq!(a.uid, 1234);
    assert_eq!(a.gid, 5678);
    assert_eq!(a.nlink, 1);
    assert_eq!(a.size, 0);
    let a = b
        .write(&OpCtx::default(), &k, 0, b"hello world", false)
        .unwrap();
    assert_eq!(a.size, 11);
    let (data, eof) = b.read(&k, 0, 100).unwrap();
    assert_eq!(&data[..], b"hello world");
    assert!(eof);
    let (data, eof) = b.read(&k, 0, 5).unwrap();
    assert_eq!(&data[..], b"hello");
    assert!(!eof);
    let (data, eof) = b.read(&k, 6, 5).unwrap();
    assert_eq!(&data[..], b"world");
    assert!(eof, "a read ending exactly at EOF reports eof");
    let (data, eof) = b.read(&k, 11, 5).unwrap();
    assert!(data.is_empty());
    assert!(eof);
    let (data, eof) = b.read(&k, 1000, 5).unwrap();
    assert!(data.is_empty());
    assert!(eof);
    // a hole
    b.write(&OpCtx::default(), &k, 20, b"x", false).unwrap();
    let (data, _) = b.read(&k, 0, 100).unwrap();
    assert_eq!(data.len(), 21);
    assert_eq!(&data[11..20], &[0u8; 9]);
    // lookup finds the same key
    let (k2, a2) = b.lookup(&root, b"f").unwrap();
    assert_eq!(k2, k);
    assert_eq!(a2.fileid, b.getattr(&k).unwrap().fileid);
    assert_eq!(
        b.lookup(&root, b"nope").unwrap_err(),
        BackendError::NotFound
    );
    // unchecked create of an existing file opens it, applies only the size
    let txnfs_backend::Created {
        key: k3,
        attrs: a3,
        created,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"f",
            CreateMode::Unchecked,
            &SetAttrs {
                mode: Some(0o600),
                size: Some(3),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(!created);
    assert_eq!(k3, k);
    assert_eq!(a3.size, 3);
    assert_eq!(a3.mode, 0o640);
    // reading a directory
    assert_eq!(b.read(&root, 0, 10).unwrap_err(), BackendError::IsDir);
    assert_eq!(
        b.write(&OpCtx::default(), &root, 0, b"x", false)
            .unwrap_err(),
        BackendError::IsDir
    );
}

pub fn check_sync_write_commit<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "s");
    let a = b.write(&OpCtx::default(), &k, 0, b"stable", true).unwrap();
    assert_eq!(a.size, 6);
    b.commit(&OpCtx::default(), &k).unwrap();
    b.write(&OpCtx::default(), &k, 6, b" more", false).unwrap();
    b.commit(&OpCtx::default(), &k).unwrap();
    assert_eq!(&b.read(&k, 0, 64).unwrap().0[..], b"stable more");
}

pub fn check_setattr<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "a");
    b.write(&OpCtx::default(), &k, 0, b"0123456789", false)
        .unwrap();
    // truncate
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                size: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, 4);
    assert_eq!(&b.read(&k, 0, 100).unwrap().0[..], b"0123");
    // extend with zeros
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                size: Some(8),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, 8);
    assert_eq!(&b.read(&k, 0, 100).unwrap().0[..], b"0123\0\0\0\0");
    // mode
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                mode: Some(0o4711),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.mode, 0o4711);
    assert_eq!(b.getattr(&k).unwrap().mode, 0o4711);
    // owner
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                uid: Some(42),
                gid: Some(43),
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid, a.mode), (42, 43, 0o600));
    // client times
    let t1 = Timestamp {
        sec: 1_000_000_000,
        nsec: 123_456_789,
    };
    let t2 = Timestamp {
        sec: 1_100_000_000,
        nsec: 5,
    };
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                atime: Some(SetTime::Client(t1)),
                mtime: Some(SetTime::Client(t2)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.atime, t1);
    assert_eq!(a.mtime, t2);
    // server time
    let before = now_sec();
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                mtime: Some(SetTime::ServerNow),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.mtime.sec >= before - 1 && a.mtime.sec <= now_sec() + 1);
    assert_eq!(a.atime, t1, "atime untouched");
    // size on a directory
    assert_eq!(
        b.setattr(
            &OpCtx::default(),
            &root,
            &SetAttrs {
                size: Some(0),
                ..Default::default()
            }
        )
        .unwrap_err(),
        BackendError::IsDir
    );
    // empty setattr is a getattr
    assert_eq!(
        b.setattr(&OpCtx::default(), &k, &SetAttrs::default())
            .unwrap()
            .size,
        8
    );
}

fn now_sec() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub fn check_create_modes<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "g");
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"g",
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let verf = *b"verifier";
    let txnfs_backend::Created {
        key: k1,
        attrs: _,
        created: c1,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"x",
            CreateMode::Exclusive(verf),
            &SetAttrs::default(),
        )
        .unwrap();
    assert!(c1);
    let txnfs_backend::Created {
        key: k2,
        attrs: _,
        created: c2,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"x",
            CreateMode::Exclusive(verf),
            &SetAttrs::default(),
        )
        .unwrap();
    assert!(!c2, "retry with the same verifier opens the file");
    assert_eq!(k1, k2);
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"x",
            CreateMode::Exclusive(*b"other!!!"),
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Exists);
    // an exclusive create over a file made otherwise is Exists
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"g",
            CreateMode::Exclusive(verf),
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let _ = k;
    // create over a directory
    mkdir(b, &root, "d");
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"d",
            CreateMode::Unchecked,
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::IsDir);
}

pub fn check_make_node<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let root_nlink = b.getattr(&root).unwrap().nlink;
    let txnfs_backend::Made {
        key: dk, attrs: da, ..
    } = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &root,
            b"dir",
            &NodeKind::Directory,
            &SetAttrs {
                mode: Some(0o750),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(da.ftype, FileType::Directory);
    assert_eq!(da.mode, 0o750);
    assert_eq!(da.nlink, 2);
    assert_eq!((da.uid, da.gid), (1234, 5678));
    assert_eq!(b.getattr(&root).unwrap().nlink, root_nlink + 1);
    let (pk, _) = b.lookup_parent(&dk).unwrap();
    assert_eq!(pk, root);
    let txnfs_backend::Made {
        key: sk, attrs: sa, ..
    } = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &dk,
            b"sym",
            &NodeKind::Symlink(Bytes::from_static(b"../target/x")),
            &SetAttrs::default(),
        )
        .unwrap();
    assert_eq!(sa.ftype, FileType::Symlink);
    assert_eq!(sa.size, 11);
    assert_eq!(&b.readlink(&sk).unwrap()[..], b"../target/x");
    assert_eq!(b.readlink(&dk).unwrap_err(), BackendError::NotSymlink);
    let txnfs_backend::Made {
        key: fk, attrs: fa, ..
    } = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &dk,
            b"fifo",
            &NodeKind::Fifo,
            &SetAttrs {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(fa.ftype, FileType::Fifo);
    assert_eq!(fa.mode, 0o600);
    assert_eq!(b.getattr(&fk).unwrap().ftype, FileType::Fifo);
    assert_eq!(b.read(&fk, 0, 1).unwrap_err(), BackendError::Inval);
    let e = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &dk,
            b"fifo",
            &NodeKind::Directory,
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Exists);
    let txnfs_backend::Made {
        key: ck, attrs: ca, ..
    } = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &dk,
            b"null",
            &NodeKind::CharDev(1, 3),
            &SetAttrs::default(),
        )
        .unwrap();
    assert_eq!(ca.ftype, FileType::CharDev);
    assert_eq!(ca.rdev, (1, 3));
    assert_eq!(b.read(&ck, 0, 1).unwrap_err(), BackendError::Inval);
    // a key of a non-directory used as a directory
    let e = b.lookup(&fk, b"x").unwrap_err();
    assert_eq!(e, BackendError::NotDir);
}

pub fn check_link<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "orig");
    let d = mkdir(b, &root, "sub");
    let a = b.link(&OpCtx::default(), &k, &d, b"alias").unwrap().attrs;
    assert_eq!(a.nlink, 2);
    let (k2, a2) = b.lookup(&d, b"alias").unwrap();
    assert_eq!(a2.fileid, a.fileid);
    assert_eq!(b.getattr(&k2).unwrap().nlink, 2);
    assert_eq!(
        b.link(&OpCtx::default(), &k, &d, b"alias").unwrap_err(),
        BackendError::Exists
    );
    assert_eq!(
        b.link(&OpCtx::default(), &d, &root, b"dirlink")
            .unwrap_err(),
        BackendError::IsDir
    );
    b.remove(&OpCtx::default(), &root, b"orig").unwrap();
    assert_eq!(
        b.getattr(&k2).unwrap().nlink,
        1,
        "still alive via the other link"
    );
    b.write(&OpCtx::default(), &k2, 0, b"ok", false).unwrap();
}

pub fn check_rename<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let a = create(b, &root, "a");
    b.write(&OpCtx::default(), &a, 0, b"AAA", false).unwrap();
    let t = create(b, &root, "t");
    b.write(&OpCtx::default(), &t, 0, b"TTTTTT", false).unwrap();
    b.rename(&OpCtx::default(), &root, b"a", &root, b"t")
        .unwrap();
    assert_eq!(b.lookup(&root, b"a").unwrap_err(), BackendError::NotFound);
    let (k, attrs) = b.lookup(&root, b"t").unwrap();
    assert_eq!(k, a, "the key follows the object");
    assert_eq!(attrs.size, 3);
    assert_eq!(b.getattr(&t).unwrap_err(), BackendError::Stale);
    // across directories
    let d1 = mkdir(b, &root, "d1");
    let d2 = mkdir(b, &root, "d2");
    let n = b.getattr(&root).unwrap().nlink;
    let sub = mkdir(b, &d1, "sub");
    b.rename(&OpCtx::default(), &d1, b"sub", &d2, b"moved")
        .unwrap();
    assert_eq!(b.getattr(&d1).unwrap().nlink, 2);
    assert_eq!(b.getattr(&d2).unwrap().nlink, 3);
    assert_eq!(b.lookup_parent(&sub).unwrap().0, d2);
    assert_eq!(b.getattr(&root).unwrap().nlink, n);
    // dir over a non-empty dir
    let full = mkdir(b, &root, "full");
    create(b, &full, "inside");
    let e = b
        .rename(&OpCtx::default(), &root, b"d1", &root, b"full")
        .unwrap_err();
    assert_eq!(e, BackendError::NotEmpty);
    // dir over an empty dir works
    b.rename(&OpCtx::default(), &root, b"d1", &d2, b"moved")
        .unwrap();
    assert_eq!(b.lookup(&d2, b"moved").unwrap().0, d1);
    assert_eq!(b.getattr(&sub).unwrap_err(), BackendError::Stale);
    // file over dir / dir over file
    assert_eq!(
        b.rename(&OpCtx::default(), &root, b"t", &root, b"full")
            .unwrap_err(),
        BackendError::IsDir
    );
    assert_eq!(
        b.rename(&OpCtx::default(), &root, b"full", &root, b"t")
            .unwrap_err(),
        BackendError::NotDir
    );
    // into its own subtree
    assert_eq!(
        b.rename(&OpCtx::default(), &root, b"d2", &d1, b"loop")
            .unwrap_err(),
        BackendError::Inval
    );
    // missing source
    assert_eq!(
        b.rename(&OpCtx::default(), &root, b"ghost", &root, b"x")
            .unwrap_err(),
        BackendError::NotFound
    );
    // rename onto itself is a no-op
    b.rename(&OpCtx::default(), &root, b"t", &root, b"t")
        .unwrap();
    assert!(b.lookup(&root, b"t").is_ok());
}

pub fn check_remove<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "gone");
    b.write(&OpCtx::default(), &k, 0, b"data", false).unwrap();
    assert!(b.getattr(&k).is_ok());
    b.remove(&OpCtx::default(), &root, b"gone").unwrap();
    assert_eq!(b.getattr(&k).unwrap_err(), BackendError::Stale);
    assert_eq!(b.read(&k, 0, 4).unwrap_err(), BackendError::Stale);
    assert_eq!(
        b.lookup(&root, b"gone").unwrap_err(),
        BackendError::NotFound
    );
    assert_eq!(
        b.remove(&OpCtx::default(), &root, b"gone").unwrap_err(),
        BackendError::NotFound
    );
    let d = mkdir(b, &root, "d");
    create(b, &d, "f");
    assert_eq!(
        b.remove(&OpCtx::default(), &root, b"d").unwrap_err(),
        BackendError::NotEmpty
    );
    b.remove(&OpCtx::default(), &d, b"f").unwrap();
    let n = b.getattr(&root).unwrap().nlink;
    b.remove(&OpCtx::default(), &root, b"d").unwrap();
    assert_eq!(b.getattr(&root).unwrap().nlink, n - 1);
    assert_eq!(b.getattr(&d).unwrap_err(), BackendError::Stale);
    // operations inside a removed directory: its key is stale
    assert_eq!(b.lookup(&d, b"f").unwrap_err(), BackendError::Stale);
    assert_eq!(
        b.remove(&OpCtx::default(), &d, b"f").unwrap_err(),
        BackendError::Stale
    );
    assert_eq!(b.readdir(&d, 0, 10).unwrap_err(), BackendError::Stale);
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &d,
            b"f",
            CreateMode::Unchecked,
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Stale);
}

pub fn check_readdir_paging<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let d = mkdir(b, &root, "big");
    let names: Vec<String> = (0..1000).map(|i| format!("entry-{i:04}")).collect();
    for n in &names {
        create(b, &d, n);
    }
    // plain paging
    let mut seen = Vec::new();
    let mut cookie = 0;
    loop {
        let (ents, eof) = b.readdir(&d, cookie, 7).unwrap();
        assert!(ents.len() <= 7);
        for e in &ents {
            assert_ne!(e.cookie, 0);
            assert_eq!(e.attrs.ftype, FileType::Regular);
            let (k, _) = b.lookup(&d, &e.name).unwrap();
            assert_eq!(k, e.key);
            seen.push(String::from_utf8(e.name.to_vec()).unwrap());
        }
        if eof {
            break;
        }
        assert!(!ents.is_empty(), "no progress without eof");
        cookie = ents.last().unwrap().cookie;
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, names, "every name exactly once");

    // paging while entries are removed between pages
    let mut seen = HashSet::new();
    let mut removed = HashSet::new();
    let mut cookie = 0;
    let mut victim = 999usize;
    loop {
        let (ents, eof) = b.readdir(&d, cookie, 7).unwrap();
        for e in &ents {
            let name = String::from_utf8(e.name.to_vec()).unwrap();
            assert!(!removed.contains(&name), "removed entry {name} returned");
            assert!(seen.insert(name.clone()), "{name} returned twice");
        }
        if eof {
            break;
        }
        cookie = ents.last().unwrap().cookie;
        // remove one already-seen entry and one not yet seen
        if let Some(e) = ents.first() {
            b.remove(&OpCtx::default(), &d, &e.name).unwrap();
        }
        while victim > 0 {
            let n = &names[victim];
            victim -= 1;
            if !seen.contains(n) && !removed.contains(n) {
                b.remove(&OpCtx::default(), &d, n.as_bytes()).unwrap();
                removed.insert(n.clone());
                break;
            }
        }
    }
    for n in &names {
        assert!(
            seen.contains(n) || removed.contains(n),
            "{n} neither seen nor removed"
        );
    }
    // max_entries 0 and empty dir
    let e = mkdir(b, &root, "empty");
    let (ents, eof) = b.readdir(&e, 0, 10).unwrap();
    assert!(ents.is_empty());
    assert!(eof);
    let plain = create(b, &root, "plain");
    assert_eq!(b.readdir(&plain, 0, 1).unwrap_err(), BackendError::NotDir);
}

pub fn check_change<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let k = create(b, &root, "c");
    let mut last = b.getattr(&k).unwrap().change;
    for i in 0..100u32 {
        let a = b
            .write(&OpCtx::default(), &k, 0, &i.to_be_bytes(), false)
            .unwrap();
        assert!(a.change > last, "write {i}: change {} !> {last}", a.change);
        assert_eq!(
            b.getattr(&k).unwrap().change,
            a.change,
            "stable without mutation"
        );
        last = a.change;
    }
    let a = b
        .setattr(
            &OpCtx::default(),
            &k,
            &SetAttrs {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.change > last);
    // directory change moves on create/remove/rename
    let d0 = b.getattr(&root).unwrap().change;
    create(b, &root, "c2");
    let d1 = b.getattr(&root).unwrap().change;
    assert!(d1 > d0);
    b.rename(&OpCtx::default(), &root, b"c2", &root, b"c3")
        .unwrap();
    let d2 = b.getattr(&root).unwrap().change;
    assert!(d2 > d1);
    b.remove(&OpCtx::default(), &root, b"c3").unwrap();
    let d3 = b.getattr(&root).unwrap().change;
    assert!(d3 > d2);
    b.link(&OpCtx::default(), &k, &root, b"c4").unwrap();
    assert!(b.getattr(&root).unwrap().change > d3);
}

pub fn check_bad_names<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let c = creds();
    for bad in [&b".."[..], b".", b"a/b", b"", b"nul\0"] {
        assert_eq!(b.lookup(&root, bad).unwrap_err(), BackendError::BadName);
        let e = b
            .create_file(
                &OpCtx::for_creds(c.clone()),
                &root,
                bad,
                CreateMode::Unchecked,
                &SetAttrs::default(),
            )
            .unwrap_err();
        assert_eq!(e, BackendError::BadName);
        let e = b
            .make_node(
                &OpCtx::for_creds(c.clone()),
                &root,
                bad,
                &NodeKind::Directory,
                &SetAttrs::default(),
            )
            .unwrap_err();
        assert_eq!(e, BackendError::BadName);
        assert_eq!(
            b.remove(&OpCtx::default(), &root, bad).unwrap_err(),
            BackendError::BadName
        );
        assert_eq!(
            b.rename(&OpCtx::default(), &root, bad, &root, b"x")
                .unwrap_err(),
            BackendError::BadName
        );
    }
    let long = vec![b'a'; 256];
    assert_eq!(
        b.lookup(&root, &long).unwrap_err(),
        BackendError::NameTooLong
    );
    let ok = vec![b'a'; 255];
    b.create_file(
        &OpCtx::for_creds(c.clone()),
        &root,
        &ok,
        CreateMode::Guarded,
        &SetAttrs::default(),
    )
    .unwrap();
    // garbage keys are stale, not a crash
    for key in [
        Bytes::new(),
        Bytes::from_static(b"\x01"),
        Bytes::from_static(&[0xff; 88]),
        Bytes::from_static(&[0x01, 0, 0, 0, 0, 0, 0, 0, 9]),
    ] {
        assert_eq!(b.getattr(&key).unwrap_err(), BackendError::Stale, "{key:?}");
    }
}

pub fn check_symlink_not_followed<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let d = mkdir(b, &root, "real");
    create(b, &d, "inner");
    let txnfs_backend::Made {
        key: sk, attrs: _, ..
    } = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &root,
            b"link",
            &NodeKind::Symlink(Bytes::from_static(b"real")),
            &SetAttrs::default(),
        )
        .unwrap();
    let (k, a) = b.lookup(&root, b"link").unwrap();
    assert_eq!(k, sk);
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(b.lookup(&sk, b"inner").unwrap_err(), BackendError::NotDir);
    assert_eq!(b.readdir(&sk, 0, 10).unwrap_err(), BackendError::NotDir);
    // creating through a symlink name does not follow it
    let e = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"link",
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Exists);
    assert!(b.read(&sk, 0, 10).is_err());
    // setattr mode on a symlink leaves the target alone
    let before = b.getattr(&d).unwrap().mode;
    let _ = b.setattr(
        &OpCtx::default(),
        &sk,
        &SetAttrs {
            mode: Some(0o700),
            ..Default::default()
        },
    );
    assert_eq!(b.getattr(&d).unwrap().mode, before);
    // times on a symlink apply to the link
    let t = Timestamp {
        sec: 1_234_567_890,
        nsec: 0,
    };
    let dt = b.getattr(&d).unwrap().mtime;
    let a = b
        .setattr(
            &OpCtx::default(),
            &sk,
            &SetAttrs {
                mtime: Some(SetTime::Client(t)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.mtime, t);
    assert_eq!(b.getattr(&d).unwrap().mtime, dt);
    // readdir reports it as a symlink
    let (ents, _) = b.readdir(&root, 0, 100).unwrap();
    let e = ents.iter().find(|e| &e.name[..] == b"link").unwrap();
    assert_eq!(e.attrs.ftype, FileType::Symlink);
}

pub fn check_create_attrs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let t = Timestamp {
        sec: 1_500_000_000,
        nsec: 42,
    };
    let txnfs_backend::Created {
        key: k,
        attrs: a,
        created,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(creds()),
            &root,
            b"sized",
            CreateMode::Guarded,
            &SetAttrs {
                size: Some(5),
                mtime: Some(SetTime::Client(t)),
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(created);
    assert_eq!((a.size, a.mtime, a.mode), (5, t, 0o600));
    assert_eq!(&b.read(&k, 0, 10).unwrap().0[..], &[0u8; 5]);
    // a write beyond any file size limit
    assert_eq!(
        b.write(&OpCtx::default(), &k, u64::MAX - 1, b"xy", false)
            .unwrap_err(),
        BackendError::FileTooBig
    );
    // empty symlink target
    let e = b
        .make_node(
            &OpCtx::for_creds(creds()),
            &root,
            b"empty-link",
            &NodeKind::Symlink(Bytes::new()),
            &SetAttrs::default(),
        )
        .unwrap_err();
    assert_eq!(e, BackendError::Inval);
}

/// Several threads at once on one backend: no deadlock, no lost entries.
pub fn check_concurrent<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let root = root.clone();
            s.spawn(move || {
                let d = mkdir(b, &root, &format!("t{t}"));
                for i in 0..50 {
                    let name = format!("f{i}");
                    let k = create(b, &d, &name);
                    b.write(&OpCtx::default(), &k, 0, name.as_bytes(), i % 2 == 0)
                        .unwrap();
                    assert_eq!(&b.read(&k, 0, 16).unwrap().0[..], name.as_bytes());
                    if i % 3 == 0 {
                        b.remove(&OpCtx::default(), &d, name.as_bytes()).unwrap();
                        assert_eq!(b.getattr(&k).unwrap_err(), BackendError::Stale);
                    }
                    let _ = b.readdir(&root, 0, 3).unwrap();
                }
                let mut n = 0;
                let mut cookie = 0;
                loop {
                    let (ents, eof) = b.readdir(&d, cookie, 10).unwrap();
                    n += ents.len();
                    if eof {
                        break;
                    }
                    cookie = ents.last().unwrap().cookie;
                }
                assert_eq!(n, 50 - 17);
            });
        }
    });
}

pub fn check_setgid_dirs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let txnfs_backend::Made {
        key: d, attrs: _, ..
    } = b
        .make_node(
            &OpCtx::for_creds(Creds {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }),
            &root,
            b"shared",
            &NodeKind::Directory,
            &SetAttrs {
                mode: Some(0o2775),
                gid: Some(777),
                ..Default::default()
            },
        )
        .unwrap();
    let a = b.getattr(&d).unwrap();
    assert_eq!((a.mode, a.uid, a.gid), (0o2775, 1000, 777));
    let txnfs_backend::Created {
        key: _,
        attrs: fa,
        created: _,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(Creds {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }),
            &d,
            b"f",
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .unwrap();
    assert_eq!((fa.uid, fa.gid, fa.mode), (1000, 777, 0o644));
    let txnfs_backend::Made {
        key: _, attrs: sa, ..
    } = b
        .make_node(
            &OpCtx::for_creds(Creds {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }),
            &d,
            b"sub",
            &NodeKind::Directory,
            &SetAttrs::default(),
        )
        .unwrap();
    assert_eq!((sa.gid, sa.mode), (777, 0o2755));
    // mode is exact, whatever the umask
    let txnfs_backend::Created {
        key: _,
        attrs: ua,
        created: _,
        ..
    } = b
        .create_file(
            &OpCtx::for_creds(Creds {
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }),
            &root,
            b"wide",
            CreateMode::Guarded,
            &SetAttrs {
                mode: Some(0o777),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(ua.mode, 0o777);
}

pub fn check_statfs<B: Backend>(b: &B) {
    let root = b.root().unwrap();
    let s = b.statfs(&root).unwrap();
    assert!(s.total_bytes > 0);
    assert!(s.free_bytes <= s.total_bytes);
    assert!(s.max_name_len >= 255);
}

macro_rules! conformance {
    ($modname:ident, $fixture:path) => {
        mod $modname {
            use super::*;

            macro_rules! case {
                ($name:ident) => {
                    #[test]
                    fn $name() {
                        let f = $fixture();
                        super::$name(&f.b);
                    }
                };
            }

            case!(check_root);
            case!(check_create_write_read);
            case!(check_sync_write_commit);
            case!(check_setattr);
            case!(check_create_modes);
            case!(check_make_node);
            case!(check_link);
            case!(check_rename);
            case!(check_remove);
            case!(check_readdir_paging);
            case!(check_change);
            case!(check_bad_names);
            case!(check_symlink_not_followed);
            case!(check_statfs);
            case!(check_create_attrs);
            case!(check_concurrent);
            case!(check_setgid_dirs);
            case!(check_dir_change);
            case!(check_clone_range);
        }
    };
}

/// Directory mutators report the directory's change exactly: `after` moved past
/// `before`, equals what getattr says afterwards, and never goes back across calls.
pub fn check_dir_change<B: Backend>(b: &B) {
    let cx = OpCtx::for_creds(creds());
    let root = b.root().unwrap();
    let change = |k: &FileKey| b.getattr(k).unwrap().change;
    let mut last_root = change(&root);
    let step = |d: txnfs_backend::DirChange, dir: &FileKey, last: &mut u64| {
        assert!(
            d.before >= *last,
            "before {} < previous {}",
            d.before,
            *last
        );
        assert!(
            d.after > d.before,
            "after {} <= before {}",
            d.after,
            d.before
        );
        assert_eq!(d.after, change(dir), "after is what getattr reports");
        *last = d.after;
    };
    let f = b
        .create_file(&cx, &root, b"f", CreateMode::Guarded, &SetAttrs::default())
        .unwrap();
    step(f.dir, &root, &mut last_root);
    let d = b
        .make_node(&cx, &root, b"d", &NodeKind::Directory, &SetAttrs::default())
        .unwrap();
    step(d.dir, &root, &mut last_root);
    let mut last_d = change(&d.key);
    let l = b.link(&cx, &f.key, &d.key, b"l").unwrap();
    step(l.dir, &d.key, &mut last_d);
    let r = b.rename(&cx, &root, b"f", &d.key, b"g").unwrap();
    step(r.from, &root, &mut last_root);
    step(r.to, &d.key, &mut last_d);
    let r = b.rename(&cx, &d.key, b"g", &d.key, b"h").unwrap();
    assert_eq!(r.from, r.to, "one directory: one change");
    step(r.to, &d.key, &mut last_d);
    step(b.remove(&cx, &d.key, b"h").unwrap(), &d.key, &mut last_d);
    // Opening an existing file changes nothing.
    let again = b
        .create_file(
            &cx,
            &d.key,
            b"l",
            CreateMode::Unchecked,
            &SetAttrs::default(),
        )
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.dir.before, again.dir.after);
    assert_eq!(again.dir.after, change(&d.key));
}

/// clone_range makes the destination range equal to the source range, by whatever
/// method, and reports `Reflink` only where the backend can share blocks.
pub fn check_clone_range<B: Backend>(b: &B) {
    let cx = OpCtx::default();
    let root = b.root().unwrap();
    let src = create(b, &root, "src");
    let dst = create(b, &root, "dst");
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
    b.write(&cx, &src, 0, &data, false).unwrap();
    let before = b.getattr(&dst).unwrap().change;
    // Whole file (len 0 = to the end of the source).
    let m = b.clone_range(&cx, &src, 0, &dst, 0, 0).unwrap();
    if b.clone_method() == txnfs_backend::CloneMethod::Copy {
        assert_eq!(m, txnfs_backend::CloneMethod::Copy);
    }
    assert_eq!(b.read(&dst, 0, 1 << 20).unwrap().0, &data[..]);
    assert!(b.getattr(&dst).unwrap().change > before, "dst change moves");
    // An unaligned range past the destination's end grows it.
    let m = b.clone_range(&cx, &src, 10, &dst, 20_000, 333).unwrap();
    assert_eq!(m, txnfs_backend::CloneMethod::Copy, "unaligned ranges copy");
    assert_eq!(b.getattr(&dst).unwrap().size, 20_333);
    assert_eq!(b.read(&dst, 20_000, 333).unwrap().0, &data[10..343]);
    // A source range beyond the end of the source is refused.
    let e = b
        .clone_range(&cx, &src, data.len() as u64, &dst, 0, 1)
        .unwrap_err();
    assert_eq!(e, BackendError::Inval);
    let d = mkdir(b, &root, "dir");
    assert!(b.clone_range(&cx, &d, 0, &dst, 0, 0).is_err());
}

conformance!(memory_backend, memory);
conformance!(local_backend, local);
conformance!(layered_backend, layered);
