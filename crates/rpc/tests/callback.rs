//! The back channel: the server calls a loopback peer back over the peer's own connection.
//!
//! The peer is a raw TCP client written here: it makes a normal call (so the server knows the
//! connection and the test learns its conn_id), then reads the server's CALL records and
//! answers them by hand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use txnfs_rpc::msg::{
    encode_reply_header, AcceptedStatus, OpaqueAuth, RejectedReply, ReplyHeader, AUTH_NONE,
    AUTH_SYS, MSG_CALL, MSG_REPLY, RPC_VERSION,
};
use txnfs_rpc::{
    decode_reply, encode_call, read_record, record, serve, AuthStat, AuthSys, BackChannel,
    CallInfo, CallbackError, Credential, ReplyBody, RpcService, ServerConfig, XdrError,
};
use txnfs_xdr::{get_u32, Decode};

const PROG: u32 = 400000;
/// Any callback program number (NFSv4.1 lets the client choose it in CREATE_SESSION).
const CB_PROG: u32 = 0x4000_0000;
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;
const T: Duration = Duration::from_secs(10);

/// prog 400000 vers 1: proc 0 NULL, 1 echo, 2 "whoami": the conn_id (u64) and whether
/// `CallInfo::back_channel` belongs to that connection (u32 1/0).
#[derive(Default)]
struct CbService {
    opened: Mutex<HashMap<u64, BackChannel>>,
    closed: AtomicUsize,
}

impl RpcService for CbService {
    fn programs(&self) -> Vec<(u32, u32, u32)> {
        vec![(PROG, 1, 1)]
    }

    async fn call(&self, info: CallInfo, args: Bytes) -> ReplyBody {
        match info.proc_num {
            0 => ReplyBody::Success(Bytes::new()),
            1 => ReplyBody::Success(args),
            2 => {
                let mut out = BytesMut::new();
                out.put_u64(info.conn_id);
                out.put_u32((info.back_channel.conn_id() == info.conn_id) as u32);
                ReplyBody::Success(out.freeze())
            }
            _ => ReplyBody::ProcUnavail,
        }
    }

    fn connection_opened(&self, conn_id: u64, back_channel: &BackChannel) {
        self.opened
            .lock()
            .unwrap()
            .insert(conn_id, back_channel.clone());
    }

    fn connection_closed(&self, _conn_id: u64) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }
}

struct Server {
    addr: SocketAddr,
    svc: Arc<CbService>,
    /// Sending (or dropping) it shuts the server down.
    stop: oneshot::Sender<()>,
}

/// Serve `cfg` on a fresh loopback port; also the task `serve` runs in.
async fn spawn_server(cfg: ServerConfig) -> (Server, JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let svc = Arc::new(CbService::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, svc.clone(), cfg, async move {
        let _ = stopped.await;
    }));
    (Server { addr, svc, stop }, task)
}

/// A server with `cfg`, a peer connected to it and the back channel to that peer.
async fn connected(cfg: ServerConfig) -> (Server, Peer, BackChannel) {
    let (srv, _) = spawn_server(cfg).await;
    let peer = Peer::connect(&srv).await;
    let bc = handle(&srv, &peer);
    (srv, peer, bc)
}

/// A server with `max_callbacks_per_conn: max`, connected as in [`connected`].
async fn connected_with_limit(max: usize) -> (Server, Peer, BackChannel) {
    connected(ServerConfig {
        max_callbacks_per_conn: max,
        ..ServerConfig::default()
    })
    .await
}

/// A CALL as the peer received it.
#[derive(Debug)]
struct ReceivedCall {
    xid: u32,
    prog: u32,
    vers: u32,
    proc_num: u32,
    cred: OpaqueAuth,
    verf: OpaqueAuth,
    args: Bytes,
}

/// One record the peer received: a CALL from the server or a reply to its own call.
enum Received {
    Call(ReceivedCall),
    Reply(u32, Result<Bytes, txnfs_rpc::RpcError>),
}

fn parse_record(mut rec: Bytes) -> Received {
    let whole = rec.clone();
    let xid = get_u32(&mut rec).expect("xid");
    let mtype = get_u32(&mut rec).expect("msg_type");
    if mtype == MSG_REPLY {
        let (xid2, r) = decode_reply(whole).expect("decodable reply");
        assert_eq!(xid, xid2);
        return Received::Reply(xid, r);
    }
    assert_eq!(mtype, MSG_CALL);
    assert_eq!(get_u32(&mut rec).expect("rpcvers"), RPC_VERSION);
    let prog = get_u32(&mut rec).expect("prog");
    let vers = get_u32(&mut rec).expect("vers");
    let proc_num = get_u32(&mut rec).expect("proc");
    let cred = OpaqueAuth::decode(&mut rec).expect("cred");
    let verf = OpaqueAuth::decode(&mut rec).expect("verf");
    Received::Call(ReceivedCall {
        xid,
        prog,
        vers,
        proc_num,
        cred,
        verf,
        args: rec,
    })
}

struct Peer {
    s: TcpStream,
    conn_id: u64,
    next_xid: u32,
}

impl Peer {
    /// Connect and make the normal "whoami" call that tells the test its conn_id.
    async fn connect(srv: &Server) -> Peer {
        let s = TcpStream::connect(srv.addr).await.expect("connect");
        let mut p = Peer {
            s,
            conn_id: 0,
            next_xid: 1,
        };
        let r = p.call(2, Bytes::new()).await.expect("whoami");
        assert_eq!(r.len(), 12);
        p.conn_id = u64::from_be_bytes(r[..8].try_into().unwrap());
        assert_eq!(
            &r[8..],
            &[0, 0, 0, 1],
            "CallInfo carries this connection's handle"
        );
        p
    }

    async fn send_call(&mut self, proc_num: u32, args: &[u8]) -> u32 {
        let xid = self.next_xid;
        self.next_xid += 1;
        let msg = encode_call(xid, PROG, 1, proc_num, &Credential::None, args);
        self.s.write_all(&record(&msg)).await.expect("write call");
        xid
    }

    async fn recv(&mut self) -> Received {
        let rec = tokio::time::timeout(T, read_record(&mut self.s, 1 << 20))
            .await
            .expect("a record in time")
            .expect("a record");
        parse_record(rec)
    }

    /// A normal call whose reply must be the next record.
    async fn call(&mut self, proc_num: u32, args: Bytes) -> Result<Bytes, txnfs_rpc::RpcError> {
        let xid = self.send_call(proc_num, &args).await;
        match self.recv().await {
            Received::Reply(x, r) => {
                assert_eq!(x, xid);
                r
            }
            Received::Call(c) => panic!("expected the reply to xid {xid}, got CALL {c:?}"),
        }
    }

    async fn recv_call(&mut self) -> ReceivedCall {
        match self.recv().await {
            Received::Call(c) => c,
            Received::Reply(x, r) => panic!("expected a CALL, got reply {x}: {r:?}"),
        }
    }

    async fn send_raw_reply(&mut self, msg: &[u8]) {
        self.s.write_all(&record(msg)).await.expect("write reply");
    }

    async fn reply(&mut self, xid: u32, hdr: ReplyHeader, results: &[u8]) {
        let mut out = BytesMut::new();
        encode_reply_header(&mut out, xid, &hdr);
        out.put_slice(results);
        self.send_raw_reply(&out).await;
    }

    async fn reply_ok(&mut self, xid: u32, results: &[u8]) {
        self.reply(xid, accepted(AcceptedStatus::Success), results)
            .await;
    }
}

fn accepted(stat: AcceptedStatus) -> ReplyHeader {
    ReplyHeader::Accepted {
        verf: OpaqueAuth::none(),
        stat,
    }
}

fn handle(srv: &Server, peer: &Peer) -> BackChannel {
    srv.svc
        .opened
        .lock()
        .unwrap()
        .get(&peer.conn_id)
        .cloned()
        .expect("connection_opened delivered the handle")
}

type CallTask = JoinHandle<Result<Bytes, CallbackError>>;

fn spawn_call(
    bc: &BackChannel,
    proc_num: u32,
    cred: Credential,
    args: Bytes,
    timeout: Duration,
) -> CallTask {
    let bc = bc.clone();
    tokio::spawn(async move { bc.call(CB_PROG, 1, proc_num, &cred, args, timeout).await })
}

/// A callback `proc_num` with no credential and no arguments, as a task.
fn empty_call(bc: &BackChannel, proc_num: u32, timeout: Duration) -> CallTask {
    spawn_call(bc, proc_num, Credential::None, Bytes::new(), timeout)
}

/// A CB_NULL with no credential, as a task.
fn cb_null(bc: &BackChannel) -> CallTask {
    empty_call(bc, CB_NULL, T)
}

fn sys_cred() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 42,
        machinename: Bytes::from_static(b"server"),
        uid: 0,
        gid: 0,
        gids: vec![1, 2],
    })
}

#[tokio::test]
async fn cb_null_and_cb_compound_round_trip() {
    let (_srv, mut peer, bc) = connected(ServerConfig::default()).await;
    assert_eq!(bc.conn_id(), peer.conn_id);
    assert_eq!(bc.peer(), peer.s.local_addr().unwrap());

    // CB_NULL with AUTH_NONE.
    let t = cb_null(&bc);
    let c = peer.recv_call().await;
    assert_eq!((c.prog, c.vers, c.proc_num), (CB_PROG, 1, CB_NULL));
    assert_eq!(c.cred, OpaqueAuth::none());
    assert_eq!(c.verf, OpaqueAuth::none());
    assert!(c.args.is_empty());
    peer.reply_ok(c.xid, b"").await;
    assert_eq!(t.await.unwrap(), Ok(Bytes::new()));

    // CB_COMPOUND with AUTH_SYS and a result body.
    let args = Bytes::from_static(b"\0\0\0\x04tag!\0\0\0\x01\0\0\0\0");
    let t = spawn_call(&bc, CB_COMPOUND, sys_cred(), args.clone(), T);
    let c = peer.recv_call().await;
    assert_eq!((c.prog, c.vers, c.proc_num), (CB_PROG, 1, CB_COMPOUND));
    assert_eq!(c.cred.flavor, AUTH_SYS);
    let Credential::Sys(want) = sys_cred() else {
        unreachable!()
    };
    assert_eq!(AuthSys::from_bytes(c.cred.body.clone()), Ok(want));
    assert_eq!(c.verf.flavor, AUTH_NONE);
    assert_eq!(c.args, args);
    let results: Vec<u8> = (0..40u8).collect();
    peer.reply_ok(c.xid, &results).await;
    assert_eq!(&t.await.unwrap().expect("CB_COMPOUND")[..], &results[..]);

    // Large arguments (sent as a separate iovec) arrive intact in one record.
    let big = Bytes::from((0..20_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let t = spawn_call(&bc, CB_COMPOUND, Credential::None, big.clone(), T);
    let c = peer.recv_call().await;
    assert_eq!(c.args, big);
    peer.reply_ok(c.xid, &big[..1000]).await;
    assert_eq!(t.await.unwrap().expect("big"), big.slice(..1000));
    assert_eq!(bc.outstanding(), 0);
}

#[tokio::test]
async fn timeout_when_the_peer_never_answers() {
    let (_srv, mut peer, bc) = connected(ServerConfig::default()).await;
    let started = Instant::now();
    let t = empty_call(&bc, CB_NULL, Duration::from_millis(200));
    let c = peer.recv_call().await;
    assert_eq!(t.await.unwrap(), Err(CallbackError::Timeout));
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(bc.outstanding(), 0, "the timed-out entry is removed");
    // The late reply is dropped; the connection still serves calls and callbacks.
    peer.reply_ok(c.xid, b"late").await;
    let r = peer
        .call(1, Bytes::from_static(b"after"))
        .await
        .expect("echo");
    assert_eq!(&r[..], b"after");
    let t = cb_null(&bc);
    let c2 = peer.recv_call().await;
    assert_ne!(c2.xid, c.xid);
    peer.reply_ok(c2.xid, b"fresh").await;
    assert_eq!(&t.await.unwrap().expect("CB_NULL")[..], b"fresh");
}

#[tokio::test]
async fn connection_closed_fails_pending_and_later_calls() {
    let (srv, mut peer, bc) = connected(ServerConfig::default()).await;
    let t1 = empty_call(&bc, CB_COMPOUND, Duration::from_secs(60));
    let t2 = empty_call(&bc, CB_NULL, Duration::from_secs(60));
    let _ = peer.recv_call().await;
    let _ = peer.recv_call().await;
    assert_eq!(bc.outstanding(), 2);
    let started = Instant::now();
    drop(peer);
    assert_eq!(t1.await.unwrap(), Err(CallbackError::ConnectionClosed));
    assert_eq!(t2.await.unwrap(), Err(CallbackError::ConnectionClosed));
    assert!(started.elapsed() < Duration::from_secs(5), "promptly");
    assert!(bc.is_closed());
    assert_eq!(bc.outstanding(), 0);
    // A later call fails at once, without waiting for its timeout.
    let started = Instant::now();
    let r = bc
        .call(
            CB_PROG,
            1,
            CB_NULL,
            &Credential::None,
            Bytes::new(),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(r, Err(CallbackError::ConnectionClosed));
    assert!(started.elapsed() < Duration::from_secs(1));
    // The service was told; the handle it kept does not keep the connection alive.
    let deadline = Instant::now() + T;
    while srv.svc.closed.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "connection_closed not called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn unknown_xid_reply_is_ignored() {
    let (_srv, mut peer, bc) = connected(ServerConfig::default()).await;
    // Before any callback, and while one is pending.
    peer.reply_ok(0xdead_beef, b"nobody asked").await;
    let t = empty_call(&bc, CB_COMPOUND, T);
    let c = peer.recv_call().await;
    peer.reply_ok(c.xid.wrapping_add(1000), b"wrong xid").await;
    let r = peer
        .call(1, Bytes::from_static(b"still"))
        .await
        .expect("echo");
    assert_eq!(&r[..], b"still");
    assert_eq!(bc.outstanding(), 1, "the pending call is untouched");
    peer.reply_ok(c.xid, b"right xid").await;
    assert_eq!(&t.await.unwrap().expect("callback")[..], b"right xid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callbacks_are_matched_by_xid() {
    let (_srv, mut peer, bc) = connected(ServerConfig::default()).await;
    const N: u32 = 20;
    let mut tasks = Vec::new();
    for i in 0..N {
        // Some arguments exceed the inline size, so records have two iovecs.
        let args = Bytes::from(vec![i as u8; 100 + (i as usize) * 500]);
        tasks.push((
            args.clone(),
            spawn_call(&bc, CB_COMPOUND, sys_cred(), args, T),
        ));
    }
    // Normal calls of the peer interleave with the CALL records on the same connection.
    let mut echo_xids = Vec::new();
    for i in 0..5u32 {
        echo_xids.push((peer.send_call(1, &i.to_be_bytes()).await, i));
    }
    let mut calls = Vec::new();
    let mut echoed = 0;
    while calls.len() < N as usize || echoed < echo_xids.len() {
        match peer.recv().await {
            Received::Call(c) => calls.push(c),
            Received::Reply(xid, r) => {
                let (_, i) = echo_xids.iter().find(|(x, _)| *x == xid).expect("our xid");
                assert_eq!(&r.expect("echo")[..], &i.to_be_bytes());
                echoed += 1;
            }
        }
    }
    let mut xids: Vec<u32> = calls.iter().map(|c| c.xid).collect();
    xids.sort_unstable();
    xids.dedup();
    assert_eq!(xids.len(), N as usize, "xids never collide");
    // Answer in reverse order; each result names the arguments it answers.
    for c in calls.iter().rev() {
        let mut res = b"re:".to_vec();
        res.extend_from_slice(&c.args);
        peer.reply_ok(c.xid, &res).await;
    }
    for (args, t) in tasks {
        let r = t.await.unwrap().expect("callback");
        assert_eq!(&r[..3], b"re:");
        assert_eq!(r.slice(3..), args, "reply matched to the wrong call");
    }
    assert_eq!(bc.outstanding(), 0);
}

#[tokio::test]
async fn malformed_and_error_replies() {
    let (_srv, mut peer, bc) = connected(ServerConfig::default()).await;

    // Truncated after the reply_stat.
    let t = cb_null(&bc);
    let c = peer.recv_call().await;
    let mut msg = Vec::new();
    for w in [c.xid, MSG_REPLY, 0] {
        msg.extend_from_slice(&w.to_be_bytes());
    }
    peer.send_raw_reply(&msg).await;
    assert!(
        matches!(
            t.await.unwrap(),
            Err(CallbackError::MalformedReply(XdrError::Truncated { .. }))
        ),
        "truncated reply"
    );

    // A reply_stat that does not exist.
    let t = cb_null(&bc);
    let c = peer.recv_call().await;
    let mut msg = Vec::new();
    for w in [c.xid, MSG_REPLY, 7, 0, 0] {
        msg.extend_from_slice(&w.to_be_bytes());
    }
    peer.send_raw_reply(&msg).await;
    assert!(matches!(
        t.await.unwrap(),
        Err(CallbackError::MalformedReply(
            XdrError::BadDiscriminant { .. }
        ))
    ));

    // An undecodable REPLY with an unknown xid: dropped. (A record too short for any xid is
    // not RPC at all and closes the connection, as it always did.)
    peer.send_raw_reply(&[0, 0, 0, 9, 0, 0, 0, 1, 0xff]).await;

    // Reply statuses become typed errors.
    let cases = [
        (
            accepted(AcceptedStatus::ProgUnavail),
            CallbackError::ProgUnavail,
        ),
        (
            accepted(AcceptedStatus::ProgMismatch { low: 4, high: 4 }),
            CallbackError::ProgMismatch { low: 4, high: 4 },
        ),
        (
            accepted(AcceptedStatus::ProcUnavail),
            CallbackError::ProcUnavail,
        ),
        (
            accepted(AcceptedStatus::GarbageArgs),
            CallbackError::GarbageArgs,
        ),
        (
            accepted(AcceptedStatus::SystemErr),
            CallbackError::SystemErr,
        ),
        (
            ReplyHeader::Denied(RejectedReply::AuthError(AuthStat::BadCred)),
            CallbackError::AuthError(AuthStat::BadCred),
        ),
        (
            ReplyHeader::Denied(RejectedReply::RpcMismatch { low: 2, high: 2 }),
            CallbackError::RpcMismatch { low: 2, high: 2 },
        ),
    ];
    for (hdr, want) in cases {
        let t = empty_call(&bc, CB_COMPOUND, T);
        let c = peer.recv_call().await;
        peer.reply(c.xid, hdr, b"").await;
        assert_eq!(t.await.unwrap(), Err(want));
    }

    // The connection is unharmed.
    let r = peer.call(1, Bytes::from_static(b"ok")).await.expect("echo");
    assert_eq!(&r[..], b"ok");
    assert!(!bc.is_closed());
    assert_eq!(bc.outstanding(), 0);
}

#[tokio::test]
async fn outstanding_limit() {
    let (_srv, mut peer, bc) = connected_with_limit(2).await;
    let t1 = cb_null(&bc);
    let t2 = cb_null(&bc);
    let c1 = peer.recv_call().await;
    let c2 = peer.recv_call().await;
    assert_eq!(bc.outstanding(), 2);
    let r = bc
        .call(CB_PROG, 1, CB_NULL, &Credential::None, Bytes::new(), T)
        .await;
    assert_eq!(r, Err(CallbackError::TooManyOutstanding { max: 2 }));
    // Answering one frees a slot.
    peer.reply_ok(c1.xid, b"1").await;
    let first = t1.await.unwrap().expect("first");
    let t3 = cb_null(&bc);
    let c3 = peer.recv_call().await;
    peer.reply_ok(c3.xid, b"3").await;
    peer.reply_ok(c2.xid, b"2").await;
    let results = (
        first,
        t2.await.unwrap().expect("second"),
        t3.await.unwrap().expect("third"),
    );
    assert_eq!(
        results,
        (
            Bytes::from_static(b"1"),
            Bytes::from_static(b"2"),
            Bytes::from_static(b"3")
        )
    );
}

#[tokio::test]
async fn cancelled_callback_releases_its_slot() {
    let (_srv, mut peer, bc) = connected_with_limit(1).await;
    let t = cb_null(&bc);
    let c = peer.recv_call().await;
    t.abort();
    assert!(t.await.unwrap_err().is_cancelled());
    assert_eq!(bc.outstanding(), 0);
    // Its reply is now an unknown xid; a new call gets the slot.
    peer.reply_ok(c.xid, b"orphan").await;
    let t = cb_null(&bc);
    let c = peer.recv_call().await;
    peer.reply_ok(c.xid, b"new").await;
    assert_eq!(&t.await.unwrap().expect("new")[..], b"new");
}

#[tokio::test]
async fn server_shutdown_closes_back_channels() {
    let (srv, server) = spawn_server(ServerConfig {
        shutdown_grace: Duration::from_secs(2),
        ..ServerConfig::default()
    })
    .await;
    let mut peer = Peer::connect(&srv).await;
    let bc = handle(&srv, &peer);
    let t = cb_null(&bc);
    let _ = peer.recv_call().await;
    let _ = srv.stop.send(());
    assert_eq!(t.await.unwrap(), Err(CallbackError::ConnectionClosed));
    tokio::time::timeout(T, server)
        .await
        .expect("serve returns although the service keeps the handle")
        .expect("task")
        .expect("serve");
    assert!(bc.is_closed());
}

/// A callback waiting for the client's reply keeps the connection from being closed for
/// idleness; once idle, the connection is closed and its back channel with it.
#[tokio::test]
async fn idle_close_waits_for_callbacks_and_closes_the_back_channel() {
    let (srv, mut peer, bc) = connected(ServerConfig {
        idle_timeout: Some(Duration::from_millis(150)),
        ..ServerConfig::default()
    })
    .await;
    let t = spawn_call(&bc, CB_NULL, Credential::None, Bytes::new(), T);
    let c = peer.recv_call().await;
    // Four idle timeouts with the callback outstanding and no bytes moving.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!bc.is_closed(), "closed with a callback outstanding");
    peer.reply_ok(c.xid, b"").await;
    assert_eq!(t.await.unwrap(), Ok(Bytes::new()));
    let deadline = Instant::now() + T;
    while !bc.is_closed() {
        assert!(Instant::now() < deadline, "idle connection never closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        bc.call(CB_PROG, 1, CB_NULL, &Credential::None, Bytes::new(), T)
            .await,
        Err(CallbackError::ConnectionClosed)
    );
    while srv.svc.closed.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "connection_closed never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
