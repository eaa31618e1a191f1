//! Permission checks and export confinement through `nfs-rs` (NFSv4.1):
//! an unprivileged AUTH_SYS user is held to the POSIX mode bits, and no
//! name, `..` or symlink lets a client reach outside the exported tree.

use std::os::unix::fs::MetadataExt;

use nfs_rs::{Nfs4ErrorCode as E, OPEN_READ, OPEN_WRITE};
use txnfs_e2e::fixtures::{expect_code, must, must_fail};
use txnfs_e2e::{create_with, err, timed, Checks, ServerGuard};

const ACCESS_READ: u32 = 0x01;
const ACCESS_LOOKUP: u32 = 0x02;
const ACCESS_MODIFY: u32 = 0x04;
const ACCESS_EXTEND: u32 = 0x08;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprivileged_user_is_held_to_mode_bits() {
    let server = ServerGuard::start_default();
    let root = server.mount().await;
    create_with(&server, &*root, "private", 0o600, b"secret").await;
    create_with(&server, &*root, "public", 0o644, b"hello").await;
    must(&server, "mkdir rootdir", root.mkdir_path("rootdir", 0o755)).await;
    must(&server, "mkdir open", root.mkdir_path("open", 0o777)).await;
    // mkdir's mode may be masked by a umask on the server side: force it.
    must(
        &server,
        "chmod open",
        root.setattr_path("open", false, Some(0o777), None, None, None, None, None),
    )
    .await;
    must(
        &server,
        "chmod export root",
        root.setattr(
            root.getfh().await,
            None,
            Some(0o755),
            None,
            None,
            None,
            None,
            None,
        ),
    )
    .await;

    let user = server.mount_with("uid=1000&gid=1000").await;
    let mut c = Checks::new(&server);

    // Reading a 0600 root file is refused, a 0644 one is allowed.
    c.expect_err(
        "OPEN(read) of a 0600 root file as uid 1000",
        timed("open", user.open_path("private", OPEN_READ)).await,
        &[E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "READ (anonymous stateid) of a 0600 root file as uid 1000",
        timed("read", user.read_path("private", 0, 100)).await,
        &[E::NFS4ERR_ACCESS],
    );
    let back = c.expect_ok(
        "READ of a 0644 root file as uid 1000",
        timed("read", user.read_path("public", 0, 100)).await,
    );
    c.check(
        back.as_deref() == Some(&b"hello"[..]),
        format!("READ of public returned {back:?}"),
    );
    c.expect_err(
        "OPEN(write) of a 0644 root file as uid 1000",
        timed("open", user.open_path("public", OPEN_WRITE)).await,
        &[E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "WRITE (anonymous stateid) to a 0644 root file as uid 1000",
        timed(
            "write",
            user.write_path("public", 0, bytes::Bytes::from_static(b"HACK")),
        )
        .await,
        &[E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "SETATTR(size=0) of a 0644 root file as uid 1000",
        timed(
            "setattr_path",
            user.setattr_path("public", false, None, None, None, Some(0), None, None),
        )
        .await,
        &[E::NFS4ERR_ACCESS, E::NFS4ERR_PERM],
    );
    c.check(
        std::fs::read(server.export_dir().join("public")).unwrap() == b"hello",
        "public changed on host by uid 1000",
    );

    // ACCESS reports what is allowed.
    let public = must(&server, "lookup public", user.lookup_path("public")).await;
    if let Some(granted) = c.expect_ok(
        "ACCESS on public",
        timed(
            "access",
            user.access(public.fh.clone(), ACCESS_READ | ACCESS_MODIFY),
        )
        .await,
    ) {
        c.check(
            granted & ACCESS_READ == ACCESS_READ,
            format!("ACCESS: read not granted on a 0644 file ({granted:#x})"),
        );
        c.check(
            granted & ACCESS_MODIFY == 0,
            format!("ACCESS: modify granted on someone else's 0644 file ({granted:#x})"),
        );
    }
    let rootdir = must(&server, "lookup rootdir", user.lookup_path("rootdir")).await;
    if let Some(granted) = c.expect_ok(
        "ACCESS on rootdir",
        timed(
            "access",
            user.access(rootdir.fh.clone(), ACCESS_LOOKUP | ACCESS_EXTEND),
        )
        .await,
    ) {
        c.check(
            granted & ACCESS_LOOKUP == ACCESS_LOOKUP,
            format!("ACCESS: lookup not granted on a 0755 dir ({granted:#x})"),
        );
        c.check(
            granted & ACCESS_EXTEND == 0,
            format!("ACCESS: extend granted on a 0755 root dir ({granted:#x})"),
        );
    }

    // Creating in a root 0755 dir is refused; in a 0777 dir it works and the
    // new file belongs to the caller.
    c.expect_err(
        "CREATE in a 0755 root dir as uid 1000",
        timed("create", user.create_path("rootdir/mine", Some(0o644))).await,
        &[E::NFS4ERR_ACCESS],
    );
    c.check(
        !server.export_dir().join("rootdir/mine").exists(),
        "rootdir/mine exists on host",
    );
    c.expect_err(
        "MKDIR in a 0755 root dir as uid 1000",
        timed("mkdir", user.mkdir_path("rootdir/d", 0o755)).await,
        &[E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "REMOVE from a 0755 root dir as uid 1000",
        timed("remove", user.remove_path("public")).await,
        &[E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "RENAME in a 0755 root dir as uid 1000",
        timed("rename", user.rename_path("public", "public2")).await,
        &[E::NFS4ERR_ACCESS],
    );

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
    c.expect_err(
        "SETATTR(mode) of a root file as uid 1000",
        timed(
            "setattr_path",
            user.setattr_path("public", false, Some(0o666), None, None, None, None, None),
        )
        .await,
        &[E::NFS4ERR_PERM, E::NFS4ERR_ACCESS],
    );
    c.expect_err(
        "SETATTR(owner=0) as uid 1000",
        timed(
            "setattr_path",
            user.setattr_path("open/mine", false, None, Some(0), None, None, None, None),
        )
        .await,
        &[E::NFS4ERR_PERM, E::NFS4ERR_ACCESS],
    );
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
    let e = must_fail(&server, "read symlink", m.read(link.fh.clone(), 0, 100)).await;
    expect_code(
        &server,
        "READ of a symlink",
        &e,
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_INVAL, E::NFS4ERR_WRONG_TYPE],
    );
    let e = must_fail(&server, "open symlink", m.open_path("esc-file", OPEN_READ)).await;
    expect_code(
        &server,
        "OPEN of a symlink",
        &e,
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_WRONG_TYPE],
    );
    let target = must(&server, "readlink", m.readlink(link.fh)).await;
    assert_eq!(
        target, "/etc/hostname",
        "READLINK returns the text, unresolved"
    );

    // Creating through a symlinked directory must not create outside.
    let e = must_fail(
        &server,
        "create via symlink dir",
        m.create_path("esc-dir/txnfs-e2e-should-not-exist", Some(0o644)),
    )
    .await;
    expect_code(
        &server,
        "CREATE under a symlink",
        &e,
        &[E::NFS4ERR_SYMLINK, E::NFS4ERR_NOTDIR],
    );
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
    let e = must_fail(&server, "lookup sub/../..", m.lookup_path("sub/../../etc")).await;
    expect_code(
        &server,
        "LOOKUP sub/../../etc",
        &e,
        &[E::NFS4ERR_BADNAME, E::NFS4ERR_NOENT, E::NFS4ERR_INVAL],
    );
    let e = must_fail(
        &server,
        "create ../x",
        m.create(root.clone(), "..", Some(0o644)),
    )
    .await;
    expect_code(
        &server,
        "OPEN/CREATE \"..\"",
        &e,
        &[
            E::NFS4ERR_BADNAME,
            E::NFS4ERR_EXIST,
            E::NFS4ERR_INVAL,
            E::NFS4ERR_ISDIR,
        ],
    );
}
