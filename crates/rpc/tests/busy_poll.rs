//! Busy polling (`ServerConfig::busy_poll`, ADR 0057 addendum): a peer that sends one
//! call at a time has its next call read by a spinning non-blocking `recv`, not by the
//! reactor. Every call is still answered whole and in order, small or 1 MiB, and after
//! pauses long enough for the spin to give up.

mod common;

use common::{echo_record, echo_reply, TestServer};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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
        let (got, body) = echo_reply(&mut s, Duration::from_secs(10)).await;
        assert_eq!(got, xid);
        assert_eq!(body, args, "call {xid} echoed whole");
    }
    srv.stop().await.expect("stop");
}
