//! The `txn` layer (ADR 0021) over real backends: every mutating call undone when its
//! transaction rolls back, kept when it commits, rolled back by recovery after a crash
//! (and again after a crash during recovery), and isolated from other callers.
//!
//! Each case runs on the memory backend and on a local directory (ext4 here); the
//! `--ignored` ones on XFS (reflink on and off) and Btrfs loop images (run by
//! `scripts/test.sh` as root).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::mounts::LoopFs;
use txnfs_backend::local::LocalBackend;
use txnfs_backend::memory::MemoryBackend;
use txnfs_backend::txn::{TxnLayer, TxnSettings, HIDDEN};
use txnfs_backend::{
    Backend, BackendError, CreateMode, Creds, FileKey, FileType, NodeKind, OpCtx, SetAttrs,
    SetTime, Timestamp,
};

/// What a client could see of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    ftype: FileType,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    /// Length and hash of the file bytes or symlink target.
    data: (usize, u64),
    /// Not for directories: their times move with every entry change, undone or not.
    mtime: Option<Timestamp>,
}

fn snapshot(b: &dyn Backend) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let root = b.root().unwrap();
    walk(b, &root, "", &mut out);
    out
}

fn walk(b: &dyn Backend, dir: &FileKey, path: &str, out: &mut BTreeMap<String, Seen>) {
    let cx = root_cx();
    let mut cookie = 0;
    loop {
        let (entries, eof) = b.readdir(&cx, dir, cookie, 64).unwrap();
        for e in &entries {
            cookie = e.cookie;
            if path.is_empty() && e.name == HIDDEN {
                // Seen when walking the backend below the layer.
                continue;
            }
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let p = format!("{path}/{name}");
            let a = b.getattr(&cx, &e.key).unwrap();
            let data = match a.ftype {
                FileType::Regular => b.read(&cx, &e.key, 0, 1 << 20).unwrap().0,
                FileType::Symlink => b.readlink(&cx, &e.key).unwrap(),
                _ => Bytes::new(),
            };
            let data = (data.len(), {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                data.hash(&mut h);
                h.finish()
            });
            out.insert(
                p.clone(),
                Seen {
                    ftype: a.ftype,
                    mode: a.mode,
                    uid: a.uid,
                    gid: a.gid,
                    nlink: if a.ftype == FileType::Directory {
                        0
                    } else {
                        a.nlink
                    },
                    data,
                    mtime: (a.ftype != FileType::Directory).then_some(a.mtime),
                },
            );
            if a.ftype == FileType::Directory {
                walk(b, &e.key, &p, out);
            }
        }
        if eof {
            return;
        }
    }
}

fn root_cx() -> OpCtx {
    OpCtx::for_creds(Creds::default())
}

fn txn_cx(compound: u64) -> OpCtx {
    OpCtx {
        creds: Creds::default(),
        client: Some(1),
        compound,
        txn: true,
        span: Default::default(),
        waited: Default::default(),
    }
}

/// The key at `path` ("a/b"), from the root, looked up with `cx`.
fn at(b: &dyn Backend, cx: &OpCtx, path: &str) -> FileKey {
    let mut k = b.root().unwrap();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        k = b.lookup(cx, &k, c.as_bytes()).unwrap().0;
    }
    k
}

fn put(b: &dyn Backend, cx: &OpCtx, path: &str, data: &[u8]) -> FileKey {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let d = at(b, cx, dir);
    let k = b
        .create_file(
            cx,
            &d,
            name.as_bytes(),
            CreateMode::Unchecked,
            &SetAttrs::default(),
        )
        .unwrap()
        .key;
    b.write(cx, &k, 0, data, false).unwrap();
    k
}

fn mkdir(b: &dyn Backend, cx: &OpCtx, path: &str) -> FileKey {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let d = at(b, cx, dir);
    b.make_node(
        cx,
        &d,
        name.as_bytes(),
        &NodeKind::Directory,
        &SetAttrs::default(),
    )
    .unwrap()
    .key
}

/// The tree every case starts from.
fn setup(b: &dyn Backend) {
    let cx = root_cx();
    mkdir(b, &cx, "d");
    mkdir(b, &cx, "d/sub");
    mkdir(b, &cx, "empty");
    mkdir(b, &cx, "other");
    put(b, &cx, "f", &pattern(100_000, 1));
    put(b, &cx, "d/g", b"gee");
    put(b, &cx, "d/sub/h", &pattern(5000, 2));
    put(b, &cx, "victim", b"the victim's bytes");
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

type Case = (&'static str, fn(&dyn Backend, &OpCtx));

fn name(s: &str) -> &[u8] {
    s.as_bytes()
}

/// Every kind of change a transaction can make, alone and mixed.
fn cases() -> Vec<Case> {
    vec![
        ("write: overwrite and extend", |b, cx| {
            let f = at(b, cx, "f");
            b.write(cx, &f, 4096, &[7; 8192], false).unwrap();
            b.write(cx, &f, 99_990, &[9; 20_000], false).unwrap();
            b.write(cx, &f, 300_000, b"far", false).unwrap();
        }),
        ("setattr: size cut then grown", |b, cx| {
            let f = at(b, cx, "f");
            b.setattr(
                cx,
                &f,
                &SetAttrs {
                    size: Some(10),
                    ..Default::default()
                },
            )
            .unwrap();
            b.setattr(
                cx,
                &f,
                &SetAttrs {
                    size: Some(500_000),
                    ..Default::default()
                },
            )
            .unwrap();
        }),
        ("setattr: mode, owner, times", |b, cx| {
            let f = at(b, cx, "d/g");
            let t = SetTime::Client(Timestamp {
                sec: 1_000_000,
                nsec: 5,
            });
            let s = SetAttrs {
                mode: Some(0o600),
                uid: Some(4321),
                gid: Some(8765),
                atime: Some(t),
                mtime: Some(t),
                size: None,
            };
            b.setattr(cx, &f, &s).unwrap();
        }),
        ("create, and open-truncate of an existing file", |b, cx| {
            put(b, cx, "new", b"fresh bytes");
            let d = at(b, cx, "d");
            let trunc = SetAttrs {
                size: Some(0),
                ..Default::default()
            };
            let c = b
                .create_file(cx, &d, name("g"), CreateMode::Unchecked, &trunc)
                .unwrap();
            assert!(!c.created);
            b.write(cx, &c.key, 0, b"replaced", false).unwrap();
        }),
        ("mkdir, symlink, fifo", |b, cx| {
            let dir = mkdir(b, cx, "newdir");
            let root = at(b, cx, "");
            b.make_node(
                cx,
                &dir,
                name("ln"),
                &NodeKind::Symlink(Bytes::from_static(b"../f")),
                &SetAttrs::default(),
            )
            .unwrap();
            b.make_node(
                cx,
                &root,
                name("fifo"),
                &NodeKind::Fifo,
                &SetAttrs::default(),
            )
            .unwrap();
        }),
        ("remove a file and an empty directory", |b, cx| {
            let root = at(b, cx, "");
            b.remove(cx, &root, name("f")).unwrap();
            b.remove(cx, &root, name("empty")).unwrap();
            assert_eq!(
                b.remove(cx, &root, name("d")).unwrap_err(),
                BackendError::NotEmpty
            );
        }),
        (
            "rename files: same directory, across, over a file",
            |b, cx| {
                let root = at(b, cx, "");
                let d = at(b, cx, "d");
                b.rename(cx, &root, name("f"), &root, name("f2")).unwrap();
                b.rename(cx, &d, name("g"), &root, name("g")).unwrap();
                b.rename(cx, &root, name("g"), &root, name("victim"))
                    .unwrap();
            },
        ),
        (
            "rename directories: a tree across, over an empty one",
            |b, cx| {
                let root = at(b, cx, "");
                let other = at(b, cx, "other");
                b.rename(cx, &root, name("d"), &other, name("moved"))
                    .unwrap();
                b.rename(cx, &other, name("moved"), &root, name("empty"))
                    .unwrap();
                // rename(2)'s refusals hold inside a transaction too.
                assert_eq!(
                    b.rename(cx, &root, name("f"), &root, name("empty"))
                        .unwrap_err(),
                    BackendError::IsDir
                );
            },
        ),
        ("link", |b, cx| {
            let f = at(b, cx, "d/g");
            let root = at(b, cx, "");
            b.link(cx, &f, &root, name("g-link")).unwrap();
        }),
        ("clone a range over a file", |b, cx| {
            let f = at(b, cx, "f");
            let h = at(b, cx, "d/sub/h");
            b.clone_range(cx, &f, 0, &h, 1000, 8192).unwrap();
        }),
        (
            "mixed: build a directory, fill it, rename it into place",
            |b, cx| {
                mkdir(b, cx, "d.tmp");
                put(
                    b,
                    cx,
                    "d.tmp/passwd",
                    b"user:x:1000:1000::/home/user:/bin/sh\n",
                );
                put(b, cx, "d.tmp/shadow", b"user:*:19000:0:99999:7:::\n");
                put(b, cx, "d.tmp/group", b"user:x:1000:\n");
                let root = at(b, cx, "");
                b.rename(cx, &root, name("d.tmp"), &root, name("home"))
                    .unwrap();
                let f = at(b, cx, "f");
                b.write(cx, &f, 0, b"overwritten", false).unwrap();
                let d = at(b, cx, "d");
                b.remove(cx, &d, name("g")).unwrap();
                let s = at(b, cx, "d/sub/h");
                b.setattr(
                    cx,
                    &s,
                    &SetAttrs {
                        mode: Some(0o444),
                        size: Some(3),
                        ..Default::default()
                    },
                )
                .unwrap();
            },
        ),
    ]
}

/// No backups or locks are left once the cleaner has run.
fn settled(t: &TxnLayer, lower: &dyn Backend) {
    assert_eq!(t.held_locks(), 0, "locks left over");
    // The directory exists once a transaction needed a backup.
    let cx = root_cx();
    let Ok((hidden, _)) = lower.lookup(&cx, &lower.root().unwrap(), HIDDEN) else {
        return;
    };
    let backups = lower.lookup(&cx, &hidden, b"backup").unwrap().0;
    for _ in 0..200 {
        if lower.readdir(&cx, &backups, 0, 8).unwrap().0.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        lower.readdir(&cx, &backups, 0, 8).unwrap().0.is_empty(),
        "backups left over"
    );
}

fn layer(lower: Arc<dyn Backend>, journal: Option<&Path>) -> TxnLayer {
    let settings = TxnSettings {
        lock_wait: Duration::from_millis(50),
        ..TxnSettings::default()
    };
    TxnLayer::open(lower, journal, settings).unwrap()
}

/// For every case: rolled back, the tree is exactly as before; committed, it differs.
fn every_change_undone(make: &dyn Fn() -> Arc<dyn Backend>) {
    for (n, (what, case)) in cases().into_iter().enumerate() {
        let lower = make();
        setup(&*lower);
        let t = layer(lower.clone(), None);
        let before = snapshot(&t);
        let cx = txn_cx(10 + n as u64);
        t.begin_compound(&cx).unwrap();
        case(&t, &cx);
        t.end_compound(&cx, false).unwrap();
        let after = snapshot(&t);
        assert_eq!(after, before, "{what}: not rolled back");
        settled(&t, &*lower);

        let cx = txn_cx(100 + n as u64);
        t.begin_compound(&cx).unwrap();
        case(&t, &cx);
        t.end_compound(&cx, true).unwrap();
        assert_ne!(
            snapshot(&t),
            before,
            "{what}: committed but nothing changed"
        );
        settled(&t, &*lower);
    }
}

fn memory() -> Arc<dyn Backend> {
    Arc::new(MemoryBackend::new())
}

#[test]
fn every_change_undone_on_memory() {
    every_change_undone(&memory);
}

#[test]
fn every_change_undone_on_a_local_directory() {
    let dirs = std::sync::Mutex::new(Vec::new());
    every_change_undone(&|| {
        let d = tempfile::tempdir().unwrap();
        let b = Arc::new(LocalBackend::open(d.path()).unwrap()) as Arc<dyn Backend>;
        dirs.lock().unwrap().push(d);
        b
    });
}

fn on_loop_fs(mkfs: &str, args: &[&str], size: &str, expect: txnfs_backend::CloneMethod) {
    let fs = LoopFs::with_args(mkfs, args, size);
    let n = std::sync::atomic::AtomicU32::new(0);
    every_change_undone(&|| {
        let d = fs.mnt.path().join(
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .to_string(),
        );
        std::fs::create_dir(&d).unwrap();
        let b = LocalBackend::open(&d).unwrap();
        assert_eq!(b.clone_method(), expect, "{mkfs} {args:?}");
        Arc::new(b) as Arc<dyn Backend>
    });
}

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs (Debian xfsprogs); run with --ignored"]
fn every_change_undone_on_xfs_with_reflink() {
    on_loop_fs(
        "mkfs.xfs",
        &["-m", "reflink=1"],
        "320M",
        txnfs_backend::CloneMethod::Reflink,
    );
}

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs (Debian xfsprogs); run with --ignored"]
fn every_change_undone_on_xfs_without_reflink() {
    on_loop_fs(
        "mkfs.xfs",
        &["-m", "reflink=0"],
        "320M",
        txnfs_backend::CloneMethod::Copy,
    );
}

#[test]
#[ignore = "needs root, loop devices and mkfs.btrfs (Debian btrfs-progs); run with --ignored"]
fn every_change_undone_on_btrfs() {
    on_loop_fs(
        "mkfs.btrfs",
        &[],
        "256M",
        txnfs_backend::CloneMethod::Reflink,
    );
}

/// A transaction cut off in the middle (the process died: no `end_compound`) is rolled
/// back when the layer opens again, and so it is after a crash during that recovery.
#[test]
fn recovery_rolls_back_an_interrupted_transaction_idempotently() {
    for (n, (what, case)) in cases().into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let data = tempfile::tempdir().unwrap();
        let lower = Arc::new(LocalBackend::open(data.path()).unwrap()) as Arc<dyn Backend>;
        setup(&*lower);
        let before = snapshot(&*lower);
        // On a thread of its own, which then ends, and with the layer never closed:
        // like a process that died with the transaction open.
        let (lower2, j2) = (lower.clone(), journal.clone());
        std::thread::spawn(move || {
            let t = layer(lower2, Some(&j2));
            let cx = txn_cx(1 + n as u64);
            t.begin_compound(&cx).unwrap();
            case(&t, &cx);
            std::mem::forget(t);
        })
        .join()
        .unwrap();
        assert_ne!(
            snapshot(&*lower),
            before,
            "{what}: the case changed nothing"
        );
        // Crashes during recovery: after 0, 1, 2, ... undo steps; each next start
        // carries on from where the last one stopped.
        let mut k = 0;
        loop {
            let settings = TxnSettings {
                stop_recovery_after: Some(k),
                ..TxnSettings::default()
            };
            match TxnLayer::open(lower.clone(), Some(&journal), settings) {
                Err(BackendError::Io(_)) => k += 1,
                Err(e) => panic!("{what}: {e}"),
                Ok(t) => {
                    assert_eq!(snapshot(&t), before, "{what}: not recovered (stops: {k})");
                    settled(&t, &*lower);
                    break;
                }
            }
        }
        assert!(k > 0, "{what}: nothing to recover");
        // Recovered once and for all: a later start finds nothing to do.
        let t = layer(lower.clone(), Some(&journal));
        assert_eq!(
            t.stats.recovered.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "{what}"
        );
        assert_eq!(snapshot(&t), before, "{what}");
    }
}

/// Committed transactions stay committed across a restart: recovery leaves them.
#[test]
fn recovery_keeps_committed_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let lower = memory();
    setup(&*lower);
    let t = layer(lower.clone(), Some(&journal));
    let cx = txn_cx(5);
    t.begin_compound(&cx).unwrap();
    put(&t, &cx, "kept", b"committed");
    t.end_compound(&cx, true).unwrap();
    let after = snapshot(&t);
    drop(t);
    let t = layer(lower, Some(&journal));
    assert_eq!(
        t.stats.recovered.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(snapshot(&t), after);
}

/// Nobody sees a transaction half-done: a plain reader waits and then gets `Conflict`
/// (NFS4ERR_DELAY), another transaction too; both succeed once it ends.
#[test]
fn an_open_transaction_is_isolated() {
    let lower = memory();
    setup(&*lower);
    let t = Arc::new(layer(lower, None));
    let f = at(&*t, &root_cx(), "f");
    let cx = txn_cx(1);
    t.begin_compound(&cx).unwrap();
    t.write(&cx, &f, 0, b"half", false).unwrap();
    put(&*t, &cx, "d/new", b"x");
    let other = {
        let t = t.clone();
        let f = f.clone();
        std::thread::spawn(move || {
            let plain = root_cx();
            let plain_read = t.read(&plain, &f, 0, 4).map(|r| r.0);
            let root = t.root().unwrap();
            let d = t.lookup(&plain, &root, b"d").map(|r| r.0);
            let listing = d.and_then(|d| t.readdir(&plain, &d, 0, 10).map(|_| ()));
            let cx2 = txn_cx(2);
            t.begin_compound(&cx2).unwrap();
            let txn_write = t.write(&cx2, &f, 0, b"mine", false).map(|_| ());
            t.end_compound(&cx2, false).unwrap();
            (plain_read, listing, txn_write)
        })
    };
    let (plain_read, listing, txn_write) = other.join().unwrap();
    assert_eq!(plain_read, Err(BackendError::Conflict));
    assert_eq!(listing, Err(BackendError::Conflict));
    assert_eq!(txn_write, Err(BackendError::Conflict));
    t.end_compound(&cx, true).unwrap();
    let t2 = t.clone();
    let got = std::thread::spawn(move || t2.read(&root_cx(), &f, 0, 4).unwrap().0)
        .join()
        .unwrap();
    assert_eq!(&got[..], b"half");
    assert_eq!(t.held_locks(), 0);
}

/// A plain read that waits for a transaction's lock counts the wait in its context's
/// clock (the server leaves it out of its execution time); one that does not wait
/// counts next to nothing.
#[test]
fn lock_waits_are_counted_in_the_callers_clock() {
    let lower = memory();
    setup(&*lower);
    let t = Arc::new(layer(lower, None));
    let f = at(&*t, &root_cx(), "f");
    let quick = root_cx();
    t.read(&quick, &f, 0, 4).unwrap();
    let cx = txn_cx(1);
    t.begin_compound(&cx).unwrap();
    t.write(&cx, &f, 0, b"half", false).unwrap();
    let blocked = root_cx();
    let (t2, f2, b2) = (t.clone(), f.clone(), blocked.clone());
    let r = std::thread::spawn(move || t2.read(&b2, &f2, 0, 4).map(|r| r.0))
        .join()
        .unwrap();
    assert_eq!(r, Err(BackendError::Conflict));
    t.end_compound(&cx, false).unwrap();
    // The layer's lock wait is 50 ms.
    assert!(
        blocked.waited.total() >= Duration::from_millis(45),
        "waited {:?}",
        blocked.waited.total()
    );
    assert!(
        quick.waited.total() < Duration::from_millis(45),
        "waited {:?}",
        quick.waited.total()
    );
}

/// The hidden backup directory is neither listed nor reachable nor creatable.
#[test]
fn the_backup_area_is_hidden() {
    let t = layer(memory(), None);
    let root = t.root().unwrap();
    let cx = root_cx();
    assert_eq!(
        t.lookup(&cx, &root, HIDDEN).unwrap_err(),
        BackendError::NotFound
    );
    assert!(t
        .readdir(&cx, &root, 0, 100)
        .unwrap()
        .0
        .iter()
        .all(|e| e.name != HIDDEN));
    assert_eq!(
        t.make_node(
            &cx,
            &root,
            HIDDEN,
            &NodeKind::Directory,
            &SetAttrs::default()
        )
        .unwrap_err(),
        BackendError::Access
    );
}

/// A backend without the layer refuses a transactional COMPOUND outright.
#[test]
fn a_plain_backend_refuses_transactions() {
    let b = MemoryBackend::new();
    assert_eq!(
        b.begin_compound(&txn_cx(1)).unwrap_err(),
        BackendError::NotSupp
    );
    assert!(b.begin_compound(&root_cx()).is_ok());
}

/// A plain COMPOUND keeps its read locks to its end: it never sees one file before a
/// transaction and another after it. Here a transaction is open before the COMPOUND
/// starts, so it locks (`gate`): its read of what the transaction holds fails
/// (NFS4ERR_DELAY, and the client retries) instead of mixing; the transaction waits
/// for the COMPOUND and then commits.
#[test]
fn a_plain_compound_never_sees_a_transaction_in_part() {
    let lower = memory();
    setup(&*lower);
    let settings = TxnSettings {
        lock_wait: Duration::from_secs(2),
        ..TxnSettings::default()
    };
    let t = Arc::new(TxnLayer::open(lower, None, settings).unwrap());
    let (f, g) = (at(&*t, &root_cx(), "f"), at(&*t, &root_cx(), "d/g"));
    let cx = txn_cx(51);
    t.begin_compound(&cx).unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let (t, f, g) = (t.clone(), f.clone(), g.clone());
        std::thread::spawn(move || {
            let cx = OpCtx {
                compound: 50,
                ..root_cx()
            };
            t.begin_compound(&cx).unwrap();
            let first = t.read(&cx, &f, 0, 4).unwrap().0;
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            let second = t.read(&cx, &g, 0, 3).map(|r| r.0);
            t.end_compound(&cx, second.is_ok()).unwrap();
            (first, second)
        })
    };
    ready.recv().unwrap();
    t.write(&cx, &g, 0, b"NEW", false).unwrap();
    go.send(()).unwrap();
    // Waits for the reader's COMPOUND to end, then goes ahead.
    t.write(&cx, &f, 0, b"NEWF", false).unwrap();
    t.end_compound(&cx, true).unwrap();
    let (first, second) = reader.join().unwrap();
    assert_eq!(&first[..], &pattern(4, 1)[..]);
    assert_eq!(second, Err(BackendError::Conflict));
    assert_eq!(&t.read(&root_cx(), &g, 0, 3).unwrap().0[..], b"NEW");
    assert_eq!(t.held_locks(), 0);
}

/// While no transaction is open, plain COMPOUNDs take no locks at all (`gate`, ADR
/// 0058); a transaction that opens meanwhile waits for them to end before it changes
/// anything, so such a COMPOUND sees it entirely or not at all too. One that cannot
/// wait that long answers `Conflict` (NFS4ERR_DELAY) and leaves nothing behind.
#[test]
fn a_transaction_opens_after_the_unlocked_plain_compounds_end() {
    let lower = memory();
    setup(&*lower);
    let settings = TxnSettings {
        lock_wait: Duration::from_secs(5),
        ..TxnSettings::default()
    };
    let t = Arc::new(TxnLayer::open(lower, None, settings).unwrap());
    let (f, g) = (at(&*t, &root_cx(), "f"), at(&*t, &root_cx(), "d/g"));
    let reader = plain_cx(80);
    t.begin_compound(&reader).unwrap();
    let first = t.read(&reader, &f, 0, 4).unwrap().0;
    t.write(&reader, &f, 0, &pattern(4, 1), false).unwrap();
    assert_eq!(t.held_locks(), 0, "an unlocked COMPOUND holds nothing");
    let (opened_tx, opened) = std::sync::mpsc::channel();
    let writer = {
        let (t, f, g) = (t.clone(), f.clone(), g.clone());
        std::thread::spawn(move || {
            let cx = txn_cx(81);
            t.begin_compound(&cx).unwrap();
            opened_tx.send(()).unwrap();
            t.write(&cx, &g, 0, b"NEW", false).unwrap();
            t.write(&cx, &f, 0, b"NEWF", false).unwrap();
            t.end_compound(&cx, true).unwrap();
        })
    };
    assert!(
        opened.recv_timeout(Duration::from_millis(200)).is_err(),
        "the transaction opened while an unlocked COMPOUND ran"
    );
    let second = t.read(&reader, &g, 0, 3).unwrap().0;
    t.end_compound(&reader, true).unwrap();
    opened
        .recv_timeout(Duration::from_secs(5))
        .expect("the transaction opens once the COMPOUND ended");
    writer.join().unwrap();
    assert_eq!(&first[..], &pattern(4, 1)[..]);
    assert_eq!(&second[..], b"gee", "g as before the transaction");
    assert_eq!(&t.read(&root_cx(), &g, 0, 3).unwrap().0[..], b"NEW");
    assert_eq!(&t.read(&root_cx(), &f, 0, 4).unwrap().0[..], b"NEWF");
    // A transaction that cannot wait long enough: Conflict, and the gate stays open.
    let ql = memory();
    setup(&*ql);
    let quick = layer(ql, None);
    let slow = plain_cx(90);
    quick.begin_compound(&slow).unwrap();
    assert_eq!(
        quick.begin_compound(&txn_cx(91)).unwrap_err(),
        BackendError::Conflict
    );
    quick.end_compound(&slow, true).unwrap();
    let w = txn_cx(92);
    quick.begin_compound(&w).unwrap();
    let h = at(&quick, &w, "f");
    quick.write(&w, &h, 0, b"done", false).unwrap();
    quick.end_compound(&w, true).unwrap();
    assert_eq!(&quick.read(&root_cx(), &h, 0, 4).unwrap().0[..], b"done");
    assert_eq!(quick.held_locks(), 0);
}

/// Undo never touches an object outside its export: a journal of directory A replayed
/// over directory B of the same file system (whose mount resolves A's handles too) is
/// refused at the first step, and A keeps every entry (issue 21: 2,836 files were
/// removed so). A's own layer then recovers it.
#[test]
fn recovery_refuses_to_undo_objects_outside_its_export() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("A"), tmp.path().join("B"));
    std::fs::create_dir_all(a.join("d")).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let journal = tmp.path().join("journal");
    let lower_a = Arc::new(LocalBackend::open(&a).unwrap()) as Arc<dyn Backend>;
    let (l2, j2) = (lower_a.clone(), journal.clone());
    std::thread::spawn(move || {
        let t = TxnLayer::open_as(l2, Some(&j2), b"same", TxnSettings::default()).unwrap();
        let cx = txn_cx(1);
        t.begin_compound(&cx).unwrap();
        let d = at(&t, &cx, "d");
        for i in 0..5 {
            t.create_file(
                &cx,
                &d,
                format!("f{i}").as_bytes(),
                CreateMode::Unchecked,
                &SetAttrs::default(),
            )
            .unwrap();
        }
        std::mem::forget(t);
    })
    .join()
    .unwrap();
    let lower_b = Arc::new(LocalBackend::open(&b).unwrap()) as Arc<dyn Backend>;
    let d_in_a = at(&*lower_a, &root_cx(), "d");
    assert_eq!(lower_b.contains(&d_in_a), Ok(false), "A's d is not in B");
    assert_eq!(lower_a.contains(&d_in_a), Ok(true));
    match TxnLayer::open_as(lower_b, Some(&journal), b"same", TxnSettings::default()) {
        Err(BackendError::Io(m)) => assert!(m.contains("outside the export"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("undid A's transaction through B"),
    }
    assert_eq!(
        std::fs::read_dir(a.join("d")).unwrap().count(),
        5,
        "A untouched"
    );
    let t = TxnLayer::open_as(lower_a, Some(&journal), b"same", TxnSettings::default()).unwrap();
    assert_eq!(t.rolled_back_at_start(), vec![1]);
    assert_eq!(
        std::fs::read_dir(a.join("d")).unwrap().count(),
        0,
        "rolled back"
    );
}

fn plain_cx(compound: u64) -> OpCtx {
    OpCtx {
        compound,
        ..root_cx()
    }
}

/// A plain COMPOUND's read locks belong to the COMPOUND its context names, not to the
/// thread that reads: two COMPOUNDs interleaved on one thread each keep their own to
/// their own end.
#[test]
fn read_locks_follow_the_compound_not_the_thread_interleaved() {
    let lower = memory();
    setup(&*lower);
    let t = layer(lower, None);
    let (f, g) = (at(&t, &root_cx(), "f"), at(&t, &root_cx(), "d/g"));
    assert_eq!(t.held_locks(), 0);
    // An open transaction makes plain COMPOUNDs lock (without one they run unlocked).
    let open = txn_cx(59);
    t.begin_compound(&open).unwrap();
    let (a, b) = (plain_cx(60), plain_cx(61));
    t.begin_compound(&a).unwrap();
    t.begin_compound(&b).unwrap();
    t.read(&a, &f, 0, 4).unwrap();
    t.read(&b, &g, 0, 3).unwrap();
    // Both kept (one lock each); a read outside any COMPOUND keeps nothing, and
    // neither does one of a COMPOUND that never began here.
    t.read(&root_cx(), &f, 0, 4).unwrap();
    t.read(&plain_cx(62), &g, 0, 3).unwrap();
    assert_eq!(t.held_locks(), 2);
    // A ends: its lock goes, B's stays.
    t.end_compound(&a, true).unwrap();
    assert_eq!(t.held_locks(), 1);
    let w = txn_cx(63);
    t.begin_compound(&w).unwrap();
    t.write(&w, &f, 0, b"free", false).unwrap();
    assert_eq!(
        t.write(&w, &g, 0, b"held", false).unwrap_err(),
        BackendError::Conflict,
        "B still reads g"
    );
    t.end_compound(&w, false).unwrap();
    // B still holds g after the transaction is gone; its end releases it.
    assert_eq!(t.held_locks(), 1);
    t.end_compound(&b, true).unwrap();
    assert_eq!(t.held_locks(), 0);
    let w = txn_cx(64);
    t.begin_compound(&w).unwrap();
    t.write(&w, &g, 0, b"now", false).unwrap();
    t.end_compound(&w, true).unwrap();
    t.end_compound(&open, true).unwrap();
    assert_eq!(t.held_locks(), 0);
}

/// One COMPOUND whose calls come from several threads: a read made on another thread
/// than `begin_compound` keeps its lock to the COMPOUND's end, which a third thread
/// calls.
#[test]
fn read_locks_follow_the_compound_not_the_thread_across_threads() {
    let lower = memory();
    setup(&*lower);
    let t = Arc::new(layer(lower, None));
    let f = at(&*t, &root_cx(), "f");
    // An open transaction makes plain COMPOUNDs lock (without one they run unlocked).
    let open = txn_cx(69);
    t.begin_compound(&open).unwrap();
    let cx = plain_cx(70);
    t.begin_compound(&cx).unwrap();
    {
        let (t, f, cx) = (t.clone(), f.clone(), cx.clone());
        std::thread::spawn(move || t.read(&cx, &f, 0, 4).map(|r| r.0))
            .join()
            .unwrap()
            .unwrap();
    }
    assert_eq!(t.held_locks(), 1, "the read's lock outlives its thread");
    let w = txn_cx(71);
    t.begin_compound(&w).unwrap();
    assert_eq!(
        t.write(&w, &f, 0, b"mine", false).unwrap_err(),
        BackendError::Conflict
    );
    t.end_compound(&w, false).unwrap();
    {
        let t = t.clone();
        std::thread::spawn(move || t.end_compound(&cx, true))
            .join()
            .unwrap()
            .unwrap();
    }
    assert_eq!(t.held_locks(), 0);
    let w = txn_cx(72);
    t.begin_compound(&w).unwrap();
    t.write(&w, &f, 0, b"mine", false).unwrap();
    t.end_compound(&w, true).unwrap();
    t.end_compound(&open, true).unwrap();
    assert_eq!(&t.read(&root_cx(), &f, 0, 4).unwrap().0[..], b"mine");
}
