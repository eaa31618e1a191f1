//! An async ONC RPC client over one TCP connection: many concurrent calls matched by xid.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::gss::client::GssSession;
use crate::gss::GssClientConfig;
use crate::msg::*;
use crate::record::{write_all_vectored, RecordError, RecordReader, SetLowat};
use crate::server::DEFAULT_MAX_RECORD_SIZE;
use crate::tls::ClientTls;
use crate::RpcError;
use txnfs_xdr::{get_u32, Decode, Gathered};

/// A CALL the peer sent on a client connection (the NFSv4.1 back channel: the server
/// calls the client's callback program over the client's own connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingCall {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub cred: OpaqueAuth,
    /// The encoded arguments.
    pub args: Bytes,
}

/// How a [`CallHandler`] answers an [`IncomingCall`]: the accepted-reply status, with the
/// encoded results for `Success`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallReply {
    Success(Bytes),
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// The future a [`CallHandler`] returns.
pub type CallFuture = Pin<Box<dyn Future<Output = CallReply> + Send>>;

/// Answers CALLs that arrive on a client connection. Each CALL runs as its own task; its
/// REPLY goes back on the same connection. Without a handler such CALLs are dropped.
pub type CallHandler = Arc<dyn Fn(IncomingCall) -> CallFuture + Send + Sync>;

/// Incoming CALLs handled at the same time on one connection; more wait in the reader
/// (the peer bounds its outstanding callbacks anyway).
const MAX_INCOMING_CALLS: usize = 32;

/// Client limits.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Largest reply record accepted; a bigger one drops the connection.
    pub max_record_size: usize,
    /// RPC-with-TLS (RFC 9289): probe with AUTH_TLS, then run every call inside TLS.
    pub tls: Option<ClientTls>,
    /// RPCSEC_GSS (RFC 2203): create a Kerberos context at connect and protect every
    /// call with it (the credential given to `connect` is then not sent).
    pub gss: Option<GssClientConfig>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
            tls: None,
            gss: None,
        }
    }
}

type Waiter = oneshot::Sender<Result<Bytes, RpcError>>;

#[derive(Default)]
struct Pending {
    waiters: HashMap<u32, Waiter>,
    /// Calls whose waiter gets the whole reply record (RPCSEC_GSS checks its verifier).
    whole: HashSet<u32>,
    closed: bool,
}

type SharedPending = Arc<Mutex<Pending>>;

fn lock(p: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Mark the connection dead and fail every pending call with `Disconnected`.
fn fail_all(p: &Mutex<Pending>) {
    let waiters = {
        let mut g = lock(p);
        g.closed = true;
        std::mem::take(&mut g.waiters)
    };
    for (_, w) in waiters {
        let _ = w.send(Err(RpcError::Disconnected));
    }
}

/// What the connection's writer sends, in queue order.
enum Wire {
    /// One whole record, record mark included.
    Record(Bytes),
    /// One record as its head (record mark included) and further parts, written in
    /// order with nothing of another record between them.
    Parts(Bytes, Vec<Bytes>),
    /// `abort()`: close our side of the connection.
    Close,
}

/// An ONC RPC client on one TCP connection. Calls take `&self` and may run concurrently;
/// share it with `Arc`. Dropping it closes the connection.
pub struct RpcClient {
    tx: mpsc::UnboundedSender<Wire>,
    pending: SharedPending,
    next_xid: AtomicU32,
    cred: Credential,
    peer: SocketAddr,
    reader: JoinHandle<()>,
    gss: Option<GssSession>,
    /// Held while a record is built and queued by `send_built_and_wait`.
    send_order: Mutex<()>,
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        // An RPCSEC_GSS context not closed with [`RpcClient::close`]: its DESTROY is
        // queued before the connection closes (the writer sends what is queued before
        // it sees the channel end), unanswered; the server frees the context.
        if let Some(gss) = &self.gss {
            if let Some((_, wire)) = gss.destroy_record(self.next_xid()) {
                let _ = self.tx.send(Wire::Record(wire));
            }
        }
        self.reader.abort();
    }
}

/// How long [`RpcClient::close`] waits for the answer to RPCSEC_GSS_DESTROY.
pub const DESTROY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Removes a waiter whose call future is dropped before its reply arrived.
struct PendingGuard<'a> {
    pending: &'a Mutex<Pending>,
    xid: u32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let mut p = lock(self.pending);
        p.waiters.remove(&self.xid);
        p.whole.remove(&self.xid);
    }
}

impl crate::gss::client::RawCaller for RpcClient {
    fn next_xid(&self) -> u32 {
        RpcClient::next_xid(self)
    }

    async fn call_whole(&self, xid: u32, wire: Bytes) -> Result<Bytes, RpcError> {
        self.send_and_wait(xid, wire, true).await
    }

    async fn call_whole_built(
        &self,
        xid: u32,
        make: impl FnOnce() -> Result<Bytes, RpcError> + Send,
    ) -> Result<Bytes, RpcError> {
        self.send_built_and_wait(xid, true, make).await
    }
}

impl RpcClient {
    /// Connect to `addr`; every call carries `cred` and a null verifier.
    pub async fn connect(addr: SocketAddr, cred: Credential) -> Result<Self, RpcError> {
        Self::connect_with_config(addr, cred, ClientConfig::default()).await
    }

    pub async fn connect_with_config(
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
    ) -> Result<Self, RpcError> {
        Self::connect_with_handler(addr, cred, cfg, None).await
    }

    /// Connect to `addr` from the local address `local` (e.g. another loopback address,
    /// 127.0.0.2, as a second host would); every call carries `cred`.
    pub async fn connect_from(
        local: std::net::IpAddr,
        addr: SocketAddr,
        cred: Credential,
    ) -> Result<Self, RpcError> {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.bind(SocketAddr::new(local, 0))?;
        let stream = socket.connect(addr).await?;
        Self::on_stream(stream, addr, cred, ClientConfig::default(), None)
    }

    /// Connect with a handler for the CALLs the peer sends on this connection (the back
    /// channel); their REPLYs go back on the same connection.
    pub async fn connect_with_handler(
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
        handler: Option<CallHandler>,
    ) -> Result<Self, RpcError> {
        let gss = cfg.gss.clone();
        let mut client = Self::connect_transport(addr, cred, cfg, handler).await?;
        if let Some(gss) = gss {
            client.gss = Some(crate::gss::client::establish(&client, addr, &gss).await?);
        }
        Ok(client)
    }

    async fn connect_transport(
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
        handler: Option<CallHandler>,
    ) -> Result<Self, RpcError> {
        let stream = TcpStream::connect(addr).await?;
        match cfg.tls.clone() {
            None => Self::on_stream(stream, addr, cred, cfg, handler),
            Some(tls) => {
                let _ = stream.set_nodelay(true);
                let xid = initial_xid();
                let stream = crate::starttls::connect(stream, &tls, addr, xid).await?;
                let (rd, wr) = tokio::io::split(stream);
                // No low-water mark under TLS: the TLS layer may hold ciphertext of
                // the record already, so what is still to come on the socket is unknown.
                Ok(Self::on_io(
                    (rd, None),
                    wr,
                    addr,
                    cred,
                    cfg,
                    handler,
                    xid.wrapping_add(1),
                ))
            }
        }
    }

    /// A client on the connected `stream` to `addr`.
    fn on_stream(
        stream: TcpStream,
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
        handler: Option<CallHandler>,
    ) -> Result<Self, RpcError> {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let lowat: SetLowat<_> = crate::server::plain_tcp::set_client_lowat;
        // `TXNFS_NO_RCVLOWAT` (any value) turns the mark off here as in the server,
        // for A/B measurements.
        let lowat = std::env::var_os("TXNFS_NO_RCVLOWAT")
            .is_none()
            .then_some(lowat);
        Ok(Self::on_io(
            (rd, lowat),
            wr,
            addr,
            cred,
            cfg,
            handler,
            initial_xid(),
        ))
    }

    /// A client reading replies from `rd` and writing calls to `wr` (the halves of a
    /// TCP or a TLS stream), with the socket's low-water mark setter for `rd` on plain
    /// TCP.
    fn on_io<R, W>(
        (rd, lowat): (R, Option<SetLowat<R>>),
        wr: W,
        addr: SocketAddr,
        cred: Credential,
        cfg: ClientConfig,
        handler: Option<CallHandler>,
        first_xid: u32,
    ) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let pending: SharedPending = Arc::default();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(client_writer(wr, rx, pending.clone()));
        let incoming = handler.map(|h| Incoming {
            handler: h,
            tx: tx.clone(),
            limit: Arc::new(Semaphore::new(MAX_INCOMING_CALLS)),
        });
        let reader = tokio::spawn(client_reader(
            rd,
            lowat,
            pending.clone(),
            cfg.max_record_size,
            incoming,
        ));
        RpcClient {
            tx,
            pending,
            next_xid: AtomicU32::new(first_xid),
            cred,
            peer: addr,
            reader,
            gss: None,
            send_order: Mutex::new(()),
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn credential(&self) -> &Credential {
        &self.cred
    }

    /// Close the connection; with an RPCSEC_GSS context, first send
    /// RPCSEC_GSS_DESTROY (RFC 2203 §5.4) so the server frees it, waiting at most
    /// [`DESTROY_WAIT`] for its answer. Whether the server confirmed it (its reply's
    /// verifier checks); `false` without a context (best effort: a dropped client
    /// sends DESTROY too, without waiting).
    pub async fn close(self) -> bool {
        let Some(gss) = &self.gss else {
            return false;
        };
        let xid = self.next_xid();
        let Some((seq, wire)) = gss.destroy_record(xid) else {
            return false;
        };
        match tokio::time::timeout(DESTROY_WAIT, self.send_and_wait(xid, wire, true)).await {
            Ok(Ok(raw)) => gss.destroy_confirmed(seq, raw),
            Ok(Err(e)) => {
                debug!(error = %e, "RPCSEC_GSS_DESTROY failed");
                false
            }
            Err(_) => {
                debug!("RPCSEC_GSS_DESTROY not answered in time");
                false
            }
        }
    }

    /// Whether calls carry an RPCSEC_GSS context.
    pub fn has_gss(&self) -> bool {
        self.gss.is_some()
    }

    /// Cut the connection now, as a network failure would: every pending call fails with
    /// `Disconnected` and the socket is closed (fault injection, tests).
    pub fn abort(&self) {
        self.reader.abort();
        fail_all(&self.pending);
        let _ = self.tx.send(Wire::Close);
    }

    /// A fresh transaction id.
    pub fn next_xid(&self) -> u32 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Call `prog`/`vers`/`proc_num` with encoded `args`; returns the encoded results of a
    /// SUCCESS reply, or the typed error of any other reply.
    pub async fn call(
        &self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: Bytes,
    ) -> Result<Bytes, RpcError> {
        self.call_parts(prog, vers, proc_num, Gathered::from(args))
            .await
    }

    /// [`RpcClient::call`] with arguments made of parts ([`Gathered`]): file data that
    /// is a part of its own (a WRITE's) goes to the socket from the caller's buffer,
    /// never copied into the record (ADR 0063). With RPCSEC_GSS the arguments are
    /// joined first: krb5i/krb5p checksum or wrap them whole.
    pub async fn call_parts(
        &self,
        prog: u32,
        vers: u32,
        proc_num: u32,
        args: Gathered,
    ) -> Result<Bytes, RpcError> {
        if let Some(gss) = &self.gss {
            return gss.call(self, prog, vers, proc_num, &args.to_bytes()).await;
        }
        let xid = self.next_xid();
        let header = CallHeader::new(xid, prog, vers, proc_num, &self.cred);
        let (head, rest) = crate::record::frame(
            64,
            |head| encode_call_into(head, &header, &[]),
            args.into_parts(),
            0,
        );
        let len = head.len() - 4 + rest.iter().map(Bytes::len).sum::<usize>();
        if len > MAX_FRAGMENT {
            return Err(RpcError::RecordTooLarge {
                size: len,
                max: MAX_FRAGMENT,
            });
        }
        let wire = if rest.is_empty() {
            Wire::Record(head)
        } else {
            Wire::Parts(head, rest)
        };
        self.queue_and_wait(xid, false, || {
            self.tx.send(wire).map_err(|_| RpcError::Disconnected)
        })
        .await
    }

    /// Send `wire` verbatim (it must carry its own record marks, see [`record`]) and wait
    /// for the reply with transaction id `xid`. For tests that craft unusual requests.
    pub async fn call_raw_record(&self, xid: u32, wire: Bytes) -> Result<Bytes, RpcError> {
        self.send_and_wait(xid, wire, false).await
    }

    /// Send `wire` and wait for the reply with `xid`: its results, or with `whole` the
    /// whole reply record.
    async fn send_and_wait(&self, xid: u32, wire: Bytes, whole: bool) -> Result<Bytes, RpcError> {
        // A record built already needs no ordering lock: the queue keeps send order.
        self.queue_and_wait(xid, whole, || {
            self.tx
                .send(Wire::Record(wire))
                .map_err(|_| RpcError::Disconnected)
        })
        .await
    }

    /// [`RpcClient::send_and_wait`] with the record built by `make` after the waiter is
    /// registered, and built and queued under the connection's `send_order` lock: the
    /// records of concurrent callers leave in the order they were built (RPCSEC_GSS
    /// sequence numbers must not fall out of the server's window, RFC 2203 §5.3.3.1).
    async fn send_built_and_wait(
        &self,
        xid: u32,
        whole: bool,
        make: impl FnOnce() -> Result<Bytes, RpcError>,
    ) -> Result<Bytes, RpcError> {
        self.queue_and_wait(xid, whole, || {
            let _order = self.send_order.lock().unwrap_or_else(|e| e.into_inner());
            let wire = make()?;
            self.tx
                .send(Wire::Record(wire))
                .map_err(|_| RpcError::Disconnected)
        })
        .await
    }

    /// Register a waiter for `xid`, run `queue` (which puts its record on the
    /// connection's queue), and wait for the reply.
    async fn queue_and_wait(
        &self,
        xid: u32,
        whole: bool,
        queue: impl FnOnce() -> Result<(), RpcError>,
    ) -> Result<Bytes, RpcError> {
        let (wtx, wrx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if p.closed {
                return Err(RpcError::Disconnected);
            }
            p.waiters.insert(xid, wtx);
            if whole {
                p.whole.insert(xid);
            }
        }
        let _guard = PendingGuard {
            pending: &self.pending,
            xid,
        };
        queue()?;
        match wrx.await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Disconnected),
        }
    }
}

fn initial_xid() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mixed =
        (t ^ (std::process::id() as u64).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 32) as u32
}

async fn client_writer<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Wire>,
    pending: SharedPending,
) {
    let mut segs = VecDeque::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let mut records = 0;
        while let Some(wire) = next.take() {
            match wire {
                Wire::Record(b) => segs.push_back(b),
                Wire::Parts(head, rest) => {
                    segs.push_back(head);
                    segs.extend(rest);
                }
                Wire::Close => {
                    // `abort()`: close our side now, as a network failure would.
                    let _ = wr.shutdown().await;
                    fail_all(&pending);
                    return;
                }
            }
            records += 1;
            if records < 64 {
                next = rx.try_recv().ok();
            }
        }
        // `flush` is free on TCP; TLS may hold the last record back until it.
        let written = match write_all_vectored(&mut wr, &mut segs).await {
            Ok(_) => wr.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            debug!(error = %e, "RPC client write failed");
            fail_all(&pending);
            return;
        }
    }
}

/// Where the reader hands incoming CALLs.
struct Incoming {
    handler: CallHandler,
    tx: mpsc::UnboundedSender<Wire>,
    limit: Arc<Semaphore>,
}

/// The header of a CALL record: (call, or the reply to send at once for a CALL of
/// another RPC version). `None`: not even an xid and a call header to answer.
fn parse_incoming(rec: Bytes) -> Option<Result<IncomingCall, (u32, ReplyHeader)>> {
    let mut b = rec;
    let xid = get_u32(&mut b).ok()?;
    let _msg_type = get_u32(&mut b).ok()?;
    let rpcvers = get_u32(&mut b).ok()?;
    if rpcvers != RPC_VERSION {
        return Some(Err((
            xid,
            ReplyHeader::Denied(RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            }),
        )));
    }
    let garbage = || {
        Some(Err((
            xid,
            ReplyHeader::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptedStatus::GarbageArgs,
            },
        )))
    };
    let (Ok(prog), Ok(vers), Ok(proc_num)) = (get_u32(&mut b), get_u32(&mut b), get_u32(&mut b))
    else {
        return garbage();
    };
    let (Ok(cred), Ok(_verf)) = (OpaqueAuth::decode(&mut b), OpaqueAuth::decode(&mut b)) else {
        return garbage();
    };
    Some(Ok(IncomingCall {
        xid,
        prog,
        vers,
        proc_num,
        cred,
        args: b,
    }))
}

/// One whole record (record mark included) of a reply.
fn reply_record(xid: u32, hdr: &ReplyHeader, results: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + 32 + results.len());
    out.put_u32(0);
    encode_reply_header(&mut out, xid, hdr);
    out.extend_from_slice(results);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.freeze()
}

/// Answer a CALL from the peer: run the handler in its own task, send its REPLY.
async fn dispatch_incoming(inc: &Incoming, rec: Bytes) {
    let call = match parse_incoming(rec) {
        None => {
            debug!("truncated RPC CALL on a client connection; dropped");
            return;
        }
        Some(Err((xid, hdr))) => {
            let _ = inc.tx.send(Wire::Record(reply_record(xid, &hdr, &[])));
            return;
        }
        Some(Ok(c)) => c,
    };
    // Waits while MAX_INCOMING_CALLS are running: back-pressure on the peer.
    let Ok(permit) = inc.limit.clone().acquire_owned().await else {
        return;
    };
    let fut = (inc.handler)(call.clone());
    let tx = inc.tx.clone();
    tokio::spawn(async move {
        let reply = fut.await;
        drop(permit);
        let (stat, results) = match reply {
            CallReply::Success(b) => (AcceptedStatus::Success, b),
            CallReply::ProgUnavail => (AcceptedStatus::ProgUnavail, Bytes::new()),
            CallReply::ProgMismatch { low, high } => {
                (AcceptedStatus::ProgMismatch { low, high }, Bytes::new())
            }
            CallReply::ProcUnavail => (AcceptedStatus::ProcUnavail, Bytes::new()),
            CallReply::GarbageArgs => (AcceptedStatus::GarbageArgs, Bytes::new()),
            CallReply::SystemErr => (AcceptedStatus::SystemErr, Bytes::new()),
        };
        let hdr = ReplyHeader::Accepted {
            verf: OpaqueAuth::none(),
            stat,
        };
        let _ = tx.send(Wire::Record(reply_record(call.xid, &hdr, &results)));
    });
}

/// Replies up to this size are read into place (ADR 0063): a 1 MiB READ's data is
/// never moved by the receive buffer growing. A server that declares a reply and sends
/// nothing makes the connection hold this much, once.
const PLACE_MAX: usize = 2 << 20;

async fn client_reader<R: AsyncRead + Unpin>(
    rd: R,
    lowat: Option<SetLowat<R>>,
    pending: SharedPending,
    max: usize,
    incoming: Option<Incoming>,
) {
    let mut reader = RecordReader::new(rd, max).with_place_max(PLACE_MAX);
    if let Some(set) = lowat {
        reader = reader.with_lowat(set);
    }
    loop {
        let rec = match reader.next_record().await {
            Ok(Some(r)) => r,
            Ok(None) => {
                debug!("RPC server closed the connection");
                break;
            }
            Err(RecordError::Io(e)) => {
                debug!(error = %e, "RPC client read error");
                break;
            }
            Err(e) => {
                // The callers see the connection fail (`RpcError::Disconnected`) and say
                // what it means to them (e.g. "not an NFS server").
                debug!(error = %e, "bad record from RPC server; dropping connection");
                break;
            }
        };
        if rec.len() >= 8 && rec[4..8] == MSG_CALL.to_be_bytes() {
            match &incoming {
                Some(inc) => dispatch_incoming(inc, rec).await,
                None => debug!("RPC CALL received on a client connection (backchannel); dropped"),
            }
            continue;
        }
        let whole_xid = rec
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .filter(|xid| lock(&pending).whole.remove(xid));
        let decoded = match whole_xid {
            Some(xid) => Ok((xid, Ok(rec.clone()))),
            None => decode_reply(rec.clone()),
        };
        let (xid, result) = match decoded {
            Ok(r) => r,
            Err(e) => {
                let Some(xid) = rec
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                else {
                    warn!(error = %e, "undecodable RPC reply without xid");
                    continue;
                };
                warn!(xid, error = %e, "undecodable RPC reply");
                (xid, Err(e))
            }
        };
        let waiter = lock(&pending).waiters.remove(&xid);
        match waiter {
            Some(w) => {
                let _ = w.send(result);
            }
            None => debug!(xid, "RPC reply for an unknown xid; dropped"),
        }
    }
    fail_all(&pending);
}

/// Decode a reply record into its xid and the call's outcome: the encoded results of a
/// SUCCESS reply or the typed error of any other reply. The outer error is a reply that
/// cannot be decoded at all.
pub fn decode_reply(record: Bytes) -> Result<(u32, Result<Bytes, RpcError>), RpcError> {
    let (xid, r) = decode_verified_reply(record)?;
    Ok((xid, r.map(|(_, results)| results)))
}

/// A call's outcome with the SUCCESS reply's verifier: (verifier, encoded results).
pub(crate) type VerifiedOutcome = Result<(OpaqueAuth, Bytes), RpcError>;

/// [`decode_reply`] keeping a SUCCESS reply's verifier (RPCSEC_GSS checks it).
pub(crate) fn decode_verified_reply(record: Bytes) -> Result<(u32, VerifiedOutcome), RpcError> {
    let (xid, hdr, rest) = decode_reply_message(record)?;
    let r = match hdr {
        ReplyHeader::Accepted { verf, stat } => match stat {
            AcceptedStatus::Success => Ok((verf, rest)),
            AcceptedStatus::ProgUnavail => Err(RpcError::ProgUnavail),
            AcceptedStatus::ProgMismatch { low, high } => Err(RpcError::ProgMismatch { low, high }),
            AcceptedStatus::ProcUnavail => Err(RpcError::ProcUnavail),
            AcceptedStatus::GarbageArgs => Err(RpcError::GarbageArgs),
            AcceptedStatus::SystemErr => Err(RpcError::SystemErr),
        },
        ReplyHeader::Denied(RejectedReply::RpcMismatch { low, high }) => {
            Err(RpcError::RpcMismatch { low, high })
        }
        ReplyHeader::Denied(RejectedReply::AuthError(s)) => Err(RpcError::AuthError(s)),
    };
    Ok((xid, r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A peer that sends CALLs on the connection a client opened gets each REPLY on that
    /// connection, by xid, while the client's own calls keep working.
    #[tokio::test]
    async fn calls_from_the_peer_are_answered_on_the_same_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let handler: CallHandler = Arc::new(|call: IncomingCall| {
            Box::pin(async move {
                match (call.prog, call.proc_num) {
                    (0x4000_0000, 0) => CallReply::Success(Bytes::new()),
                    (0x4000_0000, 1) => CallReply::Success(call.args),
                    (0x4000_0000, _) => CallReply::ProcUnavail,
                    _ => CallReply::ProgUnavail,
                }
            }) as CallFuture
        });
        let client = tokio::spawn(async move {
            let c = RpcClient::connect_with_handler(
                addr,
                Credential::None,
                ClientConfig::default(),
                Some(handler),
            )
            .await
            .expect("connect");
            c.call(100003, 4, 0, Bytes::new()).await.expect("own call")
        });
        let (mut s, _) = listener.accept().await.expect("accept");
        // Three CALLs to the client: echo, unknown procedure, unknown program.
        for (xid, prog, proc_num) in [(7u32, 0x4000_0000, 1), (8, 0x4000_0000, 9), (9, 5, 0)] {
            let call = encode_call(xid, prog, 1, proc_num, &Credential::None, b"abcd");
            s.write_all(&record(&call)).await.expect("send call");
        }
        let mut got = HashMap::new();
        let mut own_call = None;
        while got.len() < 3 || own_call.is_none() {
            let rec = crate::read_record(&mut s, 1 << 20).await.expect("record");
            if rec[4..8] == MSG_CALL.to_be_bytes() {
                let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
                own_call = Some(xid);
                continue;
            }
            let (xid, r) = decode_reply(rec).expect("reply");
            got.insert(xid, r.map_err(|e| e.to_string()));
        }
        assert_eq!(got[&7], Ok(Bytes::from_static(b"abcd")));
        assert_eq!(got[&8], Err(RpcError::ProcUnavail.to_string()));
        assert_eq!(got[&9], Err(RpcError::ProgUnavail.to_string()));
        // Answer the client's own call: it still works alongside.
        let xid = own_call.expect("client call");
        let reply = reply_record(
            xid,
            &ReplyHeader::Accepted {
                verf: OpaqueAuth::none(),
                stat: AcceptedStatus::Success,
            },
            b"ok!!",
        );
        s.write_all(&reply).await.expect("reply");
        assert_eq!(client.await.expect("join"), Bytes::from_static(b"ok!!"));
    }

    /// A CALL of another RPC version gets RPC_MISMATCH; a truncated one is dropped.
    #[test]
    fn incoming_call_headers() {
        let call = encode_call(5, 1, 2, 3, &Credential::None, b"xy");
        match parse_incoming(call.clone()) {
            Some(Ok(c)) => {
                assert_eq!((c.xid, c.prog, c.vers, c.proc_num), (5, 1, 2, 3));
                assert_eq!(c.args, Bytes::from_static(b"xy"));
            }
            other => panic!("{other:?}"),
        }
        let mut v3 = BytesMut::from(&call[..]);
        v3[8..12].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(
            parse_incoming(v3.freeze()),
            Some(Err((
                5,
                ReplyHeader::Denied(RejectedReply::RpcMismatch { .. })
            )))
        ));
        assert!(parse_incoming(call.slice(..6)).is_none());
        assert!(matches!(
            parse_incoming(call.slice(..14)),
            Some(Err((5, ReplyHeader::Accepted { .. })))
        ));
    }
}
