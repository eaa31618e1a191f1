//! Filesystem operations driven through the third-party `nfs-rs` client
//! (NFSv4.1). Each test starts its own server with a fresh export, does its
//! work over the wire, and checks the outcome both through the client and,
//! where possible, on the host directory that the server exports.

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use nfs_rs::{Mount, Nfs4ErrorCode, NfsError, OPEN_BOTH, OPEN_READ};
use txnfs_e2e::fixtures::{
    close_both, create_open, host_file, must, must_be_denied, must_fail, set_mode, set_size,
    set_times, start_and_mount, two_openers, whole_second, LockSide, TwoOpeners, NF4DIR, NF4LNK,
    NF4REG, READ_LT, WRITE_LT,
};
use txnfs_e2e::{
    create_with, is_denied, is_nfs4, join_all, list_dir, ok, pattern, read_exact, write_all,
    ServerGuard,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_write_read_roundtrip() {
    let (server, m) = start_and_mount().await;
    let data = b"hello from nfs-rs over NFSv4.1\n".repeat(10);

    let created = must(&server, "create", m.create_path("hello.txt", Some(0o644))).await;
    let attr = created.attr.as_ref().expect("OPEN returned attributes");
    assert_eq!(attr.type_, NF4REG);
    assert_eq!(attr.filesize, 0, "new file is empty");
    write_all(&server, &*m, &created.fh, 0, &data).await;
    must(&server, "close", m.close(created.fh.clone())).await;

    let opened = must(&server, "open", m.open_path("hello.txt", OPEN_READ)).await;
    assert_eq!(
        opened.fh, created.fh,
        "OPEN and CREATE agree on the file handle"
    );
    let back = ok(
        &server,
        "read",
        read_exact(&*m, opened.fh.clone(), 0, data.len() + 100).await,
    );
    must(&server, "close", m.close(opened.fh)).await;
    assert_eq!(back, data, "bytes read back over NFS");

    let on_disk = host_file(&server, "hello.txt");
    assert_eq!(on_disk, data, "bytes on the host disk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_beyond_eof_leaves_hole() {
    let (server, m) = start_and_mount().await;
    let fh = create_open(&server, &*m, "sparse").await;
    const FAR: u64 = 1 << 20;
    write_all(&server, &*m, &fh, 0, b"head").await;
    write_all(&server, &*m, &fh, FAR, b"tail").await;
    must(&server, "close", m.close(fh.clone())).await;

    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.filesize, FAR + 4);

    let all = ok(
        &server,
        "read",
        read_exact(&*m, fh.clone(), 0, (FAR + 4) as usize).await,
    );
    assert_eq!(all.len() as u64, FAR + 4);
    assert_eq!(&all[..4], b"head");
    assert!(
        all[4..FAR as usize].iter().all(|&b| b == 0),
        "hole reads as zeros"
    );
    assert_eq!(&all[FAR as usize..], b"tail");

    // A read that starts inside the hole and one that starts past EOF.
    let mid = must(&server, "read mid", m.read(fh.clone(), 4096, 16)).await;
    assert_eq!(&mid[..], &[0u8; 16]);
    let past = must(&server, "read past eof", m.read(fh.clone(), FAR + 100, 16)).await;
    assert!(past.is_empty(), "read past EOF returns no bytes");

    let on_disk = host_file(&server, "sparse");
    assert_eq!(on_disk, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_write_read_8mib() {
    let (server, m) = start_and_mount().await;
    const SIZE: usize = 8 << 20;
    const CHUNK: usize = 1 << 20;
    let data = pattern(8, SIZE);
    let fh = create_open(&server, &*m, "big.bin").await;
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        write_all(&server, &*m, &fh, (i * CHUNK) as u64, chunk).await;
    }
    must(&server, "close", m.close(fh.clone())).await;

    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.filesize, SIZE as u64);
    let back = ok(&server, "read", read_exact(&*m, fh.clone(), 0, SIZE).await);
    assert_eq!(back.len(), SIZE);
    if let Some(i) = back.iter().zip(&data).position(|(a, b)| a != b) {
        panic!("read-back differs from written data first at byte {i}");
    }
    // An unaligned read across chunk boundaries.
    let off = CHUNK - 777;
    let piece = ok(
        &server,
        "read unaligned",
        read_exact(&*m, fh.clone(), off as u64, 5000).await,
    );
    assert_eq!(&piece[..], &data[off..off + 5000]);

    let on_disk = host_file(&server, "big.bin");
    assert!(on_disk == data, "host file differs from written data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getattr_size_mode_type() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "f", 0o640, &[7u8; 100]).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.type_, NF4REG);
    assert_eq!(attr.filesize, 100);
    assert_eq!(attr.file_mode & 0o7777, 0o640, "mode set at create");
    assert_eq!(attr.nlink, 1);
    assert_ne!(attr.fileid, 0);

    let by_path = must(&server, "getattr_path", m.getattr_path("f")).await;
    assert_eq!(by_path.fileid, attr.fileid, "fileid is stable");
    assert_eq!(by_path.filesize, 100);

    let root = must(&server, "getattr root", m.getattr(m.getfh().await)).await;
    assert_eq!(root.type_, NF4DIR);

    let meta = std::fs::metadata(server.export_dir().join("f")).expect("host file");
    assert_eq!(meta.len(), 100);
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640, "mode on host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattr_chmod_truncate_times() {
    let (server, m) = start_and_mount().await;
    let data = pattern(3, 10_000);
    let fh = create_with(&server, &*m, "f", 0o644, &data).await;
    let host = server.export_dir().join("f");

    // chmod
    must(&server, "setattr mode", set_mode(&*m, &fh, 0o600)).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.file_mode & 0o7777, 0o600);
    assert_eq!(
        std::fs::metadata(&host).unwrap().permissions().mode() & 0o7777,
        0o600
    );

    // truncate down
    must(&server, "setattr size 10", set_size(&*m, &fh, 10)).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.filesize, 10);
    let back = ok(&server, "read", read_exact(&*m, fh.clone(), 0, 100).await);
    assert_eq!(back, &data[..10]);
    assert_eq!(std::fs::metadata(&host).unwrap().len(), 10);

    // extend: the new range reads as zeros
    must(&server, "setattr size 5000", set_size(&*m, &fh, 5000)).await;
    let back = ok(&server, "read", read_exact(&*m, fh.clone(), 0, 6000).await);
    assert_eq!(back.len(), 5000);
    assert_eq!(&back[..10], &data[..10]);
    assert!(back[10..].iter().all(|&b| b == 0));
    assert_eq!(std::fs::read(&host).unwrap(), back);

    // times (SET_TO_CLIENT_TIME)
    let atime = whole_second(1_000_000_000);
    let mtime = whole_second(1_234_567_890);
    must(&server, "setattr times", set_times(&*m, &fh, atime, mtime)).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.mtime.seconds, mtime.seconds, "mtime over NFS");
    assert_eq!(attr.atime.seconds, atime.seconds, "atime over NFS");
    let meta = std::fs::metadata(&host).unwrap();
    assert_eq!(meta.mtime(), i64::from(mtime.seconds), "mtime on host");
    assert_eq!(meta.atime(), i64::from(atime.seconds), "atime on host");

    // guarded setattr with the current ctime succeeds
    must(
        &server,
        "setattr guarded",
        m.setattr_path("f", true, Some(0o640), None, None, None, None, None),
    )
    .await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.file_mode & 0o7777, 0o640);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_nested_and_exists() {
    let (server, m) = start_and_mount().await;
    let a = must(&server, "mkdir a", m.mkdir_path("a", 0o755)).await;
    assert_eq!(a.attr.as_ref().map(|a| a.type_), Some(NF4DIR));
    must(&server, "mkdir a/b", m.mkdir_path("a/b", 0o700)).await;
    let c = must(&server, "mkdir a/b/c", m.mkdir_path("a/b/c", 0o750)).await;
    create_with(&server, &*m, "a/b/c/file", 0o644, b"deep").await;

    let attr = must(&server, "getattr c", m.getattr(c.fh.clone())).await;
    assert_eq!(attr.type_, NF4DIR);
    assert_eq!(attr.file_mode & 0o7777, 0o750, "mkdir mode");
    let back = must(&server, "read deep file", m.read_path("a/b/c/file", 0, 100)).await;
    assert_eq!(&back[..], b"deep");

    let e = must_fail(&server, "mkdir existing", m.mkdir_path("a/b", 0o755)).await;
    assert!(
        e.is_exist(),
        "mkdir of an existing name: want EXIST, got {e:?}"
    );
    let e = must_fail(
        &server,
        "mkdir under missing parent",
        m.mkdir_path("nope/x", 0o755),
    )
    .await;
    assert!(e.is_not_found(), "want NOENT, got {e:?}");

    let host = server.export_dir();
    assert!(host.join("a/b/c").is_dir());
    assert_eq!(
        std::fs::metadata(host.join("a/b"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o700
    );
    assert_eq!(std::fs::read(host.join("a/b/c/file")).unwrap(), b"deep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_1000_entries() {
    let (server, m) = start_and_mount().await;
    let dir = must(&server, "mkdir", m.mkdir_path("big", 0o755)).await.fh;
    const N: usize = 1000;
    let names: Vec<String> = (0..N)
        .map(|i| format!("entry-{i:04}-{}", "x".repeat(i % 40)))
        .collect();

    // Create the files with a few requests in flight at once.
    let m_ref: &dyn Mount = &*m;
    for batch in names.chunks(16) {
        let mut set = Vec::new();
        for name in batch {
            let dir = dir.clone();
            set.push(async move {
                let obj = m_ref.create(dir, name, Some(0o644)).await?;
                m_ref.close(obj.fh).await
            });
        }
        for (name, r) in batch.iter().zip(join_all(set).await) {
            ok(&server, &format!("create {name}"), r);
        }
    }

    let listed = ok(&server, "readdir", list_dir(&*m, dir.clone()).await);
    let mut seen = HashSet::new();
    for n in &listed {
        assert!(seen.insert(n.clone()), "name {n:?} listed twice");
    }
    let want: HashSet<String> = names.iter().cloned().collect();
    let missing: Vec<_> = want.difference(&seen).collect();
    let extra: Vec<_> = seen.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "readdir mismatch: {} listed, missing {:?}, extra {:?}",
        listed.len(),
        &missing[..missing.len().min(5)],
        &extra[..extra.len().min(5)]
    );
    assert_eq!(listed.len(), N);
    assert_eq!(
        std::fs::read_dir(server.export_dir().join("big"))
            .unwrap()
            .count(),
        N
    );

    // Entries carry attributes and handles that agree with LOOKUP.
    let page = must(
        &server,
        "readdir page",
        m.readdirplus_page(dir.clone(), nfs_rs::DirectoryCookie::default()),
    )
    .await;
    let first = page
        .entries
        .iter()
        .find(|e| e.file_name != "." && e.file_name != "..")
        .expect("a first entry");
    let looked = must(&server, "lookup", m.lookup(dir.clone(), &first.file_name)).await;
    if let Some(attr) = &first.attr {
        assert_eq!(attr.type_, NF4REG);
        let real = must(&server, "getattr", m.getattr(looked.fh.clone())).await;
        assert_eq!(
            attr.fileid, real.fileid,
            "READDIR fileid agrees with GETATTR"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_file() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "old-name", 0o644, b"contents").await;
    must(&server, "rename", m.rename_path("old-name", "new-name")).await;
    let e = must_fail(&server, "lookup old", m.lookup_path("old-name")).await;
    assert!(e.is_not_found(), "old name gone: got {e:?}");
    let new = must(&server, "lookup new", m.lookup_path("new-name")).await;
    assert_eq!(new.fh, fh, "rename keeps the file handle");
    let back = must(&server, "read", m.read(new.fh, 0, 100)).await;
    assert_eq!(&back[..], b"contents");

    let host = server.export_dir();
    assert!(!host.join("old-name").exists());
    assert_eq!(std::fs::read(host.join("new-name")).unwrap(), b"contents");

    let e = must_fail(
        &server,
        "rename missing",
        m.rename_path("no-such", "whatever"),
    )
    .await;
    assert!(e.is_not_found(), "rename of a missing name: got {e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_over_existing_file() {
    let (server, m) = start_and_mount().await;
    create_with(&server, &*m, "src", 0o644, b"new data").await;
    create_with(&server, &*m, "dst", 0o644, b"old data that is longer").await;
    must(&server, "rename", m.rename_path("src", "dst")).await;

    let e = must_fail(&server, "lookup src", m.lookup_path("src")).await;
    assert!(e.is_not_found(), "got {e:?}");
    let back = must(&server, "read dst", m.read_path("dst", 0, 100)).await;
    assert_eq!(&back[..], b"new data");
    let attr = must(&server, "getattr", m.getattr_path("dst")).await;
    assert_eq!(attr.filesize, 8);

    let host = server.export_dir();
    assert!(!host.join("src").exists());
    assert_eq!(std::fs::read(host.join("dst")).unwrap(), b"new data");
    assert_eq!(std::fs::read_dir(&host).unwrap().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_directory() {
    let (server, m) = start_and_mount().await;
    must(&server, "mkdir d1", m.mkdir_path("d1", 0o755)).await;
    must(&server, "mkdir other", m.mkdir_path("other", 0o755)).await;
    create_with(&server, &*m, "d1/inner", 0o644, b"inside").await;

    must(&server, "rename dir", m.rename_path("d1", "d2")).await;
    let back = must(&server, "read d2/inner", m.read_path("d2/inner", 0, 100)).await;
    assert_eq!(&back[..], b"inside");
    let e = must_fail(&server, "lookup d1", m.lookup_path("d1")).await;
    assert!(e.is_not_found(), "got {e:?}");

    // Into another directory.
    must(
        &server,
        "rename across dirs",
        m.rename_path("d2", "other/d3"),
    )
    .await;
    let back = must(
        &server,
        "read other/d3/inner",
        m.read_path("other/d3/inner", 0, 100),
    )
    .await;
    assert_eq!(&back[..], b"inside");
    let names = ok(
        &server,
        "readdir root",
        list_dir(&*m, m.getfh().await).await,
    );
    assert_eq!(names, vec!["other".to_string()], "root holds only 'other'");

    let host = server.export_dir();
    assert!(!host.join("d1").exists() && !host.join("d2").exists());
    assert_eq!(
        std::fs::read(host.join("other/d3/inner")).unwrap(),
        b"inside"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_file() {
    let (server, m) = start_and_mount().await;
    create_with(&server, &*m, "doomed", 0o644, b"bye").await;
    assert!(server.export_dir().join("doomed").exists());
    must(&server, "remove", m.remove_path("doomed")).await;
    let e = must_fail(&server, "lookup", m.lookup_path("doomed")).await;
    assert!(e.is_not_found(), "got {e:?}");
    assert!(!server.export_dir().join("doomed").exists());

    let e = must_fail(&server, "remove again", m.remove_path("doomed")).await;
    assert!(e.is_not_found(), "remove of a missing name: got {e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_nonempty_fails_then_succeeds() {
    let (server, m) = start_and_mount().await;
    must(&server, "mkdir", m.mkdir_path("d", 0o755)).await;
    create_with(&server, &*m, "d/f", 0o644, b"x").await;

    let e = must_fail(&server, "rmdir non-empty", m.rmdir_path("d")).await;
    assert!(
        is_nfs4(&e, Nfs4ErrorCode::NFS4ERR_NOTEMPTY),
        "rmdir of a non-empty dir: want NFS4ERR_NOTEMPTY, got {e:?}"
    );
    assert!(server.export_dir().join("d/f").exists());

    must(&server, "remove d/f", m.remove_path("d/f")).await;
    must(&server, "rmdir", m.rmdir_path("d")).await;
    let e = must_fail(&server, "lookup d", m.lookup_path("d")).await;
    assert!(e.is_not_found(), "got {e:?}");
    assert!(!server.export_dir().join("d").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_and_readlink() {
    let (server, m) = start_and_mount().await;
    create_with(&server, &*m, "target-file", 0o644, b"t").await;
    let link = must(&server, "symlink", m.symlink_path("target-file", "link")).await;
    let odd_target = "../some/where/not existing";
    must(
        &server,
        "symlink dangling",
        m.symlink_path(odd_target, "dangling"),
    )
    .await;

    let attr = must(&server, "getattr", m.getattr(link.fh.clone())).await;
    assert_eq!(attr.type_, NF4LNK);
    let target = must(&server, "readlink", m.readlink(link.fh.clone())).await;
    assert_eq!(target, "target-file");
    let target = must(&server, "readlink_path", m.readlink_path("dangling")).await;
    assert_eq!(target, odd_target);

    let host = server.export_dir();
    assert_eq!(
        std::fs::read_link(host.join("link")).unwrap().to_str(),
        Some("target-file")
    );
    assert_eq!(
        std::fs::read_link(host.join("dangling")).unwrap().to_str(),
        Some(odd_target)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hard_link_nlink_2() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "orig", 0o644, b"shared bytes").await;
    must(&server, "link", m.link_path("orig", "alias")).await;

    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.nlink, 2, "nlink after LINK");
    let alias = must(&server, "lookup alias", m.lookup_path("alias")).await;
    let alias_attr = must(&server, "getattr alias", m.getattr(alias.fh.clone())).await;
    assert_eq!(alias_attr.fileid, attr.fileid, "both names are one file");
    let back = must(&server, "read alias", m.read(alias.fh, 0, 100)).await;
    assert_eq!(&back[..], b"shared bytes");

    let host = server.export_dir();
    let a = std::fs::metadata(host.join("orig")).unwrap();
    let b = std::fs::metadata(host.join("alias")).unwrap();
    assert_eq!(a.nlink(), 2);
    assert_eq!(a.ino(), b.ino());

    must(&server, "remove orig", m.remove_path("orig")).await;
    let attr = must(&server, "getattr after unlink", m.getattr_path("alias")).await;
    assert_eq!(attr.nlink, 1);
    let e = must_fail(&server, "link over existing", m.link_path("alias", "alias")).await;
    assert!(e.is_exist(), "LINK onto an existing name: got {e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_missing_is_noent() {
    let (server, m) = start_and_mount().await;
    let e = must_fail(&server, "lookup", m.lookup_path("missing")).await;
    assert!(e.is_not_found(), "want NOENT, got {e:?}");
    must(&server, "mkdir", m.mkdir_path("dir", 0o755)).await;
    let e = must_fail(&server, "lookup nested", m.lookup_path("dir/missing")).await;
    assert!(e.is_not_found(), "want NOENT, got {e:?}");
    let e = must_fail(&server, "getattr_path", m.getattr_path("dir/missing")).await;
    assert!(e.is_not_found(), "want NOENT, got {e:?}");
    let e = must_fail(&server, "open missing", m.open_path("missing", OPEN_READ)).await;
    assert!(
        e.is_not_found(),
        "OPEN of a missing file without CREATE: got {e:?}"
    );

    // LOOKUP through a regular file is NOTDIR.
    create_with(&server, &*m, "plain", 0o644, b"").await;
    let e = must_fail(&server, "lookup via file", m.lookup_path("plain/x")).await;
    assert!(
        is_nfs4(&e, Nfs4ErrorCode::NFS4ERR_NOTDIR),
        "LOOKUP with a file as directory: want NOTDIR, got {e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_close_semantics() {
    let (server, m) = start_and_mount().await;
    create_with(&server, &*m, "f", 0o644, b"0123456789").await;

    // Create (UNCHECKED4) of an existing file opens it without truncating.
    let again = must(&server, "create existing", m.create_path("f", Some(0o644))).await;
    assert_eq!(again.attr.as_ref().map(|a| a.filesize), Some(10));
    must(&server, "close", m.close(again.fh.clone())).await;

    // Open for read and write, overwrite the middle, read through another open.
    let rw = must(&server, "open rw", m.open_path("f", OPEN_BOTH)).await;
    write_all(&server, &*m, &rw.fh, 3, b"abc").await;
    let ro = must(&server, "open ro", m.open_path("f", OPEN_READ)).await;
    let back = must(&server, "read", m.read(ro.fh.clone(), 0, 100)).await;
    assert_eq!(&back[..], b"012abc6789");
    must(&server, "close ro", m.close(ro.fh.clone())).await;
    must(&server, "close rw", m.close(rw.fh.clone())).await;

    // A second client sees the data (close-to-open).
    let m2 = server.mount().await;
    let back = must(&server, "read m2", m2.read_path("f", 0, 100)).await;
    assert_eq!(&back[..], b"012abc6789");
    must(&server, "umount m2", m2.umount()).await;

    // OPEN of a directory for reading is refused.
    must(&server, "mkdir", m.mkdir_path("d", 0o755)).await;
    let e = must_fail(&server, "open dir", m.open_path("d", OPEN_READ)).await;
    assert!(
        is_nfs4(&e, Nfs4ErrorCode::NFS4ERR_ISDIR),
        "OPEN of a directory: want ISDIR, got {e:?}"
    );
    must(&server, "umount", m.umount()).await;
    assert_eq!(host_file(&server, "f"), b"012abc6789");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_range_locks_two_clients() {
    let server = ServerGuard::start_default();
    // LOCK needs an open stateid: both clients open the file.
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "locked", &[0u8; 1000]).await;
    assert!(
        a.capabilities().locks,
        "nfs-rs reports lock support on v4.1"
    );
    let (la, lb) = (LockSide::new(&*a, &fa), LockSide::new(&*b, &fb));

    // A takes a write lock on [0, 100).
    let tok_a = must(&server, "lock a [0,100)", la.lock(WRITE_LT, 0, 100)).await;

    // B conflicts on overlapping ranges, both for LOCKT and LOCK.
    let e = must_fail(&server, "lockt b [50,60)", lb.lockt(WRITE_LT, 50, 10)).await;
    assert!(
        is_denied(&e),
        "LOCKT over a held lock: want DENIED, got {e:?}"
    );
    must_be_denied(&server, "lockt b read [99,1)", lb.lockt(READ_LT, 99, 1)).await;
    let e = must_fail(&server, "lock b [0,10)", lb.lock(WRITE_LT, 0, 10)).await;
    assert!(
        is_denied(&e),
        "LOCK over a held lock: want DENIED, got {e:?}"
    );
    if let NfsError::LockDenied {
        offset,
        length,
        lock_type,
        ..
    } = &e
    {
        assert_eq!(
            (*offset, *length),
            (0, 100),
            "DENIED reports the holder's range"
        );
        assert_eq!(*lock_type, WRITE_LT);
    }

    // Non-overlapping ranges do not conflict.
    must(&server, "lockt b [100,50)", lb.lockt(WRITE_LT, 100, 50)).await;
    let tok_b = must(&server, "lock b [200,10)", lb.lock(WRITE_LT, 200, 10)).await;
    // (nfs-rs tokens carry the lock stateid with its seqid at LOCK time, so
    // release this one before B locks again: a later LOCK would make it old.)
    must(&server, "unlock b", b.unlock_stateful(tok_b)).await;

    // A unlocks; B can now lock the range.
    must(&server, "unlock a", a.unlock_stateful(tok_a)).await;
    must(&server, "lockt b after unlock", lb.lockt(WRITE_LT, 0, 100)).await;
    let tok_b2 = must(
        &server,
        "lock b [0,10) after unlock",
        lb.lock(WRITE_LT, 0, 10),
    )
    .await;
    // And now A is the one refused.
    must_be_denied(&server, "lockt a [5,1)", la.lockt(WRITE_LT, 5, 1)).await;

    must(&server, "unlock b2", b.unlock_stateful(tok_b2)).await;
    close_both(&server, &*a, fa, &*b, fb).await;
    must(&server, "umount b", b.umount()).await;
    must(&server, "umount a", a.umount()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_locks_share_write_lock_excludes() {
    let server = ServerGuard::start_default();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "shared", &[1u8; 100]).await;
    let (la, lb) = (LockSide::new(&*a, &fa), LockSide::new(&*b, &fb));

    let ra = must(&server, "read lock a", la.lock(READ_LT, 0, 50)).await;
    let rb = must(&server, "read lock b (shared)", lb.lock(READ_LT, 10, 50)).await;
    must_be_denied(&server, "lockt write b", lb.lockt(WRITE_LT, 0, 5)).await;
    must(&server, "unlock a", a.unlock_stateful(ra)).await;
    must(&server, "unlock b", b.unlock_stateful(rb)).await;
    must(
        &server,
        "lockt write after unlocks",
        lb.lockt(WRITE_LT, 0, 100),
    )
    .await;
    close_both(&server, &*a, fa, &*b, fb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsinfo_fsstat_access() {
    let (server, m) = start_and_mount().await;
    let info = must(&server, "fsinfo", m.fsinfo()).await;
    assert!(info.rtmax > 0 && info.wtmax > 0, "fsinfo: {info:?}");
    let stat = must(&server, "fsstat", m.fsstat()).await;
    assert!(
        stat.tbytes > 0 && stat.fbytes <= stat.tbytes,
        "fsstat: {stat:?}"
    );
    assert!(m.get_max_read_size() >= 4096 && m.get_max_write_size() >= 4096);
    eprintln!(
        "rsize {} wsize {}; fsinfo rtmax {} wtmax {}; session {:?}",
        m.get_max_read_size(),
        m.get_max_write_size(),
        info.rtmax,
        info.wtmax,
        m.nfs41_channel_limits().await
    );
    let root = m.getfh().await;
    // ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY | ACCESS4_EXTEND
    let granted = must(&server, "access", m.access(root, 0x0f)).await;
    assert_eq!(
        granted & 0x0f,
        0x0f,
        "root may read/lookup/modify/extend the export root"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_owner_locks_do_not_conflict() {
    let server = ServerGuard::start_default();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "mine", &[0u8; 300]).await;
    let (la, lb) = (LockSide::new(&*a, &fa), LockSide::new(&*b, &fb));
    let t1 = must(&server, "lock [0,100)", la.lock(WRITE_LT, 0, 100)).await;
    // The same lock-owner may lock an overlapping, larger range again.
    let t2 = must(
        &server,
        "relock [0,150) by the same owner",
        la.lock(WRITE_LT, 0, 150),
    )
    .await;
    let e = must_fail(&server, "lockt b [120,1)", lb.lockt(WRITE_LT, 120, 1)).await;
    assert!(is_denied(&e), "the extended range is held: got {e:?}");

    // The second LOCK bumped the lock stateid's seqid: the first token's
    // stateid is now old (RFC 8881 8.2.2).
    let e = must_fail(&server, "unlock with old token", a.unlock_stateful(t1)).await;
    assert!(
        is_nfs4(&e, Nfs4ErrorCode::NFS4ERR_OLD_STATEID),
        "LOCKU with a superseded lock stateid: want OLD_STATEID, got {e:?}"
    );
    must(&server, "unlock [0,150)", a.unlock_stateful(t2)).await;
    must(&server, "lockt b after unlock", lb.lockt(WRITE_LT, 0, 300)).await;
    close_both(&server, &*a, fa, &*b, fb).await;
}
