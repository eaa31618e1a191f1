//! Tests that only make sense for the local-directory backend: restart-stable keys,
//! symlink containment, keys of objects outside the export, mount points.

mod common;

use std::os::unix::fs::symlink;

use bytes::Bytes;
use common::mounts::{LoopFs, Mounted};
use common::*;
use txnfs_backend::local::LocalBackend;
use txnfs_backend::{
    Advice, Backend, BackendError, CloneMethod, CreateMode, FileType, NodeKind, OpCtx, SetAttrs,
    MAX_KEY_LEN,
};

#[test]
fn keys_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (root, file, sub, link, data_key) = {
        let b = LocalBackend::open(dir.path()).unwrap();
        let root = b.root().unwrap();
        let file = create(&b, &root, "file");
        b.write(&OpCtx::default(), &file, 0, b"persisted", true)
            .unwrap();
        let sub = mkdir(&b, &root, "sub");
        let link = make_symlink(&b, &sub, "ln", b"../file").key;
        for k in [&root, &file, &sub, &link] {
            assert!(k.len() <= MAX_KEY_LEN);
        }
        let data_key = create(&b, &sub, "deleted-later");
        (root, file, sub, link, data_key)
    };
    // Removed while the server is down.
    std::fs::remove_file(dir.path().join("sub/deleted-later")).unwrap();

    let b = LocalBackend::open(dir.path()).unwrap();
    assert_eq!(b.root().unwrap(), root);
    assert_eq!(&b.read(&user(), &file, 0, 100).unwrap().0[..], b"persisted");
    assert_eq!(b.getattr(&user(), &sub).unwrap().ftype, FileType::Directory);
    assert_eq!(&b.readlink(&user(), &link).unwrap()[..], b"../file");
    assert_eq!(b.lookup_parent(&user(), &sub).unwrap().0, root);
    assert_eq!(b.lookup(&user(), &root, b"file").unwrap().0, file);
    assert_eq!(
        b.getattr(&user(), &data_key).unwrap_err(),
        BackendError::Stale
    );
}

#[test]
fn symlink_to_root_is_never_traversed() {
    let dir = tempfile::tempdir().unwrap();
    symlink("/", dir.path().join("escape")).unwrap();
    symlink("/etc", dir.path().join("etc")).unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let (k, a) = b.lookup(&user(), &root, b"escape").unwrap();
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(&b.readlink(&user(), &k).unwrap()[..], b"/");
    assert_eq!(
        b.lookup(&user(), &k, b"etc").unwrap_err(),
        BackendError::NotDir
    );
    assert_eq!(
        b.readdir(&user(), &k, 0, 10).unwrap_err(),
        BackendError::NotDir
    );
    assert_eq!(
        b.lookup_parent(&user(), &k).unwrap_err(),
        BackendError::NotDir
    );
    let e = create_file(
        &b,
        &k,
        b"pwned",
        CreateMode::Unchecked,
        &SetAttrs::default(),
    )
    .unwrap_err();
    assert_eq!(e, BackendError::NotDir);
    let e = make_node(&b, &k, b"pwned", &NodeKind::Directory, &SetAttrs::default()).unwrap_err();
    assert_eq!(e, BackendError::NotDir);
    assert_eq!(
        b.remove(&OpCtx::default(), &k, b"tmp").unwrap_err(),
        BackendError::NotDir
    );
    // Unchecked create on the name of a symlink does not write through it.
    let (etc, _) = b.lookup(&user(), &root, b"etc").unwrap();
    let e = create_file(&b, &root, b"etc", CreateMode::Unchecked, &set_size(0)).unwrap_err();
    assert_eq!(e, BackendError::SymlinkLoop);
    assert!(b.write(&OpCtx::default(), &etc, 0, b"x", false).is_err());
    assert!(b.setattr(&OpCtx::default(), &etc, &set_size(0)).is_err());
    // chown of the symlink changes the link, not /etc
    let etc_uid = uid_of("/etc");
    let a = b.setattr(&OpCtx::default(), &etc, &set_uid(4242)).unwrap();
    assert_eq!(a.uid, 4242);
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(uid_of("/etc"), etc_uid);
    // readdir lists them as symlinks
    let (ents, eof) = b.readdir(&user(), &root, 0, 100).unwrap();
    assert!(eof);
    assert_eq!(ents.len(), 2);
    assert!(ents.iter().all(|e| e.attrs.ftype == FileType::Symlink));
}

/// The owner of `path` on the host, if it can be read.
fn uid_of(path: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.uid()).ok()
}

/// A key of an object outside the export (but on the same file system) still resolves:
/// `open_by_handle_at` does not check ancestry. The server's MAC on NFS handles is the
/// guard against forged handles; the backend only ever hands out keys of objects it
/// reached from the export root.
#[test]
fn forged_key_outside_export_resolves_only_via_handle() {
    let top = tempfile::tempdir().unwrap();
    let export = top.path().join("export");
    let outside = top.path().join("outside");
    for d in [&export, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("secret"), b"s3cret").unwrap();

    let wide = LocalBackend::open(top.path()).unwrap();
    let (okey, _) = wide
        .lookup(&user(), &wide.root().unwrap(), b"outside")
        .unwrap();
    let (skey, _) = wide.lookup(&user(), &okey, b"secret").unwrap();
    drop(wide);

    let b = LocalBackend::open(&export).unwrap();
    let root = b.root().unwrap();
    // No name inside the export reaches it.
    assert_eq!(
        b.lookup(&user(), &root, b"outside").unwrap_err(),
        BackendError::NotFound
    );
    assert_eq!(
        b.lookup_parent(&user(), &root).unwrap_err(),
        BackendError::NotFound
    );
    // A forged key does resolve (documented: the MAC guards against this).
    assert_eq!(
        b.getattr(&user(), &okey).unwrap().ftype,
        FileType::Directory
    );
    assert_eq!(&b.read(&user(), &skey, 0, 10).unwrap().0[..], b"s3cret");
}

#[test]
fn stale_after_external_removal() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let k = create(&b, &root, "f");
    b.write(&OpCtx::default(), &k, 0, b"abc", false).unwrap(); // cached read-write descriptor
    std::fs::remove_file(dir.path().join("f")).unwrap();
    assert_eq!(b.getattr(&user(), &k).unwrap_err(), BackendError::Stale);
    assert_eq!(b.read(&user(), &k, 0, 3).unwrap_err(), BackendError::Stale);
    assert_eq!(
        b.write(&OpCtx::default(), &k, 0, b"x", false).unwrap_err(),
        BackendError::Stale
    );
    let d = mkdir(&b, &root, "d");
    std::fs::remove_dir(dir.path().join("d")).unwrap();
    assert_eq!(b.getattr(&user(), &d).unwrap_err(), BackendError::Stale);
    assert_eq!(
        b.readdir(&user(), &d, 0, 10).unwrap_err(),
        BackendError::Stale
    );
}

/// `peek_size` (a placement hint, ADR 0059): the size of a regular file by name, and
/// nothing for anything else.
#[test]
fn peek_size_sees_regular_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    std::fs::write(dir.path().join("full"), b"four").unwrap();
    std::fs::write(dir.path().join("empty"), b"").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    symlink("full", dir.path().join("link")).unwrap();
    assert_eq!(b.peek_size(&root, b"full"), Some(4));
    assert_eq!(b.peek_size(&root, b"empty"), Some(0));
    assert_eq!(b.peek_size(&root, b"missing"), None);
    assert_eq!(b.peek_size(&root, b"d"), None);
    assert_eq!(b.peek_size(&root, b"link"), None, "not followed");
    assert_eq!(b.peek_size(&root, b"bad\0name"), None);
}

#[test]
fn exclusive_verifier_lives_in_atime_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    for (i, verf) in [[0u8; 8], [0xff; 8], *b"\x80\0\0\x01\x7f\xff\xff\xff"]
        .iter()
        .enumerate()
    {
        let name = format!("x{i}");
        // The first create makes the file, a retry with the same verifier opens it.
        let first = exclusive(&b, &root, name.as_bytes(), *verf).unwrap();
        assert!(first.created);
        let at = i64::from(u32::from_be_bytes([verf[0], verf[1], verf[2], verf[3]]));
        let mt = i64::from(u32::from_be_bytes([verf[4], verf[5], verf[6], verf[7]]));
        assert_eq!((first.attrs.atime.sec, first.attrs.mtime.sec), (at, mt));
        let again = exclusive(&b, &root, name.as_bytes(), *verf).unwrap();
        assert!(!again.created);
        assert_eq!(first.key, again.key);
    }
}

#[test]
fn mount_points_are_xdev() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let bind = dir.path().join("bind");
    for d in [&mnt, &bind, &dir.path().join("plain")] {
        std::fs::create_dir(d).unwrap();
    }
    let _tmpfs = Mounted::new(&["-t", "tmpfs", "txnfs-test"], &mnt);
    let src = dir.path().join("plain");
    let src = src.to_string_lossy().into_owned();
    let _bound = Mounted::new(&["--bind", &src], &bind);

    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    assert_eq!(
        b.lookup(&user(), &root, b"mnt").unwrap_err(),
        BackendError::XDev
    );
    // Same device, other mount: refused too (a bind mount could show anything).
    assert_eq!(
        b.lookup(&user(), &root, b"bind").unwrap_err(),
        BackendError::XDev
    );
    let (ents, _) = b.readdir(&user(), &root, 0, 100).unwrap();
    let names: Vec<_> = ents.iter().map(|e| e.name.clone()).collect();
    assert!(names.contains(&Bytes::from_static(b"plain")));
    assert!(!names.contains(&Bytes::from_static(b"mnt")));
    assert!(!names.contains(&Bytes::from_static(b"bind")));
}

#[test]
fn missing_export_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        LocalBackend::open(&dir.path().join("nope")).unwrap_err(),
        BackendError::NotFound
    );
    let f = dir.path().join("file");
    std::fs::write(&f, b"").unwrap();
    assert_eq!(LocalBackend::open(&f).unwrap_err(), BackendError::NotDir);
}

/// Readdir cookies on tmpfs (whose directory offsets differ from ext4's), on a tmpfs
/// mounted for the test.
#[test]
fn readdir_cookies_on_tmpfs() {
    let dir = tempfile::tempdir().unwrap();
    let _tmpfs = Mounted::new(&["-t", "tmpfs", "txnfs-test"], dir.path());
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    for i in 0..200 {
        create_file(
            &b,
            &root,
            format!("n{i}").as_bytes(),
            CreateMode::Guarded,
            &SetAttrs::default(),
        )
        .unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let (ents, eof) = b.readdir(&user(), &root, cookie, 7).unwrap();
        for e in &ents {
            assert!(seen.insert(e.name.clone()), "duplicate {:?}", e.name);
            assert_ne!(e.cookie, 0);
        }
        if eof {
            break;
        }
        cookie = ents.last().unwrap().cookie;
        // remove an already returned entry between pages
        round += 1;
        if round % 2 == 0 {
            b.remove(&OpCtx::default(), &root, &ents[0].name).unwrap();
        }
    }
    assert_eq!(seen.len(), 200);
}

/// More objects than the descriptor cache holds: eviction keeps everything working.
#[test]
fn many_keys_beyond_the_descriptor_cache() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let mut keys = Vec::new();
    for i in 0..5000u32 {
        let k = create(&b, &root, &format!("f{i}"));
        if i % 10 == 0 {
            b.write(&OpCtx::default(), &k, 0, &i.to_be_bytes(), false)
                .unwrap();
        }
        keys.push(k);
    }
    for (i, k) in keys.iter().enumerate() {
        let a = b.getattr(&user(), k).unwrap();
        if i % 10 == 0 {
            assert_eq!(a.size, 4);
            let (d, _) = b.read(&user(), k, 0, 4).unwrap();
            assert_eq!(&d[..], &(i as u32).to_be_bytes());
        }
    }
    for i in (0..5000).step_by(7) {
        b.remove(&OpCtx::default(), &root, format!("f{i}").as_bytes())
            .unwrap();
        assert_eq!(
            b.getattr(&user(), &keys[i]).unwrap_err(),
            BackendError::Stale
        );
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 % 241) as u8).collect()
}

/// On a file system without reflinks (tmpfs here; ext4 answers the same), the probe
/// at open says so and clone_range copies, block-aligned or not.
#[test]
fn clone_range_copies_without_reflink_support() {
    let dir = tempfile::tempdir().unwrap();
    let _tmpfs = Mounted::new(&["-t", "tmpfs", "txnfs-test"], dir.path());
    let b = LocalBackend::open(dir.path()).unwrap();
    assert_eq!(b.clone_method(), CloneMethod::Copy);
    let data = pattern(64 << 10);
    let src = file_with(&b, "src", &data);
    let dst = file_with(&b, "dst", b"");
    let cx = OpCtx::default();
    assert_eq!(
        b.clone_range(&cx, &src, 0, &dst, 0, 64 << 10).unwrap(),
        CloneMethod::Copy
    );
    assert_eq!(b.read(&user(), &dst, 0, 1 << 20).unwrap().0, &data[..]);
    // Overlapping ranges of one file are refused rather than smeared.
    assert_eq!(
        b.clone_range(&cx, &src, 0, &src, 4096, 8192).unwrap_err(),
        BackendError::Inval
    );
}

/// A copy without reflinks keeps the source's holes (copy_file_range would fill them on
/// tmpfs and ext4): only the data is copied, a hole over older destination bytes reads
/// as zeros, and a range ending in a hole still gives the destination its full size.
#[test]
fn clone_range_keeps_holes_without_reflink_support() {
    let dir = tempfile::tempdir().unwrap();
    let _tmpfs = Mounted::new(&["-t", "tmpfs", "txnfs-test"], dir.path());
    let b = LocalBackend::open(dir.path()).unwrap();
    let cx = OpCtx::default();
    // 8 MiB: 64 KiB of data at 1 MiB and at 5 MiB, holes elsewhere (the end too).
    let island = pattern(64 << 10);
    let src = file_with(&b, "src", b"");
    b.write(&cx, &src, 1 << 20, &island, false).unwrap();
    b.write(&cx, &src, 5 << 20, &island, false).unwrap();
    b.setattr(
        &cx,
        &src,
        &SetAttrs {
            size: Some(8 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let mut want = vec![0u8; 8 << 20];
    want[1 << 20..(1 << 20) + island.len()].copy_from_slice(&island);
    want[5 << 20..(5 << 20) + island.len()].copy_from_slice(&island);
    // Into an empty file, and over a file full of other bytes.
    let fresh = file_with(&b, "fresh", b"");
    let full = file_with(&b, "full", &vec![0xee; 8 << 20]);
    for dst in [&fresh, &full] {
        b.clone_range(&cx, &src, 0, dst, 0, 0).unwrap();
        let mut got = Vec::new();
        while got.len() < want.len() {
            let (d, _) = b.read(&user(), dst, got.len() as u64, 1 << 20).unwrap();
            assert!(!d.is_empty(), "short file at {}", got.len());
            got.extend_from_slice(&d);
        }
        assert!(got == want, "copied bytes differ");
        assert_eq!(b.getattr(&user(), dst).unwrap().size, 8 << 20);
    }
    let used = b.getattr(&user(), &fresh).unwrap().space_used;
    assert!(used < 1 << 20, "holes filled: {used} bytes allocated");
}

fn reflink_on(mkfs: &str, size: &str) {
    let fs = LoopFs::new(mkfs, size);
    let b = LocalBackend::open(fs.mnt.path()).unwrap();
    assert_eq!(b.clone_method(), CloneMethod::Reflink, "{mkfs}: probe");
    let data = pattern(256 << 10);
    let src = file_with(&b, "src", &data);
    let dst = file_with(&b, "dst", &[0xee; 64 << 10]);
    let cx = OpCtx::default();
    // Block-aligned: shared blocks.
    let m = b
        .clone_range(&cx, &src, 64 << 10, &dst, 0, 128 << 10)
        .unwrap();
    assert_eq!(m, CloneMethod::Reflink, "{mkfs}: aligned range");
    assert_eq!(
        b.read(&user(), &dst, 0, 1 << 20).unwrap().0,
        &data[64 << 10..192 << 10]
    );
    // Writing the clone leaves the source alone (copy-on-write).
    b.write(&cx, &dst, 0, b"changed", false).unwrap();
    assert_eq!(
        b.read(&user(), &src, 64 << 10, 7).unwrap().0,
        &data[64 << 10..(64 << 10) + 7]
    );
    // Unaligned: the copy fallback, same bytes.
    let m = b.clone_range(&cx, &src, 100, &dst, 5, 1000).unwrap();
    assert_eq!(m, CloneMethod::Copy, "{mkfs}: unaligned range");
    assert_eq!(b.read(&user(), &dst, 5, 1000).unwrap().0, &data[100..1100]);
    drop(b);
}

#[test]
#[ignore = "needs root, loop devices and mkfs.btrfs (Debian btrfs-progs); run with --ignored"]
fn clone_range_reflinks_on_btrfs() {
    reflink_on("mkfs.btrfs", "256M");
}

#[test]
#[ignore = "needs root, loop devices and mkfs.xfs (Debian xfsprogs); run with --ignored"]
fn clone_range_reflinks_on_xfs() {
    reflink_on("mkfs.xfs", "320M");
}

/// Reads on a runtime worker (where the server runs READs at any size, ADR 0040): the
/// cached part without blocking, the rest off the worker. The same bytes either way,
/// from a file whose pages were dropped from the cache (DONTNEED) and once cached.
#[test]
fn reads_on_a_runtime_worker_cached_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(4 << 20);
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let b = std::sync::Arc::new(LocalBackend::open(dir.path()).unwrap());
    let root = b.root().unwrap();
    let (f, _) = b.lookup(&user(), &root, b"f").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for round in ["dropped", "cached"] {
        if round == "dropped" {
            // Written pages must reach the disk before they can be dropped.
            std::fs::File::open(dir.path().join("f"))
                .unwrap()
                .sync_all()
                .unwrap();
            b.advise(&user(), &f, 0, 0, Advice::DontNeed).unwrap();
        }
        let (b2, f2) = (b.clone(), f.clone());
        let got = rt.block_on(async move {
            tokio::spawn(async move {
                let mut out = Vec::new();
                let mut off = 0u64;
                loop {
                    let (d, eof) = b2.read(&user(), &f2, off, 1 << 20).unwrap();
                    off += d.len() as u64;
                    out.extend_from_slice(&d);
                    if eof {
                        break;
                    }
                }
                out
            })
            .await
            .unwrap()
        });
        assert_eq!(got.len(), data.len(), "{round}");
        assert!(got == data, "{round}: bytes differ");
    }
}

/// A READ or WRITE under an open stateid asks for its file's type and fileid only; the
/// local backend answers that from its descriptor cache after the first stat. Seen from
/// outside: once known, the identity is still answered after the object's last link
/// went (removed behind the server's back), where a getattr's stat says `Stale`.
#[test]
fn a_known_identity_is_answered_without_a_stat() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let file = create(&b, &root, "file");
    let sub = mkdir(&b, &root, "sub");
    let ino = |p: &str| {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir.path().join(p)).unwrap())
    };
    let (file_ino, sub_ino) = (ino("file"), ino("sub"));
    assert_eq!(
        b.identity(&user(), &file).unwrap(),
        (FileType::Regular, file_ino)
    );
    assert_eq!(
        b.identity(&user(), &sub).unwrap(),
        (FileType::Directory, sub_ino)
    );
    assert_eq!(b.getattr(&user(), &file).unwrap().fileid, file_ino);

    std::fs::remove_file(dir.path().join("file")).unwrap();
    assert_eq!(
        b.identity(&user(), &file).unwrap(),
        (FileType::Regular, file_ino)
    );
    assert_eq!(b.getattr(&user(), &file).unwrap_err(), BackendError::Stale);
    // The stat that found it gone dropped its descriptors, and the identity with them.
    assert_eq!(b.identity(&user(), &file).unwrap_err(), BackendError::Stale);
}

/// Small reads share a per-thread buffer (`LocalBackend::read_small`): each read's
/// bytes stay its own while later reads fill the buffer, wrap past its end and reuse
/// it, and the end of the file is told by the byte asked for beyond the read.
#[test]
fn small_reads_held_together_keep_their_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(dir.path()).unwrap();
    let root = b.root().unwrap();
    let f = create(&b, &root, "f");
    let data = pattern(200 << 10);
    b.write(&OpCtx::default(), &f, 0, &data, false).unwrap();
    let size = data.len() as u64;
    // Sizes around the shared buffer's size, at offsets that do not repeat its bytes.
    let mut held = Vec::new();
    let mut off = 0u64;
    for i in 0..120u64 {
        let count = [1u32, 512, 4096, 4095, 8191, 3000][i as usize % 6];
        let (d, eof) = b.read(&user(), &f, off, count).unwrap();
        let end = (off + u64::from(count)).min(size);
        assert_eq!(
            &d[..],
            &data[off as usize..end as usize],
            "read {i} at {off}"
        );
        assert_eq!(eof, end == size, "read {i} at {off}: end of file");
        held.push((off, d));
        off = (off + 7919 * (i + 1)) % size;
    }
    // Every held read still has its bytes after all the others.
    for (off, d) in &held {
        assert_eq!(&d[..], &data[*off as usize..*off as usize + d.len()]);
    }
    // Released, then read again: the buffer is reused, the bytes still right.
    drop(held);
    for i in 0..20u64 {
        let off = size - 4096 * (i + 1) + 3;
        let (d, eof) = b.read(&user(), &f, off, 4096).unwrap();
        assert_eq!(&d[..], &data[off as usize..(off + 4096).min(size) as usize]);
        assert_eq!(eof, off + 4096 >= size);
    }
    // The very end: a read that ends at the file's end is end of file.
    let (d, eof) = b.read(&user(), &f, size - 100, 100).unwrap();
    assert_eq!(d.len(), 100);
    assert!(eof);
    let (d, eof) = b.read(&user(), &f, size - 101, 100).unwrap();
    assert_eq!(&d[..], &data[data.len() - 101..data.len() - 1]);
    assert!(!eof);
}
