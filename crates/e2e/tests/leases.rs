//! Lease behaviour (lease time 10 s): a client that stops renewing loses
//! its byte-range locks to other clients; a client that keeps renewing
//! (nfs-rs renews with SEQUENCE every lease/2, at least every 5 s) keeps
//! them past several lease periods.

use std::time::{Duration, Instant};

use txnfs_e2e::fixtures::{close_both, must, two_openers, LockSide, TwoOpeners, WRITE_LT};
use txnfs_e2e::{is_denied, timed, ServerGuard, ServerOpts};

const LEASE: u32 = 10;

fn start() -> ServerGuard {
    ServerGuard::start_default_with(ServerOpts {
        lease_time: Some(LEASE),
        ..ServerOpts::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_loses_its_lock_after_the_lease() {
    let server = start();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "f", &[0u8; 100]).await;
    let _held = must(&server, "lock a", a.lock_stateful(fa, WRITE_LT, 0, 100)).await;
    let e = timed("lockt", b.lock_test(fb.clone(), WRITE_LT, 0, 100))
        .await
        .expect_err("B must conflict while A holds the lock");
    assert!(is_denied(&e), "got {e:?}");

    // A goes silent: dropping the mount stops its lease renewal (its TCP
    // connection may stay open, but no SEQUENCE is sent any more).
    let silent_at = Instant::now();
    drop(a);
    let deadline = Duration::from_secs(u64::from(LEASE) * 4);
    loop {
        match timed("lockt", b.lock_test(fb.clone(), WRITE_LT, 0, 100)).await {
            Ok(()) => break,
            Err(e) if is_denied(&e) => {
                assert!(
                    silent_at.elapsed() < deadline,
                    "A's lock still blocks B {:?} after A stopped renewing a {LEASE}s lease\n{}",
                    silent_at.elapsed(),
                    server.log_tail(20)
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("LOCKT failed: {e:?}\n{}", server.log_tail(20)),
        }
    }
    let waited = silent_at.elapsed();
    assert!(
        waited >= Duration::from_secs(u64::from(LEASE) - 1),
        "A's lock vanished after {waited:?}, before its {LEASE}s lease could expire"
    );
    let lb = LockSide::new(&*b, &fb);
    let tok = must(&server, "lock b after expiry", lb.lock(WRITE_LT, 0, 100)).await;
    must(&server, "unlock b", b.unlock_stateful(tok)).await;
    eprintln!("silent client's lock released after {waited:?} (lease {LEASE}s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_client_keeps_its_lock() {
    let server = start();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "f", &[0u8; 100]).await;
    let (la, lb) = (LockSide::new(&*a, &fa), LockSide::new(&*b, &fb));
    let held = must(&server, "lock a", la.lock(WRITE_LT, 0, 100)).await;
    // Idle for 2.5 lease periods; only nfs-rs's background SEQUENCE renews.
    tokio::time::sleep(Duration::from_secs(u64::from(LEASE) * 5 / 2)).await;
    let e = timed("lockt", b.lock_test(fb.clone(), WRITE_LT, 0, 100))
        .await
        .expect_err("B must still conflict: A renewed its lease");
    assert!(is_denied(&e), "got {e:?}");
    assert_eq!(
        a.health().lease_healthy,
        Some(true),
        "nfs-rs reports its lease unhealthy"
    );
    must(&server, "unlock a", a.unlock_stateful(held)).await;
    must(&server, "lockt b after unlock", lb.lockt(WRITE_LT, 0, 100)).await;
    close_both(&server, &*a, fa, &*b, fb).await;
}
