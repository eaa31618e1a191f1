//! The session layer: EXCHANGE_ID + CREATE_SESSION, SEQUENCE on every COMPOUND, lease
//! renewal in the background, recovery when the server restarts, and statistics.

use crate::cache::{CacheStats, DelegCache};
use crate::callback::{CallbackService, CallbackStats};
use crate::compound::{compound_ops, op_name, Compound, Reply};
use crate::optimes::{request_type, OpTimesSnapshot};
use crate::slots::SlotTable;
use crate::transport::{Transport, PROC_COMPOUND};
use crate::ClientError;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use txnfs_proto::nfs4::*;
use txnfs_rpc::{AuthSys, CallFuture, CallHandler, Credential, IncomingCall};

mod config;
mod establish;
mod wire;

pub use config::ClientConfig;
use establish::{establish, solo};
use wire::{decode_reply, encode};

/// Negotiated limits of the fore channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_ops: u32,
    pub max_request: u32,
    pub max_response: u32,
    /// Largest reply the server keeps for retransmissions (ca_maxresponsesize_cached).
    pub max_response_cached: u32,
    pub slots: u32,
}

/// Counters of what this client sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub compounds: u64,
    /// Ops sent per op name (SEQUENCE included).
    pub ops: BTreeMap<&'static str, u64>,
    pub reconnects: u64,
    pub session_recoveries: u64,
    /// BIND_CONN_TO_SESSIONs sent (after a reconnect, or when the server reported the
    /// back channel down).
    pub binds: u64,
}

impl Stats {
    pub fn total_ops(&self) -> u64 {
        self.ops.values().sum()
    }
    /// Ops sent other than SEQUENCE.
    pub fn ops_excluding_sequence(&self) -> u64 {
        self.total_ops() - self.ops.get("SEQUENCE").copied().unwrap_or(0)
    }
}

struct SessionState {
    /// The minor version every COMPOUND of this session carries.
    minor: u32,
    clientid: u64,
    sessionid: sessionid4,
    /// The server bound our connection for callbacks (CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    /// granted).
    back_channel: bool,
    /// The server granted CREATE_SESSION4_FLAG_PERSIST: it keeps the session and its
    /// replies across a restart (ADR 0022).
    persistent: bool,
    /// The server is txnfs (its EXCHANGE_ID implementation name): a DELAY is most
    /// likely a transaction's lock ([`crate::busy::Busy::Locked`]).
    txnfs: bool,
    limits: Limits,
    slots: SlotTable,
    /// Bumped on every re-establishment so concurrent callers recover only once.
    epoch: u64,
}

pub(crate) struct Inner {
    cfg: ClientConfig,
    cache: Arc<DelegCache>,
    callbacks: Arc<CallbackService>,
    /// The transport generation whose connection is bound to the session (for both
    /// channels); a newer connection is bound with BIND_CONN_TO_SESSION.
    bound_generation: AtomicU64,
    binding: tokio::sync::Mutex<()>,
    /// When the last rebind for a reported CB_PATH_DOWN was sent.
    last_path_rebind: Mutex<Option<std::time::Instant>>,
    binds: AtomicU64,
    transport: Transport,
    session: RwLock<Arc<SessionState>>,
    recovering: tokio::sync::Mutex<()>,
    stats: Mutex<Stats>,
    compounds: AtomicU64,
    /// Held while a transaction of several COMPOUNDs is open: the server allows one
    /// per session.
    pub(crate) txn_span: tokio::sync::Mutex<()>,
    recoveries: AtomicU64,
    /// A RECLAIM_COMPLETE for a restored session is on its way.
    reclaiming: std::sync::atomic::AtomicBool,
    /// The kinds of waiting ([`crate::busy::Busy`]) told already.
    told_busy: crate::busy::Told,
    /// Where this client's transaction stands ([`crate::txn::TxnPhase`]): left as it
    /// was when the future running it is dropped (an interrupted command), so that
    /// [`Client::interrupt_txn`] knows what to do.
    pub(crate) txn_phase: Mutex<crate::txn::TxnPhase>,
    verifier: [u8; 8],
    owner: Bytes,
    lease: AtomicU64,
    /// The server refused a READ_PLUS (NFS-Ganesha and others without it): read sparse
    /// files with READ from now on.
    read_plus_refused: std::sync::atomic::AtomicBool,
    /// Batches independent requests of concurrent callers (`ClientConfig::batch`).
    batcher: Option<crate::batch::Batcher>,
    pub(crate) op_times: crate::optimes::OpTimes,
}

/// How [`Client::send_as`] sends a COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A plain COMPOUND; its reply is cached when it changes state and carries no data.
    Plain,
    /// A transaction (or, with `part`, a COMPOUND of one that spans several); `cache`:
    /// ask the server to keep the reply (sa_cachethis), so a retransmission after a
    /// lost reply gets it instead of an unknown outcome.
    Txn { cache: bool, part: TxnPart },
}

/// Which COMPOUND of a transaction [`Mode::Txn`] sends: the RPC procedure (ADR 0021).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnPart {
    /// A whole transaction in one COMPOUND (PROC_TXN_COMPOUND).
    Whole,
    /// The first COMPOUND of a transaction that spans several (PROC_TXN_BEGIN).
    Begin,
    /// A middle one (PROC_TXN_CONTINUE).
    Continue,
    /// The last one, which commits (PROC_TXN_COMMIT).
    Commit,
    /// Roll the session's open transaction back (PROC_TXN_ABORT).
    Abort,
}

impl TxnPart {
    fn procedure(self) -> u32 {
        match self {
            TxnPart::Whole => txnfs_proto::PROC_TXN_COMPOUND,
            TxnPart::Begin => txnfs_proto::PROC_TXN_BEGIN,
            TxnPart::Continue => txnfs_proto::PROC_TXN_CONTINUE,
            TxnPart::Commit => txnfs_proto::PROC_TXN_COMMIT,
            TxnPart::Abort => txnfs_proto::PROC_TXN_ABORT,
        }
    }
}

/// An NFSv4.1 client session. Cheap to clone; all clones share the session.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// How long a new connection's NULL call may take before the peer is taken for
/// something other than an NFS server.
/// [`ClientConfig::busy_wait`] by default: longer than a grace period (a lease) and a
/// transaction's default timeout (a lease), well past what a person waits for.
pub const DEFAULT_BUSY_WAIT: Duration = Duration::from_secs(300);

pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The minor versions this client speaks, newest first.
pub const MINOR_VERSIONS: [u32; 2] = [2, 1];

impl Client {
    /// Connect, create a client id and a session.
    pub async fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        let cred = Credential::Sys(AuthSys {
            stamp: 0,
            machinename: Bytes::from(
                std::fs::read_to_string("/etc/hostname")
                    .unwrap_or_else(|_| "txnfs-client".into())
                    .trim()
                    .to_string(),
            ),
            uid: cfg.uid,
            gid: cfg.gid,
            gids: cfg.gids.clone(),
        });
        let cache = Arc::new(DelegCache::new(cfg.delegations, cfg.cache_bytes));
        let callbacks = Arc::new(CallbackService::new(cache.clone()));
        let cb = callbacks.clone();
        let handler: CallHandler = Arc::new(move |call: IncomingCall| {
            let reply = cb.handle(&call);
            Box::pin(async move { reply }) as CallFuture
        });
        let transport = Transport::connect(
            cfg.addr,
            cred,
            cfg.max_attempts,
            cfg.call_timeout,
            Some(handler),
            cfg.tls.clone(),
            cfg.gss.clone(),
        )
        .await?;
        // Is it NFSv4 at all? Ask before anything waits on the call timeout: a peer
        // that is not an NFS server fails here at once, with what it did.
        transport.probe(PROBE_TIMEOUT).await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let verifier = (now.as_nanos() as u64).to_be_bytes();
        let owner = cfg.owner.clone().unwrap_or_else(|| {
            Bytes::from(format!(
                "txnfs-client/{}/{}/{}",
                std::fs::read_to_string("/etc/hostname")
                    .unwrap_or_default()
                    .trim(),
                std::process::id(),
                now.as_nanos()
            ))
        });
        let (state, _) = establish(&transport, &cfg, &owner, verifier, 1, &callbacks).await?;
        let bound = transport.generation();
        let batcher = crate::batch::Batcher::new(cfg.batch);
        let inner = Arc::new(Inner {
            cfg,
            cache: cache.clone(),
            callbacks,
            bound_generation: AtomicU64::new(bound),
            binding: tokio::sync::Mutex::new(()),
            last_path_rebind: Mutex::new(None),
            binds: AtomicU64::new(0),
            transport,
            session: RwLock::new(Arc::new(state)),
            recovering: tokio::sync::Mutex::new(()),
            stats: Mutex::new(Stats::default()),
            compounds: AtomicU64::new(0),
            txn_span: tokio::sync::Mutex::new(()),
            recoveries: AtomicU64::new(0),
            reclaiming: Default::default(),
            told_busy: Default::default(),
            txn_phase: Mutex::new(crate::txn::TxnPhase::Idle),
            verifier,
            owner,
            lease: AtomicU64::new(60),
            read_plus_refused: Default::default(),
            batcher,
            op_times: Default::default(),
        });
        cache.attach(Arc::downgrade(&inner));
        let c = Client { inner };
        // Lease time for the renewal task (default 60 s if the server does not say).
        let mut q = Compound::new();
        q.putrootfh();
        let i = q.getattr(crate::attrs::bitmap(&[crate::attrs::LEASE_TIME]));
        if let Ok(r) = c.compound(&q).await {
            if let Ok(a) = r.attrs(i) {
                if let Some(l) = a.lease_time {
                    c.inner.lease.store(l.max(5) as u64, Ordering::Relaxed);
                }
            }
        }
        spawn_renewer(Arc::downgrade(&c.inner));
        Ok(c)
    }

    /// What CB_OFFLOAD reported for the background copy `id` (status, bytes), taken.
    pub(crate) fn take_offload(&self, id: &stateid4) -> Option<(nfsstat4, u64)> {
        self.inner.callbacks.take_offload(id)
    }

    /// The NFSv4 minor version this session speaks (negotiated at connect).
    pub fn minor_version(&self) -> u32 {
        self.state().minor
    }

    /// Whether to read sparse files with READ_PLUS (holes cross the wire as their
    /// length): an NFSv4.2 session whose server has not refused it.
    pub fn uses_read_plus(&self) -> bool {
        self.minor_version() >= 2 && !self.inner.read_plus_refused.load(Ordering::Relaxed)
    }

    /// The server refused a READ_PLUS: read with READ from now on.
    pub fn read_plus_refused(&self) {
        self.inner.read_plus_refused.store(true, Ordering::Relaxed);
    }

    pub fn limits(&self) -> Limits {
        self.state().limits
    }

    fn state(&self) -> Arc<SessionState> {
        self.inner
            .session
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Snapshot of what was sent so far.
    pub fn stats(&self) -> Stats {
        let mut s = self
            .inner
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        s.compounds = self.inner.compounds.load(Ordering::Relaxed);
        s.reconnects = self.inner.transport.reconnects.load(Ordering::Relaxed);
        s.session_recoveries = self.inner.recoveries.load(Ordering::Relaxed);
        s.binds = self.inner.binds.load(Ordering::Relaxed);
        s
    }

    /// What the delegation cache did so far.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// The callbacks received so far.
    pub fn callback_stats(&self) -> CallbackStats {
        self.inner.callbacks.stats()
    }

    /// Delegations held now: (files, directories).
    pub fn delegations_held(&self) -> (usize, usize) {
        self.inner.cache.held()
    }

    /// Flush what is buffered and return every delegation this client holds (what
    /// [`Client::close`] does first), e.g. before other clients use the files.
    pub async fn return_delegations(&self) {
        self.inner.cache.return_all().await;
    }

    /// Hand a delegation that an OPEN sent through [`Client::compound`] granted (see
    /// [`Compound::open_wanting`]) to the delegation cache, which returns it when the
    /// server recalls it and when the client closes. Nothing of the file is cached
    /// (the caller read it itself).
    pub fn adopt_delegation(&self, fh: &Bytes, deleg: &open_delegation4) {
        let path = format!("#fh:{}", hex_of(fh));
        self.inner.cache.open_reply(&path, fh, deleg, None, None);
    }

    /// Whether the server bound our connection for callbacks at CREATE_SESSION.
    pub fn back_channel(&self) -> bool {
        self.state().back_channel
    }

    /// The current session id.
    pub fn session_id(&self) -> [u8; 16] {
        self.state().sessionid
    }

    pub(crate) fn cache(&self) -> &Arc<DelegCache> {
        &self.inner.cache
    }

    /// Answer `call` as if it had arrived on the back channel (what the server's CALLs
    /// go through): for tests and tools that play the server's part, e.g. a
    /// CB_RECALL_ANY the server does not send by itself.
    pub fn handle_callback(&self, call: &IncomingCall) -> txnfs_rpc::CallReply {
        self.inner.callbacks.handle(call)
    }

    /// Whether this client uses delegations (see [`ClientConfig::delegations`]).
    pub fn delegations_enabled(&self) -> bool {
        self.inner.cfg.delegations
    }

    /// Bind the current connection to the session for both channels
    /// (BIND_CONN_TO_SESSION with CDFC4_FORE_OR_BOTH), so callbacks reach us on it.
    pub async fn bind_connection(&self) -> Result<(), ClientError> {
        let _g = self.inner.binding.lock().await;
        self.bind_locked().await
    }

    async fn bind_locked(&self) -> Result<(), ClientError> {
        let st = self.state();
        let generation = self.inner.transport.generation();
        let op = nfs_argop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4args {
            bctsa_sessid: st.sessionid,
            bctsa_dir: channel_dir_from_client4::CDFC4_FORE_OR_BOTH,
            bctsa_use_conn_in_rdma_mode: false,
        });
        self.inner.binds.fetch_add(1, Ordering::Relaxed);
        let r = solo(&self.inner.transport, st.minor, "BIND_CONN_TO_SESSION", op).await;
        // Whatever the answer, do not try again on this connection for this reason.
        self.inner
            .bound_generation
            .fetch_max(generation, Ordering::Relaxed);
        r
    }

    /// After a call: bind a new connection, or rebind when the server says the back
    /// channel is down (at most every 5 s).
    async fn check_binding(&self, status_flags: u32) {
        if !self.state().back_channel {
            return;
        }
        let generation = self.inner.transport.generation();
        let reconnected = generation > self.inner.bound_generation.load(Ordering::Relaxed);
        let down =
            status_flags & (SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION) != 0;
        if !reconnected && !down {
            return;
        }
        if !reconnected {
            let mut last = self
                .inner
                .last_path_rebind
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let now = std::time::Instant::now();
            if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(5)) {
                return;
            }
            *last = Some(now);
        }
        let Ok(_g) = self.inner.binding.try_lock() else {
            return; // another call is binding
        };
        if reconnected && generation <= self.inner.bound_generation.load(Ordering::Relaxed) {
            return;
        }
        match self.bind_locked().await {
            Ok(()) => tracing::debug!(reconnected, "connection bound for callbacks"),
            Err(e) => tracing::info!("BIND_CONN_TO_SESSION failed: {e}"),
        }
    }

    pub fn reset_stats(&self) {
        *self.inner.stats.lock().unwrap_or_else(|e| e.into_inner()) = Stats::default();
        self.inner.compounds.store(0, Ordering::Relaxed);
    }

    fn count(&self, ops: &[nfs_argop4]) {
        self.inner.compounds.fetch_add(1, Ordering::Relaxed);
        let mut s = self.inner.stats.lock().unwrap_or_else(|e| e.into_inner());
        *s.ops.entry("SEQUENCE").or_default() += 1;
        for op in compound_ops(ops) {
            *s.ops.entry(op_name(op)).or_default() += 1;
        }
    }

    /// Send `ops` after a SEQUENCE. Returns the results of `ops` (SEQUENCE removed).
    /// Retries transparently on a dropped connection (same slot, same bytes: exactly
    /// once), on NFS4ERR_DELAY from SEQUENCE, and re-establishes the session if the
    /// server lost it (restart).
    /// With batching on (`ClientConfig::batch`), a request that can share a COMPOUND
    /// with other callers' ([`crate::batch`]) may go out in one with them.
    pub async fn compound(&self, c: &Compound) -> Result<Reply, ClientError> {
        match self.batcher() {
            Some(b) if crate::batch::batchable(c) => b.call(self, c).await,
            _ => self.send(c, true).await,
        }
    }

    /// [`Client::compound`] without batching: this COMPOUND alone.
    pub(crate) async fn send_alone(&self, c: &Compound) -> Result<Reply, ClientError> {
        self.send(c, true).await
    }

    pub(crate) fn batcher(&self) -> Option<&crate::batch::Batcher> {
        self.inner.batcher.as_ref()
    }

    /// Per request type counts, queue and round-trip times, and transport counters
    /// since the client started (mountstats' view; [`crate::optimes`]).
    pub fn op_times(&self) -> OpTimesSnapshot {
        self.inner.op_times.snapshot()
    }

    /// What the batcher did (`None` with batching off).
    pub fn batch_stats(&self) -> Option<crate::batch::BatchStats> {
        self.batcher().map(|b| b.stats())
    }

    async fn send(&self, c: &Compound, counted: bool) -> Result<Reply, ClientError> {
        self.send_as(c, counted, Mode::Plain).await
    }

    /// [`Client::send`], as a transaction in [`Mode::Txn`] (procedure
    /// PROC_TXN_COMPOUND, ADR 0021). A transaction whose fate is unknown (no reply, a
    /// retransmission the server kept no reply for) is never re-sent as a new request,
    /// which could run it twice: it fails with [`ClientError::TxnOutcomeUnknown`].
    /// NFS4ERR_DELAY is left to the caller (`Client::compound_txn`), which retries the
    /// whole transaction.
    pub(crate) async fn send_as(
        &self,
        c: &Compound,
        counted: bool,
        mode: Mode,
    ) -> Result<Reply, ClientError> {
        let txn = matches!(mode, Mode::Txn { .. });
        let cachethis = match mode {
            Mode::Plain => c.wants_cache(),
            Mode::Txn { cache, .. } => cache,
        };
        let unknown = |e: ClientError| {
            if txn {
                ClientError::TxnOutcomeUnknown(Box::new(e))
            } else {
                e
            }
        };
        let proc_num = match mode {
            Mode::Txn { part, .. } => part.procedure(),
            Mode::Plain => PROC_COMPOUND,
        };
        let mut busy = crate::busy::BusyWait::new(self.inner.cfg.busy_wait);
        loop {
            let st = self.state();
            let asked = std::time::Instant::now();
            let Some((slot, seq, highest)) = st.slots.acquire().await else {
                // Every slot was retired: start a fresh session.
                self.recover(st.epoch).await?;
                continue;
            };
            let mut all = Vec::with_capacity(c.ops.len() + 1);
            all.push(nfs_argop4::OP_SEQUENCE(SEQUENCE4args {
                sa_sessionid: st.sessionid,
                sa_sequenceid: seq,
                sa_slotid: slot,
                sa_highest_slotid: highest,
                sa_cachethis: cachethis,
            }));
            all.extend(c.ops.iter().cloned());
            if counted {
                self.count(&c.ops);
            }
            let request = encode(st.minor, &all);
            let (kind, len, waited) = (request_type(&c.ops), request.len(), asked.elapsed());
            let call = self.inner.transport.call(proc_num, request);
            let (bytes, resent) = match self
                .inner
                .op_times
                .timed(kind, waited, len, call, |a| a.reply.len())
                .await
            {
                Ok(a) => (a.reply, a.resent),
                Err(ClientError::Rpc(txnfs_rpc::RpcError::ProcUnavail)) if txn => {
                    // Not a transactional server: it ran nothing, not even SEQUENCE.
                    st.slots.release(slot, false, None);
                    return Err(ClientError::TxnUnsupported);
                }
                Err(e @ ClientError::Rpc(_)) => {
                    // A reply that rejects the call (GARBAGE_ARGS, AUTH_ERROR ...): the
                    // server ran nothing, not even SEQUENCE; the slot is free as it was.
                    st.slots.release(slot, false, None);
                    return Err(e);
                }
                Err(e) => {
                    // No reply: whether the server executed it is unknown, so this slot
                    // is never used again in this session.
                    st.slots.retire(slot);
                    return Err(unknown(e));
                }
            };
            let res = match decode_reply(bytes) {
                Ok(r) => r,
                Err(e) => {
                    st.slots.retire(slot);
                    return Err(unknown(e));
                }
            };
            let mut results = res.resarray;
            if results.is_empty() {
                st.slots.release(slot, false, None);
                // e.g. Ganesha's NFS4ERR_RESOURCE for more ops than it handles, whatever
                // it negotiated.
                return Err(ClientError::nfs("COMPOUND", 0, res.status));
            }
            let seq_res = results.remove(0);
            match seq_res {
                nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)) => {
                    st.slots
                        .release(slot, true, Some(ok.sr_target_highest_slotid));
                    self.check_binding(ok.sr_status_flags).await;
                    if ok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0 {
                        self.inner.cache.spawn_revocation_check();
                    }
                    if ok.sr_status_flags & SEQ4_STATUS_RESTART_RECLAIM_NEEDED != 0 {
                        self.spawn_reclaim_complete();
                    }
                    if let (false, Some(b), 1) = (
                        txn,
                        crate::busy::Busy::of(res.status, st.txnfs),
                        results.len(),
                    ) {
                        // The first op asked us to come back later; nothing ran.
                        if let Some(pause) = busy.next_pause() {
                            self.told_busy(b);
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                    }
                    if res.status == nfsstat4::NFS4ERR_RETRY_UNCACHED_REP && results.len() == 1 {
                        if txn {
                            return Err(unknown(ClientError::nfs(
                                "COMPOUND",
                                0,
                                nfsstat4::NFS4ERR_RETRY_UNCACHED_REP,
                            )));
                        }
                        // knfsd and Ganesha answer the retransmission of an uncached
                        // request with SEQUENCE OK and this error on the next op; nothing
                        // ran, so send it again as a new request.
                        continue;
                    }
                    return Ok(Reply {
                        status: res.status,
                        results,
                        sent: c.ops.len(),
                    });
                }
                nfs_resop4::OP_SEQUENCE(SEQUENCE4res::default(s)) => {
                    st.slots.release(slot, false, None);
                    match s {
                        nfsstat4::NFS4ERR_DELAY => match busy.next_pause() {
                            Some(pause) => tokio::time::sleep(pause).await,
                            None => return Err(ClientError::nfs("SEQUENCE", 0, s)),
                        },
                        nfsstat4::NFS4ERR_RETRY_UNCACHED_REP => {
                            // Our retransmission of a request whose reply the server did
                            // not keep: the sequence id is used up; send it again as a new
                            // request (only compounds without cachethis get here, and those
                            // are safe to repeat).
                            st.slots.release(slot, true, None);
                            if txn {
                                return Err(unknown(ClientError::nfs("SEQUENCE", 0, s)));
                            }
                        }
                        nfsstat4::NFS4ERR_BADSESSION
                        | nfsstat4::NFS4ERR_DEADSESSION
                        | nfsstat4::NFS4ERR_STALE_CLIENTID
                        | nfsstat4::NFS4ERR_EXPIRED => {
                            self.recover(st.epoch).await?;
                            if txn && resent {
                                // An earlier sending may have run, even committed,
                                // before the server lost the session (a restart without
                                // persistent sessions): sending it again in the new
                                // session could run it twice.
                                return Err(unknown(ClientError::SessionLost(s)));
                            }
                        }
                        other => return Err(ClientError::nfs("SEQUENCE", 0, other)),
                    }
                }
                _ => {
                    st.slots.retire(slot);
                    return Err(unknown(ClientError::Protocol(
                        "first result is not SEQUENCE".into(),
                    )));
                }
            }
        }
    }

    /// The server restarted and restored our persistent session (SEQUENCE said
    /// SEQ4_STATUS_RESTART_RECLAIM_NEEDED): we reclaim nothing, so say so at once
    /// (RECLAIM_COMPLETE), or the server holds our new OPENs until its grace ends
    /// (RFC 8881 §18.51.3). In a task: `send` must not wait on itself.
    fn spawn_reclaim_complete(&self) {
        if self.inner.reclaiming.swap(true, Ordering::AcqRel) {
            return;
        }
        let c = self.clone();
        tokio::spawn(async move {
            let mut rc = Compound::new();
            rc.op(nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
                rca_one_fs: false,
            }));
            match c.send(&rc, false).await {
                Ok(r)
                    if matches!(
                        r.status,
                        nfsstat4::NFS4_OK | nfsstat4::NFS4ERR_COMPLETE_ALREADY
                    ) =>
                {
                    tracing::info!("server restarted and kept our session; reclaim complete")
                }
                Ok(r) => tracing::warn!("RECLAIM_COMPLETE after a restart: {:?}", r.status),
                Err(e) => tracing::warn!("RECLAIM_COMPLETE after a restart: {e}"),
            }
            c.inner.reclaiming.store(false, Ordering::Release);
        });
    }

    /// Tell (once per kind) that a request waits out DELAY or GRACE.
    pub(crate) fn told_busy(&self, b: crate::busy::Busy) {
        self.inner
            .told_busy
            .tell(b, self.inner.cfg.on_busy.as_ref());
    }

    /// What `status` asks the client to wait for, if anything.
    pub(crate) fn busy_kind(&self, status: nfsstat4) -> Option<crate::busy::Busy> {
        crate::busy::Busy::of(status, self.state().txnfs)
    }

    /// [`ClientConfig::busy_wait`].
    pub(crate) fn busy_wait(&self) -> Duration {
        self.inner.cfg.busy_wait
    }

    /// Does the session survive a server restart (PERSIST granted)?
    pub fn session_persistent(&self) -> bool {
        self.state().persistent
    }

    /// Re-create the session (and, if needed, the client id) after the server lost it.
    async fn recover(&self, seen_epoch: u64) -> Result<(), ClientError> {
        let _g = self.inner.recovering.lock().await;
        if self.state().epoch != seen_epoch {
            return Ok(()); // someone else already recovered
        }
        tracing::info!("server lost our session; establishing a new one");
        let (st, _) = establish(
            &self.inner.transport,
            &self.inner.cfg,
            &self.inner.owner,
            self.inner.verifier,
            seen_epoch + 1,
            &self.inner.callbacks,
        )
        .await?;
        // The new session was created on the current connection: it is bound.
        self.inner
            .bound_generation
            .fetch_max(self.inner.transport.generation(), Ordering::Relaxed);
        *self
            .inner
            .session
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(st);
        self.inner.recoveries.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Drop the TCP connection (as a network failure would). In-flight and later calls
    /// reconnect and retry in their slots. For tests and fault injection.
    pub async fn sever_connection(&self) {
        self.inner.transport.sever().await;
    }

    /// Flush buffered writes and return every delegation (DELEGRETURN), then
    /// DESTROY_SESSION and DESTROY_CLIENTID.
    pub async fn close(self) -> Result<(), ClientError> {
        self.inner.cache.return_all().await;
        let st = self.state();
        let t = &self.inner.transport;
        let session = nfs_argop4::OP_DESTROY_SESSION(DESTROY_SESSION4args {
            dsa_sessionid: st.sessionid,
        });
        solo(t, st.minor, "DESTROY_SESSION", session).await?;
        let clientid = nfs_argop4::OP_DESTROY_CLIENTID(DESTROY_CLIENTID4args {
            dca_clientid: st.clientid,
        });
        solo(t, st.minor, "DESTROY_CLIENTID", clientid).await?;
        t.close().await;
        Ok(())
    }
}

/// Renew the lease with a bare SEQUENCE every third of the lease time.
fn spawn_renewer(weak: Weak<Inner>) {
    tokio::spawn(async move {
        loop {
            let secs = match weak.upgrade() {
                Some(i) => i.lease.load(Ordering::Relaxed),
                None => return,
            };
            tokio::time::sleep(Duration::from_secs((secs / 3).max(1))).await;
            let Some(inner) = weak.upgrade() else { return };
            let c = Client { inner };
            if let Err(e) = c.send(&Compound::new(), false).await {
                tracing::warn!("lease renewal failed: {e}");
            }
        }
    });
}

/// Lower-case hex of `b` (a handle as a cache key no real path can take).
fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
