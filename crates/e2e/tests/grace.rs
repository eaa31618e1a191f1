//! Grace period after a restart (lease time 5 s, grace on): a new client's
//! non-reclaim OPEN/CREATE and LOCK are held off (NFS4ERR_GRACE, which
//! nfs-rs retries with back-off) until the grace period has ended, then
//! succeed; data and handles from before the crash are intact.

use std::time::{Duration, Instant};

use nfs_rs::OPEN_BOTH;
use txnfs_e2e::fixtures::must;
use txnfs_e2e::{create_with, ok, read_exact, ServerGuard, ServerOpts};

const LEASE: u32 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_state_waits_for_the_grace_period() {
    let mut server = ServerGuard::start_default_with(ServerOpts {
        lease_time: Some(LEASE),
        grace: true,
        ..ServerOpts::default()
    });
    // The first start may itself begin with a grace period: let it pass.
    let m = server.mount().await;
    let fh = create_with(&server, &*m, "before", 0o644, b"from before the crash").await;
    // Hold an open and a lock, so the server has state to protect.
    let f = must(&server, "open", m.open_path("before", OPEN_BOTH))
        .await
        .fh;
    let _lock = must(&server, "lock", m.lock_stateful(f, 2, 0, 10)).await;

    server.kill9();
    server.restart();
    let restarted = Instant::now();
    drop(m);

    let m2 = server.mount().await;
    // Reading with the old handle (no new state) is fine at any time.
    let back = ok(
        &server,
        "read old handle",
        read_exact(&*m2, fh.clone(), 0, 100).await,
    );
    assert_eq!(back, b"from before the crash");

    // A new OPEN+CREATE is not allowed until the grace period is over.
    let created = must(
        &server,
        "create during grace",
        m2.create_path("after", Some(0o644)),
    )
    .await;
    let waited = restarted.elapsed();
    must(&server, "close", m2.close(created.fh)).await;
    eprintln!(
        "first new OPEN after restart succeeded {waited:?} after the restart (lease {LEASE}s)"
    );
    assert!(
        waited >= Duration::from_secs(u64::from(LEASE)) - Duration::from_millis(1500),
        "a new OPEN succeeded {waited:?} after a restart with a {LEASE}s grace period: \
         the grace period was not enforced\n{}",
        server.log_tail(20)
    );
    assert!(
        waited < Duration::from_secs(u64::from(LEASE) * 4 + 10),
        "grace period lasted {waited:?}, far more than the {LEASE}s lease"
    );

    // After grace: a new lock on the old file works (the old one is gone).
    let f2 = must(
        &server,
        "open after grace",
        m2.open_path("before", OPEN_BOTH),
    )
    .await
    .fh;
    let tok = must(
        &server,
        "lock after grace",
        m2.lock_stateful(f2.clone(), 2, 0, 10),
    )
    .await;
    must(&server, "unlock", m2.unlock_stateful(tok)).await;
    must(&server, "close", m2.close(f2)).await;
}
