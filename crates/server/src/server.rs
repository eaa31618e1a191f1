//! The server instance: the one place that owns the server's parts — configuration,
//! exports, handles, the state core (ADR 0008), the durable session store, callbacks,
//! held requests, watches, transactions and copies — and exposes its operations:
//! housekeeping, the effects the state core asks for (each carried out by the part it
//! concerns: `recall`, `watches`, `dirnotify`, `offload`, the state directory), and
//! the helpers ops share (handle resolution, attribute encoding, stateid checks).

use crate::attrs::Attributes;
use crate::callback::{cb_compound, CallbackFailure};
use crate::config::Config;
use crate::errors::OpError;
use crate::export::{Export, ExportError, Exports};
use crate::fh::{Fh, ObjFh};
use crate::handle::{HandleCodec, HandleError, HandleTarget};
use crate::nfs::{fattr4, nfs_cb_resop4, nfsstat4, stateid4};
use crate::offload::CopyHost;
use crate::placement::WaitClock;
use crate::recall::{HolderAttrs, Recall};
use crate::statecore::{stateid_from_wire, CoreAccess, CoreFaults, CoreGuard};
use crate::statedir::sessionstore::{self, SessionStore};
use crate::statedir::StateDir;
use crate::waitmode::WaitMode;
use bytes::Bytes;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use txnfs_backend::{Attrs, FileKey, FileType, OpCtx, Timestamp};
use txnfs_state::clock::{Clock, SystemClock};
use txnfs_state::session::{ChannelAttrs, Session, SessionId, SessionLimits};
use txnfs_state::{
    Access, Callback, ClientId, ClientList, CoreConfig, Effect, FileId, Grace, StateCore,
    StateLimits,
};

mod stats;

pub use stats::{Stats, StatsSnapshot};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("state directory {path}: {err}")]
    StateDir { path: String, err: std::io::Error },
    /// Another server holds the state directory (its PID, when it wrote it).
    #[error(transparent)]
    StateDirInUse(crate::statedir::OpenError),
    #[error(transparent)]
    Kerberos(#[from] crate::kerberos::KerberosError),
}

/// Whether sessions offer a back channel (CREATE_SESSION's CONN_BACK_CHAN,
/// BIND_CONN_TO_SESSION's BACK/BOTH; ADR 0016). Callbacks (CB_RECALL, CB_GETATTR,
/// CB_NOTIFY, CB_OFFLOAD) travel on it, and nfs-rs 0.8.8 (the e2e client) refuses every
/// NFSv4.1 mount unless BIND_CONN_TO_SESSION confirms it. Switched off, sessions get
/// the fore channel only, and no client is reachable for a callback.
pub const OFFER_BACK_CHANNEL: bool = true;

pub struct Server {
    pub cfg: Config,
    pub exports: Exports,
    /// Where a reload reads the exports again (set once by the embedding program;
    /// without it a reload is refused; ADR 0048).
    pub config_source: std::sync::OnceLock<crate::reload::ConfigSource>,
    pub handles: HandleCodec,
    /// Clients, sessions, slots, leases, grace, opens and locks (ADR 0008). Held only
    /// for bookkeeping, never across storage calls; reach it through
    /// [`Server::core`], which takes a poisoned lock back into service.
    pub(crate) core: Mutex<StateCore>,
    /// Times the state core's lock was found poisoned (a thread panicked holding it)
    /// and the core was rechecked and taken back into service (ADR 0029).
    pub core_faults: AtomicU64,
    /// Of those, the times the recheck found a broken invariant (logged at error
    /// level; the server serves on, and should be restarted soon).
    pub core_invariant_failures: AtomicU64,
    /// Test-only fault injection (ADR 0029).
    #[cfg(feature = "fault-injection")]
    pub faults: crate::faultinject::FaultInjection,
    /// Generation of the last client list written to the state directory (also
    /// serialises those writes).
    pub(crate) persisted: Mutex<u64>,
    pub write_verf: [u8; 8],
    pub boot_epoch: u32,
    pub server_owner: Bytes,
    /// Fore-channel maxima we offer.
    pub limits: ChannelAttrs,
    pub stats: Stats,
    /// Latencies, failures, bytes and connections for the administrator (ADR 0045).
    pub metrics: crate::metrics::Metrics,
    /// Files kept alive for their opens (`crate::held`).
    pub held: crate::held::HeldFiles,
    /// Sessions' back channels and every open connection's callback handle (ADR 0016).
    pub callbacks: crate::callback::Callbacks,
    /// The one source of time for leases, grace and the executor (simulated in tests).
    pub clock: Arc<dyn Clock>,
    pub(crate) statedir: StateDir,
    /// Persistent sessions, their slots and cached replies (ADR 0022): present when
    /// `persistent_sessions` is on or a previous instance left persistent sessions.
    pub session_store: Option<SessionStore>,
    boot_time: Timestamp,
    /// Requests held for recalled delegations wait here (`crate::recall`).
    pub recall_waits: crate::recall::RecallWaits,
    /// Delegated files watched for access from outside the server (`crate::watches`).
    pub watches: crate::watches::FileWatches,
    /// NFS changes of one file, one at a time (NFSv3's exact pre-op attributes).
    pub file_changes: crate::filechange::FileChangeLocks,
    /// Delegated directories watched for changes from outside the server
    /// (`crate::dirwatches`, ADR 0047).
    pub dir_watches: crate::dirwatches::DirWatches,
    /// Transactions of several COMPOUNDs that are open (`crate::txnspan`).
    pub txns: crate::txnspan::OpenTxns,
    /// Asynchronous COPYs, running and recently finished (`crate::offload`, ADR 0026).
    pub offloads: crate::offload::Offloads,
    /// Callbacks the core asked for while no runtime could send them (the
    /// simulation delivers them itself): see [`Server::take_undelivered_callbacks`].
    pub(crate) undelivered_callbacks: Mutex<Vec<(txnfs_state::ClientId, txnfs_state::Callback)>>,
    /// This server, for the tasks that send callbacks.
    me: std::sync::Weak<Server>,
    /// NFSv3's lock manager and status monitor besides the lock table (`crate::nlm`).
    pub nlm: crate::nlm::Nlm,
    /// Which local identity a Kerberos principal acts as (ADR 0051).
    pub principals: crate::kerberos::PrincipalMap,
    /// The RPCSEC_GSS acceptor and its contexts, once serving with Kerberos started.
    pub(crate) gss: std::sync::OnceLock<Arc<txnfs_rpc::gss::GssServer>>,
    /// The RPC-with-TLS certificate served, once serving with TLS started (a reload
    /// replaces what it holds; ADR 0048).
    pub(crate) tls: std::sync::OnceLock<Arc<txnfs_rpc::ServerTls>>,
    /// One reload at a time (SIGHUP and the control socket may ask at once).
    pub(crate) reloading: Mutex<()>,
}

impl Server {
    /// The RPCSEC_GSS acceptor (its contexts), when serving with Kerberos started.
    pub fn gss(&self) -> Option<&Arc<txnfs_rpc::gss::GssServer>> {
        self.gss.get()
    }

    pub fn new(cfg: Config) -> Result<Arc<Server>, ServerError> {
        Self::with_clock(cfg, Arc::new(SystemClock))
    }

    /// A server whose leases, grace period and executor run on `clock`.
    pub fn with_clock(cfg: Config, clock: Arc<dyn Clock>) -> Result<Arc<Server>, ServerError> {
        let principals = crate::kerberos::PrincipalMap::load(cfg.kerberos.as_ref())?;
        let dir = cfg.state_dir();
        // A state-directory error names the file (or the directory) it concerns.
        let error_at = |path: &std::path::Path| {
            let path = path.display().to_string();
            move |err| ServerError::StateDir { path, err }
        };
        // First of all: nothing in the directory is read or written before its lock is
        // ours (one server per state directory).
        let statedir = StateDir::open(&dir).map_err(|e| match e {
            crate::statedir::OpenError::Io { dir, err } => ServerError::StateDir {
                path: dir.display().to_string(),
                err,
            },
            e => ServerError::StateDirInUse(e),
        })?;
        let secret = statedir.handle_secret().map_err(error_at(&dir))?;
        let boot_epoch = statedir.next_boot_epoch().map_err(error_at(&dir))?;
        // An unreadable client list would silently skip the grace period and let new
        // clients take locks the old ones still hold: refuse to start instead.
        let saved_clients = statedir
            .load_client_list()
            .map_err(error_at(&dir.join("clients")))?;
        // `handles` (ADR 0050) is a parameter of each export's `local` layer.
        let export_cfgs = cfg.handles.apply_to(&cfg.exports);
        let exports = Exports::open(
            &export_cfgs,
            &txnfs_backend::layer::LayerRegistry::builtin(),
            Some(&dir),
            cfg.txn,
        )?;
        exports.number_compounds_from(boot_epoch);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut write_verf = [0u8; 8];
        write_verf[..4].copy_from_slice(&boot_epoch.to_be_bytes());
        write_verf[4..].copy_from_slice(&now.subsec_nanos().to_be_bytes());
        let limits = ChannelAttrs {
            max_request: cfg.max_record_size as u32,
            max_response: cfg.max_record_size as u32,
            max_response_cached: cfg.max_cached_reply,
            max_ops: cfg.max_ops_per_compound,
            max_requests: cfg.max_slots_per_session,
        };
        let back = ChannelAttrs {
            max_request: 64 << 10,
            max_response: 64 << 10,
            max_response_cached: 0,
            max_ops: 16,
            max_requests: 16,
        };
        let grace_len = Duration::from_secs(cfg.lease_time as u64);
        // Persistent sessions are restored only for clients the previous instance still
        // counted as confirmed: the client list is written (durably) whenever a client
        // with a persistent session is confirmed, one first holds state, expires or is
        // destroyed, so it is the authority on who was alive.
        let alive: std::collections::HashSet<Bytes> = saved_clients
            .held_state
            .iter()
            .chain(&saved_clients.sessions_only)
            .cloned()
            .collect();
        // Only the clients that held state are waited for (ADR 0036).
        let mut previous_clients = saved_clients.held_state;
        // The NFSv3 hosts that held NLM locks reclaim them in the same grace period.
        let nsm = crate::nlm::nsm::Nsm::open(&dir, boot_epoch)
            .map_err(error_at(&dir.join(crate::nlm::nsm::FILE_NAME)))?;
        previous_clients.extend(nsm.grace_owners());
        let grace = if cfg.grace && !previous_clients.is_empty() {
            tracing::info!(
                clients = previous_clients.len(),
                seconds = grace_len.as_secs(),
                "grace period: waiting for clients to reclaim"
            );
            Grace::new(clock.now() + grace_len, previous_clients)
        } else {
            Grace::none()
        };
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        let server_owner = Bytes::from(format!("txnfs@{}", host.trim()));
        let mut core = StateCore::new(
            CoreConfig {
                boot_epoch,
                lease: Duration::from_secs(u64::from(cfg.lease_time)),
                sessions: SessionLimits {
                    max_clients: cfg.max_clients,
                    max_sessions_per_client: cfg.max_sessions_per_client,
                    server_fore: limits,
                    server_back: back,
                    back_channel: OFFER_BACK_CHANNEL,
                    reply_cache_bytes: cfg.max_reply_cache_bytes,
                },
                state: StateLimits::default(),
                deleg: txnfs_state::DelegLimits {
                    enabled: cfg.delegations,
                    ..Default::default()
                },
            },
            grace,
        );
        let session_store =
            crate::durable::restore(&cfg, &dir, &exports, &alive, &mut core, &*clock)
                .map_err(error_at(&dir.join(sessionstore::FILE_NAME)))?;
        let metrics = crate::metrics::Metrics::new(exports.snapshot().exports.keys().copied());
        Ok(Arc::new_cyclic(|me| Server {
            me: me.clone(),
            nlm: crate::nlm::Nlm::new(nsm),
            principals,
            gss: std::sync::OnceLock::new(),
            tls: std::sync::OnceLock::new(),
            reloading: Mutex::new(()),
            recall_waits: Default::default(),
            watches: Default::default(),
            file_changes: Default::default(),
            dir_watches: Default::default(),
            txns: Default::default(),
            offloads: Default::default(),
            undelivered_callbacks: Mutex::new(Vec::new()),
            exports,
            config_source: std::sync::OnceLock::new(),
            handles: HandleCodec::new(&secret),
            core: Mutex::new(core),
            core_faults: AtomicU64::new(0),
            core_invariant_failures: AtomicU64::new(0),
            #[cfg(feature = "fault-injection")]
            faults: Default::default(),
            persisted: Mutex::new(0),
            write_verf,
            boot_epoch,
            server_owner,
            limits,
            stats: Stats::new(cfg.max_in_flight_bytes),
            metrics,
            held: Default::default(),
            callbacks: Default::default(),
            clock,
            statedir,
            session_store,
            boot_time: Timestamp {
                sec: now.as_secs() as i64,
                nsec: now.subsec_nanos(),
            },
            cfg,
        }))
    }

    /// After a CREATE_SESSION by `client` that made `session`: a persistent session is
    /// stored before the reply leaves ([`crate::durable::persist_session`]). An error:
    /// the session could not be made durable and was destroyed.
    pub(crate) fn persist_session(&self, client: u64, session: &SessionId) -> Result<(), nfsstat4> {
        match &self.session_store {
            Some(store) => crate::durable::persist_session(store, self, client, session),
            None => Ok(()),
        }
    }

    /// BACKCHANNEL_CTL changed a persistent session's callback: store it, not waited
    /// for ([`crate::durable::persist_session_update`]).
    pub(crate) fn persist_session_update(&self, session: &SessionId) {
        if let Some(store) = &self.session_store {
            crate::durable::persist_session_update(store, self, session);
        }
    }

    /// DESTROY_SESSION or a client released: forget them in the store, not waited for
    /// ([`crate::durable::forget`]).
    pub(crate) fn forget_durable(&self, session: Option<&SessionId>, client: Option<u64>) {
        if let Some(store) = &self.session_store {
            crate::durable::forget(store, session, client);
        }
    }

    /// Makes the outcome of the request in `slot` of persistent session `s` durable
    /// ([`crate::durable::persist_reply`]); returns when it is on disk.
    pub(crate) fn persist_reply(
        &self,
        s: &Session,
        slot: u32,
        seqid: u32,
        hash: u64,
        txn: u64,
        reply: Option<Bytes>,
    ) -> std::io::Result<()> {
        let Some(store) = &self.session_store else {
            return Err(std::io::Error::other("no session store"));
        };
        crate::durable::persist_reply(store, s, slot, seqid, hash, txn, reply)
    }

    /// The transaction whose reply [`Server::persist_reply`] stored in `slot` of `s`
    /// ended as stored.
    pub(crate) fn settle_reply(&self, s: &Session, slot: u32) {
        if let Some(store) = &self.session_store {
            store.settle(&s.id, slot);
        }
    }

    /// This server as an `Arc` (alive as long as anyone calls it).
    pub(crate) fn arc(&self) -> Option<Arc<Server>> {
        self.me.upgrade()
    }

    /// Callbacks that could not be sent because no runtime runs (the simulation
    /// delivers them to its clients itself).
    pub fn take_undelivered_callbacks(
        &self,
    ) -> Vec<(txnfs_state::ClientId, txnfs_state::Callback)> {
        std::mem::take(
            &mut *self
                .undelivered_callbacks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    // ---- the state core and its effects --------------------------------------------

    /// The state core, for one decision. A poisoned lock (a thread panicked while
    /// holding it) is taken back into service after the core's invariants are
    /// rechecked ([`Server::lock_core`], ADR 0029): one panicking request must not
    /// turn every later request into `NFS4ERR_SERVERFAULT`. (The `Result` stays for
    /// the callers' `?`; it is always `Ok`.)
    ///
    /// Effects a decision leaves in the core ([`StateCore::take_effects`]: a courtesy
    /// client released by a conflicting OPEN or LOCK) are executed when the guard is
    /// dropped, after the lock is released.
    pub fn core(&self) -> Result<CoreGuard<'_>, nfsstat4> {
        Ok(CoreGuard::new(self))
    }

    /// The core's lock, taken back into service if it was poisoned
    /// ([`crate::statecore::lock`]; counted in [`Server::core_faults`] and
    /// [`Server::core_invariant_failures`]). `who` names the finder.
    pub(crate) fn lock_core(&self, who: &str) -> MutexGuard<'_, StateCore> {
        let counts = CoreFaults {
            faults: &self.core_faults,
            invariant_failures: &self.core_invariant_failures,
        };
        crate::statecore::lock(&self.core, counts, who)
    }

    /// Execute what the core asked for, each effect by the part it concerns. Call after
    /// the core's lock is released.
    pub fn apply(&self, effects: Vec<Effect>) {
        let mut released_clients = false;
        for e in effects {
            match e {
                Effect::PersistClients(list) => self.persist(list),
                Effect::ClientReleased {
                    client,
                    reason,
                    states,
                } => {
                    released_clients = true;
                    // Its asynchronous copies stop with it (ADR 0026).
                    self.offloads.cancel_client(client);
                    // A client that said goodbye (DESTROY_CLIENTID) is routine: every
                    // CLI command ends so. An expiry or a replacement is the
                    // administrator's business.
                    if reason == txnfs_state::ReleaseReason::Destroyed {
                        tracing::debug!(
                            client = format_args!("{client:#x}"),
                            states,
                            "released client state: Destroyed"
                        )
                    } else {
                        tracing::info!(
                            client = format_args!("{client:#x}"),
                            ?reason,
                            states,
                            "released client state"
                        )
                    }
                }
                Effect::GraceEnded(end) => tracing::info!(?end, "grace period over"),
                Effect::Callback { client, call } => match self.arc() {
                    Some(me) => me.send_callback(client, call),
                    None => tracing::warn!("callback dropped: the server is shutting down"),
                },
                Effect::Revoke {
                    client,
                    stateid,
                    reason,
                } => match reason {
                    txnfs_state::RevokeReason::Timeout => tracing::info!(
                        client = format_args!("{client:#x}"),
                        ?stateid,
                        "delegation revoked: not returned in time"
                    ),
                    txnfs_state::RevokeReason::Unreachable => tracing::info!(
                        client = format_args!("{client:#x}"),
                        ?stateid,
                        "delegation revoked: holder unreachable (no back channel)"
                    ),
                },
                Effect::DelegationsReleased { files } => {
                    // Watches first: a woken request may open the file.
                    self.watches.unwatch_released(self, Some(&files));
                    self.dir_watches.unwatch_released(self, Some(&files));
                    self.recall_waits.notify();
                }
                Effect::NotifyDue { client, id, after } => match self.arc() {
                    Some(me) => me.schedule_notify(client, id, after),
                    None => tracing::warn!("notification dropped: the server is shutting down"),
                },
            }
        }
        if released_clients {
            // Their opens are gone: so are the holds that kept those files alive.
            let released = {
                let core = self.lock_core("releasing holds");
                // No COMPOUND gives them back: a context outside any.
                let cx = txnfs_backend::OpCtx::default();
                self.held.release_closed(&core, None, &cx)
            };
            drop(released);
        }
    }

    /// Write a client list unless a newer one was written already. Writes are
    /// serialised, so two snapshots never race on the same file.
    fn persist(&self, list: ClientList) {
        let mut last = self
            .persisted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if list.generation <= *last {
            return;
        }
        match self
            .statedir
            .save_client_list(&list.owners, &list.sessions_only)
        {
            Ok(()) => *last = list.generation,
            Err(e) => tracing::error!(
                "cannot record clients in the state directory (a restart would not wait for them to reclaim): {e}"
            ),
        }
    }

    /// Persist the owners of confirmed clients so that after a restart the grace period
    /// knows whom to wait for.
    pub fn persist_clients(&self) {
        let e = self.lock_core("persisting clients").persist_clients();
        self.apply(vec![e]);
    }

    /// Periodic housekeeping on the server's clock: expire clients whose lease ran out
    /// (with their opens and locks), end the grace period when due.
    pub fn tick(&self) {
        let now = self.clock.now();
        let effects = {
            let mut core = self.lock_core("lease expiry");
            let effects = core.tick(now);
            // Back channels of sessions that expired with their client go too.
            self.callbacks
                .retain(|id| core.sessions().session(id).is_some());
            self.callbacks
                .v40
                .retain(|c| core.sessions().client_exists(c));
            effects
        };
        self.apply(effects);
        // A backstop for a watch whose delegation left by a path that named no file.
        self.watches.unwatch_released(self, None);
        self.dir_watches.unwatch_released(self, None);
        // A backstop for a lost SIGIO (ADR 0027).
        if let Some(me) = self.arc() {
            me.lease_breaks();
        }
        self.reap_transactions(now);
        // Finished copies are reported for two leases (OFFLOAD_STATUS), then forgotten.
        let lease = std::time::Duration::from_secs(u64::from(self.cfg.lease_time.max(1)));
        self.offloads.reap(now, 2 * lease);
    }

    /// Rolls back the transactions of several COMPOUNDs whose session is gone or that
    /// stayed open longer than `txn_timeout`.
    fn reap_transactions(&self, now: Instant) {
        if self.txns.is_empty() {
            return;
        }
        let expired = {
            // (Reading which sessions exist: a poisoned core was reported by `tick`.)
            let core = self.lock_core("transaction reaping");
            self.txns.expired(now, self.cfg.txn_timeout(), |s| {
                core.sessions().session(s).is_some()
            })
        };
        self.roll_back(
            expired,
            "abandoned (its session is gone or it ran out of time)",
        );
    }

    /// Rolls back transactions taken out of `self.txns` (`why`: for the log).
    pub fn roll_back(&self, txns: Vec<crate::txnspan::Expired>, why: &str) {
        crate::txnspan::roll_back(&self.exports, txns, why);
    }

    /// A transport connection closed: unbind it from every session. A back channel it
    /// was the last connection of is down: requests held for recalls look again (its
    /// client's delegations are revoked at once if it cannot be reached otherwise).
    ///
    /// A transaction of several COMPOUNDs open on a session whose last connection this
    /// was is rolled back at once (ADR 0036): nobody is left to commit it, and its
    /// locks would hold every other client off until `txn_timeout`. On a runtime the
    /// rollback (disk work) runs on the blocking pool, not on the transport's task.
    pub fn connection_closed(&self, conn: u64) {
        let orphaned = self.lock_core("connection close").connection_closed(conn);
        if self.callbacks.connection_closed(conn) {
            self.back_channel_lost();
        }
        if orphaned.is_empty() || self.txns.is_empty() {
            return;
        }
        let txns = self.txns.orphaned(&orphaned);
        if txns.is_empty() {
            return;
        }
        const WHY: &str = "its session's last connection closed";
        match (tokio::runtime::Handle::try_current(), self.arc()) {
            (Ok(rt), Some(me)) => {
                rt.spawn_blocking(move || me.roll_back(txns, WHY));
            }
            _ => self.roll_back(txns, WHY),
        }
    }

    /// Complete the slot a COMPOUND's SEQUENCE opened (`reply`: the reply to cache, or
    /// `None` when it is not cached).
    pub fn finish_slot(&self, session: &Session, slot: u32, reply: Option<txnfs_xdr::Gathered>) {
        self.lock_core("completing a slot")
            .finish_slot(&session.id, slot, reply);
    }

    /// Validate the stateid of a READ, WRITE or SETATTR(size) of `file`, after another
    /// client's conflicting delegation is recalled and returned (`crate::recall`). One
    /// acquisition of the core's lock when no delegation is in the way, as before
    /// delegations existed: this is every READ's and WRITE's path.
    pub fn check_io(
        &self,
        now: Instant,
        client: Option<ClientId>,
        sid: &stateid4,
        file: FileId,
        write: bool,
        waited: &WaitClock,
    ) -> Result<(), nfsstat4> {
        let access = if write { Access::Modify } else { Access::Read };
        let sid = stateid_from_wire(sid);
        let check = |core: &StateCore| {
            core.check_io(client.unwrap_or(0), &sid, file, write)
                .map_err(|e| crate::errors::state_status(&e))
        };
        {
            let mut core = self.core()?;
            if core
                .delegation_conflicts(now, client, file, access, self.unreachable())
                .is_empty()
            {
                return check(&core);
            }
        }
        self.clear_delegations(now, client, file, access, waited)?;
        let core = self.core()?;
        check(&core)
    }

    // ---- delegations: recalls, watches, notifications ---------------------------------

    /// The server as recall-and-wait sees it (`crate::recall`).
    pub fn recall(&self) -> Recall<'_> {
        Recall {
            core: self,
            callbacks: &self.callbacks,
            waits: &self.recall_waits,
            clock: &*self.clock,
            cfg: &self.cfg,
        }
    }

    /// Hold the current request until no other client's delegation conflicts with
    /// `access` to `file` ([`Recall::clear_delegations`]).
    pub fn clear_delegations(
        &self,
        now: Instant,
        client: Option<ClientId>,
        file: FileId,
        access: Access,
        waited: &WaitClock,
    ) -> Result<(), nfsstat4> {
        self.recall()
            .clear_delegations(now, client, file, access, waited)
    }

    /// CB_GETATTR to the write-delegation holder `client` of `fh`
    /// ([`Recall::cb_getattr`]).
    pub fn cb_getattr(
        &self,
        client: ClientId,
        fh: &Bytes,
        timestamps: bool,
        waited: &WaitClock,
    ) -> Option<HolderAttrs> {
        self.recall().cb_getattr(client, fh, timestamps, waited)
    }

    /// Whether a recall cannot reach a client ([`Recall::unreachable`]). Called under
    /// the core's lock: the callback registry's locks are taken after it, never before.
    pub(crate) fn unreachable(&self) -> impl Fn(ClientId) -> bool + '_ {
        self.recall().unreachable()
    }

    /// The back channel of some client may have gone: requests held for recalls look
    /// again (a holder that cannot be reached any more loses its delegation at once).
    pub(crate) fn back_channel_lost(&self) {
        self.recall_waits.notify();
    }

    /// Send a callback the core asked for ([`Recall::deliver`], on the runtime). Without
    /// a runtime (the simulation, no sockets) it is recorded for
    /// [`Server::take_undelivered_callbacks`].
    fn send_callback(self: &Arc<Self>, client: ClientId, call: Callback) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.undelivered_callbacks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((client, call));
            return;
        };
        let srv = self.clone();
        rt.spawn(async move { srv.recall().deliver(client, call).await });
    }

    /// The core queued notifications for directory delegation `id` of `client`: send
    /// them after `after` (more changes may join the batch meanwhile;
    /// `crate::dirnotify`). Without a runtime (the simulation) nothing can be sent: the
    /// delegation is recalled.
    fn schedule_notify(self: &Arc<Self>, client: ClientId, id: u64, after: Duration) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            crate::dirnotify::cannot_send(&**self, self.clock.now(), id);
            return;
        };
        let srv = self.clone();
        rt.spawn(async move {
            tokio::time::sleep(after).await;
            crate::dirnotify::flush(srv.recall(), client, id).await;
        });
    }

    /// The attributes of `key` of `export` changed by `client` (outside a COMPOUND's
    /// own ops too: an asynchronous COPY that finished): notify the directory
    /// delegations that follow it (`crate::dirnotify::attrs_changed`). `cx` reads the
    /// attributes, `now` dates the notices.
    pub(crate) fn attrs_changed_by(
        &self,
        cx: &OpCtx,
        client: Option<ClientId>,
        now: Instant,
        export: &Arc<Export>,
        key: &FileKey,
    ) {
        let encode = |key: &FileKey, mask: &[u32], attrs: &Attrs| {
            let fh = self.obj_fh(export, key.clone());
            self.fattr(cx, &fh, mask, Some(attrs), 1).ok()
        };
        crate::dirnotify::attrs_changed(self, cx, client, now, export, key, &encode);
    }

    /// Look for watches an outside access broke (on SIGIO, and on every tick) and
    /// recall their files' delegations, each on a blocking-pool thread
    /// (`crate::watches`).
    pub fn lease_breaks(self: &Arc<Self>) {
        self.outside_dir_changes();
        let broken = self.watches.take_broken();
        if broken.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime (no SIGIO stream either): recall here without waiting.
            for file in broken {
                self.watches
                    .recall_for_outside(self.recall(), file, WaitMode::Never);
            }
            return;
        };
        for file in broken {
            let srv = self.clone();
            rt.spawn_blocking(move || {
                crate::waitmode::on_blocking_pool(|| {
                    srv.watches
                        .recall_for_outside(srv.recall(), file, WaitMode::Plain)
                })
            });
        }
    }

    /// Look for changes made outside the server in delegated directories (on SIGIO
    /// and every tick) and notify or recall their holders on a blocking-pool thread;
    /// the recalled delegations not returned within `recall_wait` are revoked
    /// (`crate::dirwatches`).
    fn outside_dir_changes(self: &Arc<Self>) {
        if !self.dir_watches.schedule() {
            return;
        }
        let srv = self.clone();
        let look = move || {
            // Outside any COMPOUND.
            let cx = OpCtx::default();
            let encode = |export: &Arc<Export>, key: &FileKey, mask: &[u32], attrs: &Attrs| {
                let fh = srv.obj_fh(export, key.clone());
                srv.fattr(&cx, &fh, mask, Some(attrs), 1).ok()
            };
            let recalled = srv.dir_watches.look(srv.recall(), &cx, &encode);
            if recalled.is_empty() {
                return;
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let wait = srv.cfg.recall_wait();
                let srv = srv.clone();
                rt.spawn(async move {
                    tokio::time::sleep(wait).await;
                    if let Ok(mut core) = srv.core() {
                        core.revoke_delegations(&recalled, txnfs_state::RevokeReason::Timeout);
                    }
                });
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(look)),
            // No runtime: look here (the tick revokes overdue recalls).
            Err(_) => look(),
        }
    }

    /// A CB_COMPOUND of CB_SEQUENCE alone on `session`'s back channel, with the
    /// configured timeout: the tests' way to drive the back-channel slot. Updates the
    /// session's path state.
    pub async fn callback_sequence(
        &self,
        session: &SessionId,
    ) -> Result<Vec<nfs_cb_resop4>, CallbackFailure> {
        let s = self
            .callbacks
            .session(session)
            .ok_or(CallbackFailure::NoBackChannel)?;
        let r = cb_compound(&s, Vec::new(), self.cfg.callback_timeout()).await;
        s.observe(&r);
        r
    }

    // ---- handles -------------------------------------------------------------------

    pub fn root_fh(&self) -> Fh {
        let set = self.exports.snapshot();
        match set.root_export.and_then(|id| set.get(id)) {
            Some(e) => self.obj_fh(e, e.root_key.clone()),
            None => Fh::Pseudo(0),
        }
    }

    pub fn obj_fh(&self, export: &Arc<Export>, key: FileKey) -> Fh {
        let wire = self.handles.encode(&HandleTarget::Object {
            export: export.id,
            key: key.clone(),
        });
        Fh::Obj(ObjFh {
            export: export.clone(),
            key,
            wire,
        })
    }

    pub fn fh_wire(&self, fh: &Fh) -> Bytes {
        fh.wire(&self.handles)
    }

    pub fn fh_from_wire(&self, wire: &Bytes) -> Result<Fh, nfsstat4> {
        match self.handles.decode(wire) {
            Ok(HandleTarget::Pseudo(n)) => {
                if self.exports.snapshot().node(n).is_some() {
                    Ok(Fh::Pseudo(n))
                } else {
                    Err(nfsstat4::NFS4ERR_STALE)
                }
            }
            Ok(HandleTarget::Object { export, key }) => {
                let e = self.exports.get(export).ok_or(nfsstat4::NFS4ERR_STALE)?;
                Ok(Fh::Obj(ObjFh {
                    export: e,
                    key,
                    wire: wire.clone(),
                }))
            }
            Err(HandleError::Forged) => {
                tracing::warn!("rejected a file handle that fails verification (forged?)");
                Err(nfsstat4::NFS4ERR_BADHANDLE)
            }
            Err(HandleError::Malformed) => Err(nfsstat4::NFS4ERR_BADHANDLE),
        }
    }

    // ---- attributes ------------------------------------------------------------------

    /// The server as the attribute encoding sees it (`crate::attrs`).
    pub fn attrs(&self) -> Attributes<'_> {
        Attributes {
            cfg: &self.cfg,
            exports: &self.exports,
            handles: &self.handles,
            boot_time: self.boot_time,
            boot_epoch: self.boot_epoch,
        }
    }

    /// The attributes of `fh` ([`Attributes::attrs_of`]).
    pub fn attrs_of(&self, cx: &OpCtx, fh: &Fh) -> Result<Attrs, OpError> {
        self.attrs().attrs_of(cx, fh)
    }

    /// The attributes `request` asks for of `fh`, encoded ([`Attributes::fattr`]).
    pub fn fattr(
        &self,
        cx: &OpCtx,
        fh: &Fh,
        request: &[u32],
        known: Option<&Attrs>,
        minor: u32,
    ) -> Result<fattr4, OpError> {
        self.attrs().fattr(cx, fh, request, known, minor)
    }

    /// VERIFY/NVERIFY: whether the client's attributes equal ours
    /// ([`Attributes::compare_attrs`]).
    pub fn compare_attrs(
        &self,
        cx: &OpCtx,
        fh: &Fh,
        f: &fattr4,
        minor: u32,
    ) -> Result<bool, OpError> {
        self.attrs().compare_attrs(cx, fh, f, minor)
    }

    /// READDIR cookie verifier ([`Attributes::cookieverf`]).
    pub fn cookieverf(&self, fh: &Fh) -> [u8; 8] {
        self.attrs().cookieverf(fh)
    }

    // ---- state -----------------------------------------------------------------------

    /// The id under which opens and locks of an object are kept: (export, fileid),
    /// without collisions for any 64-bit fileid.
    pub fn state_file_id(&self, export: &Export, fileid: u64) -> FileId {
        txnfs_state::file_id(export.id, fileid)
    }

    pub fn cfh_file_id(&self, cx: &OpCtx, fh: &Fh) -> Result<FileId, OpError> {
        match fh {
            Fh::Pseudo(_) => Err(nfsstat4::NFS4ERR_ISDIR.into()),
            Fh::Obj(o) => {
                let a = o.export.backend.getattr(cx, &o.key)?;
                match a.ftype {
                    FileType::Regular => Ok(self.state_file_id(&o.export, a.fileid)),
                    FileType::Directory => Err(nfsstat4::NFS4ERR_ISDIR.into()),
                    _ => Err(nfsstat4::NFS4ERR_INVAL.into()),
                }
            }
        }
    }
}

impl CoreAccess for Server {
    fn lock_core(&self, who: &str) -> MutexGuard<'_, StateCore> {
        Server::lock_core(self, who)
    }

    fn apply(&self, effects: Vec<Effect>) {
        Server::apply(self, effects)
    }

    fn core(&self) -> Result<CoreGuard<'_>, nfsstat4> {
        Server::core(self)
    }
}

impl CopyHost for Server {
    fn offloads(&self) -> &crate::offload::Offloads {
        &self.offloads
    }

    fn recall(&self) -> Recall<'_> {
        Server::recall(self)
    }

    fn boot_epoch(&self) -> u32 {
        self.boot_epoch
    }

    fn write_verf(&self) -> [u8; 8] {
        self.write_verf
    }

    fn attrs_changed(
        &self,
        cx: &OpCtx,
        client: Option<ClientId>,
        now: Instant,
        export: &Arc<Export>,
        key: &FileKey,
    ) {
        self.attrs_changed_by(cx, client, now, export, key)
    }
}

#[cfg(test)]
mod tests;
