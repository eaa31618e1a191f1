//! The server transport: accept loop, per-connection reader / writer, call dispatch.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use std::pin::Pin;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};
use txnfs_xdr::{get_opaque, get_u32, Decode, Gathered, PipedTail, XdrError};

pub(crate) mod behind;
pub(crate) mod plain_tcp;

use crate::backchannel::{BackChannel, DEFAULT_MAX_CALLBACKS_PER_CONN};
use crate::budget::{Charge, InFlightBudget, DEFAULT_IN_FLIGHT_BYTES};
use crate::gss::{GssCaller, GssServer};
use crate::msg::*;
use crate::record::{RecordError, RecordReader};
use crate::starttls::Negotiated;
use crate::tls::{ServerTls, TlsPeer};
use crate::writer::WriteCounts;

/// What the transport tells a service about one call.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_num: u32,
    pub cred: Credential,
    /// Unique (per process) id of the connection the call arrived on.
    pub conn_id: u64,
    pub peer: SocketAddr,
    /// Sends callbacks (CALLs from the server) to the client over this same connection.
    pub back_channel: BackChannel,
    /// The connection runs inside TLS (RFC 9289): what is known of the client.
    pub tls: Option<Arc<TlsPeer>>,
    /// An RPCSEC_GSS call (then `cred` is `None`): its verified principal and service.
    pub gss: Option<Arc<GssCaller>>,
    /// When the call was read, no other call of its connection was executing and no
    /// further byte of the connection had been received, nor for the connection's
    /// last few calls: the client waits for this reply only, so holding the
    /// connection's reader while the call runs delays no one on it (the placement of
    /// short syncs, ADR 0059).
    pub alone: bool,
}

/// What a service answers to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// MSG_ACCEPTED / SUCCESS followed by these encoded procedure results.
    Success(Bytes),
    /// [`ReplyBody::Success`] with results made of parts (file data shared with the
    /// buffer it was read into, ADR 0052), written with one gathered write. Whoever must
    /// post-process the results whole (RPCSEC_GSS integrity or privacy) flattens them
    /// with [`Gathered::to_bytes`], which copies.
    SuccessParts(Gathered),
    /// Normally answered by the transport from [`RpcService::programs`].
    ProgUnavail,
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    ProgMismatch {
        low: u32,
        high: u32,
    },
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
    /// Send no reply at all.
    Drop,
}

/// An RPC program implementation served by [`serve`].
pub trait RpcService: Send + Sync + 'static {
    /// (program, lowest version, highest version) this service serves; the transport answers
    /// PROG_UNAVAIL / PROG_MISMATCH itself. Queried once when [`serve`] starts.
    fn programs(&self) -> Vec<(u32, u32, u32)>;

    /// Execute one call. Calls of one connection run concurrently.
    fn call(&self, info: CallInfo, args: Bytes) -> impl Future<Output = ReplyBody> + Send;

    /// A connection was accepted; `back_channel` sends callbacks to its client. Called
    /// before the connection's first call is read.
    fn connection_opened(&self, _conn_id: u64, _back_channel: &BackChannel) {}

    /// The connection `conn_id` is gone and every call that arrived on it has finished.
    /// Its [`BackChannel`] is closed by then.
    fn connection_closed(&self, _conn_id: u64) {}
}

/// Transport limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest accepted record (sum of its fragments); a bigger one closes the connection.
    pub max_record_size: usize,
    /// Calls of one connection executing (or whose replies are queued) at the same time;
    /// beyond it the connection is not read until some finish.
    pub max_in_flight_per_conn: usize,
    /// Open connections. A new connection beyond it makes the server close the connection
    /// that has been idle longest (no call executing, no reply queued, no callback waiting),
    /// so one peer holding idle sockets cannot lock every other client out; only when every
    /// connection is busy is the new one closed at once.
    pub max_connections: usize,
    /// A connection with nothing in progress and no bytes received or sent for this long is
    /// closed. `None` keeps idle connections forever.
    pub idle_timeout: Option<Duration>,
    /// After `shutdown` resolved: how long in-flight calls may take to finish and have their
    /// replies written before the remaining connections are dropped.
    pub shutdown_grace: Duration,
    /// Callbacks ([`BackChannel::call`]) of one connection waiting for their replies at the
    /// same time; one more fails with `TooManyOutstanding`.
    pub max_callbacks_per_conn: usize,
    /// Bytes in flight over all connections: request records read and not yet
    /// answered plus replies not yet written (ADR 0029). When it is used up,
    /// connections stop reading their sockets until bytes are given back; nothing is
    /// dropped or failed for it. Shared with whoever watches it (its `in_use` and
    /// `peak`). Not charged: each connection's read-ahead (at most 64 KiB), replies the
    /// transport makes itself (a few dozen bytes, bounded by the per-connection call
    /// limit) and callbacks (bounded by `max_callbacks_per_conn`).
    pub in_flight_budget: Arc<InFlightBudget>,
    /// RPC-with-TLS (RFC 9289): with it, a connection whose first call is the AUTH_TLS
    /// probe is answered STARTTLS and upgraded; without it the probe is refused as an
    /// unknown flavour.
    pub tls: Option<Arc<ServerTls>>,
    /// RPCSEC_GSS (RFC 2203, Kerberos v5): without it the flavour is refused as unknown.
    pub gss: Option<Arc<GssServer>>,
    /// Gathered writes and the records they carried, over all connections (shared with
    /// whoever watches them).
    pub write_counts: Arc<WriteCounts>,
    /// Run-to-completion (ADR 0057): a call's first step runs on the connection's reader
    /// task, and only a call that must wait (for the blocking pool, a recall, a lock)
    /// becomes a task of its own. `false` spawns a task for every call, as before; the
    /// environment variable `TXNFS_SPAWN_EVERY_CALL` selects that for A/B measurements.
    pub run_inline: bool,
    /// Busy polling on plain TCP (ADR 0057 addendum): a connection's reader tries a
    /// non-blocking read for up to this long before it sleeps on the socket, so a
    /// client that sends its next call within it costs no wake-up. Zero (the default)
    /// never spins; `TXNFS_BUSY_POLL_US` sets it for measurements.
    pub busy_poll: Duration,
}

pub const DEFAULT_MAX_RECORD_SIZE: usize = 4 * 1024 * 1024 + 64 * 1024;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
            max_in_flight_per_conn: 1024,
            max_connections: 4096,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            shutdown_grace: SHUTDOWN_GRACE,
            max_callbacks_per_conn: DEFAULT_MAX_CALLBACKS_PER_CONN,
            in_flight_budget: InFlightBudget::new(DEFAULT_IN_FLIGHT_BYTES),
            tls: None,
            gss: None,
            write_counts: Arc::default(),
            run_inline: std::env::var_os("TXNFS_SPAWN_EVERY_CALL").is_none(),
            busy_poll: std::env::var("TXNFS_BUSY_POLL_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(Duration::ZERO, Duration::from_micros),
        }
    }
}

/// Default [`ServerConfig::idle_timeout`]: three NFSv4 lease periods of the default 60 s.
/// A live NFSv4.1 client renews its lease by SEQUENCE well within every lease period, so a
/// connection silent for three belongs to a client whose lease (and courtesy time) is over,
/// or is one the client no longer uses; either way closing it costs at most a reconnect.
/// (knfsd closes temporary sockets after 6–12 minutes, but it also serves NFSv3, whose
/// idle mounts send nothing.)
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(180);

/// Default [`ServerConfig::shutdown_grace`].
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Serve `svc` on `listener` until `shutdown` resolves; then stop accepting, let in-flight
/// calls finish (at most [`ServerConfig::shutdown_grace`]) and return.
pub async fn serve<S: RpcService>(
    listener: TcpListener,
    svc: Arc<S>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let shared = Arc::new(Shared {
        programs: svc.programs(),
        max_record_size: cfg.max_record_size.max(4),
        max_in_flight: cfg.max_in_flight_per_conn.max(1),
        max_callbacks: cfg.max_callbacks_per_conn.max(1),
        epoch: Instant::now(),
        live: AtomicUsize::new(0),
        budget: cfg.in_flight_budget.clone(),
        tls: cfg.tls.clone(),
        gss: cfg.gss.clone(),
        write_counts: cfg.write_counts.clone(),
        run_inline: cfg.run_inline,
        busy_poll: cfg.busy_poll,
        spinners: AtomicUsize::new(0),
        max_spinners: std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
    });
    let max_connections = cfg.max_connections.max(1);
    let (sd_tx, sd_rx) = watch::channel(false);
    // The accept loop's view of every connection task, to pick one to close.
    let mut table: HashMap<tokio::task::Id, Arc<ConnState>> = HashMap::new();
    let mut conns = JoinSet::new();
    // Idle connections are found by a sweep a few times per timeout (so one is closed
    // between 1 and 1.25 timeouts after it fell silent) rather than by a timer per
    // connection, which would be re-armed on every record.
    let sweep_every = cfg
        .idle_timeout
        .map(|t| (t / 4).clamp(Duration::from_millis(10), Duration::from_secs(30)));
    let mut sweep = tokio::time::interval(sweep_every.unwrap_or(Duration::from_secs(3600)));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_limit_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    if let Ok(addr) = listener.local_addr() {
        debug!(%addr, "RPC server listening");
    }
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(done) = conns.join_next_with_id(), if !conns.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                table.remove(&id);
            }
            _ = sweep.tick(), if cfg.idle_timeout.is_some() => {
                if let Some(timeout) = cfg.idle_timeout {
                    close_idle(&table, &shared, timeout);
                }
            }
            acc = listener.accept() => match acc {
                Ok((stream, peer)) => {
                    if !make_room(&table, &shared, max_connections) {
                        warn!(%peer, max = max_connections,
                            "too many connections, all of them busy; closing new one");
                        drop(stream);
                        continue;
                    }
                    if shared.live.load(Ordering::Acquire) + 1 >= max_connections
                        && last_limit_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(60))
                    {
                        // Once a minute, like knfsd's rate-limited notice.
                        last_limit_warning = Some(Instant::now());
                        warn!(max = max_connections,
                            "connection limit reached: closing the longest idle connections; \
                             consider raising max_connections");
                    }
                    let conn_id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
                    debug!(%peer, conn_id, "accepted connection");
                    let (tx, rx) = mpsc::unbounded_channel();
                    let back_channel =
                        BackChannel::new(conn_id, peer, tx.clone(), shared.max_callbacks);
                    let state = Arc::new(ConnState {
                        last_active: AtomicU64::new(shared.now_nanos()),
                        slots: Arc::new(Semaphore::new(shared.max_in_flight)),
                        back_channel,
                        closing: AtomicBool::new(false),
                        close_requested_at: AtomicU64::new(0),
                        close_reason: AtomicU8::new(CLOSE_EVICT),
                        close: Notify::new(),
                    });
                    shared.live.fetch_add(1, Ordering::AcqRel);
                    let conn = Connection {
                        svc: svc.clone(),
                        shared: shared.clone(),
                        conn_id,
                        peer,
                        shutdown: sd_rx.clone(),
                        state: state.clone(),
                    };
                    let task = conns.spawn(conn.run(stream, tx, rx));
                    table.insert(task.id(), state);
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let _ = sd_tx.send(true);
    let drained = tokio::time::timeout(cfg.shutdown_grace, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            remaining = conns.len(),
            "shutdown grace period over; dropping connections"
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
    info!("RPC server stopped");
    Ok(())
}

/// Ask connections to close until a new one fits under `max` (knfsd's
/// `svc_check_conn_limits`, except that a busy connection is never chosen): the one whose
/// bytes moved longest ago among those with nothing in progress. False when every
/// connection is busy.
fn make_room(
    table: &HashMap<tokio::task::Id, Arc<ConnState>>,
    shared: &Shared,
    max: usize,
) -> bool {
    while shared.live.load(Ordering::Acquire) >= max {
        let victim = table
            .values()
            .filter(|c| !c.closing.load(Ordering::Acquire) && !c.busy(shared.max_in_flight))
            .min_by_key(|c| c.last_active.load(Ordering::Acquire));
        let Some(victim) = victim else {
            return false;
        };
        if victim.request_close(CLOSE_EVICT, shared) {
            debug!(
                conn_id = victim.back_channel.conn_id(),
                peer = %victim.back_channel.peer(),
                "connection limit: closing the longest idle connection"
            );
        }
    }
    true
}

/// Ask every connection silent for `timeout` with nothing in progress to close (knfsd's
/// `svc_age_temp_xprts`, with a configurable age).
fn close_idle(
    table: &HashMap<tokio::task::Id, Arc<ConnState>>,
    shared: &Shared,
    timeout: Duration,
) {
    let now = shared.now_nanos();
    let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    for c in table.values() {
        let silent = now.saturating_sub(c.last_active.load(Ordering::Acquire));
        if silent >= limit
            && !c.closing.load(Ordering::Acquire)
            && !c.busy(shared.max_in_flight)
            && c.request_close(CLOSE_IDLE, shared)
        {
            debug!(
                conn_id = c.back_channel.conn_id(),
                peer = %c.back_channel.peer(),
                idle_ms = silent / 1_000_000,
                "closing idle connection"
            );
        }
    }
}

struct Shared {
    programs: Vec<(u32, u32, u32)>,
    max_record_size: usize,
    max_in_flight: usize,
    max_callbacks: usize,
    /// Origin of the nanosecond timestamps in [`ConnState`].
    epoch: Instant,
    /// Connections that count against `max_connections`: accepted and neither asked to
    /// close nor finished.
    live: AtomicUsize,
    /// Bytes in flight over all connections ([`ServerConfig::in_flight_budget`]).
    budget: Arc<InFlightBudget>,
    tls: Option<Arc<ServerTls>>,
    gss: Option<Arc<GssServer>>,
    write_counts: Arc<WriteCounts>,
    run_inline: bool,
    busy_poll: Duration,
    /// Readers spinning now (busy polling), and how many may at once.
    spinners: AtomicUsize,
    max_spinners: usize,
}

impl Shared {
    fn now_nanos(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

const CLOSE_EVICT: u8 = 1;
const CLOSE_IDLE: u8 = 2;

/// What the accept loop and a connection's task share about the connection.
struct ConnState {
    /// When bytes last moved in either direction (nanoseconds since `Shared::epoch`).
    last_active: AtomicU64,
    /// One permit per call executing or reply queued (taken from `max_in_flight`).
    slots: Arc<Semaphore>,
    back_channel: BackChannel,
    /// Asked to close, or finished: no longer counts in `Shared::live`.
    closing: AtomicBool,
    /// `last_active` must not have moved past this for a close request to be honoured.
    close_requested_at: AtomicU64,
    close_reason: AtomicU8,
    close: Notify,
}

impl ConnState {
    fn touch(&self, shared: &Shared) {
        self.last_active
            .fetch_max(shared.now_nanos(), Ordering::AcqRel);
    }

    /// Something in progress: a call executing, a reply not yet written, or a callback
    /// waiting for the client's reply.
    fn busy(&self, max_in_flight: usize) -> bool {
        self.slots.available_permits() < max_in_flight || self.back_channel.outstanding() > 0
    }

    /// Stop counting this connection in `live`; false if it already was not.
    fn mark_closing(&self, shared: &Shared) -> bool {
        let first = !self.closing.swap(true, Ordering::AcqRel);
        if first {
            shared.live.fetch_sub(1, Ordering::AcqRel);
        }
        first
    }

    fn request_close(&self, reason: u8, shared: &Shared) -> bool {
        if !self.mark_closing(shared) {
            return false;
        }
        self.close_requested_at
            .store(shared.now_nanos(), Ordering::Release);
        self.close_reason.store(reason, Ordering::Release);
        self.close.notify_one();
        true
    }

    /// The connection became busy or active after the request: keep it, and count it again.
    fn decline_close(&self, shared: &Shared) {
        if self.closing.swap(false, Ordering::AcqRel) {
            shared.live.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The read half, noting when bytes arrive (a record trickling in counts as activity).
struct Touching<R> {
    io: R,
    state: Arc<ConnState>,
    shared: Arc<Shared>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Touching<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.state.touch(&this.shared);
        }
        r
    }
}

struct Connection<S> {
    svc: Arc<S>,
    shared: Arc<Shared>,
    conn_id: u64,
    peer: SocketAddr,
    shutdown: watch::Receiver<bool>,
    state: Arc<ConnState>,
}

/// A record queued for the writer: a reply, whose permit bounds queued + executing calls,
/// or a callback CALL (no permit; [`BackChannel`] bounds those).
pub(crate) struct Outgoing {
    /// Record mark and message header (and small bodies).
    pub(crate) head: Bytes,
    /// The rest of the same record, as separate buffers; may be empty.
    pub(crate) body: Vec<Bytes>,
    /// The record's end, file data in a pipe (ADR 0065), after `body`.
    pub(crate) piped: Option<PipedTail>,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    /// The reply's bytes in the in-flight budget, given back once written.
    pub(crate) charge: Option<Charge>,
}

/// Calls `connection_closed` and stops the writer however the connection task ends
/// (normally, or aborted at the end of the shutdown grace period).
struct CloseGuard<S: RpcService> {
    svc: Arc<S>,
    conn_id: u64,
    writer: Option<AbortHandle>,
    back_channel: Option<BackChannel>,
}

impl<S: RpcService> Drop for CloseGuard<S> {
    fn drop(&mut self) {
        if let Some(w) = self.writer.take() {
            w.abort();
        }
        if let Some(b) = self.back_channel.take() {
            b.close();
        }
        self.svc.connection_closed(self.conn_id);
    }
}

/// Sends the reply of a call; if the call never produced one (its future panicked or was
/// cancelled) a SYSTEM_ERR is sent instead so the client is not left waiting.
struct ReplySender {
    tx: mpsc::UnboundedSender<Outgoing>,
    xid: u32,
    permit: Option<OwnedSemaphorePermit>,
}

impl ReplySender {
    fn send(&mut self, body: ReplyBody) {
        self.send_reply(Reply::Body(body))
    }

    fn send_reply(&mut self, reply: Reply) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        if let Some((head, body, piped)) = encode_reply(self.xid, reply) {
            let _ = self.tx.send(Outgoing {
                head,
                body,
                piped,
                permit: Some(permit),
                charge: None,
            });
        }
    }

    /// Send a service's reply with its bytes charged to `budget` (ADR 0029): the
    /// request's `charge` becomes the reply's if it is large enough or can grow at
    /// once; otherwise it is given back first and the reply waits for its bytes,
    /// holding no other reservation (so waits cannot form a cycle).
    async fn send_charged(
        &mut self,
        reply: Reply,
        charge: Option<Charge>,
        budget: &Arc<InFlightBudget>,
    ) {
        let Some((head, body, piped)) = encode_reply(self.xid, reply) else {
            // No reply (Drop): the call's slot is free again.
            self.permit = None;
            return;
        };
        // Every part's bytes (since replies became parts, ADR 0052, this counted parts),
        // and the piped data's, which the writer may read into memory.
        let len = head.len()
            + body.iter().map(Bytes::len).sum::<usize>()
            + piped.as_ref().map_or(0, PipedTail::len);
        let charge = match charge.and_then(|c| budget.resize(c, len)) {
            Some(c) => Some(c),
            None => budget.clone().reserve(len).await,
        };
        let Some(permit) = self.permit.take() else {
            return;
        };
        let _ = self.tx.send(Outgoing {
            head,
            body,
            piped,
            permit: Some(permit),
            charge,
        });
    }
}

impl Drop for ReplySender {
    fn drop(&mut self) {
        if self.permit.is_some() {
            error!(
                xid = self.xid,
                "RPC call ended without a reply (panic or cancellation)"
            );
            self.send(ReplyBody::SystemErr);
        }
    }
}

/// Everything the transport can answer: the service's replies plus RPC_MISMATCH.
pub(crate) enum Reply {
    Body(ReplyBody),
    /// A reply with its own verifier (RPCSEC_GSS).
    Verified(OpaqueAuth, ReplyBody),
    RpcMismatch,
}

/// Encode a reply as (record mark + header [+ small first part], the other parts, a
/// piped last part). `None` for `Drop`.
pub(crate) fn encode_reply(
    xid: u32,
    reply: Reply,
) -> Option<(Bytes, Vec<Bytes>, Option<PipedTail>)> {
    let verf = match &reply {
        Reply::Verified(verf, _) => verf.clone(),
        _ => OpaqueAuth::none(),
    };
    let (hdr, (body, piped)) = match reply {
        Reply::RpcMismatch => (
            ReplyHeader::Denied(RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            }),
            (Vec::new(), None),
        ),
        Reply::Body(b) | Reply::Verified(_, b) => {
            let accepted = |stat| ReplyHeader::Accepted {
                verf: verf.clone(),
                stat,
            };
            match b {
                ReplyBody::Drop => return None,
                ReplyBody::Success(res) => success(xid, verf.clone(), Gathered::from(res)),
                ReplyBody::SuccessParts(res) => success(xid, verf.clone(), res),
                ReplyBody::ProgUnavail => {
                    (accepted(AcceptedStatus::ProgUnavail), (Vec::new(), None))
                }
                ReplyBody::ProcUnavail => {
                    (accepted(AcceptedStatus::ProcUnavail), (Vec::new(), None))
                }
                ReplyBody::GarbageArgs => {
                    (accepted(AcceptedStatus::GarbageArgs), (Vec::new(), None))
                }
                ReplyBody::SystemErr => (accepted(AcceptedStatus::SystemErr), (Vec::new(), None)),
                ReplyBody::ProgMismatch { low, high } => (
                    accepted(AcceptedStatus::ProgMismatch { low, high }),
                    (Vec::new(), None),
                ),
                ReplyBody::AuthError(s) => (
                    ReplyHeader::Denied(RejectedReply::AuthError(s)),
                    (Vec::new(), None),
                ),
            }
        }
    };
    let trailing = piped.as_ref().map_or(0, PipedTail::len);
    let (head, body) = crate::record::frame(
        crate::msg::reply_header_len(&hdr),
        |head| encode_reply_header(head, xid, &hdr),
        body,
        trailing,
    );
    Some((head, body, piped))
}

/// SUCCESS with `res` (and the reply verifier `verf`), or SYSTEM_ERR when the record
/// could not hold it.
fn success(
    xid: u32,
    verf: OpaqueAuth,
    res: Gathered,
) -> (ReplyHeader, (Vec<Bytes>, Option<PipedTail>)) {
    let accepted = |stat| ReplyHeader::Accepted { verf, stat };
    // 4 (mark) + 24 (header) + results must fit one fragment.
    if res.len() > MAX_FRAGMENT - 64 {
        error!(xid, len = res.len(), "reply too large; sending SYSTEM_ERR");
        (accepted(AcceptedStatus::SystemErr), (Vec::new(), None))
    } else {
        (accepted(AcceptedStatus::Success), res.into_parts_piped())
    }
}

/// The outcome of parsing one received record.
enum Parsed {
    /// Not even an xid: close the connection.
    Close,
    /// A REPLY message (the whole record, from the xid): an answer to a callback.
    BackReply(Bytes),
    /// Answer without involving the service.
    Reply(u32, Reply),
    /// A call for the service (once its program is checked), with its arguments.
    Call(CallInfo, Bytes),
}

/// Parse one record that arrived on connection `conn_id` from `peer`.
fn parse_call(
    mut rec: Bytes,
    conn_id: u64,
    peer: SocketAddr,
    back_channel: &BackChannel,
    tls: &Option<Arc<TlsPeer>>,
    gss: Option<&GssServer>,
    programs: &[(u32, u32, u32)],
) -> Parsed {
    let whole = rec.clone();
    // A REPLY (msg_type at offset 4) answers one of our callbacks: hand over the whole record.
    if rec.get(4..8) == Some(&MSG_REPLY.to_be_bytes()[..]) {
        return Parsed::BackReply(rec);
    }
    let Ok(xid) = get_u32(&mut rec) else {
        warn!(%peer, len = rec.len(), "RPC record too short for an xid; closing connection");
        return Parsed::Close;
    };
    let garbage = |what: &str, e: XdrError| {
        warn!(%peer, xid, error = %e, "malformed RPC call header ({what})");
        Parsed::Reply(xid, Reply::Body(ReplyBody::GarbageArgs))
    };
    let mtype = match get_u32(&mut rec) {
        Ok(m) => m,
        Err(e) => return garbage("msg_type", e),
    };
    if mtype != MSG_CALL {
        return garbage(
            "msg_type",
            XdrError::BadDiscriminant {
                type_name: "msg_type",
                value: mtype as i64,
            },
        );
    }
    let mut head = [0u32; 4];
    for (i, h) in head.iter_mut().enumerate() {
        match get_u32(&mut rec) {
            Ok(v) => *h = v,
            Err(e) => return garbage(["rpcvers", "prog", "vers", "proc"][i], e),
        }
        if i == 0 && *h != RPC_VERSION {
            warn!(%peer, xid, rpcvers = *h, "unsupported RPC version");
            return Parsed::Reply(xid, Reply::RpcMismatch);
        }
    }
    let [_, prog, vers, proc_num] = head;
    let auth_err = |what: &str, stat: AuthStat, e: &dyn std::fmt::Display| {
        warn!(%peer, xid, error = %e, "bad RPC {what}; {stat:?}");
        Parsed::Reply(xid, Reply::Body(ReplyBody::AuthError(stat)))
    };
    let cred = match get_u32(&mut rec) {
        Ok(f) => f,
        Err(e) => return garbage("cred flavor", e),
    };
    let cred_body = match get_opaque(&mut rec, MAX_AUTH_BYTES) {
        Ok(b) => b,
        Err(e @ XdrError::TooLong { .. }) => return auth_err("credential", AuthStat::BadCred, &e),
        Err(e) => return garbage("cred body", e),
    };
    let header = whole.slice(..whole.len() - rec.len());
    let verf = match OpaqueAuth::decode(&mut rec) {
        Ok(v) => v,
        Err(e @ XdrError::TooLong { .. }) => return auth_err("verifier", AuthStat::BadVerf, &e),
        Err(e) => return garbage("verifier", e),
    };
    let mut gss_caller = None;
    let cred = match (cred, gss) {
        (AUTH_NONE, _) => Credential::None,
        (RPCSEC_GSS, Some(gss)) => {
            match gss.accept(&header, cred_body, verf.clone(), proc_num, rec) {
                crate::gss::server::GssVerdict::Drop => {
                    return Parsed::Reply(xid, Reply::Body(ReplyBody::Drop))
                }
                crate::gss::server::GssVerdict::Reply { verf, body } => {
                    return Parsed::Reply(xid, Reply::Verified(verf, body))
                }
                crate::gss::server::GssVerdict::Call { caller, args } => {
                    // A program or version not served: the transport's answer, signed
                    // as every accepted reply of the context (RFC 2203 §5.3.3.2).
                    if let Some(body) = check_program(programs, prog, vers) {
                        debug!(%peer, xid, prog, vers, reply = ?body, "program check failed");
                        let (verf, body) = caller.seal_reply(body);
                        return Parsed::Reply(xid, Reply::Verified(verf, body));
                    }
                    gss_caller = Some(caller);
                    rec = args;
                    Credential::None
                }
            }
        }
        (AUTH_SYS, _) => {
            let mut body = cred_body;
            match AuthSys::decode(&mut body) {
                Ok(s) if body.is_empty() => Credential::Sys(s),
                Ok(_) => {
                    return auth_err("AUTH_SYS credential", AuthStat::BadCred, &"trailing bytes")
                }
                Err(e) => return auth_err("AUTH_SYS credential", AuthStat::BadCred, &e),
            }
        }
        (f, _) => {
            return auth_err(
                "credential",
                AuthStat::BadCred,
                &format_args!("unsupported flavor {f}"),
            )
        }
    };
    if gss_caller.is_none() && verf.flavor != AUTH_NONE {
        return auth_err(
            "verifier",
            AuthStat::BadVerf,
            &format_args!("flavor {}", verf.flavor),
        );
    }
    let info = CallInfo {
        xid,
        prog,
        vers,
        proc_num,
        cred,
        conn_id,
        peer,
        back_channel: back_channel.clone(),
        tls: tls.clone(),
        gss: gss_caller,
        alone: false,
    };
    Parsed::Call(info, rec)
}

/// PROG_UNAVAIL / PROG_MISMATCH from the service's program table.
fn check_program(programs: &[(u32, u32, u32)], prog: u32, vers: u32) -> Option<ReplyBody> {
    let mut range: Option<(u32, u32)> = None;
    for &(p, low, high) in programs {
        if p != prog {
            continue;
        }
        if (low..=high).contains(&vers) {
            return None;
        }
        range = Some(match range {
            None => (low, high),
            Some((l, h)) => (l.min(low), h.max(high)),
        });
    }
    Some(match range {
        None => ReplyBody::ProgUnavail,
        Some((low, high)) => ReplyBody::ProgMismatch { low, high },
    })
}

/// What to do with a parsed record.
enum Work {
    Reply(Reply),
    Call(CallInfo, Bytes),
}

impl<S: RpcService> Connection<S> {
    /// Serve the connection: over TCP as it is, or, when the server speaks TLS and the
    /// client's first call is the AUTH_TLS probe, inside TLS. Each is its own
    /// instance of [`Connection::serve`]: the plain path reads and writes the TCP
    /// halves directly, with no TLS branch per record.
    async fn run(
        self,
        stream: TcpStream,
        tx: mpsc::UnboundedSender<Outgoing>,
        rx: mpsc::UnboundedReceiver<Outgoing>,
    ) {
        let _ = stream.set_nodelay(true);
        // The socket, for a held call's look at what waits behind it (`behind.rs`):
        // the same descriptor under TLS.
        let sock = std::os::fd::AsRawFd::as_raw_fd(&stream);
        let Some(tls) = self.shared.tls.clone() else {
            let (rd, wr) = stream.into_split();
            return self
                .serve(
                    rd,
                    wr,
                    &[],
                    None,
                    (tx, rx),
                    (sock, Some(plain_tcp::PLAIN_TCP)),
                )
                .await;
        };
        let mut shutdown = self.shutdown.clone();
        let negotiated = tokio::select! {
            n = crate::starttls::accept(stream, &tls, self.peer) => n,
            _ = shutdown.wait_for(|s| *s) => Negotiated::Closed,
            _ = self.state.close.notified() => Negotiated::Closed,
        };
        match negotiated {
            Negotiated::Plain(stream, head) => {
                let (rd, wr) = stream.into_split();
                self.serve(
                    rd,
                    wr,
                    &head,
                    None,
                    (tx, rx),
                    (sock, Some(plain_tcp::PLAIN_TCP)),
                )
                .await
            }
            Negotiated::Tls(stream, peer) => {
                let (rd, wr) = tokio::io::split(*stream);
                self.serve(rd, wr, &[], Some(Arc::new(peer)), (tx, rx), (sock, None))
                    .await
            }
            Negotiated::Closed => {
                // The service never saw the connection: only the transport's books.
                self.state.mark_closing(&self.shared);
                self.state.back_channel.close();
            }
        }
    }

    /// Read records from `rd` (after the bytes `head` already read), run their calls,
    /// write the replies to `wr`.
    async fn serve<R, W>(
        self,
        rd: R,
        wr: W,
        head: &[u8],
        tls: Option<Arc<TlsPeer>>,
        (tx, rx): (
            mpsc::UnboundedSender<Outgoing>,
            mpsc::UnboundedReceiver<Outgoing>,
        ),
        (sock, plain): (std::os::fd::RawFd, Option<plain_tcp::PlainTcp<Touching<R>>>),
    ) where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + crate::writer::PipeSink + Unpin + Send + 'static,
    {
        let (conn_id, peer) = (self.conn_id, self.peer);
        let state = self.state.clone();
        let back_channel = state.back_channel.clone();
        let mut guard = CloseGuard {
            svc: self.svc.clone(),
            conn_id,
            writer: None,
            back_channel: Some(back_channel.clone()),
        };
        let write_failed = Arc::new(Notify::new());
        let touch = {
            let (state, shared) = (state.clone(), self.shared.clone());
            move || state.touch(&shared)
        };
        let writer = tokio::spawn(crate::writer::writer_loop(
            wr,
            rx,
            write_failed.clone(),
            peer,
            self.shared.write_counts.clone(),
            touch,
        ));
        guard.writer = Some(writer.abort_handle());
        self.svc.connection_opened(conn_id, &back_channel);
        let slots = state.slots.clone();
        let rd = Touching {
            io: rd,
            state: state.clone(),
            shared: self.shared.clone(),
        };
        let mut reader = RecordReader::new(rd, self.shared.max_record_size)
            .with_prefix(head)
            .with_budget(self.shared.budget.clone());
        if let Some(plain) = plain {
            if std::env::var_os("TXNFS_NO_RCVLOWAT").is_none() {
                reader = reader.with_lowat(plain.lowat);
            }
            reader = reader.with_spin(crate::record::Spin {
                read: plain.try_read,
                idle: plain.idle,
                claim: plain.claim,
                release: plain.release,
                limit: self.shared.busy_poll,
            });
        }
        let mut calls = JoinSet::new();
        // The box of the last call that completed on the reader (ADR 0064 addendum): the
        // next call's future is written into it, so a call run to completion costs no
        // allocation for its future. A completed async block holds nothing.
        let mut spare_call = None;
        // Calls to come that are not `CallInfo::alone` (see `COMPANY_MEMORY`).
        let mut company = 0u32;
        // The events that end the loop are waited for by futures made once, not once per
        // record: a `Notified` takes its `Notify`'s lock to register when first polled and
        // again to leave when dropped, which cost about 3 % of the server's CPU per 4 KiB
        // READ. Each is polled again only while it has not completed.
        let mut shutdown = self.shutdown.clone();
        let mut stopping = std::pin::pin!(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        });
        let mut writer_failed = std::pin::pin!(write_failed.notified());
        let mut close_asked = std::pin::pin!(state.close.notified());

        loop {
            let rec = tokio::select! {
                biased;
                _ = &mut stopping => {
                    debug!(%peer, conn_id, "shutdown: no longer reading");
                    break;
                }
                _ = &mut writer_failed => break,
                Some(_) = calls.join_next(), if !calls.is_empty() => continue,
                r = reader.next_charged() => r,
                // After the reader: a record already received is taken (and makes the
                // connection busy) before a close request is looked at.
                _ = &mut close_asked => {
                    close_asked.set(state.close.notified());
                    let requested = state.close_requested_at.load(Ordering::Acquire);
                    let active_since = state.last_active.load(Ordering::Acquire) > requested;
                    if state.busy(self.shared.max_in_flight) || active_since {
                        debug!(%peer, conn_id, "close request declined: connection in use");
                        state.decline_close(&self.shared);
                        continue;
                    }
                    let reason = match state.close_reason.load(Ordering::Acquire) {
                        CLOSE_IDLE => "idle timeout",
                        _ => "connection limit reached and this one idle longest",
                    };
                    // Debug only: under a flood of connections this is one line per
                    // accept; the accept loop warns once a minute instead.
                    debug!(%peer, conn_id, reason, "closing idle connection");
                    break;
                }
            };
            let (rec, charge) = match rec {
                Ok(Some(r)) => r,
                Ok(None) => {
                    debug!(%peer, conn_id, "connection closed by peer");
                    break;
                }
                Err(RecordError::Io(e)) => {
                    debug!(%peer, conn_id, error = %e, "read error");
                    break;
                }
                Err(e) => {
                    warn!(%peer, conn_id, error = %e, "bad record; closing connection");
                    break;
                }
            };
            let (xid, work) = match parse_call(
                rec,
                conn_id,
                peer,
                &back_channel,
                &tls,
                self.shared.gss.as_deref(),
                &self.shared.programs,
            ) {
                Parsed::Close => break,
                Parsed::BackReply(rec) => {
                    back_channel.deliver(rec);
                    continue;
                }
                Parsed::Reply(xid, reply) => (xid, Work::Reply(reply)),
                Parsed::Call(mut info, args) => {
                    // A client seen with calls in parallel lately is likely to send
                    // another while this one runs: not alone for the next few calls.
                    company = if calls.is_empty() && reader.buffered() == 0 {
                        company.saturating_sub(1)
                    } else {
                        COMPANY_MEMORY
                    };
                    info.alone = company == 0;
                    let (xid, prog, vers, proc_num) =
                        (info.xid, info.prog, info.vers, info.proc_num);
                    match check_program(&self.shared.programs, prog, vers) {
                        Some(r) => {
                            debug!(%peer, xid, prog, vers, proc_num, reply = ?r, "program check failed");
                            (xid, Work::Reply(Reply::Body(r)))
                        }
                        None => (xid, Work::Call(info, args)),
                    }
                }
            };
            // One slot per call (or transport-generated reply) until its reply is written.
            let permit = match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(TryAcquireError::Closed) => break,
                Err(TryAcquireError::NoPermits) => tokio::select! {
                    biased;
                    _ = &mut stopping => break,
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                },
            };
            let mut sender = ReplySender {
                tx: tx.clone(),
                xid,
                permit: Some(permit),
            };
            match work {
                Work::Reply(reply) => sender.send_reply(reply),
                Work::Call(info, args) => {
                    debug!(%peer, conn_id, xid, prog = info.prog, vers = info.vers,
                        proc_num = info.proc_num, "RPC call");
                    let svc = self.svc.clone();
                    let budget = self.shared.budget.clone();
                    let call = async move {
                        let mut sender = sender;
                        // The request's bytes stay charged until it is answered.
                        let gss = info.gss.clone();
                        let reply = svc.call(info, args).await;
                        let reply = match gss {
                            None => Reply::Body(reply),
                            Some(g) => {
                                let (verf, body) = g.seal_reply(reply);
                                Reply::Verified(verf, body)
                            }
                        };
                        sender.send_charged(reply, charge, &budget).await;
                    };
                    if self.shared.run_inline {
                        let mut call = match spare_call.take() {
                            Some(mut boxed) => {
                                Pin::set(&mut boxed, call);
                                boxed
                            }
                            None => Box::pin(call),
                        };
                        match poll_inline(call.as_mut(), sock, peer, xid).await {
                            Poll::Pending => {
                                calls.spawn(call);
                            }
                            Poll::Ready(Completed::Normally) => spare_call = Some(call),
                            // Dropped now: its `ReplySender` answers SYSTEM_ERR.
                            Poll::Ready(Completed::Panicked) => {}
                        }
                    } else {
                        calls.spawn(call);
                    }
                }
            }
        }
        drop(reader);
        state.mark_closing(&self.shared);
        // No reply can arrive any more: fail pending callbacks and release the writer queue.
        back_channel.close();
        // Let the calls already started finish; their replies are still written.
        while calls.join_next().await.is_some() {}
        drop(tx);
        let _ = writer.await;
        debug!(%peer, conn_id, "connection finished");
        drop(guard);
    }
}

/// After a call that found another of its connection running or already received,
/// this many calls of the connection are not `CallInfo::alone`, even when they find
/// none: a client with several threads has idle moments too, and a call placed as if
/// alone (a short sync holding the reader) makes the others wait for it.
const COMPANY_MEMORY: u32 = 8;

/// Poll a call once on the reader's task (run-to-completion, ADR 0057): most calls
/// finish in that one poll, and their replies go to the writer without a task of their
/// own. One that returns `Pending` continues as its own task; the waker registered here
/// may then fire once more for nothing, which the reader's loop absorbs. A panic that
/// escapes the service (the NFS executor catches its own) ends only this call: the
/// future is dropped, and its `ReplySender` answers SYSTEM_ERR, as a task's would.
async fn poll_inline<F: Future<Output = ()>>(
    mut call: Pin<&mut F>,
    sock: std::os::fd::RawFd,
    peer: SocketAddr,
    xid: u32,
) -> Poll<Completed> {
    let polled = std::future::poll_fn(|cx| {
        Poll::Ready(std::panic::catch_unwind(AssertUnwindSafe(|| {
            behind::polling(sock, || call.as_mut().poll(cx))
        })))
    })
    .await;
    match polled {
        Ok(p) => p.map(|()| Completed::Normally),
        Err(_) => {
            error!(%peer, xid, "RPC call panicked");
            Poll::Ready(Completed::Panicked)
        }
    }
}

/// How a call polled on the reader ended.
enum Completed {
    Normally,
    /// Its future must be dropped (its `ReplySender` then answers SYSTEM_ERR), not
    /// reused.
    Panicked,
}
