//! Random input never panics the server, never gets a malformed reply, and never affects
//! other connections.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use txnfs_rpc::{decode_reply, encode_call, record, AuthSys, Credential, RpcClient};

/// Feed `wire` on a fresh connection, half-close, and check that the server answers only
/// with well-formed replies and then closes the connection.
async fn feed(srv_addr: std::net::SocketAddr, wire: &[u8]) -> Result<(), TestCaseError> {
    let mut s = TcpStream::connect(srv_addr)
        .await
        .map_err(|e| TestCaseError::fail(format!("connect: {e}")))?;
    write_lenient(&mut s, wire).await;
    let _ = s.shutdown().await;
    let (out, closed) = read_until_close(&mut s, Duration::from_secs(10)).await;
    prop_assert!(closed, "server did not close the connection after EOF");
    // Everything the server sent must be complete, decodable reply records.
    let mut out = Bytes::from(out);
    while !out.is_empty() {
        prop_assert!(out.len() >= 4, "partial record mark");
        let mark = out.get_u32();
        prop_assert!(mark & 0x8000_0000 != 0, "server replies use one fragment");
        let len = (mark & 0x7fff_ffff) as usize;
        prop_assert!(out.len() >= len, "truncated reply record");
        let rec = out.split_to(len);
        prop_assert!(decode_reply(rec).is_ok(), "undecodable reply");
    }
    Ok(())
}

async fn good_client_works(c: &RpcClient) -> Result<(), TestCaseError> {
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.call(PROG, 2, 1, Bytes::from_static(b"ping")),
    )
    .await
    .map_err(|_| TestCaseError::fail("good client timed out"))?
    .map_err(|e| TestCaseError::fail(format!("good client failed: {e}")))?;
    prop_assert_eq!(&r[..], b"ping");
    Ok(())
}

/// A plausible call (any credential shape, procedures that return quickly), then mutated.
fn mutated_call() -> impl Strategy<Value = Vec<u8>> {
    let cred = prop_oneof![
        Just(Credential::None),
        (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..20),
            proptest::collection::vec(any::<u32>(), 0..20)
        )
            .prop_map(|(uid, name, gids)| Credential::Sys(AuthSys {
                stamp: 1,
                machinename: Bytes::from(name),
                uid,
                gid: uid,
                gids,
            })),
    ];
    (
        any::<u32>(),
        prop_oneof![Just(PROG), any::<u32>()],
        0u32..4,
        prop_oneof![Just(0u32), Just(1), Just(3), Just(5)],
        cred,
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(
            |(xid, prog, vers, proc_num, cred, args, flips, cut, do_cut)| {
                let mut m = encode_call(xid, prog, vers, proc_num, &cred, &args).to_vec();
                for (i, b) in flips {
                    let i = i.index(m.len());
                    m[i] = b;
                }
                if do_cut {
                    m.truncate(cut.index(m.len() + 1));
                }
                m
            },
        )
}

fn inputs() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Random bytes as one well-framed record.
        proptest::collection::vec(any::<u8>(), 0..512).prop_map(|v| record(&v).to_vec()),
        // A mutated call as one record.
        mutated_call().prop_map(|v| record(&v).to_vec()),
        // Several mutated calls pipelined.
        proptest::collection::vec(mutated_call(), 1..5)
            .prop_map(|vs| { vs.iter().flat_map(|v| record(v).to_vec()).collect() }),
        // Raw bytes with no framing at all (record marks are whatever they are).
        proptest::collection::vec(any::<u8>(), 0..512),
    ]
}

/// Panics anywhere in this test binary other than the toy service's deliberate one.
static UNEXPECTED_PANICS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn random_records_never_hurt_the_server() {
    // Spawned server tasks that panic would be swallowed by tokio; count them instead.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        if !msg.contains("on purpose") {
            UNEXPECTED_PANICS.fetch_add(1, Ordering::Relaxed);
        }
        default_hook(info)
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (srv, good) = rt.block_on(async {
        let srv = TestServer::start().await;
        let good = RpcClient::connect(srv.addr, Credential::None)
            .await
            .expect("connect");
        (srv, good)
    });
    let mut runner = TestRunner::new(Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&inputs(), |wire| {
        rt.block_on(async {
            feed(srv.addr, &wire).await?;
            good_client_works(&good).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(async {
        // A brand-new connection is served too, and the server shuts down cleanly.
        let c = RpcClient::connect(srv.addr, Credential::None)
            .await
            .expect("connect");
        good_client_works(&c).await.expect("fresh client");
        assert!(!srv.handle.is_finished());
        // Every fed connection was closed and reported (+ none of the two good ones yet).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let closed = srv.svc.closed.load(Ordering::Relaxed);
            if closed >= 300 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {closed} connections reported closed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(c);
        drop(good);
        srv.stop().await.expect("clean shutdown");
    });
    assert_eq!(
        UNEXPECTED_PANICS.load(Ordering::Relaxed),
        0,
        "a task panicked"
    );
}
