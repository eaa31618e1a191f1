//! Several exports under a pseudo-root, and a read-only export: each
//! export's files land in its own host directory, the pseudo-root lists
//! the exports and is not writable, objects cannot be renamed or linked
//! across exports (XDEV), and a read-only export refuses every change (ROFS).

use bytes::Bytes;
use nfs_rs::{Nfs4ErrorCode as E, OPEN_READ, OPEN_WRITE};
use txnfs_e2e::fixtures::{check_read_path, must, set_mode_at, set_size_at, CheckCalls};
use txnfs_e2e::{create_with, list_dir, ok, timed, Checks, ServerGuard, ServerKind, ServerOpts};

fn start() -> ServerGuard {
    ServerGuard::start_default_with(ServerOpts {
        exports: vec![
            ("/a".into(), false),
            ("/b".into(), false),
            ("/ro".into(), true),
            ("/deep/er".into(), false),
        ],
        ..ServerOpts::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_are_separate_trees() {
    let server = start();
    let a = server.mount_at("/a").await;
    let b = server.mount_at("/b").await;
    let deep = server.mount_at("/deep/er").await;
    create_with(&server, &*a, "in-a", 0o644, b"AAA").await;
    create_with(&server, &*b, "in-b", 0o644, b"BBB").await;
    create_with(&server, &*deep, "in-deep", 0o644, b"DDD").await;
    let mut c = Checks::new(&server);

    c.check(
        std::fs::read(server.export_host_dir("/a").join("in-a")).ok() == Some(b"AAA".to_vec()),
        "/a file not in its host dir",
    );
    c.check(
        std::fs::read(server.export_host_dir("/b").join("in-b")).ok() == Some(b"BBB".to_vec()),
        "/b file not in its host dir",
    );
    c.check(
        std::fs::read(server.export_host_dir("/deep/er").join("in-deep")).ok()
            == Some(b"DDD".to_vec()),
        "/deep/er file not in its host dir",
    );
    c.check(
        !server.export_host_dir("/a").join("in-b").exists(),
        "/b file leaked into /a",
    );
    let la = ok(&server, "list a", list_dir(&*a, a.getfh().await).await);
    c.check(la == vec!["in-a".to_string()], format!("/a lists {la:?}"));

    // Distinct file systems: different fsids, different root handles.
    let ra = must(&server, "getattr a", a.getattr(a.getfh().await)).await;
    let rb = must(&server, "getattr b", b.getattr(b.getfh().await)).await;
    // (Ganesha's VFS FSAL reports the fsid of the host file system, shared
    // by /a and /b here, so this is checked on txnfs only.)
    if server.kind() == ServerKind::Txnfs {
        c.check(ra.fsid != rb.fsid, "exports /a and /b report the same fsid");
    }
    c.check(
        a.getfh().await != b.getfh().await,
        "same root handle for /a and /b",
    );

    // A handle from /a used through the /b mount still names the /a file
    // (handles are server-wide), never a /b object.
    let fa = must(&server, "lookup a", a.lookup_path("in-a")).await.fh;
    match timed("read via b", b.read(fa, 0, 10)).await {
        Ok(bytes) => c.check(
            &bytes[..] == b"AAA",
            format!("a's handle via b read {bytes:?}"),
        ),
        Err(e) => c.check(false, format!("a's handle through another mount: {e:?}")),
    }

    // The pseudo-root: lists the top-level names, is read-only.
    let root = server.mount_at("/").await;
    let mut names = ok(
        &server,
        "list pseudo root",
        list_dir(&*root, root.getfh().await).await,
    );
    names.sort();
    c.check(
        names == vec!["a", "b", "deep", "ro"],
        format!("pseudo-root lists {names:?}"),
    );
    let rattr = must(
        &server,
        "getattr pseudo root",
        root.getattr(root.getfh().await),
    )
    .await;
    c.check(rattr.type_ == 2, "pseudo-root is not a directory");
    c.call_err(
        "CREATE in the pseudo-root",
        root.create(root.getfh().await, "x", Some(0o644)),
        &[E::NFS4ERR_ROFS, E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    )
    .await;
    c.call_err(
        "MKDIR in the pseudo-root",
        root.mkdir_path("newdir", 0o755),
        &[E::NFS4ERR_ROFS, E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    )
    .await;
    c.call_err(
        "LOOKUP of a missing name in the pseudo-root",
        root.lookup_path("nope"),
        &[E::NFS4ERR_NOENT],
    )
    .await;
    // Walking from the pseudo-root into an export crosses into it.
    let via_root = c
        .call_ok(
            "LOOKUP a/in-a from the pseudo-root",
            root.lookup_path("a/in-a"),
        )
        .await;
    if let Some(o) = via_root {
        c.check(
            o.attr.map(|x| x.filesize) == Some(3),
            "a/in-a via pseudo-root size",
        );
    }
    c.call_ok(
        "read deep/er/in-deep from the pseudo-root",
        root.read_path("deep/er/in-deep", 0, 10),
    )
    .await;

    // No rename or link across exports.
    c.call_err(
        "RENAME across exports",
        root.rename_path("a/in-a", "b/moved"),
        &[E::NFS4ERR_XDEV],
    )
    .await;
    c.call_err(
        "LINK across exports",
        root.link_path("a/in-a", "b/linked"),
        &[E::NFS4ERR_XDEV],
    )
    .await;
    c.check(
        server.export_host_dir("/a").join("in-a").exists(),
        "in-a moved",
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_export_refuses_changes() {
    let server = start();
    let host = server.export_host_dir("/ro");
    std::fs::write(host.join("file"), b"read me").unwrap();
    std::fs::create_dir(host.join("dir")).unwrap();
    let m = server.mount_at("/ro").await;
    let mut c = Checks::new(&server);

    check_read_path(
        &mut c,
        &*m,
        "READ on a read-only export",
        "file",
        b"read me",
    )
    .await;
    c.call_ok(
        "OPEN(read) on a read-only export",
        m.open_path("file", OPEN_READ),
    )
    .await;

    let rofs = [E::NFS4ERR_ROFS];
    c.call_err("OPEN(write)", m.open_path("file", OPEN_WRITE), &rofs)
        .await;
    c.call_err(
        "WRITE (anonymous stateid)",
        m.write_path("file", 0, Bytes::from_static(b"X")),
        &rofs,
    )
    .await;
    c.call_err("CREATE", m.create_path("new", Some(0o644)), &rofs)
        .await;
    c.call_err("MKDIR", m.mkdir_path("newdir", 0o755), &rofs)
        .await;
    c.call_err("REMOVE", m.remove_path("file"), &rofs).await;
    c.call_err("RMDIR", m.rmdir_path("dir"), &rofs).await;
    c.call_err("RENAME", m.rename_path("file", "file2"), &rofs)
        .await;
    c.call_err("LINK", m.link_path("file", "file2"), &rofs)
        .await;
    c.call_err("SYMLINK", m.symlink_path("file", "sl"), &rofs)
        .await;
    c.call_err("SETATTR mode", set_mode_at(&*m, "file", 0o600), &rofs)
        .await;
    c.call_err("SETATTR size", set_size_at(&*m, "file", 0), &rofs)
        .await;
    c.check(
        std::fs::read(host.join("file")).unwrap() == b"read me",
        "file changed on host",
    );
    let mut names: Vec<String> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    c.check(
        names == vec!["dir", "file"],
        format!("host dir now holds {names:?}"),
    );
    c.finish();
}
