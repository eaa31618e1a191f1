//! Byte-range lock details beyond the basics in `nfsrs_ops.rs`, using the
//! raw `Mount::lock`/`locku` calls: splitting a lock with a partial
//! unlock, the "current seqid" stateid (seqid 0), lock-type vs open-mode,
//! invalid ranges, locks to EOF, and CLOSE while locks are held.

use bytes::Bytes;
use nfs_rs::{Mount, Nfs4ErrorCode as E, OPEN_READ};
use txnfs_e2e::fixtures::{must, two_openers, CheckCalls, TwoOpeners, READ_LT, WRITE_LT};
use txnfs_e2e::{create_with, is_denied, timed, Checks, ServerGuard};

/// The same stateid with seqid 0: "the current seqid" (RFC 8881 8.2.2).
fn current(stateid: &Bytes) -> Bytes {
    let mut v = stateid.to_vec();
    v[..4].copy_from_slice(&[0, 0, 0, 0]);
    Bytes::from(v)
}

async fn lockt_free(m: &dyn Mount, fh: &Bytes, off: u64, len: u64) -> Result<bool, String> {
    match timed("lockt", m.lock_test(fh.clone(), WRITE_LT, off, len)).await {
        Ok(()) => Ok(true),
        Err(e) if is_denied(&e) => Ok(false),
        Err(e) => Err(format!("LOCKT [{off},+{len}): {e:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_unlock_splits_a_lock() {
    let server = ServerGuard::start_default();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "f", &[0u8; 200]).await;
    let mut c = Checks::new(&server);

    let sid = must(
        &server,
        "lock [0,100)",
        a.lock(fa.clone(), WRITE_LT, 0, 100),
    )
    .await;
    must(
        &server,
        "unlock [40,60)",
        a.locku(fa.clone(), sid.clone(), WRITE_LT, 40, 20),
    )
    .await;
    for (off, len, free) in [
        (40, 20, true),
        (0, 10, false),
        (90, 10, false),
        (39, 2, false),
        (59, 2, false),
    ] {
        match lockt_free(&*b, &fb, off, len).await {
            Ok(f) => c.check(
                f == free,
                format!("after unlocking [40,60) of [0,100): [{off},+{len}) free={f}, want {free}"),
            ),
            Err(e) => c.check(false, e),
        }
    }
    // The LOCKU bumped the lock stateid's seqid: the original is now old,
    // seqid 0 means "current".
    c.call_err(
        "LOCKU with the superseded lock stateid",
        a.locku(fa.clone(), sid.clone(), WRITE_LT, 0, 40),
        &[E::NFS4ERR_OLD_STATEID],
    )
    .await;
    c.call_ok(
        "LOCKU [0,40) with seqid 0 (current)",
        a.locku(fa.clone(), current(&sid), WRITE_LT, 0, 40),
    )
    .await;
    c.call_ok(
        "LOCKU [60,100) with seqid 0 (current)",
        a.locku(fa.clone(), current(&sid), WRITE_LT, 60, 40),
    )
    .await;
    match lockt_free(&*b, &fb, 0, 200).await {
        Ok(f) => c.check(f, "range still locked after unlocking every piece"),
        Err(e) => c.check(false, e),
    }
    c.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_modes_ranges_and_close() {
    let server = ServerGuard::start_default();
    let TwoOpeners { a, b, fa, fb } = two_openers(&server, "f", &[0u8; 200]).await;
    create_with(&server, &*a, "r", 0o644, &[0u8; 10]).await;
    let mut c = Checks::new(&server);

    // A WRITE lock needs an open for writing.
    let fr = must(&server, "open r read-only", a.open_path("r", OPEN_READ))
        .await
        .fh;
    c.call_err(
        "WRITE lock on a file opened read-only",
        a.lock(fr.clone(), WRITE_LT, 0, 10),
        &[E::NFS4ERR_OPENMODE],
    )
    .await;
    c.call_ok(
        "READ lock on a file opened read-only",
        a.lock(fr.clone(), READ_LT, 0, 10),
    )
    .await;

    // Invalid ranges.
    let invalid = [
        ("LOCK with length 0", 0, 0),
        ("LOCK whose end overflows 64 bits", 10, u64::MAX - 5),
    ];
    for (what, offset, length) in invalid {
        let lock = a.lock(fa.clone(), WRITE_LT, offset, length);
        c.call_err(what, lock, &[E::NFS4ERR_INVAL]).await;
    }
    // A lock "to EOF" (length all ones) covers every later offset.
    let sid = c
        .call_ok(
            "LOCK [1000, EOF)",
            a.lock(fa.clone(), WRITE_LT, 1000, u64::MAX),
        )
        .await;
    for (off, free) in [(999u64, true), (1000, false), (u64::MAX - 1, false)] {
        match lockt_free(&*b, &fb, off, 1).await {
            Ok(f) => c.check(
                f == free,
                format!("lock to EOF: offset {off} free={f}, want {free}"),
            ),
            Err(e) => c.check(false, e),
        }
    }
    // CLOSE while holding a lock: LOCKS_HELD (RFC 8881 18.2.4).
    c.call_err(
        "CLOSE with a byte-range lock held",
        a.close(fa.clone()),
        &[E::NFS4ERR_LOCKS_HELD],
    )
    .await;
    if let Some(sid) = sid {
        let _ = timed(
            "locku",
            a.locku(fa.clone(), current(&sid), WRITE_LT, 1000, u64::MAX),
        )
        .await;
    }
    c.finish();
}
