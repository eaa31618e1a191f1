//! A large record read with the socket's low-water mark (`SO_RCVLOWAT`, plain TCP): it
//! arrives in many small pieces and is answered whole, and the mark is reset after it,
//! so that a small call sent alone afterwards is answered at once, not left waiting
//! for bytes that never come.
//! Calls made of parts (ADR 0063) leave as whole records too.

mod common;

use common::{echo_record, echo_reply as reply, TestServer};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_record_in_pieces_then_a_small_one_alone() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let rec = echo_record(1, &big);
    for piece in rec.chunks(16 << 10) {
        s.write_all(piece).await.expect("write");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (xid, body) = reply(&mut s, Duration::from_secs(10)).await;
    assert_eq!(xid, 1);
    assert_eq!(body, big, "the large record echoed whole");
    // Alone on the connection after a pause: were the low-water mark still ~1 MiB,
    // these 44 bytes would never wake the reader.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    s.write_all(&echo_record(2, b"small")).await.expect("write");
    let (xid, body) = reply(&mut s, Duration::from_secs(5)).await;
    assert_eq!((xid, &body[..]), (2, &b"small"[..]));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "answered in {:?}",
        t.elapsed()
    );
    // And a second large record, sent at once, still reads whole.
    let rec = echo_record(3, &big);
    s.write_all(&rec).await.expect("write");
    let (xid, body) = reply(&mut s, Duration::from_secs(10)).await;
    assert_eq!((xid, body.len()), (3, big.len()));
}

/// ADR 0063: arguments made of parts (a WRITE's data as its own part) leave as one
/// record each, with nothing of another caller's record between their parts, when
/// many callers send at once; every echo comes back whole and to its own caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_made_of_parts_from_many_callers_arrive_whole() {
    let srv = TestServer::start().await;
    let c = std::sync::Arc::new(srv.client().await);
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..8u8 {
        let c = c.clone();
        tasks.spawn(async move {
            for round in 0..4u8 {
                let head = bytes::Bytes::from(vec![caller; 40]);
                let data = bytes::Bytes::from(vec![round ^ caller; (256 << 10) + caller as usize]);
                let tail = bytes::Bytes::from(vec![0xee; 12]);
                let args = txnfs_rpc::Gathered::from_parts(vec![head, data, tail]);
                let want = args.to_bytes();
                let got = c.call_parts(common::PROG, 1, 1, args).await.expect("echo");
                assert_eq!(got, want, "caller {caller} round {round}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("caller");
    }
}

/// A SUCCESS reply record to `xid` carrying `results`.
fn reply_record(xid: u32, results: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 1, 0, 0, 0, 0] {
        m.extend_from_slice(&common::be32(w));
    }
    m.extend_from_slice(results);
    let mut rec = common::be32(0x8000_0000 | m.len() as u32).to_vec();
    rec.extend_from_slice(&m);
    rec
}

/// ADR 0063: the client sets the low-water mark for a large reply as the server does
/// for a large call. A 1 MiB reply that arrives in pieces is read whole, and the mark
/// is reset after it: a small reply sent alone after a pause reaches its caller at
/// once (a mark left at ~1 MiB would leave it unread forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reads_a_large_reply_in_pieces_then_a_small_one_alone() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    let sent = big.clone();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        for round in 0..2 {
            let call = txnfs_rpc::read_record(&mut s, 1 << 20).await.expect("call");
            let xid = u32::from_be_bytes([call[0], call[1], call[2], call[3]]);
            if round == 0 {
                for piece in reply_record(xid, &sent).chunks(16 << 10) {
                    s.write_all(piece).await.expect("write");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                s.write_all(&reply_record(xid, b"tiny"))
                    .await
                    .expect("write");
            }
        }
        s
    });
    let c = txnfs_rpc::RpcClient::connect(addr, txnfs_rpc::Credential::None)
        .await
        .expect("connect");
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        c.call(common::PROG, 1, 1, bytes::Bytes::new()),
    )
    .await
    .expect("the large reply in time")
    .expect("call");
    assert_eq!(&got[..], &big[..], "the large reply read whole");
    let t = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        c.call(common::PROG, 1, 1, bytes::Bytes::new()),
    )
    .await
    .expect("the small reply in time")
    .expect("call");
    assert_eq!(&got[..], b"tiny");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "answered in {:?}",
        t.elapsed()
    );
    drop(server.await.expect("server"));
}
