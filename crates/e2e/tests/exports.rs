//! Several exports under a pseudo-root, and a read-only export: each
//! export's files land in its own host directory, the pseudo-root lists
//! the exports and is not writable, objects cannot be renamed or linked
//! across exports (XDEV), and a read-only export refuses every change (ROFS).

use bytes::Bytes;
use nfs_rs::{Nfs4ErrorCode as E, OPEN_READ, OPEN_WRITE};
use txnfs_e2e::fixtures::must;
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
    c.expect_err(
        "CREATE in the pseudo-root",
        timed("create", root.create(root.getfh().await, "x", Some(0o644))).await,
        &[E::NFS4ERR_ROFS, E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    );
    c.expect_err(
        "MKDIR in the pseudo-root",
        timed("mkdir", root.mkdir_path("newdir", 0o755)).await,
        &[E::NFS4ERR_ROFS, E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    );
    c.expect_err(
        "LOOKUP of a missing name in the pseudo-root",
        timed("lookup", root.lookup_path("nope")).await,
        &[E::NFS4ERR_NOENT],
    );
    // Walking from the pseudo-root into an export crosses into it.
    let via_root = c.expect_ok(
        "LOOKUP a/in-a from the pseudo-root",
        timed("lookup", root.lookup_path("a/in-a")).await,
    );
    if let Some(o) = via_root {
        c.check(
            o.attr.map(|x| x.filesize) == Some(3),
            "a/in-a via pseudo-root size",
        );
    }
    c.expect_ok(
        "read deep/er/in-deep from the pseudo-root",
        timed("read", root.read_path("deep/er/in-deep", 0, 10)).await,
    );

    // No rename or link across exports.
    c.expect_err(
        "RENAME across exports",
        timed("rename", root.rename_path("a/in-a", "b/moved")).await,
        &[E::NFS4ERR_XDEV],
    );
    c.expect_err(
        "LINK across exports",
        timed("link", root.link_path("a/in-a", "b/linked")).await,
        &[E::NFS4ERR_XDEV],
    );
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

    let back = c.expect_ok(
        "READ on a read-only export",
        timed("read", m.read_path("file", 0, 100)).await,
    );
    c.check(
        back.as_deref() == Some(&b"read me"[..]),
        format!("{back:?}"),
    );
    c.expect_ok(
        "OPEN(read) on a read-only export",
        timed("open", m.open_path("file", OPEN_READ)).await,
    );

    let rofs = [E::NFS4ERR_ROFS];
    c.expect_err(
        "OPEN(write)",
        timed("open", m.open_path("file", OPEN_WRITE)).await,
        &rofs,
    );
    c.expect_err(
        "WRITE (anonymous stateid)",
        timed("write", m.write_path("file", 0, Bytes::from_static(b"X"))).await,
        &rofs,
    );
    c.expect_err(
        "CREATE",
        timed("create", m.create_path("new", Some(0o644))).await,
        &rofs,
    );
    c.expect_err(
        "MKDIR",
        timed("mkdir", m.mkdir_path("newdir", 0o755)).await,
        &rofs,
    );
    c.expect_err(
        "REMOVE",
        timed("remove", m.remove_path("file")).await,
        &rofs,
    );
    c.expect_err("RMDIR", timed("rmdir", m.rmdir_path("dir")).await, &rofs);
    c.expect_err(
        "RENAME",
        timed("rename", m.rename_path("file", "file2")).await,
        &rofs,
    );
    c.expect_err(
        "LINK",
        timed("link", m.link_path("file", "file2")).await,
        &rofs,
    );
    c.expect_err(
        "SYMLINK",
        timed("symlink", m.symlink_path("file", "sl")).await,
        &rofs,
    );
    c.expect_err(
        "SETATTR mode",
        timed(
            "setattr",
            m.setattr_path("file", false, Some(0o600), None, None, None, None, None),
        )
        .await,
        &rofs,
    );
    c.expect_err(
        "SETATTR size",
        timed(
            "setattr",
            m.setattr_path("file", false, None, None, None, Some(0), None, None),
        )
        .await,
        &rofs,
    );
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
