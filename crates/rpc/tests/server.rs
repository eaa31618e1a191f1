mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txnfs_rpc::msg::{CallHeader, OpaqueAuth, AUTH_SYS, RPCSEC_GSS};
use txnfs_rpc::{
    decode_reply, encode_call, read_record, record, AuthStat, AuthSys, Credential, RpcClient,
    RpcError,
};
use txnfs_xdr::Encode;

const T: Duration = Duration::from_secs(10);

fn sys_cred() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 7,
        machinename: Bytes::from_static(b"testhost"),
        uid: 1000,
        gid: 100,
        gids: vec![100, 101, 102],
    })
}

/// Send one raw record on a fresh connection and decode the single reply.
async fn raw_call(srv: &TestServer, msg: &[u8]) -> (u32, Result<Bytes, RpcError>) {
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    s.write_all(&record(msg)).await.expect("write");
    let rec = tokio::time::timeout(T, read_record(&mut s, 1 << 20))
        .await
        .expect("reply in time")
        .expect("reply record");
    decode_reply(rec).expect("decodable reply")
}

#[tokio::test]
async fn null_round_trip() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    let r = null(&c).await.expect("NULL");
    assert!(r.is_empty());
    let c2 = RpcClient::connect(srv.addr, sys_cred())
        .await
        .expect("connect");
    assert_echo(&c2, 2, b"abcd", "echo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_out_of_order() {
    let srv = TestServer::start().await;
    let c = Arc::new(srv.client().await);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            // Earlier calls sleep longer, so replies come back roughly in reverse order.
            let ms = (200 - i) % 100;
            let mut args = BytesMut::new();
            args.put_u32(ms);
            args.put_u32(i);
            args.put_slice(&vec![i as u8; (i as usize) * 7]);
            let args = args.freeze();
            let r = c.call(PROG, 1, 2, args.clone()).await.expect("call");
            assert_eq!(r, args, "reply of call {i} matched to the wrong xid");
            i
        }));
    }
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.expect("task"));
    }
    assert_eq!(seen.len(), 200);
    // Executed concurrently: 200 calls of up to 100 ms take far less than their sum (~10 s).
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn multi_fragment_request_is_reassembled() {
    let srv = TestServer::start().await;
    let args: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let msg = encode_call(0xabcd, PROG, 1, 1, &Credential::None, &args);
    // Three fragments: split inside the header, inside the args, and an empty middle one.
    let cuts = [
        (0, 10, false),
        (10, 10, false),
        (10, 500, false),
        (500, msg.len(), true),
    ];
    let mut wire = Vec::new();
    for (a, b, last) in cuts {
        let len = (b - a) as u32;
        wire.extend_from_slice(&be32(if last { len | 0x8000_0000 } else { len }));
        wire.extend_from_slice(&msg[a..b]);
    }
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    // Dribble the bytes to exercise partial reads.
    for chunk in wire.chunks(97) {
        s.write_all(chunk).await.expect("write");
        s.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rec = read_record(&mut s, 1 << 20).await.expect("reply");
    let (xid, r) = decode_reply(rec).expect("decode");
    assert_eq!(xid, 0xabcd);
    assert_eq!(&r.expect("success")[..], &args[..]);

    // The same through the client's raw helper.
    let c = srv.client().await;
    let r = c
        .call_raw_record(0xabcd, Bytes::from(wire))
        .await
        .expect("raw call");
    assert_eq!(&r[..], &args[..]);
}

#[tokio::test]
async fn accept_errors() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    assert!(matches!(
        c.call(PROG + 1, 1, 0, Bytes::new()).await,
        Err(RpcError::ProgUnavail)
    ));
    match c.call(PROG, 3, 0, Bytes::new()).await {
        Err(RpcError::ProgMismatch { low, high }) => assert_eq!((low, high), (1, 2)),
        other => panic!("expected PROG_MISMATCH, got {other:?}"),
    }
    match c.call(PROG, 0, 0, Bytes::new()).await {
        Err(RpcError::ProgMismatch { low, high }) => assert_eq!((low, high), (1, 2)),
        other => panic!("expected PROG_MISMATCH, got {other:?}"),
    }
    assert!(matches!(
        c.call(PROG, 1, 99, Bytes::new()).await,
        Err(RpcError::ProcUnavail)
    ));
    assert!(matches!(
        c.call(PROG, 1, 3, Bytes::new()).await,
        Err(RpcError::GarbageArgs)
    ));
    // A panicking procedure yields SYSTEM_ERR and does not hurt the connection.
    assert!(matches!(
        c.call(PROG, 1, 4, Bytes::new()).await,
        Err(RpcError::SystemErr)
    ));
    assert!(null(&c).await.is_ok());
}

fn header(xid: u32, rpcvers: u32, cred: OpaqueAuth) -> Vec<u8> {
    CallHeader {
        xid,
        rpcvers,
        prog: PROG,
        vers: 1,
        proc_num: 0,
        cred,
        verf: OpaqueAuth::none(),
    }
    .to_bytes()
    .to_vec()
}

#[tokio::test]
async fn denied_replies() {
    let srv = TestServer::start().await;

    let (xid, r) = raw_call(&srv, &header(11, 3, OpaqueAuth::none())).await;
    assert_eq!(xid, 11);
    match r {
        Err(RpcError::RpcMismatch { low, high }) => assert_eq!((low, high), (2, 2)),
        other => panic!("expected RPC_MISMATCH, got {other:?}"),
    }

    let gss = OpaqueAuth {
        flavor: RPCSEC_GSS,
        body: Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0, 0]),
    };
    let (xid, r) = raw_call(&srv, &header(12, 2, gss)).await;
    assert_eq!(xid, 12);
    assert!(
        matches!(r, Err(RpcError::AuthError(AuthStat::BadCred))),
        "{r:?}"
    );

    // AUTH_SYS with 17 gids (limit 16) and with a 256-byte machine name.
    let mut too_many = sys_cred();
    if let Credential::Sys(s) = &mut too_many {
        s.gids = (0..17).collect();
    }
    let (_, r) = raw_call(&srv, &header(13, 2, too_many.to_opaque_auth())).await;
    assert!(
        matches!(r, Err(RpcError::AuthError(AuthStat::BadCred))),
        "{r:?}"
    );
    let long_name = AuthSys {
        machinename: Bytes::from(vec![b'x'; 256]),
        ..Default::default()
    };
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: long_name.to_bytes(),
    };
    let (_, r) = raw_call(&srv, &header(14, 2, cred)).await;
    assert!(
        matches!(r, Err(RpcError::AuthError(AuthStat::BadCred))),
        "{r:?}"
    );

    // A valid AUTH_SYS credential goes through.
    let (xid, r) = raw_call(&srv, &header(15, 2, sys_cred().to_opaque_auth())).await;
    assert_eq!(xid, 15);
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test]
async fn malformed_header_gets_garbage_args() {
    let srv = TestServer::start().await;
    // xid, CALL, rpcvers 2, prog, then nothing.
    let mut msg = Vec::new();
    for v in [77u32, 0, 2, PROG] {
        msg.extend_from_slice(&be32(v));
    }
    let (xid, r) = raw_call(&srv, &msg).await;
    assert_eq!(xid, 77);
    assert!(matches!(r, Err(RpcError::GarbageArgs)), "{r:?}");

    // Bad msg_type.
    let (xid, r) = raw_call(&srv, &[0, 0, 0, 78, 0, 0, 0, 9]).await;
    assert_eq!(xid, 78);
    assert!(matches!(r, Err(RpcError::GarbageArgs)), "{r:?}");
}

/// Sends `bad` on its own connection; asserts the server closes it, and that a client
/// connected before keeps working.
async fn assert_closes_only_that_connection(srv: &TestServer, bad: &[u8], half_close: bool) {
    let good = srv.client().await;
    null(&good).await.expect("before");
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    write_lenient(&mut s, bad).await;
    if half_close {
        let _ = s.shutdown().await;
    }
    let (reply, closed) = read_until_close(&mut s, Duration::from_secs(5)).await;
    assert!(closed, "server kept the bad connection open");
    assert!(reply.is_empty(), "unexpected reply bytes {reply:?}");
    assert_echo(&good, 1, b"still here", "after").await;
}

#[tokio::test]
async fn hostile_connections_are_closed_alone() {
    let srv = TestServer::start().await;
    // Record too short for an xid.
    assert_closes_only_that_connection(&srv, &[0x80, 0, 0, 2, 1, 2], false).await;
    // Plain text: the "record mark" declares ~1.2 GB.
    assert_closes_only_that_connection(&srv, b"GET / HTTP/1.1\r\n\r\n", false).await;
    // Truncated record: 100 bytes declared, 10 sent, then EOF.
    let mut t = be32(0x8000_0064).to_vec();
    t.extend_from_slice(&[1; 10]);
    assert_closes_only_that_connection(&srv, &t, true).await;
    // Declared 1 GiB, last fragment, followed by a few bytes: closed without reading it all.
    let mut big = be32(0x8000_0000 | (1 << 30)).to_vec();
    big.extend_from_slice(&[0; 64]);
    let started = Instant::now();
    assert_closes_only_that_connection(&srv, &big, false).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    // 1 GiB declared over many non-last fragments that each fit but add up.
    let mut frags = Vec::new();
    for _ in 0..3 {
        frags.extend_from_slice(&be32(2 * 1024 * 1024));
        frags.extend_from_slice(&vec![0; 2 * 1024 * 1024]);
    }
    assert_closes_only_that_connection(&srv, &frags, false).await;
}

#[tokio::test]
async fn oversized_record_respects_config() {
    let srv = TestServer::start_set(|c| c.max_record_size = 1024).await;
    let c = srv.client().await;
    let ok = Bytes::from(vec![5u8; 900]);
    assert_eq!(c.call(PROG, 1, 1, ok.clone()).await.expect("fits"), ok);
    let r = c.call(PROG, 1, 1, Bytes::from(vec![5u8; 1100])).await;
    assert!(matches!(r, Err(RpcError::Disconnected)), "{r:?}");
    // The dead client reports Disconnected from now on; the server serves others.
    assert!(matches!(null(&c).await, Err(RpcError::Disconnected)));
    let c2 = srv.client().await;
    assert_eq!(c2.call(PROG, 1, 1, ok.clone()).await.expect("fits"), ok);
}

#[tokio::test]
async fn reply_messages_to_server_are_dropped() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    // A REPLY (msg_type 1) is ignored; the following call on the same connection is answered.
    let mut reply = Vec::new();
    for v in [5u32, 1, 0, 0, 0, 0] {
        reply.extend_from_slice(&be32(v));
    }
    s.write_all(&record(&reply)).await.expect("write");
    s.write_all(&record(&encode_call(6, PROG, 1, 0, &Credential::None, &[])))
        .await
        .expect("write");
    let rec = tokio::time::timeout(T, read_record(&mut s, 1 << 20))
        .await
        .expect("in time")
        .expect("record");
    let (xid, r) = decode_reply(rec).expect("decode");
    assert_eq!(xid, 6);
    assert!(r.is_ok());
}

#[tokio::test]
async fn pipelined_requests_in_one_write() {
    let srv = TestServer::start().await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let mut wire = Vec::new();
    for xid in 0..50u32 {
        wire.extend_from_slice(&record(&encode_call(
            xid,
            PROG,
            1,
            1,
            &Credential::None,
            &be32(xid),
        )));
    }
    s.write_all(&wire).await.expect("write");
    let mut seen = [false; 50];
    for _ in 0..50 {
        let rec = read_record(&mut s, 1 << 20).await.expect("record");
        let (xid, r) = decode_reply(rec).expect("decode");
        assert_eq!(&r.expect("ok")[..], &be32(xid));
        assert!(!std::mem::replace(&mut seen[xid as usize], true));
    }
}

#[tokio::test]
async fn in_flight_limit_still_answers_everything() {
    let srv = TestServer::start_set(|c| c.max_in_flight_per_conn = 3).await;
    let c = Arc::new(srv.client().await);
    let mut tasks = Vec::new();
    for i in 0..30u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut a = BytesMut::new();
            a.put_u32(20);
            a.put_u32(i);
            let a = a.freeze();
            assert_eq!(c.call(PROG, 1, 2, a.clone()).await.expect("call"), a);
        }));
    }
    let start = Instant::now();
    for t in tasks {
        t.await.expect("task");
    }
    // 30 calls of 20 ms, 3 at a time: at least ~200 ms.
    assert!(
        start.elapsed() >= Duration::from_millis(180),
        "{:?}",
        start.elapsed()
    );
}

/// With every connection busy there is nobody to close for the new one: it is refused.
/// (Idle connections make room instead: tests/conn_limits.rs.)
#[tokio::test]
async fn max_connections_refuses_extra_when_all_busy() {
    let srv = TestServer::start_set(|c| c.max_connections = 1).await;
    let c1 = Arc::new(srv.client().await);
    null(&c1).await.expect("first");
    let busy = {
        let c1 = c1.clone();
        tokio::spawn(async move {
            c1.call(PROG, 1, 2, Bytes::from_static(&[0, 0, 1, 244]))
                .await
        })
    };
    // Let the slow call (500 ms) reach the server.
    while srv.svc.calls.load(Ordering::Relaxed) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let c2 = srv.client().await;
    assert!(matches!(null(&c2).await, Err(RpcError::Disconnected)));
    busy.await
        .expect("task")
        .expect("the busy call is answered");
    null(&c1).await.expect("first still works");
}

#[tokio::test]
async fn connection_closed_is_reported() {
    let srv = TestServer::start().await;
    let c = srv.client().await;
    null(&c).await.expect("call");
    drop(c);
    let deadline = Instant::now() + T;
    while srv.svc.closed.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "connection_closed never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(srv.svc.closed.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_calls() {
    let srv = TestServer::start().await;
    let addr = srv.addr;
    let c = Arc::new(srv.client().await);
    let mut a = BytesMut::new();
    a.put_u32(300);
    let a = a.freeze();
    let call = {
        let c = c.clone();
        let a = a.clone();
        tokio::spawn(async move { c.call(PROG, 1, 2, a).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let svc = srv.svc.clone();
    let started = Instant::now();
    srv.stop().await.expect("serve returned Ok");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        call.await.expect("task").expect("in-flight call answered"),
        a
    );
    assert_eq!(svc.closed.load(Ordering::Relaxed), 1);
    // No longer accepting.
    assert!(RpcClient::connect(addr, Credential::None).await.is_err());
}

#[tokio::test]
async fn client_reports_disconnect_for_pending_calls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        // Read the call, then hang up without answering.
        let _ = read_record(&mut s, 1 << 20).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    });
    let c = RpcClient::connect(addr, Credential::None)
        .await
        .expect("connect");
    let r = tokio::time::timeout(T, c.call(PROG, 1, 0, Bytes::new()))
        .await
        .expect("in time");
    assert!(matches!(r, Err(RpcError::Disconnected)), "{r:?}");
}

#[tokio::test]
async fn shutdown_grace_is_bounded() {
    let srv = TestServer::start_set(|c| c.shutdown_grace = Duration::from_millis(200)).await;
    let c = Arc::new(srv.client().await);
    let call = {
        let c = c.clone();
        tokio::spawn(async move {
            c.call(PROG, 1, 2, Bytes::from_static(&[0, 0, 7, 208]))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let svc = srv.svc.clone();
    let started = Instant::now();
    srv.stop().await.expect("serve returned Ok");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    // The 2 s call was cut short: the client hears SYSTEM_ERR or loses the connection.
    let r = tokio::time::timeout(T, call)
        .await
        .expect("in time")
        .expect("task");
    assert!(
        matches!(r, Err(RpcError::Disconnected) | Err(RpcError::SystemErr)),
        "{r:?}"
    );
    assert_eq!(svc.closed.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn credential_and_conn_id_reach_the_service() {
    use bytes::Buf;
    let srv = TestServer::start().await;
    let c1 = RpcClient::connect(srv.addr, sys_cred())
        .await
        .expect("connect");
    let c2 = srv.client().await;
    let mut r = c1.call(PROG, 1, 5, Bytes::new()).await.expect("whoami");
    assert_eq!(r.get_u32(), 1);
    assert_eq!((r.get_u32(), r.get_u32(), r.get_u32()), (1000, 100, 3));
    assert_eq!((r.get_u32(), r.get_u32(), r.get_u32()), (100, 101, 102));
    let id1 = r.get_u64();
    let mut r = c1.call(PROG, 1, 5, Bytes::new()).await.expect("whoami");
    r.advance(7 * 4);
    assert_eq!(r.get_u64(), id1, "same connection, same conn_id");
    let mut r = c2.call(PROG, 1, 5, Bytes::new()).await.expect("whoami");
    assert_eq!(r.get_u32(), 0);
    assert_ne!(r.get_u64(), id1, "conn_id is per connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_records_both_ways() {
    let srv = TestServer::start().await;
    let c = Arc::new(srv.client().await);
    let mut tasks = Vec::new();
    for i in 0..6u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let len = if i == 0 {
                4 * 1024 * 1024
            } else {
                700_000 + i as usize
            };
            let args: Bytes = (0..len)
                .map(|j| (j as u32 ^ i) as u8)
                .collect::<Vec<u8>>()
                .into();
            let r = c.call(PROG, 1, 1, args.clone()).await.expect("big echo");
            assert!(r == args, "big echo {i} corrupted");
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    // A reply above the client's limit drops the client's connection, not the server.
    let small = RpcClient::connect_with_config(
        srv.addr,
        Credential::None,
        txnfs_rpc::ClientConfig {
            max_record_size: 1000,
            ..Default::default()
        },
    )
    .await
    .expect("connect");
    assert!(small
        .call(PROG, 1, 1, Bytes::from(vec![1u8; 900]))
        .await
        .is_ok());
    let r = small.call(PROG, 1, 1, Bytes::from(vec![1u8; 2000])).await;
    assert!(
        matches!(r, Err(RpcError::Disconnected)),
        "{:?}",
        r.map(|b| b.len())
    );
    assert!(null(&c).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_does_not_read_gets_backpressure_not_loss() {
    let srv = TestServer::start_set(|c| c.max_in_flight_per_conn = 4).await;
    let s = TcpStream::connect(srv.addr).await.expect("connect");
    let (mut rd, mut wr) = s.into_split();
    const N: u32 = 100;
    let writer = tokio::spawn(async move {
        for xid in 0..N {
            let mut args = vec![xid as u8; 64 * 1024];
            args[..4].copy_from_slice(&be32(xid));
            let m = encode_call(xid, PROG, 1, 1, &Credential::None, &args);
            wr.write_all(&record(&m)).await.expect("write");
        }
        wr
    });
    // Nobody reads for a while: the server must stall, not buffer everything or give up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = [false; N as usize];
    for _ in 0..N {
        let rec = tokio::time::timeout(T, read_record(&mut rd, 1 << 20))
            .await
            .expect("in time")
            .expect("record");
        let (xid, r) = decode_reply(rec).expect("decode");
        let r = r.expect("success");
        assert_eq!(r.len(), 64 * 1024);
        assert_eq!(&r[..4], &be32(xid));
        assert!(!std::mem::replace(&mut seen[xid as usize], true));
    }
    writer.await.expect("writer");
}
