//! txnfs's in-memory backend (`txnfs serve --memory`) through nfs-rs: the
//! usual operations work, and after a restart (the data is volatile) the
//! old handles are refused with STALE rather than breaking the server.
//! Ganesha has no such backend: the test returns early there.

use nfs_rs::{Nfs4ErrorCode as E, OPEN_BOTH};
use txnfs_e2e::fixtures::{must, set_size, CheckCalls};
use txnfs_e2e::{
    create_with, is_denied, is_nfs4, list_dir, ok, pattern, read_exact, timed, Checks, ServerGuard,
    ServerKind, ServerOpts,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_backend_roundtrip_and_restart() {
    if ServerKind::from_env() != ServerKind::Txnfs {
        eprintln!("memory backend: txnfs only, nothing to do for Ganesha");
        return;
    }
    let mut server = ServerGuard::start_default_with(ServerOpts {
        memory: true,
        ..ServerOpts::default()
    });
    let m = server.mount().await;
    let mut c = Checks::new(&server);

    let data = pattern(11, 3 << 20);
    let fh = create_with(&server, &*m, "big", 0o640, &data).await;
    let back = ok(
        &server,
        "read",
        read_exact(&*m, fh.clone(), 0, data.len()).await,
    );
    c.check(back == data, "3 MiB round trip");
    let attr = must(&server, "getattr", m.getattr(fh.clone())).await;
    c.check(
        attr.filesize == data.len() as u64,
        format!("size {}", attr.filesize),
    );
    c.check(
        attr.file_mode & 0o7777 == 0o640,
        format!("mode {:o}", attr.file_mode),
    );

    must(&server, "mkdir", m.mkdir_path("d", 0o755)).await;
    for i in 0..200 {
        create_with(&server, &*m, &format!("d/f{i}"), 0o644, b"").await;
    }
    let names = ok(&server, "readdir", list_dir(&*m, m.getfh().await).await);
    c.check(names.len() == 2, format!("root lists {names:?}"));
    let sub = must(&server, "lookup d", m.lookup_path("d")).await.fh;
    let listed = ok(&server, "readdir d", list_dir(&*m, sub).await);
    c.check(
        listed.len() == 200,
        format!("d lists {} names", listed.len()),
    );

    c.call_ok("rename", m.rename_path("d/f0", "moved")).await;
    c.call_ok("link", m.link_path("moved", "d/hard")).await;
    c.call_ok("symlink", m.symlink_path("moved", "sl")).await;
    let t = c.call_ok("readlink", m.readlink_path("sl")).await;
    c.check(t.as_deref() == Some("moved"), format!("readlink {t:?}"));
    c.call_ok("remove", m.remove_path("d/f1")).await;
    c.call_err("rmdir non-empty", m.rmdir_path("d"), &[E::NFS4ERR_NOTEMPTY])
        .await;
    c.call_ok("truncate", set_size(&*m, &fh, 10)).await;
    let b10 = must(&server, "read", m.read(fh.clone(), 0, 100)).await;
    c.check(b10[..] == data[..10], "truncated content");

    // Locks between two clients.
    let m2 = server.mount().await;
    let f1 = must(&server, "open 1", m.open_path("big", OPEN_BOTH))
        .await
        .fh;
    let f2 = must(&server, "open 2", m2.open_path("big", OPEN_BOTH))
        .await
        .fh;
    c.call_ok("lock", m.lock(f1.clone(), 2, 0, 5)).await;
    match timed("lockt", m2.lock_test(f2.clone(), 2, 0, 5)).await {
        Err(e) => c.check(is_denied(&e), format!("LOCKT: {e:?}")),
        Ok(()) => c.check(false, "LOCKT saw no conflict"),
    }
    drop(m2);
    drop(m);
    c.finish();

    // Restart: the in-memory tree is gone; old handles are STALE.
    server.kill9();
    server.restart();
    let mut c = Checks::new(&server);
    let m = server.mount().await;
    match timed("getattr", m.getattr(fh.clone())).await {
        Err(e) => c.check(
            is_nfs4(&e, E::NFS4ERR_STALE) || is_nfs4(&e, E::NFS4ERR_BADHANDLE),
            format!("old handle after restart of a memory server: {e:?}"),
        ),
        Ok(a) => c.check(
            false,
            format!("old handle still works on a fresh memory fs: {a:?}"),
        ),
    }
    let names = ok(
        &server,
        "readdir after restart",
        list_dir(&*m, m.getfh().await).await,
    );
    c.check(names.is_empty(), format!("fresh memory fs lists {names:?}"));
    create_with(&server, &*m, "new", 0o644, b"works").await;
    c.finish();
}
