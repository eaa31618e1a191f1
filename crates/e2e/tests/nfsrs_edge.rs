//! Edge cases through `nfs-rs` (NFSv4.1): 64-bit offsets, zero-length I/O,
//! empty directories, long symlink targets, special mode bits, renames that
//! are no-ops, handles that outlive a parent rename, and changes made
//! directly on the exported directory by the host.

use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use nfs_rs::OPEN_BOTH;
use txnfs_e2e::fixtures::{
    check_read_path, create_open, must, set_mode, start_and_mount, CheckCalls,
};
use txnfs_e2e::{create_with, list_dir, ok, read_exact, timed, Checks, ServerKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_beyond_4gib_and_zero_length_io() {
    let (server, m) = start_and_mount().await;
    let fh = create_open(&server, &*m, "huge").await;
    let far: u64 = 5 << 30;
    txnfs_e2e::write_all(&server, &*m, &fh, far, b"past 4GiB").await;
    let mut c = Checks::new(&server);
    let w0 = must(
        &server,
        "zero-length write",
        m.write(fh.clone(), 10, Bytes::new()),
    )
    .await;
    c.check(
        w0.count == 0,
        format!("zero-length WRITE count {}", w0.count),
    );
    must(&server, "close", m.close(fh.clone())).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        attr.filesize == far + 9,
        format!("size {} want {}", attr.filesize, far + 9),
    );
    let back = must(&server, "read far", m.read(fh.clone(), far, 100)).await;
    c.check(
        &back[..] == b"past 4GiB",
        format!("read at 5 GiB: {back:?}"),
    );
    let hole = must(&server, "read hole", m.read(fh.clone(), 4 << 30, 64)).await;
    c.check(
        hole.len() == 64 && hole.iter().all(|&b| b == 0),
        "hole at 4 GiB",
    );
    let zero = must(&server, "read 0 bytes", m.read(fh.clone(), 0, 0)).await;
    c.check(zero.is_empty(), "READ of 0 bytes returned data");
    let meta = std::fs::metadata(server.export_dir().join("huge")).unwrap();
    c.check(meta.len() == far + 9, format!("host size {}", meta.len()));
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_directory_and_long_symlink() {
    let (server, m) = start_and_mount().await;
    let d = must(&server, "mkdir", m.mkdir_path("empty", 0o755))
        .await
        .fh;
    let names = ok(&server, "readdir empty", list_dir(&*m, d.clone()).await);
    assert!(names.is_empty(), "empty dir lists {names:?}");
    let page = must(
        &server,
        "readdir page",
        m.readdirplus_page(d.clone(), nfs_rs::DirectoryCookie::default()),
    )
    .await;
    assert!(page.eof, "an empty directory's first page is EOF");

    let target: String = (0..400).map(|i| format!("dir{i:03}/")).collect::<String>() + "end";
    assert!(target.len() > 2000 && target.len() < 4096);
    must(
        &server,
        "long symlink",
        m.symlink_path(&target, "long-link"),
    )
    .await;
    let back = must(&server, "readlink", m.readlink_path("long-link")).await;
    assert_eq!(back, target);
    assert_eq!(
        std::fs::read_link(server.export_dir().join("long-link"))
            .unwrap()
            .to_str(),
        Some(target.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_mode_bits() {
    let (server, m) = start_and_mount().await;
    let mut c = Checks::new(&server);
    let f = create_with(&server, &*m, "suid", 0o644, b"#!/bin/sh\n").await;
    for mode in [0o4755, 0o2755, 0o0000, 0o0777] {
        must(&server, "chmod", set_mode(&*m, &f, mode)).await;
        let attr = must(&server, "getattr", m.getattr(f.clone())).await;
        c.check(
            attr.file_mode & 0o7777 == mode,
            format!("chmod {mode:o}: getattr says {:o}", attr.file_mode & 0o7777),
        );
        let host = std::fs::metadata(server.export_dir().join("suid")).unwrap();
        c.check(
            host.permissions().mode() & 0o7777 == mode,
            format!(
                "chmod {mode:o}: host says {:o}",
                host.permissions().mode() & 0o7777
            ),
        );
    }
    let d = must(&server, "mkdir", m.mkdir_path("sticky", 0o755))
        .await
        .fh;
    must(&server, "chmod dir", set_mode(&*m, &d, 0o1777)).await;
    let attr = must(&server, "getattr dir", m.getattr(d)).await;
    c.check(
        attr.file_mode & 0o7777 == 0o1777,
        format!("sticky dir mode {:o}", attr.file_mode & 0o7777),
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_that_change_nothing_and_handles_after_parent_rename() {
    let (server, m) = start_and_mount().await;
    let mut c = Checks::new(&server);
    let f = create_with(&server, &*m, "f", 0o644, b"same file").await;
    must(&server, "link", m.link_path("f", "g")).await;
    // Renaming one name of a file onto another name of the same file does
    // nothing (POSIX rename(2), RFC 8881 18.26.4): both names remain.
    c.call_ok("rename f -> g (same file)", m.rename_path("f", "g"))
        .await;
    c.check(
        m.lookup_path("f").await.is_ok(),
        "name f vanished after rename onto its hard link",
    );
    c.check(
        m.lookup_path("g").await.is_ok(),
        "name g vanished after rename onto its hard link",
    );
    let attr = must(&server, "getattr", m.getattr(f.clone())).await;
    c.check(
        attr.nlink == 2,
        format!("nlink {} after no-op rename", attr.nlink),
    );

    // A file handle stays valid when its parent directory is renamed.
    must(&server, "mkdir", m.mkdir_path("p1", 0o755)).await;
    let child = create_with(&server, &*m, "p1/child", 0o644, b"child data").await;
    must(&server, "rename parent", m.rename_path("p1", "p2")).await;
    match timed("read", m.read(child.clone(), 0, 100)).await {
        Ok(b) => c.check(
            &b[..] == b"child data",
            format!("child read after parent rename: {b:?}"),
        ),
        Err(e) => c.check(false, format!("child handle after parent rename: {e:?}")),
    }
    let looked = must(&server, "lookup p2/child", m.lookup_path("p2/child")).await;
    c.check(
        looked.fh == child,
        "LOOKUP after parent rename returns a different handle",
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_side_changes_are_visible() {
    let (server, m) = start_and_mount().await;
    let host = server.export_dir();
    let mut c = Checks::new(&server);

    // Files made directly in the exported directory appear over NFS.
    std::fs::create_dir(host.join("made-on-host")).unwrap();
    std::fs::write(host.join("made-on-host/a.txt"), b"from the host").unwrap();
    let names = ok(&server, "readdir", list_dir(&*m, m.getfh().await).await);
    c.check(
        names.contains(&"made-on-host".to_string()),
        format!("host-made dir not listed: {names:?}"),
    );
    check_read_path(
        &mut c,
        &*m,
        "read host-made file",
        "made-on-host/a.txt",
        b"from the host",
    )
    .await;

    // A file read over NFS, then rewritten on the host, reads the new bytes.
    let fh = create_with(&server, &*m, "x", 0o644, b"version one").await;
    let _ = ok(&server, "read", read_exact(&*m, fh.clone(), 0, 100).await);
    std::fs::write(host.join("x"), b"version two, longer").unwrap();
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        attr.filesize == 19,
        format!("size after host rewrite: {}", attr.filesize),
    );
    let back = ok(
        &server,
        "read again",
        read_exact(&*m, fh.clone(), 0, 100).await,
    );
    c.check(
        back == b"version two, longer",
        format!("after host rewrite: {:?}", String::from_utf8_lossy(&back)),
    );

    // Removed on the host: LOOKUP says NOENT, the old handle is STALE.
    // (Not checked on Ganesha: its MDCACHE keeps serving the cached entry
    // and the still-open inode for a while — a Ganesha limitation.)
    std::fs::remove_file(host.join("x")).unwrap();
    if server.kind() != ServerKind::Ganesha {
        match timed("lookup", m.lookup_path("x")).await {
            Err(e) => c.check(
                e.is_not_found(),
                format!("LOOKUP of a host-removed file: {e:?}"),
            ),
            Ok(_) => c.check(false, "LOOKUP of a host-removed file succeeded"),
        }
        c.call_err(
            "GETATTR of a host-removed file's handle",
            m.getattr(fh.clone()),
            &[nfs_rs::Nfs4ErrorCode::NFS4ERR_STALE],
        )
        .await;
    }

    // Renamed on the host: the handle still names the file.
    let fh2 = create_with(&server, &*m, "y", 0o644, b"moving").await;
    std::fs::rename(host.join("y"), host.join("made-on-host/y2")).unwrap();
    match timed("read", m.read(fh2, 0, 100)).await {
        Ok(b) => c.check(
            &b[..] == b"moving",
            format!("read after host rename: {b:?}"),
        ),
        Err(e) => c.check(false, format!("handle after a host-side rename: {e:?}")),
    }
    must(&server, "open", m.open_path("made-on-host/y2", OPEN_BOTH)).await;
    c.finish();
}
