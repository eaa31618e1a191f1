//! Server restart: file handles handed out before a `kill -9` must still
//! name the same objects after the server comes back on the same port and
//! state directory (no NFS4ERR_STALE, same bytes).
//!
//! nfs-rs takes file handles as raw `Bytes`, so a handle obtained from a
//! mount before the crash can be passed verbatim to a new mount afterwards.
//! A client that stays live across the crash is ours (txnfs-client), which
//! re-creates its session and reclaims.

use bytes::Bytes;
use nfs_rs::{Mount, NfsError};
use txnfs_e2e::fixtures::host_file;
use txnfs_e2e::{pattern, read_exact, timed, write_all, ServerGuard};

fn ok<T>(server: &ServerGuard, what: &str, r: nfs_rs::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            let stale = matches!(&e, NfsError::Nfs4(c) if c.to_string().contains("stale"));
            panic!(
                "{what} failed{}: {e} ({e:?})\nserver log tail:\n{}",
                if stale { " with a STALE handle" } else { "" },
                server.log_tail(30)
            )
        }
    }
}

/// Await the NFS call `fut` with a timeout; on failure panic as [`ok`]
/// does (naming a STALE handle as such).
async fn must<T>(
    server: &ServerGuard,
    what: &str,
    fut: impl std::future::Future<Output = nfs_rs::Result<T>>,
) -> T {
    ok(server, what, timed(what, fut).await)
}

struct Before {
    root: Bytes,
    dir: Bytes,
    file: Bytes,
    fileid: u64,
    data: Vec<u8>,
}

async fn populate(server: &ServerGuard, m: &dyn Mount) -> Before {
    let data = pattern(42, 300_000);
    let dir = must(server, "mkdir", m.mkdir_path("keep", 0o755)).await.fh;
    let file = must(
        server,
        "create",
        m.create(dir.clone(), "file.bin", Some(0o644)),
    )
    .await
    .fh;
    let n = must(
        server,
        "write_all",
        nfs_rs::write_all(m, file.clone(), 0, Bytes::from(data.clone())),
    )
    .await;
    assert_eq!(n, data.len() as u64);
    must(server, "close", m.close(file.clone())).await;
    let attr = must(server, "getattr", m.getattr(file.clone())).await;
    assert_eq!(attr.filesize, data.len() as u64);
    Before {
        root: m.getfh().await,
        dir,
        file,
        fileid: attr.fileid,
        data,
    }
}

/// The handles from before the crash work through a brand-new mount.
async fn check_old_handles(server: &ServerGuard, m: &dyn Mount, before: &Before) {
    assert_eq!(
        m.getfh().await,
        before.root,
        "root file handle changed across restart"
    );
    let attr = must(
        server,
        "getattr(old file handle)",
        m.getattr(before.file.clone()),
    )
    .await;
    assert_eq!(attr.filesize, before.data.len() as u64);
    assert_eq!(attr.fileid, before.fileid, "fileid changed across restart");
    let back = ok(
        server,
        "read(old file handle)",
        read_exact(m, before.file.clone(), 0, before.data.len()).await,
    );
    assert!(back == before.data, "bytes changed across restart");

    let dattr = must(
        server,
        "getattr(old dir handle)",
        m.getattr(before.dir.clone()),
    )
    .await;
    assert_eq!(dattr.type_, 2, "old dir handle is still a directory");
    let looked = must(
        server,
        "lookup(old dir handle, file.bin)",
        m.lookup(before.dir.clone(), "file.bin"),
    )
    .await;
    assert_eq!(
        looked.fh, before.file,
        "LOOKUP returns the same handle as before"
    );
}

/// A fresh server whose export [`populate`] has filled (its mount is gone).
async fn start_populated() -> (ServerGuard, Before) {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let before = populate(&server, &*m).await;
    (server, before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_handles_survive_kill9_restart() {
    let (mut server, before) = start_populated().await;

    server.kill9();
    server.restart();

    let m2 = server.mount().await;
    check_old_handles(&server, &*m2, &before).await;

    // Writing through the old handle (anonymous stateid, no OPEN) and via a
    // fresh OPEN both work and reach the disk.
    must(
        &server,
        "write(old handle)",
        m2.write(before.file.clone(), 0, Bytes::from_static(b"AFTER")),
    )
    .await;
    let dir_obj = must(
        &server,
        "open via old dir handle",
        m2.open(before.dir.clone(), "file.bin", nfs_rs::OPEN_BOTH),
    )
    .await;
    assert_eq!(dir_obj.fh, before.file);
    let n = must(
        &server,
        "write_all after restart",
        nfs_rs::write_all(&*m2, before.file.clone(), 5, Bytes::from_static(b"-again")),
    )
    .await;
    assert_eq!(n, 6);
    must(&server, "close", m2.close(before.file.clone())).await;
    let on_disk = std::fs::read(server.export_dir().join("keep/file.bin")).unwrap();
    assert_eq!(&on_disk[..11], b"AFTER-again");
    assert_eq!(&on_disk[11..], &before.data[11..]);
    must(&server, "umount", m2.umount()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_twice_and_create_after() {
    let (mut server, before) = start_populated().await;
    for round in 0..2 {
        server.kill9();
        server.restart();
        let m = server.mount().await;
        check_old_handles(&server, &*m, &before).await;
        // New objects created after a restart get working handles too.
        let name = format!("new-{round}");
        let fh = must(
            &server,
            "create after restart",
            m.create(before.dir.clone(), &name, Some(0o600)),
        )
        .await
        .fh;
        assert_ne!(fh, before.file, "distinct files have distinct handles");
        must(&server, "close", m.close(fh)).await;
        must(&server, "umount", m.umount()).await;
    }
    let m = server.mount().await;
    let names = ok(
        &server,
        "readdir",
        txnfs_e2e::list_dir(&*m, before.dir.clone()).await,
    );
    let mut names = names;
    names.sort();
    assert_eq!(names, vec!["file.bin", "new-0", "new-1"]);
}

/// A client that was live during the crash recovers on its own: its next call after
/// `kill -9` and a restart (with a grace period) reconnects, finds its session and client
/// id gone (NFS4ERR_BADSESSION / STALE_CLIENTID), creates new ones and says
/// RECLAIM_COMPLETE (it held no state to reclaim). The bytes written before the crash read
/// back through it, never STALE; and on txnfs its RECLAIM_COMPLETE ends the grace period
/// early (it was the only client before the crash), so a new file is created long before
/// the lease-long grace would have ended.
///
/// The live client is ours: nfs-rs 0.8.8 only re-binds its old session after a reconnect
/// (BIND_CONN_TO_SESSION) and leaves the mount 'not ready' on NFS4ERR_BADSESSION.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_client_recovers_and_reclaims_after_restart() {
    use std::time::{Duration, Instant};
    use txnfs_client::{Client, ClientConfig, Fs};
    const LEASE: u32 = 20;
    let mut server = txnfs_e2e::ServerGuard::start_default_with(txnfs_e2e::ServerOpts {
        lease_time: Some(LEASE),
        grace: true,
        ..txnfs_e2e::ServerOpts::default()
    });
    let mut cfg = ClientConfig::new(([127, 0, 0, 1], server.port()).into());
    cfg.uid = 0;
    cfg.gid = 0;
    cfg.delegations = false;
    let client = Client::connect(cfg).await.expect("connect");
    let fs = Fs::new(client.clone());
    let base = server.export_path().trim_matches('/').to_string();
    let path = |name: &str| {
        if base.is_empty() {
            name.to_string()
        } else {
            format!("{base}/{name}")
        }
    };
    let data = Bytes::from(pattern(5, 200_000));
    for r in fs.vwrite(&[(path("before"), data.clone())], true).await {
        r.expect("write before the crash");
    }
    assert!(
        host_file(&server, "before") == data[..],
        "stable write not on disk"
    );
    let recoveries = client.stats().session_recoveries;

    server.kill9();
    server.restart();
    let restarted = Instant::now();

    let back = tokio::time::timeout(Duration::from_secs(60), fs.vread(&[path("before")]))
        .await
        .expect("the live client answers after the restart")
        .pop()
        .expect("one result")
        .unwrap_or_else(|e| panic!("read after restart: {e}\n{}", server.log_tail(30)));
    assert!(back == data, "bytes changed across the restart");
    let stats = client.stats();
    assert!(stats.reconnects >= 1, "no reconnect: {stats:?}");
    assert_eq!(
        stats.session_recoveries,
        recoveries + 1,
        "the lost session is re-created once: {stats:?}"
    );

    // A new file: an OPEN that is not a reclaim, refused (NFS4ERR_GRACE, retried by the
    // client) while the server's grace period lasts.
    for r in fs
        .vwrite(&[(path("after"), Bytes::from_static(b"after"))], true)
        .await
    {
        r.unwrap_or_else(|e| panic!("create after restart: {e}\n{}", server.log_tail(30)));
    }
    assert_eq!(host_file(&server, "after"), b"after");
    if server.kind() == txnfs_e2e::ServerKind::Txnfs {
        assert!(
            restarted.elapsed() < Duration::from_secs(u64::from(LEASE) / 2),
            "the new file waited {:?}: the grace period did not end when the only previous \
             client had reclaimed (RECLAIM_COMPLETE)\n{}",
            restarted.elapsed(),
            server.log_tail(30)
        );
    }
}

/// The write verifier must change when the server restarts, so a client
/// holding UNSTABLE writes knows to resend them (RFC 8881 18.32.3); and
/// data that was COMMITted before the crash is on disk afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_verifier_changes_across_restart() {
    let mut server = ServerGuard::start_default();
    let m = server.mount().await;
    let fh = must(&server, "create", m.create_path("v", Some(0o644)))
        .await
        .fh;
    let committed = pattern(7, 50_000);
    write_all(&server, &*m, &fh, 0, &committed).await;
    let before = must(
        &server,
        "unstable write",
        m.write(fh.clone(), 50_000, Bytes::from_static(b"maybe lost")),
    )
    .await;
    drop(m);
    server.kill9();
    // Committed data is on disk even before the server comes back.
    let on_disk = host_file(&server, "v");
    assert!(
        on_disk.len() >= committed.len() && on_disk[..committed.len()] == committed[..],
        "committed bytes missing on disk after kill -9"
    );
    if server.kind() == txnfs_e2e::ServerKind::Ganesha {
        // Ganesha's write verifier is its start time in whole seconds: a
        // restart within the same second would reuse it (a Ganesha limit).
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    server.restart();

    let m2 = server.mount().await;
    let after = must(
        &server,
        "write after restart",
        m2.write(fh.clone(), 50_000, Bytes::from_static(b"maybe lost")),
    )
    .await;
    if before.committed != nfs_rs::WriteCommitted::FileSync {
        assert_ne!(
            before.verifier, after.verifier,
            "write verifier unchanged across a restart: clients cannot detect lost UNSTABLE writes"
        );
    }
    let cv = must(
        &server,
        "commit after restart",
        m2.commit_with_verifier(fh.clone(), 0, 0),
    )
    .await;
    if after.committed != nfs_rs::WriteCommitted::FileSync {
        assert_eq!(
            cv, after.verifier,
            "COMMIT verifier differs from WRITE verifier"
        );
    }
    let back = ok(
        &server,
        "read",
        read_exact(&*m2, fh.clone(), 0, 50_010).await,
    );
    assert!(back[..50_000] == committed[..]);
    assert_eq!(&back[50_000..], b"maybe lost");
}

/// kill -9 in the middle of a large write stream and of a burst of
/// namespace changes: the server restarts cleanly, the file holds only
/// bytes that were written (or zeros for a hole, never garbage), every name
/// that was acknowledged exists, and the export holds no stray files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_writes_leaves_a_consistent_tree() {
    let mut server = ServerGuard::start_default();
    let m = server.mount().await;
    let data = pattern(99, 32 << 20);
    let fh = must(&server, "create", m.create_path("stream", Some(0o644)))
        .await
        .fh;
    // Acknowledged namespace changes before the crash.
    for i in 0..20 {
        let f = must(
            &server,
            "create small",
            m.create_path(&format!("small-{i}"), Some(0o644)),
        )
        .await
        .fh;
        must(&server, "close", m.close(f)).await;
    }
    must(&server, "rename", m.rename_path("small-0", "renamed-0")).await;

    // Four writers stream max-size chunks (UNSTABLE, no COMMIT); the server
    // is killed once 8 MiB have been acknowledged, with writes in flight.
    let chunk = (m.get_max_write_size() as usize).clamp(4096, 1 << 20);
    let acked = std::sync::atomic::AtomicUsize::new(0);
    let mref: &dyn Mount = &*m;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let fh = fh.clone();
            let data = &data;
            let acked = &acked;
            async move {
                for (i, piece) in data.chunks(chunk).enumerate().skip(w).step_by(4) {
                    let off = (i * chunk) as u64;
                    match mref
                        .write(fh.clone(), off, Bytes::copy_from_slice(piece))
                        .await
                    {
                        Ok(o) => {
                            acked.fetch_add(o.count as usize, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(_) => break,
                    }
                }
            }
        })
        .collect();
    let killer = async {
        let t0 = std::time::Instant::now();
        while acked.load(std::sync::atomic::Ordering::SeqCst) < 8 << 20
            && t0.elapsed() < std::time::Duration::from_secs(20)
        {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        server.kill9();
    };
    // Once the server is dead, give in-flight writes a moment, then drop
    // them (nfs-rs would keep trying to reconnect).
    tokio::select! {
        _ = txnfs_e2e::join_all(writers) => {}
        _ = async {
            killer.await;
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        } => {}
    }
    let acked = acked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        acked >= 8 << 20,
        "only {acked} bytes acknowledged before the kill"
    );
    drop(m);
    server.restart();

    let m2 = server.mount().await;
    let attr = must(&server, "getattr after crash", m2.getattr(fh.clone())).await;
    assert!(attr.filesize <= data.len() as u64);
    let back = ok(
        &server,
        "read after crash",
        read_exact(&*m2, fh.clone(), 0, attr.filesize as usize).await,
    );
    assert_eq!(back.len() as u64, attr.filesize);
    if let Some(i) = back
        .iter()
        .zip(&data)
        .position(|(&b, &want)| b != want && b != 0)
    {
        panic!(
            "byte {i} after crash is {:#x}: neither written data nor zero",
            back[i]
        );
    }
    let nonzero = back.iter().filter(|&&b| b != 0).count();
    eprintln!(
        "after kill -9 mid-stream: size {} of {}, {nonzero} non-zero bytes; {acked} bytes were \
         acknowledged (UNSTABLE) before the kill",
        attr.filesize,
        data.len()
    );

    let mut names = ok(
        &server,
        "readdir after crash",
        txnfs_e2e::list_dir(&*m2, m2.getfh().await).await,
    );
    names.sort();
    let mut want: Vec<String> = (1..20).map(|i| format!("small-{i}")).collect();
    want.push("renamed-0".into());
    want.push("stream".into());
    want.sort();
    assert_eq!(names, want, "names over NFS after crash");
    let mut host: Vec<String> = std::fs::read_dir(server.export_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    host.sort();
    assert_eq!(host, want, "names on the host after crash (stray files?)");
}
