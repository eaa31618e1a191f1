//! Run-to-completion (ADR 0057): a call that finishes in its first poll runs on the
//! connection's reader task; one that waits becomes a task of its own and does not hold
//! the connection up.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use txnfs_rpc::{RpcError, ServerConfig};
// A call that panics on the reader task is answered SYSTEM_ERR and the connection serves
// on: `tests/server.rs` (proc 4) covers it, now on the inline path.

const T: Duration = Duration::from_secs(10);

/// The ids of the tasks that ran `n` quick calls made one after another on one
/// connection.
async fn task_ids_of_quick_calls(cfg: ServerConfig, n: usize) -> Vec<String> {
    let srv = TestServer::start_with(cfg).await;
    let c = srv.client().await;
    let mut ids = Vec::new();
    for _ in 0..n {
        let id = tokio::time::timeout(T, c.call(PROG, 1, 8, Bytes::new()))
            .await
            .expect("reply in time")
            .expect("proc 8");
        let id = String::from_utf8(id.to_vec()).expect("utf-8 task id");
        assert!(!id.is_empty(), "the call ran outside a tokio task");
        ids.push(id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_calls_run_on_the_reader_task() {
    let inline = task_ids_of_quick_calls(ServerConfig::default(), 4).await;
    assert!(
        inline.windows(2).all(|w| w[0] == w[1]),
        "quick calls of one connection ran on different tasks: {inline:?}"
    );
    // The same probe tells the two modes apart: with a task per call every id differs.
    let spawned = task_ids_of_quick_calls(
        ServerConfig {
            run_inline: false,
            ..ServerConfig::default()
        },
        4,
    )
    .await;
    let distinct: std::collections::HashSet<_> = spawned.iter().collect();
    assert_eq!(distinct.len(), spawned.len(), "{spawned:?}");
    assert!(!spawned.contains(&inline[0]));
}

async fn waiting_call_leaves_the_connection_free() {
    let srv = TestServer::start().await;
    let c = Arc::new(srv.client().await);
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.call(PROG, 1, 9, Bytes::from_static(b"waited")).await })
    };
    // While proc 9 waits, the same connection still answers other calls...
    for i in 0..20u32 {
        let args = Bytes::from(i.to_be_bytes().to_vec());
        let r = tokio::time::timeout(T, c.call(PROG, 1, 1, args.clone()))
            .await
            .expect("an echo answered while another call of the connection waits");
        assert_eq!(r.expect("echo"), args);
    }
    assert!(!waiter.is_finished(), "proc 9 returned before it was woken");
    // ...and the waiting call finishes once woken (proc 10 until it is).
    let deadline = tokio::time::Instant::now() + T;
    while !waiter.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "proc 9 never woke");
        c.call(PROG, 1, 10, Bytes::new()).await.expect("proc 10");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r: Result<Bytes, RpcError> = waiter.await.expect("waiter task");
    assert_eq!(r.expect("proc 9"), Bytes::from_static(b"waited"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_call_leaves_the_connection_free_multi_thread() {
    waiting_call_leaves_the_connection_free().await;
}

#[tokio::test(flavor = "current_thread")]
async fn waiting_call_leaves_the_connection_free_current_thread() {
    waiting_call_leaves_the_connection_free().await;
}

/// `CallInfo::alone` (ADR 0059): a call is alone when nothing else of its connection
/// runs or was received, and has not for the connection's last few calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_alone_only_while_its_client_waits_for_it_only() {
    let srv = TestServer::start().await;
    let c = Arc::new(srv.client().await);
    let alone = |c: Arc<txnfs_rpc::RpcClient>| async move {
        let r = tokio::time::timeout(T, c.call(PROG, 1, 11, Bytes::new()))
            .await
            .expect("reply in time")
            .expect("proc 11");
        r[..] == [1]
    };
    for i in 0..3 {
        assert!(alone(c.clone()).await, "call {i} one after another: alone");
    }
    // A call of the connection waits (proc 9): the next ones have company.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.call(PROG, 1, 9, Bytes::new()).await })
    };
    let deadline = tokio::time::Instant::now() + T;
    while srv.svc.calls.load(std::sync::atomic::Ordering::Relaxed) < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "proc 9 never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !alone(c.clone()).await,
        "a call beside a waiting one is not alone"
    );
    while !waiter.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "proc 9 never woke");
        c.call(PROG, 1, 10, Bytes::new()).await.expect("proc 10");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    waiter.await.expect("waiter task").expect("proc 9");
    // Company is remembered for a few calls, then calls one after another are alone again.
    let mut n = 0;
    while !alone(c.clone()).await {
        n += 1;
        assert!(n <= 16, "still not alone after {n} calls one after another");
    }
    assert!(n >= 4, "company forgotten after {n} calls");
    assert!(alone(c.clone()).await);
}
