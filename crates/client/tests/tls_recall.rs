//! A delegation recall over RPC-with-TLS (ADR 0049): the holder's connection runs
//! inside TLS, so the server's CB_RECALL travels on it inside TLS too; the holder
//! flushes its buffered write and returns the delegation, and the other client reads
//! the new bytes.

mod common;

use bytes::Bytes;
use common::*;
use std::time::Duration;
use txnfs_client::{Client, ClientConfig, Fs};
use txnfs_server::TlsFiles;
use txnfs_testbed::certs::TestCa;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_reaches_a_holder_connected_over_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path(), "good");
    let cert = ca.server(dir.path(), "server");
    let files = TlsFiles {
        cert: cert.cert.clone(),
        key: cert.key.clone(),
        client_ca: None,
    };
    let srv = start_memory_server_with(|cfg| cfg.tls = Some(files)).await;

    let mut cfg = ClientConfig::new(srv.addr);
    cfg.uid = 0;
    cfg.gid = 0;
    cfg.max_attempts = 5;
    cfg.tls = Some(txnfs_rpc::ClientTls::from_pem_files(&ca.cert_pem, None).expect("client TLS"));
    let a: Client = Client::connect(cfg).await.expect("TLS connect");
    wait_back_channel_up(Some(srv.server.clone()), &a).await;
    let fs = Fs::new(a.clone());
    for r in fs
        .vwrite(&[("t.txt", Bytes::from_static(b"v1"))], false)
        .await
    {
        r.expect("first write");
    }
    assert_eq!(
        a.cache_stats().write_delegations,
        1,
        "{:?}",
        a.cache_stats()
    );
    for r in fs
        .vwrite(&[("t.txt", Bytes::from_static(b"sent inside TLS"))], false)
        .await
    {
        r.expect("buffered write");
    }
    assert_eq!(a.cache_stats().buffered_writes, 1);

    // A plain client's read conflicts: CB_RECALL goes to A over its TLS connection.
    let b = connect(srv.addr, false).await;
    let got = Fs::new(b.clone()).vread(&["t.txt"]).await;
    assert_eq!(
        got[0].as_ref().expect("B reads"),
        &Bytes::from_static(b"sent inside TLS")
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while a.delegations_held() != (0, 0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let st = a.cache_stats();
    assert_eq!((st.recalls, st.flushes, st.returns), (1, 1, 1), "{st:?}");
    let s = srv.server.core().expect("core").delegations().stats();
    assert_eq!((s.recalled, s.returned, s.revoked), (1, 1, 0), "{s:?}");
    b.close().await.expect("close b");
    a.close().await.expect("close a");
}

/// The same server refuses a TLS client that trusts another CA, at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_trust_the_server_does_not_connect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path(), "good");
    let cert = ca.server(dir.path(), "server");
    let files = TlsFiles {
        cert: cert.cert.clone(),
        key: cert.key.clone(),
        client_ca: None,
    };
    let srv = start_memory_server_with(|cfg| cfg.tls = Some(files)).await;
    let other = TestCa::new(dir.path(), "other");
    let mut cfg = ClientConfig::new(srv.addr);
    cfg.tls =
        Some(txnfs_rpc::ClientTls::from_pem_files(&other.cert_pem, None).expect("client TLS"));
    let started = std::time::Instant::now();
    let err = Client::connect(cfg).await.err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("UnknownIssuer"), "{text}");
    // Not retried as if the network had failed (20 attempts with back-off).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
