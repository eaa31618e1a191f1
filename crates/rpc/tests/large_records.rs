//! A large record read with the socket's low-water mark (`SO_RCVLOWAT`, plain TCP): it
//! arrives in many small pieces and is answered whole, and the mark is reset after it,
//! so that a small call sent alone afterwards is answered at once, not left waiting
//! for bytes that never come.

mod common;

use common::{be32, TestServer, PROG};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An echo call (proc 1, AUTH_NONE) of `args` as one record.
fn echo_record(xid: u32, args: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 0, 2, PROG, 1, 1, 0, 0, 0, 0] {
        m.extend_from_slice(&be32(w));
    }
    m.extend_from_slice(args);
    let mut rec = be32(0x8000_0000 | m.len() as u32).to_vec();
    rec.extend_from_slice(&m);
    rec
}

/// The next reply record: (xid, its echoed body).
async fn reply(s: &mut TcpStream, limit: Duration) -> (u32, Vec<u8>) {
    let mut mark = [0u8; 4];
    tokio::time::timeout(limit, s.read_exact(&mut mark))
        .await
        .expect("a reply in time")
        .expect("read");
    let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
    let mut rec = vec![0u8; len];
    tokio::time::timeout(limit, s.read_exact(&mut rec))
        .await
        .expect("the reply's body in time")
        .expect("read");
    let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
    // xid, REPLY, MSG_ACCEPTED, verifier (flavor, length 0), SUCCESS: 24 bytes.
    assert_eq!(&rec[4..8], &be32(1), "a reply");
    assert_eq!(&rec[20..24], &be32(0), "SUCCESS");
    (xid, rec[24..].to_vec())
}

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
