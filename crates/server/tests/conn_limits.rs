//! A peer holding `max_connections` idle sockets cannot lock other clients out: a new
//! connection still gets NULL and COMPOUND answered (the longest idle socket is closed).

mod common;

use bytes::Bytes;
use common::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use txnfs_server::nfs::*;
use txnfs_server::Config;

const LIMIT: usize = 64;

#[tokio::test]
async fn full_table_of_idle_sockets_still_serves_null_and_compound() {
    let srv = start_server(|d| Config {
        max_connections: LIMIT,
        ..memory_config(d, false)
    })
    .await;
    // A session made first, then LIMIT idle sockets from "another peer", each having
    // completed a NULL so the server has accepted it.
    let mut early = Session::new(srv.addr, b"early").await;
    let mut idle = Vec::new();
    for _ in 0..LIMIT {
        let cl = connect(srv.addr).await;
        let r = cl.call(100003, 4, 0, Bytes::new()).await.expect("NULL");
        assert!(r.is_empty());
        idle.push(cl);
    }
    let mut raw = Vec::new();
    for _ in 0..4 {
        // Sockets that never send a byte at all are idle too.
        raw.push(TcpStream::connect(srv.addr).await.expect("connect"));
    }
    let late = connect(srv.addr).await;
    let r = late
        .call(100003, 4, 0, Bytes::new())
        .await
        .expect("NULL on a new connection");
    assert!(r.is_empty());
    let r = call(&late, vec![exchange_id(b"late")]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // A whole session on yet another new connection.
    let mut s = Session::new(srv.addr, b"late2").await;
    let r = s.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // The early client's connection was the longest idle: closed; its session carries on
    // over a new connection, as NFSv4.1 clients do after a disconnect.
    assert!(early.cl.call(100003, 4, 0, Bytes::new()).await.is_err());
    early.cl = connect(srv.addr).await;
    let r = early.run(vec![nfs_argop4::OP_PUTROOTFH]).await;
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    // Only as many connections as needed were closed: the newest socket is still open.
    let mut buf = [0u8; 1];
    let newest = raw.last_mut().expect("four sockets");
    let still_open =
        tokio::time::timeout(std::time::Duration::from_millis(100), newest.read(&mut buf))
            .await
            .is_err();
    assert!(still_open, "the newest idle socket was closed");
}
