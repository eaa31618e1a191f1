//! RPC-with-TLS (RFC 9289) at the transport: the AUTH_TLS probe answered STARTTLS and
//! the connection upgraded; calls, large records and callbacks inside TLS; plain
//! connections beside TLS ones; the probe refused by a server without TLS; an
//! untrusted or misnamed server certificate refused by the client; the verified
//! client certificate's identity handed to the service; a certificate replaced while
//! serving; configuration errors.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use txnfs_rpc::msg::{CallHeader, OpaqueAuth, AUTH_TLS};
use txnfs_rpc::{
    read_record, CallReply, ClientConfig, ClientTls, Credential, RpcClient, RpcError, ServerTls,
    TlsConfigError,
};
use txnfs_testbed::certs::{CertFiles, TestCa};

const T: Duration = Duration::from_secs(10);

struct Pki {
    dir: tempfile::TempDir,
    ca: TestCa,
    server: CertFiles,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new(dir.path(), "good");
    let server = ca.server(dir.path(), "server");
    Pki { dir, ca, server }
}

fn server_tls(p: &Pki, client_ca: Option<&Path>) -> Arc<ServerTls> {
    Arc::new(
        ServerTls::from_pem_files(&p.server.cert, &p.server.key, client_ca).expect("server TLS"),
    )
}

async fn tls_server(p: &Pki, client_ca: Option<&Path>) -> TestServer {
    let tls = server_tls(p, client_ca);
    TestServer::start_set(|c| c.tls = Some(tls)).await
}

async fn tls_client(addr: std::net::SocketAddr, tls: ClientTls) -> Result<RpcClient, RpcError> {
    let cfg = ClientConfig {
        tls: Some(tls),
        ..ClientConfig::default()
    };
    tokio::time::timeout(
        T,
        RpcClient::connect_with_config(addr, Credential::None, cfg),
    )
    .await
    .expect("connect in time")
}

fn trusting(ca: &Path) -> ClientTls {
    ClientTls::from_pem_files(ca, None).expect("client TLS")
}

/// What the toy service saw of the connection: 0 plain, 1 TLS, 2 mTLS + identity.
async fn conn_tls(c: &RpcClient) -> (u32, String) {
    let r = c.call(PROG, 1, 6, Bytes::new()).await.expect("proc 6");
    let kind = u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
    (kind, String::from_utf8_lossy(&r[4..]).into_owned())
}

#[tokio::test]
async fn starttls_then_calls_run_inside_tls() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let c = tls_client(srv.addr, trusting(&p.ca.cert_pem))
        .await
        .expect("TLS connect");
    assert_eq!(conn_tls(&c).await, (1, String::new()));
    // A record of several TLS records (TLS carries at most 16 KiB per record).
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let echoed = c
        .call(PROG, 1, 1, Bytes::from(big.clone()))
        .await
        .expect("echo");
    assert_eq!(echoed.len(), big.len());
    assert!(echoed == big, "the echo came back changed");
    // Many calls at once, replies coalesced by the writer.
    let c = Arc::new(c);
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.call(PROG, 1, 1, Bytes::from(i.to_be_bytes().to_vec()))
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(
            t.await.expect("task").expect("echo")[..],
            (i as u32).to_be_bytes()
        );
    }
    // A plain client is still served by the same server.
    let plain = srv.client().await;
    assert_eq!(conn_tls(&plain).await, (0, String::new()));
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn the_probe_is_answered_starttls_and_tls_follows() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    let header = CallHeader {
        xid: 77,
        rpcvers: 2,
        prog: PROG,
        vers: 1,
        proc_num: 0,
        cred: OpaqueAuth {
            flavor: AUTH_TLS,
            body: Bytes::new(),
        },
        verf: OpaqueAuth::none(),
    };
    let mut msg = BytesMut::new();
    txnfs_xdr::Encode::encode(&header, &mut msg);
    s.write_all(&txnfs_rpc::record(&msg)).await.expect("probe");
    let reply = tokio::time::timeout(T, read_record(&mut s, 4096))
        .await
        .expect("answer in time")
        .expect("answer");
    // xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE "STARTTLS", SUCCESS.
    let mut want = BytesMut::new();
    for w in [77u32, 1, 0, 0, 8] {
        want.put_u32(w);
    }
    want.extend_from_slice(b"STARTTLS");
    want.put_u32(0);
    assert_eq!(reply[..], want[..]);
    // The server now expects a TLS ClientHello: a plain RPC call gets no RPC reply
    // (the server's TLS layer refuses it and closes).
    s.write_all(&txnfs_rpc::record(&txnfs_rpc::encode_call(
        5,
        PROG,
        1,
        0,
        &Credential::None,
        &[],
    )))
    .await
    .expect("write");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(T, s.read_to_end(&mut rest))
        .await
        .expect("closed in time");
    // Nothing, or a TLS alert record (content type 21, version 0x0303): no RPC reply.
    assert!(
        rest.is_empty() || rest.starts_with(&[0x15, 0x03, 0x03]),
        "a plain call after STARTTLS was answered in clear: {rest:?}"
    );
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn a_server_without_tls_refuses_the_probe() {
    let p = pki();
    let srv = TestServer::start().await;
    let err = tls_client(srv.addr, trusting(&p.ca.cert_pem))
        .await
        .err()
        .expect("refused");
    match &err {
        RpcError::TlsRefused { why, .. } => {
            assert!(why.contains("does not offer RPC-with-TLS"), "{why}");
            assert!(why.contains("BadCred"), "{why}");
        }
        e => panic!("expected TlsRefused, got {e:?}"),
    }
    // The server keeps serving plain clients.
    assert_echo(
        &srv.client().await,
        1,
        b"still",
        "plain after a refused probe",
    )
    .await;
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_refused() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let other = TestCa::new(p.dir.path(), "other");
    let err = tls_client(srv.addr, trusting(&other.cert_pem))
        .await
        .err()
        .expect("refused");
    match &err {
        RpcError::TlsHandshake { why, .. } => {
            assert!(why.contains("certificate"), "{why}");
            assert!(why.contains("UnknownIssuer"), "{why}");
        }
        e => panic!("expected TlsHandshake, got {e:?}"),
    }
    assert_eq!(srv.svc.calls.load(std::sync::atomic::Ordering::Relaxed), 0);
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn a_replaced_certificate_serves_new_handshakes_and_old_connections_go_on() {
    let p = pki();
    let tls = server_tls(&p, None);
    let shared = tls.clone();
    let srv = TestServer::start_set(|c| c.tls = Some(shared)).await;
    let before = tls.certificate();
    assert!(
        before.starts_with("CN=txnfs test server sha256:"),
        "{before}"
    );
    let early = tls_client(srv.addr, trusting(&p.ca.cert_pem))
        .await
        .expect("TLS connect before the swap");
    assert_eq!(conn_tls(&early).await, (1, String::new()));

    // A certificate of another CA, with client verification on.
    let ca2 = TestCa::new(p.dir.path(), "second");
    let server2 = ca2.server(p.dir.path(), "server2");
    let next = ServerTls::from_pem_files(&server2.cert, &server2.key, Some(&ca2.cert_pem))
        .expect("second TLS");
    tls.replace_with(next);
    assert!(tls.verifies_clients());
    assert_ne!(tls.certificate(), before);

    // New handshakes: the second CA's certificate, the first CA no longer trusted.
    let late = tls_client(srv.addr, trusting(&ca2.cert_pem))
        .await
        .expect("TLS connect after the swap");
    assert_eq!(conn_tls(&late).await, (1, String::new()));
    match tls_client(srv.addr, trusting(&p.ca.cert_pem)).await {
        Err(RpcError::TlsHandshake { why, .. }) => assert!(why.contains("UnknownIssuer"), "{why}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("the old certificate is still served"),
    }
    // The connection made before the swap goes on.
    assert_eq!(conn_tls(&early).await, (1, String::new()));
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn a_server_certificate_for_another_name_is_refused() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let tls = trusting(&p.ca.cert_pem)
        .with_server_name("nfs.elsewhere.test")
        .expect("name");
    let err = tls_client(srv.addr, tls).await.err().expect("refused");
    let text = err.to_string();
    assert!(matches!(err, RpcError::TlsHandshake { .. }), "{text}");
    assert!(text.contains("not valid for name"), "{text}");
    // By name: the certificate carries `localhost`.
    let tls = trusting(&p.ca.cert_pem)
        .with_server_name("localhost")
        .expect("name");
    let c = tls_client(srv.addr, tls)
        .await
        .expect("localhost is in the certificate");
    assert_eq!(conn_tls(&c).await.0, 1);
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn a_verified_client_certificate_names_the_client() {
    let p = pki();
    let srv = tls_server(&p, Some(&p.ca.cert_pem)).await;
    let alice = p.ca.client(p.dir.path(), "alice", "alice");
    let tls =
        ClientTls::from_pem_files(&p.ca.cert_pem, Some((&alice.cert, &alice.key))).expect("mTLS");
    let c = tls_client(srv.addr, tls).await.expect("mTLS connect");
    assert_eq!(conn_tls(&c).await, (2, "CN=alice".to_string()));
    // Without a certificate: TLS, no identity.
    let c = tls_client(srv.addr, trusting(&p.ca.cert_pem))
        .await
        .expect("TLS connect");
    assert_eq!(conn_tls(&c).await, (1, String::new()));
    // A certificate from a CA the server does not trust: the handshake fails (the
    // server refuses it, the client sees the alert on its first read or at once).
    let other = TestCa::new(p.dir.path(), "other");
    let mallory = other.client(p.dir.path(), "mallory", "mallory");
    let tls = ClientTls::from_pem_files(&p.ca.cert_pem, Some((&mallory.cert, &mallory.key)))
        .expect("mTLS");
    let refused = match tls_client(srv.addr, tls).await {
        Err(e) => e.to_string(),
        Ok(c) => match c.call(PROG, 1, 6, Bytes::new()).await {
            Err(e) => e.to_string(),
            Ok(r) => panic!("an untrusted client certificate was served: {r:?}"),
        },
    };
    assert!(!refused.is_empty());
    srv.stop().await.expect("stop");
}

#[tokio::test]
async fn callbacks_travel_inside_tls() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let handler: txnfs_rpc::CallHandler = Arc::new(|call: txnfs_rpc::IncomingCall| {
        Box::pin(async move {
            let mut out = BytesMut::from(&b"cb:"[..]);
            out.extend_from_slice(&call.args);
            CallReply::Success(out.freeze())
        })
    });
    let cfg = ClientConfig {
        tls: Some(trusting(&p.ca.cert_pem)),
        ..ClientConfig::default()
    };
    let c = RpcClient::connect_with_handler(srv.addr, Credential::None, cfg, Some(handler))
        .await
        .expect("TLS connect");
    assert_eq!(conn_tls(&c).await.0, 1);
    let bc = srv.svc.back_channels.lock().expect("lock")[0].clone();
    let got = bc
        .call(
            0x4000_0000,
            1,
            1,
            &Credential::None,
            Bytes::from_static(b"recall"),
            T,
        )
        .await
        .expect("callback answered");
    assert_eq!(&got[..], b"cb:recall");
    srv.stop().await.expect("stop");
}

#[test]
fn configuration_errors_name_the_file_and_the_problem() {
    let p = pki();
    let missing = p.dir.path().join("missing.pem");
    let e = ServerTls::from_pem_files(&missing, &p.server.key, None).unwrap_err();
    assert!(matches!(e, TlsConfigError::Read { .. }), "{e}");
    assert!(e.to_string().contains("missing.pem"), "{e}");
    // A key file given as the certificate: no certificate in it.
    let e = ServerTls::from_pem_files(&p.server.key, &p.server.key, None).unwrap_err();
    assert!(matches!(e, TlsConfigError::NoCertificate { .. }), "{e}");
    // A certificate given as the key: no key in it.
    let e = ServerTls::from_pem_files(&p.server.cert, &p.server.cert, None).unwrap_err();
    assert!(matches!(e, TlsConfigError::NoKey { .. }), "{e}");
    // Another certificate's key.
    let other = p.ca.server(p.dir.path(), "other-server");
    let e = ServerTls::from_pem_files(&p.server.cert, &other.key, None).unwrap_err();
    assert!(matches!(e, TlsConfigError::KeyMismatch { .. }), "{e}");
    // A client CA file without certificates.
    let e =
        ServerTls::from_pem_files(&p.server.cert, &p.server.key, Some(&p.server.key)).unwrap_err();
    assert!(matches!(e, TlsConfigError::NoCertificate { .. }), "{e}");
    assert!(
        ServerTls::from_pem_files(&p.server.cert, &p.server.key, Some(&p.ca.cert_pem))
            .expect("valid")
            .verifies_clients()
    );
}
