//! RPCSEC_GSS (RFC 2203) with Kerberos v5 at the transport, against a private MIT KDC:
//! contexts created on the NULL procedure, calls of the three services (krb5, krb5i,
//! krb5p) answered with the caller's principal, krb5p's arguments and results never in
//! clear on the wire while krb5i's are, a server with the wrong keytab and one without
//! Kerberos refused with a clear error, AUTH_SYS beside Kerberos on one server.
//!
//! The KDC binaries come from Debian's krb5-kdc, krb5-admin-server and krb5-user; when
//! they are missing the test fails saying so (CI installs them).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use txnfs_rpc::gss::{GssClientConfig, GssServer, GssServerConfig, GssService};
use txnfs_rpc::{ClientConfig, Credential, RpcClient, RpcError};
use txnfs_testbed::kdc::{Kdc, REALM, USER};

const T: Duration = Duration::from_secs(20);
const MARKER: &[u8] = b"MARKER-7c1e5f-krb5-plaintext";

fn client_cfg(kdc: &Kdc, service: GssService) -> ClientConfig {
    ClientConfig {
        gss: Some(GssClientConfig {
            target: "nfs@localhost".into(),
            service,
            ccache: Some(format!("FILE:{}", kdc.ccache.display())),
            program: PROG,
            version: 1,
        }),
        ..ClientConfig::default()
    }
}

/// Copy `r` to `w`, appending what passes to `seen`.
async fn pipe(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    seen: Arc<Mutex<Vec<u8>>>,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 || w.write_all(&buf[..n]).await.is_err() {
            break;
        }
        seen.lock().expect("capture").extend_from_slice(&buf[..n]);
    }
    let _ = w.shutdown().await;
}

/// What a relay saw: client to server, server to client.
type Seen = Arc<Mutex<Vec<u8>>>;

/// A TCP relay to `to` that records the bytes of each direction.
async fn relay(to: std::net::SocketAddr) -> (std::net::SocketAddr, Seen, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let addr = l.local_addr().expect("addr");
    let (up, down): (Seen, Seen) = Default::default();
    let (u, d) = (up.clone(), down.clone());
    tokio::spawn(async move {
        while let Ok((a, _)) = l.accept().await {
            let Ok(b) = TcpStream::connect(to).await else {
                return;
            };
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            tokio::spawn(pipe(ar, bw, u.clone()));
            tokio::spawn(pipe(br, aw, d.clone()));
        }
    });
    (addr, up, down)
}

/// The last whole record (with its mark) in `bytes`, a stream of single-fragment
/// records.
fn last_record(bytes: &[u8]) -> Vec<u8> {
    let mut at = 0;
    let mut last = None;
    while at + 4 <= bytes.len() {
        let mark = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let len = (mark & 0x7fff_ffff) as usize;
        last = Some(bytes[at..at + 4 + len].to_vec());
        at += 4 + len;
    }
    last.expect("a record")
}

/// Send `record` on a new connection to `addr`: the reply record, if one comes
/// within half a second.
async fn send_alone(addr: std::net::SocketAddr, record: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(record).await.expect("send");
    let mut mark = [0u8; 4];
    let read = async {
        s.read_exact(&mut mark).await.ok()?;
        let mut body = vec![0u8; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
        s.read_exact(&mut body).await.ok()?;
        Some(body)
    };
    tokio::time::timeout(Duration::from_millis(500), read)
        .await
        .ok()
        .flatten()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn connect(addr: std::net::SocketAddr, cfg: ClientConfig) -> Result<RpcClient, RpcError> {
    tokio::time::timeout(
        T,
        RpcClient::connect_with_config(addr, Credential::None, cfg),
    )
    .await
    .expect("connect (and context creation) in time")
}

/// Wait (up to 5 s) for the server to hold `n` contexts; fails saying how many it holds.
async fn settle(gss: &GssServer, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while gss.contexts() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server holds {} RPCSEC_GSS contexts, not {n}",
            gss.contexts()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One test, in order: the environment (KRB5_CONFIG) is the process's, so the steps
/// do not run in parallel with each other.
#[test]
fn kerberos_at_the_transport() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Before the runtime's threads exist: nothing reads the environment yet.
    let kdc = Kdc::start_for_this_process(dir.path());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let gss = GssServer::new(&GssServerConfig {
            keytab: Some(kdc.service_keytab.clone()),
        })
        .expect("acceptor credential from the keytab");
        let contexts = gss.clone();
        let srv = TestServer::start_set(|c| c.gss = Some(gss)).await;
        let principal = format!("{USER}@{REALM}");

        // (1) every service: echo, and the principal the service sees.
        for service in [GssService::None, GssService::Integrity, GssService::Privacy] {
            let (addr, up, down) = relay(srv.addr).await;
            let c = connect(addr, client_cfg(&kdc, service))
                .await
                .unwrap_or_else(|e| panic!("{service:?}: context creation: {e}"));
            let back = c.call(PROG, 1, 1, Bytes::from_static(MARKER)).await;
            assert_eq!(back.expect("echo").as_ref(), MARKER, "{service:?}");
            let who = c.call(PROG, 1, 7, Bytes::new()).await.expect("whoami");
            assert_eq!(
                String::from_utf8_lossy(&who),
                format!("{} {principal}", service as u32),
                "{service:?}"
            );
            // Replies the transport makes (PROG_UNAVAIL, PROG_MISMATCH) and the
            // service's own errors carry the MIC of the sequence number as verifier
            // (RFC 2203 §5.3.3.2): the client checks it on every accepted reply, so a
            // reply with an AUTH_NONE verifier would fail as "reply verifier".
            let r = c.call(PROG + 1, 1, 0, Bytes::new()).await;
            assert!(
                matches!(r, Err(RpcError::ProgUnavail)),
                "{service:?}: unknown program: {r:?}"
            );
            let r = c.call(PROG, 9, 0, Bytes::new()).await;
            assert!(
                matches!(r, Err(RpcError::ProgMismatch { low: 1, high: 2 })),
                "{service:?}: unknown version: {r:?}"
            );
            let r = c.call(PROG, 1, 3, Bytes::new()).await;
            assert!(
                matches!(r, Err(RpcError::GarbageArgs)),
                "{service:?}: GARBAGE_ARGS of the service: {r:?}"
            );
            let r = c.call(PROG, 1, 99, Bytes::new()).await;
            assert!(
                matches!(r, Err(RpcError::ProcUnavail)),
                "{service:?}: unknown procedure: {r:?}"
            );
            // The context is still good after them.
            let back = c.call(PROG, 1, 1, Bytes::from_static(MARKER)).await;
            assert_eq!(back.expect("echo after errors").as_ref(), MARKER);
            // Many calls at once, beyond any ordering: all inside the window.
            let c = Arc::new(c);
            let calls: Vec<_> = (0..40u32)
                .map(|i| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        (
                            i,
                            c.call(PROG, 1, 1, Bytes::from(i.to_be_bytes().to_vec()))
                                .await,
                        )
                    })
                })
                .collect();
            for call in calls {
                let (i, r) = call.await.expect("task");
                assert_eq!(r.expect("concurrent echo").as_ref(), &i.to_be_bytes());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut wire = up.lock().expect("capture").clone();
            // A replay of the last call, on another connection: dropped, no reply
            // (§5.3.3.1). The same call with one header byte changed fails its MIC:
            // AUTH_ERROR RPCSEC_GSS_CREDPROBLEM, so silence above is the window's doing.
            let last = last_record(&wire);
            assert_eq!(
                send_alone(srv.addr, &last).await,
                None,
                "{service:?}: a replay was answered"
            );
            let mut forged = last.clone();
            forged[4 + 23] ^= 1; // the procedure number's last byte
            let reply = send_alone(srv.addr, &forged)
                .await
                .expect("a forged call is answered");
            assert_eq!(
                &reply[8..16],
                &[0, 0, 0, 1, 0, 0, 0, 1],
                "{service:?}: MSG_DENIED / AUTH_ERROR"
            );
            assert_eq!(
                &reply[16..20],
                &13u32.to_be_bytes(),
                "RPCSEC_GSS_CREDPROBLEM"
            );
            wire.extend_from_slice(&down.lock().expect("capture"));
            assert!(!wire.is_empty());
            let clear = contains(&wire, MARKER);
            match service {
                GssService::Privacy => assert!(!clear, "krb5p: the marker crossed in clear"),
                _ => assert!(
                    clear,
                    "{service:?}: the marker is expected in clear (signed only)"
                ),
            }
        }

        // (1c) RPCSEC_GSS_DESTROY when our client closes (RFC 2203 §5.4): the server
        // frees the context, whether the client is closed (the answer awaited and its
        // verifier checked) or dropped (DESTROY sent unanswered before the socket
        // closes).
        settle(&contexts, 0).await;
        for service in [GssService::None, GssService::Integrity, GssService::Privacy] {
            let c = connect(srv.addr, client_cfg(&kdc, service))
                .await
                .expect("context");
            assert_echo(&c, 1, b"before close", "echo before close").await;
            assert_eq!(contexts.contexts(), 1, "{service:?}: one context");
            assert!(c.close().await, "{service:?}: DESTROY confirmed");
            assert_eq!(contexts.contexts(), 0, "{service:?}: freed by DESTROY");
            let c = connect(srv.addr, client_cfg(&kdc, service))
                .await
                .expect("context");
            assert_eq!(contexts.contexts(), 1, "{service:?}: one context");
            drop(c);
            settle(&contexts, 0).await;
        }

        // (2) AUTH_SYS still served beside Kerberos (export rules decide per export).
        let plain = srv.client().await;
        assert_echo(&plain, 1, b"plain", "AUTH_SYS beside RPCSEC_GSS").await;
        let who = plain.call(PROG, 1, 7, Bytes::new()).await.expect("whoami");
        assert!(who.is_empty(), "no GSS caller for AUTH_SYS");
        srv.stop().await.expect("stop");

        // (3) a server whose keytab has a stale key: a clear error, not a hang.
        let wrong = GssServer::new(&GssServerConfig {
            keytab: Some(kdc.wrong_keytab.clone()),
        })
        .expect("the stale keytab still loads");
        let srv = TestServer::start_set(|c| c.gss = Some(wrong)).await;
        let err = connect(srv.addr, client_cfg(&kdc, GssService::Privacy))
            .await
            .err()
            .expect("a stale key must fail the context");
        let text = err.to_string();
        eprintln!("stale keytab, as the client sees it: {text}");
        assert!(
            matches!(err, RpcError::Gss { .. }) && text.contains("could not accept"),
            "unclear error: {text}"
        );
        srv.stop().await.expect("stop");

        // (4) a server without Kerberos.
        let srv = TestServer::start().await;
        let err = connect(srv.addr, client_cfg(&kdc, GssService::None))
            .await
            .err()
            .expect("no RPCSEC_GSS on this server");
        assert!(
            err.to_string().contains("refused RPCSEC_GSS"),
            "unclear error: {err}"
        );
        srv.stop().await.expect("stop");
    });
}
