//! Connection loss without a server restart: dropping nfs-rs calls in the
//! middle of sending large WRITEs makes nfs-rs shut that TCP connection
//! down; the next call reconnects and binds the new connection to the same
//! session (BIND_CONN_TO_SESSION). The server must accept that and keep the
//! session's slots usable; data written afterwards must be intact.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use txnfs_e2e::fixtures::must;
use txnfs_e2e::{create_with, join_all, ok, pattern, read_exact, timed, write_all, ServerGuard};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_requests_then_reconnect() {
    let server = ServerGuard::start_default();
    let m = server.mount().await;
    let fh = create_with(&server, &*m, "f", 0o644, b"start").await;
    // Each WRITE as large as the mount allows (bigger ones fail locally).
    let wsize = m.get_max_write_size() as u64;
    let big = Bytes::from(pattern(3, wsize as usize));
    let mut cancelled = 0;
    for round in 0..6u64 {
        // Eight max-size WRITEs at once (more than a socket buffer holds),
        // dropped after a poll or two, or after a few milliseconds.
        let writes: Vec<_> = (0..8u64)
            .map(|i| m.write(fh.clone(), i * wsize, big.clone()))
            .collect();
        let mut burst = Box::pin(join_all(writes));
        let finished = if round < 3 {
            let mut done = false;
            for _ in 0..=round {
                done = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(burst.as_mut().poll(cx).is_ready())
                })
                .await;
                if done {
                    break;
                }
                tokio::task::yield_now().await;
            }
            done
        } else {
            tokio::time::timeout(Duration::from_millis(round - 2), burst.as_mut())
                .await
                .is_ok()
        };
        drop(burst);
        if !finished {
            cancelled += 1;
        }
        // The mount must work again (give the reconnect a few tries).
        let mut last = None;
        for _ in 0..10 {
            match timed("getattr", m.getattr(fh.clone())).await {
                Ok(_) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        if let Some(e) = last {
            panic!(
                "round {round}: the mount did not recover after cancelled WRITEs: {e:?}\n\
                 server log tail:\n{}",
                server.log_tail(30)
            );
        }
    }
    eprintln!("{cancelled} of 6 WRITE bursts were dropped before completing");
    assert!(
        cancelled >= 3,
        "the poll-once rounds should have been cut off"
    );
    let data = pattern(4, 3 << 20);
    write_all(&server, &*m, &fh, 0, &data).await;
    let back = ok(
        &server,
        "read",
        read_exact(&*m, fh.clone(), 0, data.len()).await,
    );
    assert!(back == data, "data written after reconnects differs");
    must(&server, "umount", m.umount()).await;
}
