//! Delegations and the callback channel, as far as `nfs-rs` exposes them:
//! a client mounted with `retain-delegations=true` keeps whatever
//! delegation the server grants on OPEN; a conflicting OPEN/WRITE from a
//! second client must make the server recall it (CB_RECALL on the
//! back channel) and then proceed promptly, and the first client must see
//! the new data. nfs-rs 0.8.8 does not report NFSv4.1 delegation grants
//! (`callback_stats().grants_received` stays 0), so whether a delegation
//! was granted is not asserted.

use std::time::{Duration, Instant};

use nfs_rs::{OPEN_BOTH, OPEN_READ};
use txnfs_e2e::{create_with, ok, read_exact, timed, write_all, ServerGuard};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_open_recalls_a_retained_delegation() {
    let server = ServerGuard::start_default();
    let a = server
        .mount_with("uid=0&gid=0&retain-delegations=true")
        .await;
    let b = server.mount().await;
    create_with(&server, &*a, "deleg", 0o644, b"original").await;

    // A opens for reading (a read delegation may be granted) and reads.
    let fa = ok(
        &server,
        "open a",
        timed("open", a.open_path("deleg", OPEN_READ)).await,
    )
    .fh;
    let first = ok(&server, "read a", read_exact(&*a, fa.clone(), 0, 100).await);
    assert_eq!(first, b"original");

    // B opens for writing and writes: any delegation A holds must be
    // recalled first. This must not take anything like a lease period.
    let t0 = Instant::now();
    let fb = ok(
        &server,
        "open b",
        timed("open", b.open_path("deleg", OPEN_BOTH)).await,
    )
    .fh;
    write_all(&server, &*b, &fb, 0, b"CHANGED!").await;
    ok(&server, "close b", timed("close", b.close(fb)).await);
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "conflicting OPEN+WRITE took {took:?} (delegation recall stalled?)\n{}",
        server.log_tail(20)
    );

    // A sees B's data through its still-open file.
    let after = ok(
        &server,
        "read a again",
        read_exact(&*a, fa.clone(), 0, 100).await,
    );
    assert_eq!(after, b"CHANGED!");
    ok(&server, "close a", timed("close", a.close(fa)).await);
    ok(&server, "umount a", timed("umount", a.umount()).await);
    ok(&server, "umount b", timed("umount", b.umount()).await);
    eprintln!(
        "conflicting open/write took {took:?}; A's callback stats: {:?}",
        a.callback_stats().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_delegation_holder_and_remove_by_other_client() {
    let server = ServerGuard::start_default();
    let a = server
        .mount_with("uid=0&gid=0&retain-delegations=true")
        .await;
    let b = server.mount().await;
    let fa = ok(
        &server,
        "create a",
        timed("create", a.create_path("w", Some(0o644))).await,
    )
    .fh;
    write_all(&server, &*a, &fa, 0, b"written by A").await;

    // B reads the file A still has open for writing (a write delegation, if
    // granted, must be recalled so B sees A's committed data) ...
    let t0 = Instant::now();
    let got = ok(
        &server,
        "read b",
        timed("read", b.read_path("w", 0, 100)).await,
    );
    assert_eq!(&got[..], b"written by A");
    // ... and removes it.
    ok(
        &server,
        "remove b",
        timed("remove", b.remove_path("w")).await,
    );
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "READ+REMOVE against another client's open took {took:?}\n{}",
        server.log_tail(20)
    );
    assert!(!server.export_dir().join("w").exists());
    let _ = timed("close a", a.close(fa)).await;
}
