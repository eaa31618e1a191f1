//! Busy polling (`ServerConfig::busy_poll`, ADR 0057 addendum): a peer that sends one
//! call at a time has its next call read by a spinning non-blocking `recv`, not by the
//! reactor. Every call is still answered whole and in order, small or 1 MiB, and after
//! pauses long enough for the spin to give up.

mod common;

use common::{be32, TestServer, PROG};
use std::time::Duration;
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
async fn reply(s: &mut TcpStream) -> (u32, Vec<u8>) {
    let limit = Duration::from_secs(10);
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
    assert_eq!(&rec[20..24], &be32(0), "SUCCESS");
    (xid, rec[24..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_at_a_time_is_answered_whole_with_spinning_on() {
    let srv = TestServer::start_set(|c| c.busy_poll = Duration::from_micros(200)).await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    for xid in 1..=300u32 {
        let args: Vec<u8> = match xid {
            // Large records in the middle of the spinning (a spin reads part of one).
            100 | 200 => big.clone(),
            _ => (0..(xid % 64) * 4).map(|i| (i ^ xid) as u8).collect(),
        };
        if xid % 50 == 0 {
            // Longer than any spin: the reader must still wake for the next call.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        s.write_all(&echo_record(xid, &args)).await.expect("write");
        let (got, body) = reply(&mut s).await;
        assert_eq!(got, xid);
        assert_eq!(body, args, "call {xid} echoed whole");
    }
    srv.stop().await.expect("stop");
}
