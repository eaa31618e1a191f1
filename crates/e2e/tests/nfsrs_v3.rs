//! NFSv3 through the third-party `nfs-rs` client (`?version=3`): MOUNT on the NFS
//! port, then create, write, read, readdir, rename and remove, each checked through
//! the client and on the export's disk; and the same file through v3 and v4.

use txnfs_e2e::fixtures::{host_file, must};
use txnfs_e2e::{list_dir, ok, pattern, read_exact, write_all, ServerGuard, ServerKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_rs_over_v3_writes_reads_lists_renames_and_removes() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let m = server.mount_v3().await;
    assert_eq!(m.version(), nfs_rs::NFSVersion::NFSv3, "mounted over NFSv3");

    // A file of a few write sizes, written and read back.
    let data = pattern(3, 3 * 1024 * 1024 + 17);
    let created = must(&server, "create", m.create_path("v3.bin", Some(0o644))).await;
    write_all(&server, &*m, &created.fh, 0, &data).await;
    must(&server, "commit", m.commit(created.fh.clone(), 0, 0)).await;
    let back = ok(
        &server,
        "read",
        read_exact(&*m, created.fh.clone(), 0, data.len() + 10).await,
    );
    assert!(back == data, "bytes read back over NFSv3");
    assert!(
        host_file(&server, "v3.bin") == data,
        "bytes on the export's disk"
    );
    let attr = must(&server, "getattr", m.getattr(created.fh.clone())).await;
    assert_eq!(attr.filesize, data.len() as u64);

    // A directory with files in it, listed with READDIRPLUS.
    must(&server, "mkdir", m.mkdir_path("dir", 0o755)).await;
    for i in 0..30 {
        let f = must(
            &server,
            "create",
            m.create_path(&format!("dir/f{i}"), Some(0o600)),
        )
        .await;
        write_all(&server, &*m, &f.fh, 0, format!("file {i}").as_bytes()).await;
    }
    let dir = must(&server, "lookup dir", m.lookup_path("dir")).await;
    let mut names = ok(&server, "readdir", list_dir(&*m, dir.fh.clone()).await);
    names.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names, want);
    assert_eq!(host_file(&server, "dir/f7"), b"file 7");

    // Rename into the directory, remove one of its files.
    must(&server, "rename", m.rename_path("v3.bin", "dir/moved.bin")).await;
    must(&server, "remove", m.remove_path("dir/f0")).await;
    let root = server.export_dir();
    assert!(!root.join("v3.bin").exists() && root.join("dir/moved.bin").exists());
    assert!(!root.join("dir/f0").exists());
    let moved = must(&server, "lookup moved", m.lookup_path("dir/moved.bin")).await;
    assert_eq!(moved.fh, created.fh, "a rename keeps the handle");
    let err = m.lookup_path("v3.bin").await;
    assert!(err.is_err(), "the old name is gone: {err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_file_through_nfs_rs_v3_and_v4() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let v3 = server.mount_v3().await;
    let v4 = server.mount().await;

    // Written over v3, read over v4.
    let f = must(&server, "v3 create", v3.create_path("shared", Some(0o644))).await;
    write_all(&server, &*v3, &f.fh, 0, b"from version 3").await;
    let opened = must(
        &server,
        "v4 open",
        v4.open_path("shared", nfs_rs::OPEN_BOTH),
    )
    .await;
    assert_eq!(opened.fh, f.fh, "one object, one handle");
    let got = ok(
        &server,
        "v4 read",
        read_exact(&*v4, opened.fh.clone(), 0, 64).await,
    );
    assert_eq!(got, b"from version 3");

    // Written over v4, read over v3.
    write_all(&server, &*v4, &opened.fh, 0, b"FROM VERSION 4").await;
    must(&server, "v4 close", v4.close(opened.fh.clone())).await;
    let got = must(&server, "v3 read", v3.read(f.fh.clone(), 0, 64)).await;
    assert_eq!(&got[..], b"FROM VERSION 4");
    assert_eq!(host_file(&server, "shared"), b"FROM VERSION 4");
}
