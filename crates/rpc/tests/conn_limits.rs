//! Connection limits: a full table of idle connections makes room for a new client (the
//! longest idle one is closed, never one with a call in progress), and idle connections
//! are closed after `ServerConfig::idle_timeout`.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::net::TcpStream;
use tokio::time::Instant;
use txnfs_rpc::{RpcClient, RpcError, ServerConfig};

const T: Duration = Duration::from_secs(20);

/// Proc 2 of the toy service sleeps this many milliseconds before answering.
fn sleep_args(ms: u32) -> Bytes {
    Bytes::copy_from_slice(&ms.to_be_bytes())
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Open `n` connections that have each completed one NULL call (so the server has
/// accepted them, in this order) and then stay idle.
async fn idle_clients(srv: &TestServer, n: usize) -> Vec<RpcClient> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let c = srv.client().await;
        null(&c).await.expect("NULL");
        v.push(c);
    }
    v
}

async fn full_table_serves_new_client(limit: usize) {
    let srv = TestServer::start_set(|c| c.max_connections = limit).await;
    let old = idle_clients(&srv, limit).await;
    let new = srv.client().await;
    null(&new)
        .await
        .expect("NULL on a new connection while the table is full of idle ones");
    assert_echo(&new, 1, b"ping", "echo").await;
    // Exactly one connection made room: the first, idle longest.
    wait_for("the evicted connection to close", || {
        srv.svc.closed.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert!(matches!(null(&old[0]).await, Err(RpcError::Disconnected)));
    null(&old[1]).await.expect("the second oldest is kept");
    null(&old[limit - 1]).await.expect("the newest is kept");
    assert_eq!(srv.svc.closed.load(Ordering::Relaxed), 1);
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn full_table_of_idle_connections_still_serves_a_new_client() {
    full_table_serves_new_client(64).await;
}

/// The default limit (4,096) with as many idle sockets: the same rule at a realistic size.
/// The test holds two descriptors per connection (client and server side), so it first
/// raises its soft descriptor limit to the hard one, as `txnfs serve` does; where even
/// the hard limit is lower it runs at the largest size that fits rather than skipping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_limit_of_idle_connections_still_serves_a_new_client() {
    let fits = usize::try_from(raise_nofile().saturating_sub(256) / 2).unwrap_or(usize::MAX);
    let limit = ServerConfig::default().max_connections.min(fits);
    assert!(
        limit >= 1024,
        "RLIMIT_NOFILE allows only {limit} test connections; raise the hard limit"
    );
    full_table_serves_new_client(limit).await;
}

/// Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now.
fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if let Some(hard) = lim.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(hard),
                maximum: lim.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The oldest connection has a call executing: the next oldest, idle, is closed instead,
/// and the busy one's reply arrives.
#[tokio::test]
async fn connection_with_call_in_progress_is_not_chosen() {
    let srv = TestServer::start_set(|c| c.max_connections = 4).await;
    // The busy connection's bytes moved first, so by time alone it would be the victim.
    let busy = Arc::new(srv.client().await);
    let slow = {
        let busy = busy.clone();
        tokio::spawn(async move { busy.call(PROG, 1, 2, sleep_args(1500)).await })
    };
    wait_for("the slow call to start", || {
        srv.svc.calls.load(Ordering::Relaxed) >= 1
    })
    .await;
    let others = idle_clients(&srv, 3).await;
    let new = srv.client().await;
    null(&new).await.expect("new client served");
    let reply = slow
        .await
        .expect("task")
        .expect("the busy call is answered");
    assert_eq!(reply, sleep_args(1500));
    assert!(matches!(
        null(&others[0]).await,
        Err(RpcError::Disconnected)
    ));
    null(&busy)
        .await
        .expect("the busy connection is still open");
    null(&others[1]).await.expect("kept");
    assert_eq!(srv.svc.closed.load(Ordering::Relaxed), 1);
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn idle_connection_is_closed_after_the_idle_timeout() {
    let srv = TestServer::start_set(|c| c.idle_timeout = Some(Duration::from_millis(300))).await;
    let mut raw = TcpStream::connect(srv.addr).await.expect("connect");
    let c = srv.client().await;
    null(&c).await.expect("NULL");
    let start = Instant::now();
    let (_, closed) = read_until_close(&mut raw, Duration::from_secs(5)).await;
    assert!(closed, "the idle connection was not closed");
    let after = start.elapsed();
    assert!(
        after >= Duration::from_millis(250),
        "closed too early: {after:?}"
    );
    wait_for("both idle connections to close", || {
        srv.svc.closed.load(Ordering::Relaxed) == 2
    })
    .await;
    assert!(matches!(null(&c).await, Err(RpcError::Disconnected)));
    srv.stop().await.expect("stop");
}

/// A call running longer than the idle timeout keeps its connection open; it is closed
/// only once it has been idle for the timeout after the reply.
#[tokio::test]
async fn connection_with_call_in_progress_outlives_the_idle_timeout() {
    let srv = TestServer::start_set(|c| c.idle_timeout = Some(Duration::from_millis(200))).await;
    let c = srv.client().await;
    let reply = c
        .call(PROG, 1, 2, sleep_args(900))
        .await
        .expect("a call longer than the idle timeout is answered");
    assert_eq!(reply, sleep_args(900));
    assert_eq!(srv.svc.closed.load(Ordering::Relaxed), 0);
    wait_for("the connection to close once idle", || {
        srv.svc.closed.load(Ordering::Relaxed) == 1
    })
    .await;
    srv.stop().await.expect("stop");
}

/// Without an idle timeout idle connections stay.
#[tokio::test]
async fn no_idle_timeout_keeps_idle_connections() {
    let srv = TestServer::start_set(|c| c.idle_timeout = None).await;
    let c = srv.client().await;
    null(&c).await.expect("NULL");
    tokio::time::sleep(Duration::from_millis(300)).await;
    null(&c).await.expect("still open");
    assert_eq!(srv.svc.closed.load(Ordering::Relaxed), 0);
    srv.stop().await.expect("stop");
}
