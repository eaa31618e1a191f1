//! Shared test fixtures: a toy RPC service and a server on 127.0.0.1:0.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use txnfs_rpc::{
    serve, CallInfo, Credential, ReplyBody, RpcClient, RpcError, RpcService, ServerConfig,
};

pub const PROG: u32 = 400000;

/// prog 400000 vers 1..=2: proc 0 NULL, 1 echo, 2 sleep (first u32 of args, in ms, capped
/// at 2 s) then echo, 3 GARBAGE_ARGS, 4 panics, 5 returns
/// the credential and conn_id, 6 the TLS peer, 7 the RPCSEC_GSS caller, 8 the id of the
/// tokio task running the call, 9 waits until a proc 10 call arrives, 10 wakes the
/// proc 9 callers, 11 answers 1 if the call was `CallInfo::alone`, else 0; anything
/// else PROC_UNAVAIL.
#[derive(Default)]
pub struct Toy {
    pub closed: AtomicUsize,
    pub calls: AtomicUsize,
    /// The back channel of every connection opened, in order.
    pub back_channels: std::sync::Mutex<Vec<txnfs_rpc::BackChannel>>,
    /// What proc 9 waits for and proc 10 signals.
    pub gate: tokio::sync::Notify,
}

impl RpcService for Toy {
    fn programs(&self) -> Vec<(u32, u32, u32)> {
        vec![(PROG, 1, 2)]
    }

    async fn call(&self, info: CallInfo, args: Bytes) -> ReplyBody {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match info.proc_num {
            0 => ReplyBody::Success(Bytes::new()),
            1 => ReplyBody::Success(args),
            2 => {
                let ms = args
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0)
                    .min(2000);
                tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                ReplyBody::Success(args)
            }
            3 => ReplyBody::GarbageArgs,
            4 => panic!("toy service: proc 4 panics on purpose"),
            5 => {
                // whoami: flavor, uid, gid, gids..., conn_id
                let mut out = bytes::BytesMut::new();
                use bytes::BufMut;
                match &info.cred {
                    txnfs_rpc::Credential::None => out.put_u32(0),
                    txnfs_rpc::Credential::Sys(s) => {
                        out.put_u32(1);
                        out.put_u32(s.uid);
                        out.put_u32(s.gid);
                        out.put_u32(s.gids.len() as u32);
                        for g in &s.gids {
                            out.put_u32(*g);
                        }
                    }
                }
                out.put_u64(info.conn_id);
                ReplyBody::Success(out.freeze())
            }
            6 => {
                // the connection's TLS: 0 plain, 1 TLS, 2 TLS with a client certificate
                // (then its identity)
                let mut out = bytes::BytesMut::new();
                use bytes::BufMut;
                match &info.tls {
                    None => out.put_u32(0),
                    Some(t) => match &t.client_identity {
                        None => out.put_u32(1),
                        Some(id) => {
                            out.put_u32(2);
                            out.extend_from_slice(id.as_bytes());
                        }
                    },
                }
                ReplyBody::Success(out.freeze())
            }
            7 => {
                // the RPCSEC_GSS caller: "<service> <principal>", or empty
                let text = info
                    .gss
                    .as_ref()
                    .map(|g| format!("{} {}", g.service as u32, g.principal))
                    .unwrap_or_default();
                ReplyBody::Success(Bytes::from(text))
            }
            8 => {
                let id = tokio::task::try_id().map(|id| id.to_string());
                ReplyBody::Success(Bytes::from(id.unwrap_or_default()))
            }
            9 => {
                self.gate.notified().await;
                ReplyBody::Success(args)
            }
            10 => {
                self.gate.notify_waiters();
                ReplyBody::Success(args)
            }
            11 => ReplyBody::Success(Bytes::from(vec![u8::from(info.alone)])),
            _ => ReplyBody::ProcUnavail,
        }
    }

    fn connection_opened(&self, _conn_id: u64, back_channel: &txnfs_rpc::BackChannel) {
        if let Ok(mut all) = self.back_channels.lock() {
            all.push(back_channel.clone());
        }
    }

    fn connection_closed(&self, _conn_id: u64) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub svc: Arc<Toy>,
    stop: Option<oneshot::Sender<()>>,
    pub handle: JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(ServerConfig::default()).await
    }

    pub async fn start_with(cfg: ServerConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        let svc = Arc::new(Toy::default());
        let (stop, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(serve(listener, svc.clone(), cfg, async move {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            svc,
            stop: Some(stop),
            handle,
        }
    }

    /// A server with the default configuration as `set` changes it.
    pub async fn start_set(set: impl FnOnce(&mut ServerConfig)) -> Self {
        let mut cfg = ServerConfig::default();
        set(&mut cfg);
        Self::start_with(cfg).await
    }

    /// A client connected to this server without credentials.
    pub async fn client(&self) -> RpcClient {
        RpcClient::connect(self.addr, Credential::None)
            .await
            .expect("connect")
    }

    /// Trigger graceful shutdown and wait for `serve` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        (&mut self.handle).await.expect("serve task")
    }
}

/// A NULL call (proc 0) of the toy service.
pub async fn null(c: &RpcClient) -> Result<Bytes, RpcError> {
    c.call(PROG, 1, 0, Bytes::new()).await
}

/// An echo call (proc 1) of version `vers` of the toy service (`what` if it fails): it
/// must return `data`.
pub async fn assert_echo(c: &RpcClient, vers: u32, data: &'static [u8], what: &str) {
    let r = c
        .call(PROG, vers, 1, Bytes::from_static(data))
        .await
        .expect(what);
    assert_eq!(&r[..], data);
}

/// Read everything the server sends until it closes the connection (or `limit` passes).
/// Returns (bytes, closed_by_server).
pub async fn read_until_close(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (out, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (out, true),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Write raw bytes, tolerating a server that already closed the connection.
pub async fn write_lenient(s: &mut TcpStream, data: &[u8]) {
    let _ = s.write_all(data).await;
}

pub fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// An echo call (proc 1, AUTH_NONE) of `args` as one record.
pub fn echo_record(xid: u32, args: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    for w in [xid, 0, 2, PROG, 1, 1, 0, 0, 0, 0] {
        m.extend_from_slice(&be32(w));
    }
    m.extend_from_slice(args);
    let mut rec = be32(0x8000_0000 | m.len() as u32).to_vec();
    rec.extend_from_slice(&m);
    rec
}

/// The next reply record to an echo call, within `limit`: (xid, its echoed body).
pub async fn echo_reply(s: &mut TcpStream, limit: Duration) -> (u32, Vec<u8>) {
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
