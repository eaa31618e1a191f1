//! Issue 17 item 7: a global budget for the bytes of requests and replies in flight.
//! 64 connections each push 1 MiB WRITE COMPOUNDs without reading a reply while the
//! server is slow; the transport stops reading sockets at the budget (back-pressure),
//! the bytes it holds never exceed it, and once the clients read, every request has
//! its answer (ADR 0029).

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txnfs_server::nfs::*;
use txnfs_server::Config;
use txnfs_xdr::{Decode, Encode};

const CONNS: usize = 64;
const PER_CONN: usize = 4;
const WRITE_SIZE: usize = 1 << 20;
const BUDGET: usize = 8 << 20;

/// One RPC CALL record: COMPOUND { PUTROOTFH, WRITE of 1 MiB } (no SEQUENCE: answered
/// OP_NOT_IN_SESSION after the executor's delay, which is all the transport needs).
fn write_record(xid: u32, data: &Bytes) -> Bytes {
    let args = COMPOUND4args {
        tag: Bytes::from_static(b"budget"),
        minorversion: 1,
        argarray: vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_WRITE(WRITE4args {
                stateid: stateid4 {
                    seqid: 0,
                    other: [0; 12],
                },
                offset: 0,
                stable: stable_how4::UNSTABLE4,
                data: data.clone(),
            }),
        ],
    }
    .to_bytes();
    let mut call = BytesMut::new();
    for v in [xid, 0, 2, 100003, 4, 1, 0, 0, 0, 0] {
        // xid, CALL, RPC v2, NFS, v4, COMPOUND, AUTH_NONE cred and verifier
        call.put_u32(v);
    }
    call.extend_from_slice(&args);
    let mut rec = BytesMut::with_capacity(4 + call.len());
    rec.put_u32(0x8000_0000 | call.len() as u32);
    rec.extend_from_slice(&call);
    rec.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_pushing_writes_stay_under_the_in_flight_budget() {
    let srv = start_server(|d| Config {
        max_in_flight_bytes: BUDGET,
        ..memory_config(d, false)
    })
    .await;
    // Slow COMPOUNDs, so that requests pile up faster than they are answered.
    srv.server.faults.delay_compounds(Duration::from_millis(20));
    let started = Instant::now();
    let data = Bytes::from(vec![0x5a; WRITE_SIZE]);
    let mut pushers = Vec::new();
    for c in 0..CONNS {
        let stream = TcpStream::connect(srv.addr).await.expect("connect");
        let data = data.clone();
        pushers.push(tokio::spawn(async move {
            let (rd, mut wr) = stream.into_split();
            for i in 0..PER_CONN {
                let rec = write_record((c * PER_CONN + i) as u32, &data);
                wr.write_all(&rec).await.expect("the server reads on");
            }
            (rd, wr)
        }));
    }
    // Nobody reads a reply while the requests go in.
    let stats = srv.server.stats.in_flight.clone();
    let mut conns = Vec::new();
    for p in pushers {
        conns.push(p.await.expect("pusher"));
        assert!(stats.peak() <= BUDGET);
    }
    // Every record is sent; now read every reply.
    for (c, (mut rd, _wr)) in conns.into_iter().enumerate() {
        for _ in 0..PER_CONN {
            let rec = tokio::time::timeout(
                Duration::from_secs(20),
                txnfs_rpc::read_record(&mut rd, 1 << 20),
            )
            .await
            .expect("answered in time")
            .expect("a reply record");
            let (xid, body) = txnfs_rpc::decode_reply(rec).expect("an RPC reply");
            assert_eq!(xid as usize / PER_CONN, c, "a reply of this connection");
            let r = COMPOUND4res::from_bytes(body.expect("accepted")).expect("COMPOUND4res");
            assert_eq!(r.status, nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
        }
    }
    let peak = stats.peak();
    assert!(peak <= BUDGET, "peak {peak} above the budget {BUDGET}");
    assert!(
        peak >= BUDGET / 2,
        "the budget was never approached (peak {peak}): no back-pressure shown"
    );
    // All given back once every reply is written.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats.in_use() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stats.in_use(), 0);
    assert!(started.elapsed() < Duration::from_secs(20));
}
