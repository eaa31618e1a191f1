//! Error semantics and multi-client behaviour through `nfs-rs` (NFSv4.1):
//! the status codes a server must return for bad names, wrong object
//! types and stale handles, and what a second client observes.

use std::os::unix::fs::MetadataExt;

use bytes::Bytes;
use nfs_rs::{Nfs4ErrorCode as E, OPEN_BOTH};
use txnfs_e2e::fixtures::{
    expect_code, host_file, must, must_fail, must_fail_with, set_size, start_and_mount,
};
use txnfs_e2e::{create_with, err, join_all, list_dir, ok, pattern, read_exact, timed, write_all};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_rejected() {
    let (server, m) = start_and_mount().await;
    let root = m.getfh().await;

    let long = "n".repeat(256);
    must_fail_with(
        &server,
        "256-byte name",
        m.create(root.clone(), &long, Some(0o644)),
        &[E::NFS4ERR_NAMETOOLONG],
    )
    .await;
    must_fail_with(
        &server,
        "LOOKUP 256-byte name",
        m.lookup(root.clone(), &long),
        &[E::NFS4ERR_NAMETOOLONG],
    )
    .await;
    // 255 bytes is fine.
    let max = "m".repeat(255);
    create_with(&server, &*m, &max, 0o644, b"ok").await;
    assert!(server.export_dir().join(&max).exists());

    must_fail_with(
        &server,
        "empty name",
        m.create(root.clone(), "", Some(0o644)),
        &[E::NFS4ERR_INVAL],
    )
    .await;

    for bad in [".", ".."] {
        must_fail_with(
            &server,
            &format!("CREATE {bad:?}"),
            m.mkdir(root.clone(), bad, 0o755),
            &[E::NFS4ERR_BADNAME, E::NFS4ERR_EXIST, E::NFS4ERR_INVAL],
        )
        .await;
    }
    must_fail_with(
        &server,
        "name with '/'",
        m.create(root.clone(), "a/b", Some(0o644)),
        &[E::NFS4ERR_BADNAME, E::NFS4ERR_BADCHAR, E::NFS4ERR_INVAL],
    )
    .await;
    assert!(!server.export_dir().join("a").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicode_names_roundtrip() {
    let (server, m) = start_and_mount().await;
    let names = [
        "héllo-wörld.txt",
        "日本語のファイル",
        "emoji-🦀",
        "spaces and\ttab",
    ];
    for (i, name) in names.iter().enumerate() {
        create_with(&server, &*m, name, 0o644, format!("file {i}").as_bytes()).await;
    }
    let mut listed = ok(&server, "readdir", list_dir(&*m, m.getfh().await).await);
    listed.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(listed, want);
    for (i, name) in names.iter().enumerate() {
        let back = must(&server, "read", m.read_path(name, 0, 100)).await;
        assert_eq!(back, format!("file {i}").as_bytes());
        assert_eq!(host_file(&server, name), format!("file {i}").as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_object_types() {
    let (server, m) = start_and_mount().await;
    let dir = must(&server, "mkdir", m.mkdir_path("d", 0o755)).await.fh;
    let file = create_with(&server, &*m, "f", 0o644, b"data").await;

    must_fail_with(
        &server,
        "READ of a directory",
        m.read(dir.clone(), 0, 10),
        &[E::NFS4ERR_ISDIR],
    )
    .await;
    must_fail_with(
        &server,
        "WRITE to a directory",
        m.write(dir.clone(), 0, Bytes::from_static(b"x")),
        &[E::NFS4ERR_ISDIR],
    )
    .await;
    must_fail_with(
        &server,
        "READLINK of a regular file",
        m.readlink(file.clone()),
        &[E::NFS4ERR_INVAL],
    )
    .await;
    let e = err(&server, "readdir file", list_dir(&*m, file.clone()).await);
    expect_code(
        &server,
        "READDIR of a regular file",
        &e,
        &[E::NFS4ERR_NOTDIR],
    );
    must_fail_with(
        &server,
        "LOOKUP in a regular file",
        m.lookup(file.clone(), "x"),
        &[E::NFS4ERR_NOTDIR],
    )
    .await;
    must_fail_with(
        &server,
        "OPEN/CREATE with a file as directory",
        m.create(file.clone(), "x", Some(0o644)),
        &[E::NFS4ERR_NOTDIR],
    )
    .await;
    must_fail_with(
        &server,
        "LINK of a directory",
        m.link_path("d", "d2"),
        &[E::NFS4ERR_ISDIR],
    )
    .await;
    must_fail_with(
        &server,
        "SETATTR size on a directory",
        set_size(&*m, &dir, 0),
        &[E::NFS4ERR_ISDIR, E::NFS4ERR_INVAL],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_edge_cases() {
    let (server, m) = start_and_mount().await;
    must(&server, "mkdir a", m.mkdir_path("a", 0o755)).await;
    must(&server, "mkdir a/sub", m.mkdir_path("a/sub", 0o755)).await;
    must(&server, "mkdir full", m.mkdir_path("full", 0o755)).await;
    create_with(&server, &*m, "full/x", 0o644, b"x").await;
    create_with(&server, &*m, "file", 0o644, b"file").await;

    // A directory cannot move into its own subtree, nor replace a non-empty
    // directory; a file and a directory cannot replace each other.
    let refused: [(&str, &str, &str, &[E]); 4] = [
        (
            "RENAME dir into its own subdir",
            "a",
            "a/sub/a",
            &[E::NFS4ERR_INVAL],
        ),
        (
            "RENAME dir over non-empty dir",
            "a",
            "full",
            &[E::NFS4ERR_EXIST, E::NFS4ERR_NOTEMPTY],
        ),
        (
            "RENAME file over dir",
            "file",
            "a",
            &[E::NFS4ERR_EXIST, E::NFS4ERR_ISDIR],
        ),
        (
            "RENAME dir over file",
            "a",
            "file",
            &[E::NFS4ERR_EXIST, E::NFS4ERR_NOTDIR],
        ),
    ];
    for (what, from, to, want) in refused {
        must_fail_with(&server, what, m.rename_path(from, to), want).await;
    }
    // Rename onto itself is a no-op success.
    must(&server, "rename onto itself", m.rename_path("file", "file")).await;
    // Directory over an empty directory replaces it.
    must(&server, "mkdir empty", m.mkdir_path("empty", 0o755)).await;
    must(
        &server,
        "rename over empty dir",
        m.rename_path("a", "empty"),
    )
    .await;
    assert!(server.export_dir().join("empty/sub").is_dir());
    assert!(!server.export_dir().join("a").exists());
    assert_eq!(host_file(&server, "file"), b"file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_file_handle_is_stale() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "gone", 0o644, b"soon gone").await;
    let dir = must(&server, "mkdir", m.mkdir_path("gonedir", 0o755))
        .await
        .fh;
    must(&server, "remove", m.remove_path("gone")).await;
    must(&server, "rmdir", m.rmdir_path("gonedir")).await;
    must_fail_with(
        &server,
        "GETATTR of a removed file",
        m.getattr(fh.clone()),
        &[E::NFS4ERR_STALE],
    )
    .await;
    must_fail_with(
        &server,
        "READ of a removed file",
        m.read(fh.clone(), 0, 10),
        &[E::NFS4ERR_STALE],
    )
    .await;
    must_fail_with(
        &server,
        "LOOKUP in a removed dir",
        m.lookup(dir.clone(), "x"),
        &[E::NFS4ERR_STALE, E::NFS4ERR_NOENT],
    )
    .await;

    // A handle the server never issued.
    let mut forged = fh.to_vec();
    for b in forged.iter_mut() {
        *b ^= 0x5a;
    }
    must_fail_with(
        &server,
        "GETATTR of a forged handle",
        m.getattr(Bytes::from(forged)),
        &[E::NFS4ERR_BADHANDLE, E::NFS4ERR_STALE, E::NFS4ERR_FHEXPIRED],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_client_sees_changes() {
    let (server, a) = start_and_mount().await;
    let b = server.mount().await;
    let data = pattern(5, 70_000);
    let fh = create_with(&server, &*a, "shared", 0o644, &data).await;

    // B sees A's data and metadata.
    let fb = must(&server, "lookup b", b.lookup_path("shared")).await;
    assert_eq!(fb.fh, fh, "both clients get the same handle");
    let back = ok(
        &server,
        "read b",
        read_exact(&*b, fb.fh.clone(), 0, data.len()).await,
    );
    assert!(back == data);

    // B appends; A sees the new size and bytes.
    must(&server, "open b", b.open_path("shared", OPEN_BOTH)).await;
    write_all(&server, &*b, &fb.fh, data.len() as u64, b"APPENDED").await;
    must(&server, "close b", b.close(fb.fh.clone())).await;
    let attr = must(&server, "getattr a", a.getattr(fh.clone())).await;
    assert_eq!(attr.filesize, data.len() as u64 + 8);
    let tail = must(
        &server,
        "read a",
        a.read(fh.clone(), data.len() as u64, 100),
    )
    .await;
    assert_eq!(&tail[..], b"APPENDED");

    // A renames and removes; B observes both.
    must(&server, "rename a", a.rename_path("shared", "moved")).await;
    let e = must_fail(&server, "lookup old b", b.lookup_path("shared")).await;
    assert!(e.is_not_found(), "got {e:?}");
    let moved = must(&server, "lookup new b", b.lookup_path("moved")).await;
    assert_eq!(moved.fh, fh);
    must(&server, "remove a", a.remove_path("moved")).await;
    must_fail_with(
        &server,
        "GETATTR of a file removed by another client",
        b.getattr(fh.clone()),
        &[E::NFS4ERR_STALE],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers() {
    let (server, a) = start_and_mount().await;
    let b = server.mount().await;
    const PART: usize = 256 * 1024;
    let fh = create_with(&server, &*a, "striped", 0o644, &[]).await;
    let data = pattern(9, PART * 8);

    // Two clients write alternating 256 KiB parts of one file at once,
    // and each also fills a file of its own.
    let mut jobs = Vec::new();
    for (who, m) in [(0usize, &*a), (1, &*b)] {
        let fh = fh.clone();
        let data = &data;
        let server = &server;
        jobs.push(async move {
            let own = m
                .create_path(&format!("own-{who}"), Some(0o644))
                .await
                .map_err(|e| format!("create own-{who}: {e:?}"))?
                .fh;
            for part in (who..8).step_by(2) {
                let off = part * PART;
                nfs_rs::write_all(
                    m,
                    fh.clone(),
                    off as u64,
                    Bytes::copy_from_slice(&data[off..off + PART]),
                )
                .await
                .map_err(|e| format!("client {who} part {part}: {e:?}"))?;
                nfs_rs::write_all(
                    m,
                    own.clone(),
                    off as u64,
                    Bytes::copy_from_slice(&data[off..off + PART]),
                )
                .await
                .map_err(|e| format!("client {who} own part {part}: {e:?}"))?;
            }
            m.close(own)
                .await
                .map_err(|e| format!("close own: {e:?}"))?;
            let _ = server;
            Ok::<(), String>(())
        });
    }
    for r in timed("concurrent writers", join_all(jobs)).await {
        if let Err(e) = r {
            panic!("{e}\nserver log tail:\n{}", server.log_tail(20));
        }
    }
    let back = ok(
        &server,
        "read striped",
        read_exact(&*a, fh.clone(), 0, data.len()).await,
    );
    assert!(
        back == data,
        "interleaved writes from two clients lost data"
    );
    let host = server.export_dir();
    assert!(std::fs::read(host.join("striped")).unwrap() == data);
    for who in 0..2 {
        let own = std::fs::read(host.join(format!("own-{who}"))).unwrap();
        assert_eq!(
            own.len(),
            (7 + who) * PART,
            "own-{who} ends after its last part"
        );
        for part in (who..8).step_by(2) {
            let r = part * PART..(part + 1) * PART;
            assert!(own[r.clone()] == data[r], "own-{who} part {part}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chown_as_root() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "owned", 0o644, b"x").await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(
        (attr.uid, attr.gid),
        (0, 0),
        "file created by uid 0 is owned by root"
    );
    must(
        &server,
        "setattr owner",
        m.setattr(
            fh.clone(),
            None,
            None,
            Some(1234),
            Some(5678),
            None,
            None,
            None,
        ),
    )
    .await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!((attr.uid, attr.gid), (1234, 5678));
    let meta = std::fs::metadata(server.export_dir().join("owned")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1234, 5678), "owner on host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_to_zero_and_rewrite() {
    let (server, m) = start_and_mount().await;
    let fh = create_with(&server, &*m, "t", 0o644, &pattern(1, 50_000)).await;
    must(&server, "truncate 0", set_size(&*m, &fh, 0)).await;
    let back = must(&server, "read empty", m.read(fh.clone(), 0, 100)).await;
    assert!(back.is_empty());
    must(&server, "open", m.open_path("t", OPEN_BOTH)).await;
    write_all(&server, &*m, &fh, 0, b"fresh").await;
    must(&server, "close", m.close(fh.clone())).await;
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    assert_eq!(attr.filesize, 5);
    assert_eq!(host_file(&server, "t"), b"fresh");
}
