//! Permission checks and export confinement through `nfs-rs` (NFSv4.1):
//! an unprivileged AUTH_SYS user is held to the POSIX mode bits, and no
//! name, `..` or symlink lets a client reach outside the exported tree.

use std::os::unix::fs::MetadataExt;

use nfs_rs::{Mount, Nfs4ErrorCode as E, OPEN_READ, OPEN_WRITE};
use txnfs_e2e::fixtures::{
    check_read_path, expect_code, host_file, must, must_fail_with, set_mode, set_mode_at,
    set_size_at, CheckCalls, ACCESS_EXTEND, ACCESS_LOOKUP, ACCESS_MODIFY, ACCESS_READ,
};
use txnfs_e2e::{create_with, err, timed, Checks, ServerGuard};

/// ACCESS on `path` asking for `granted | refused`: the reply must grant
/// every bit of `granted` and none of `refused`.
async fn check_access(c: &mut Checks<'_>, m: &dyn Mount, path: &str, granted: u32, refused: u32) {
    let what = format!("ACCESS on {path}");
    let Some(obj) = c
        .call_ok(&format!("lookup {path}"), m.lookup_path(path))
        .await
    else {
        return;
    };
    let Some(reply) = c.call_ok(&what, m.access(obj.fh, granted | refused)).await else {
        return;
    };
    c.check(
        reply & granted == granted,
        format!("{what}: {granted:#x} not granted ({reply:#x})"),
    );
    c.check(
        reply & refused == 0,
        format!("{what}: {refused:#x} granted ({reply:#x})"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprivileged_user_is_held_to_mode_bits() {
    let server = ServerGuard::start_default();
    let root = server.mount().await;
    create_with(&server, &*root, "private", 0o600, b"secret").await;
    create_with(&server, &*root, "public", 0o644, b"hello").await;
    must(&server, "mkdir rootdir", root.mkdir_path("rootdir", 0o755)).await;
    must(&server, "mkdir open", root.mkdir_path("open", 0o777)).await;
    // mkdir's mode may be masked by a umask on the server side: force it.
    must(&server, "chmod open", set_mode_at(&*root, "open", 0o777)).await;
    must(
        &server,
        "chmod export root",
        set_mode(&*root, &root.getfh().await, 0o755),
    )
    .await;

    let user = server.mount_with("uid=1000&gid=1000").await;
    let mut c = Checks::new(&server);

    // Reading a 0600 root file is refused, a 0644 one is allowed.
    c.call_err(
        "OPEN(read) of a 0600 root file as uid 1000",
        user.open_path("private", OPEN_READ),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "READ (anonymous stateid) of a 0600 root file as uid 1000",
        user.read_path("private", 0, 100),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    check_read_path(
        &mut c,
        &*user,
        "READ of a 0644 root file as uid 1000",
        "public",
        b"hello",
    )
    .await;
    c.call_err(
        "OPEN(write) of a 0644 root file as uid 1000",
        user.open_path("public", OPEN_WRITE),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "WRITE (anonymous stateid) to a 0644 root file as uid 1000",
        user.write_path("public", 0, bytes::Bytes::from_static(b"HACK")),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "SETATTR(size=0) of a 0644 root file as uid 1000",
        set_size_at(&*user, "public", 0),
        &[E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    )
    .await;
    c.check(
        host_file(&server, "public") == b"hello",
        "public changed on host by uid 1000",
    );

    // ACCESS reports what is allowed.
    check_access(&mut c, &*user, "public", ACCESS_READ, ACCESS_MODIFY).await;
    check_access(&mut c, &*user, "rootdir", ACCESS_LOOKUP, ACCESS_EXTEND).await;

    // Creating in a root 0755 dir is refused; in a 0777 dir it works and the
    // new file belongs to the caller.
    c.call_err(
        "CREATE in a 0755 root dir as uid 1000",
        user.create_path("rootdir/mine", Some(0o644)),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.check(
        !server.export_dir().join("rootdir/mine").exists(),
        "rootdir/mine exists on host",
    );
    c.call_err(
        "MKDIR in a 0755 root dir as uid 1000",
        user.mkdir_path("rootdir/d", 0o755),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "REMOVE from a 0755 root dir as uid 1000",
        user.remove_path("public"),
        &[E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "RENAME in a 0755 root dir as uid 1000",
        user.rename_path("public", "public2"),
        &[E::NFS4ERR_ACCESS],
    )
    .await;

    let mine = create_with(&server, &*user, "open/mine", 0o640, b"user data").await;
    let attr = must(&server, "getattr mine", user.getattr(mine)).await;
    c.check(
        (attr.uid, attr.gid) == (1000, 1000),
        format!(
            "owner of a file created by uid 1000 over NFS: {}:{}",
            attr.uid, attr.gid
        ),
    );
    let meta = std::fs::metadata(server.export_dir().join("open/mine")).unwrap();
    c.check(
        (meta.uid(), meta.gid()) == (1000, 1000),
        format!(
            "owner on host of a file created by uid 1000: {}:{}",
            meta.uid(),
            meta.gid()
        ),
    );

    // Only the owner (or root) may chmod/chown.
    c.call_err(
        "SETATTR(mode) of a root file as uid 1000",
        set_mode_at(&*user, "public", 0o666),
        &[E::NFS4ERR_PERM, E::NFS4ERR_ACCESS],
    )
    .await;
    c.call_err(
        "SETATTR(owner=0) as uid 1000",
        user.setattr_path("open/mine", false, None, Some(0), None, None, None, None),
        &[E::NFS4ERR_PERM, E::NFS4ERR_ACCESS],
    )
    .await;
    let meta = std::fs::metadata(server.export_dir().join("public")).unwrap();
    c.check(
        meta.mode() & 0o7777 == 0o644,
        "mode of public changed on host",
    );
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_are_not_followed_by_the_server() {
    let server = ServerGuard::start_default();
    let host = server.export_dir();
    // Host-side symlinks pointing out of the export.
    std::os::unix::fs::symlink("/etc", host.join("esc-dir")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", host.join("esc-file")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../etc", host.join("esc-rel")).unwrap();
    let m = server.mount().await;

    for path in ["esc-dir/passwd", "esc-rel/passwd"] {
        let r = timed("lookup", m.lookup_path(path)).await;
        let e = err(&server, &format!("lookup {path}"), r);
        expect_code(
            &server,
            &format!("LOOKUP through a symlink ({path})"),
            &e,
            &[E::NFS4ERR_SYMLINK, E::NFS4ERR_NOTDIR],
        );
    }
    let link = must(&server, "lookup esc-file", m.lookup_path("esc-file")).await;
    assert_eq!(
        link.attr.as_ref().map(|a| a.type_),
        Some(5),
        "esc-file is a symlink"
    );
    must_fail_with(
        &server,
        "READ of a symlink",
        m.read(link.fh.clone(), 0, 100),
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_INVAL, E::NFS4ERR_WRONG_TYPE],
    )
    .await;
    must_fail_with(
        &server,
        "OPEN of a symlink",
        m.open_path("esc-file", OPEN_READ),
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_WRONG_TYPE],
    )
    .await;
    let target = must(&server, "readlink", m.readlink(link.fh)).await;
    assert_eq!(
        target, "/etc/hostname",
        "READLINK returns the text, unresolved"
    );

    // Creating through a symlinked directory must not create outside.
    must_fail_with(
        &server,
        "CREATE under a symlink",
        m.create_path("esc-dir/txnfs-e2e-should-not-exist", Some(0o644)),
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_NOTDIR],
    )
    .await;
    assert!(!std::path::Path::new("/etc/txnfs-e2e-should-not-exist").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotdot_does_not_escape_the_export() {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let root = m.getfh().await;
    must(&server, "mkdir", m.mkdir_path("sub", 0o755)).await;

    // NFSv4 LOOKUP takes a component name; ".." is not a name (LOOKUPP is).
    let r = timed("lookup ..", m.lookup(root.clone(), "..")).await;
    match r {
        Err(e) => expect_code(
            &server,
            "LOOKUP \"..\" at the export root",
            &e,
            &[E::NFS4ERR_BADNAME, E::NFS4ERR_NOENT, E::NFS4ERR_INVAL],
        ),
        Ok(obj) => {
            // Tolerated only if it stays at the root (or pseudo-root).
            let attr = must(&server, "getattr", m.getattr(obj.fh.clone())).await;
            let names = txnfs_e2e::list_dir(&*m, obj.fh).await.unwrap_or_default();
            assert!(
                attr.type_ == 2 && !names.iter().any(|n| n == "etc" || n == "tmp"),
                "LOOKUP \"..\" at the export root escaped to {names:?}"
            );
        }
    }
    must_fail_with(
        &server,
        "LOOKUP sub/../../etc",
        m.lookup_path("sub/../../etc"),
        &[E::NFS4ERR_BADNAME, E::NFS4ERR_NOENT, E::NFS4ERR_INVAL],
    )
    .await;
    must_fail_with(
        &server,
        "OPEN/CREATE \"..\"",
        m.create(root.clone(), "..", Some(0o644)),
        &[
            E::NFS4ERR_BADNAME,
            E::NFS4ERR_EXIST,
            E::NFS4ERR_INVAL,
            E::NFS4ERR_ISDIR,
        ],
    )
    .await;
}
