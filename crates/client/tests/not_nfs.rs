//! Connecting to something that is not an NFS server fails at once with what it is,
//! never after the call timeout.

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use txnfs_client::{Client, ClientConfig, ClientError};

async fn connect_fails_fast(addr: std::net::SocketAddr) -> String {
    let started = Instant::now();
    let r = Client::connect(ClientConfig::new(addr)).await;
    let took = started.elapsed();
    let err = match r {
        Ok(_) => panic!("connected to a non-NFS peer at {addr}"),
        Err(e) => e,
    };
    assert!(
        matches!(err, ClientError::NotNfsServer { .. }),
        "wrong error: {err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("not an NFS server at {addr}")),
        "{msg}"
    );
    msg
}

#[tokio::test]
async fn a_listener_that_never_answers_is_not_an_nfs_server() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            open.push(s); // read nothing, answer nothing
        }
    });
    let msg = connect_fails_fast(addr).await;
    assert!(msg.contains("no RPC reply"), "{msg}");
    held.abort();
}

#[tokio::test]
async fn an_http_server_is_not_an_nfs_server() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let http = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    let msg = connect_fails_fast(addr).await;
    assert!(!msg.contains("no RPC reply"), "{msg}");
    http.abort();
}
