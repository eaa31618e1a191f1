//! The RPC programs of the NFS port: NFS version 4 (NULL, COMPOUND and the
//! transactional COMPOUND procedures, `txnfs_proto::PROC_TXN_*`, ADR 0021), NFS
//! version 3 (`crate::v3`, ADR 0038), MOUNT version 3 (`crate::mount`), and NLM
//! version 4 with NSM version 1 (`crate::nlm`, ADR 0041). A COMPOUND
//! or a v3 procedure runs to completion either inline on the transport thread (no
//! handoff) or on one blocking-pool thread (the single handoff), as `crate::placement`
//! decides from how it may wait on storage or on others, so the transport threads
//! never wait.

use crate::placement::{MetadataPace, WaitClock};
use crate::server::Server;
use crate::txnspan::TxnProc;
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_backend::Creds;
use txnfs_rpc::{CallInfo, Credential, ReplyBody, RpcService};

pub const NFS_PROGRAM: u32 = 100003;
const NFS_V4: u32 = 4;
const PROC_NULL: u32 = 0;
const PROC_COMPOUND: u32 = 1;

/// Caller identity: AUTH_SYS as sent; a Kerberos principal as the principal map
/// says (ADR 0051); AUTH_NONE and unmapped principals as nobody (65534), which the
/// export rule replaces with its anonymous ids.
fn call_creds(server: &Server, info: &CallInfo) -> Creds {
    match &info.gss {
        Some(g) => server
            .principals
            .creds_of(&g.principal)
            .unwrap_or_else(|| creds(&Credential::None)),
        None => creds(&info.cred),
    }
}

/// AUTH_SYS as sent; AUTH_NONE as nobody (65534).
fn creds(c: &Credential) -> Creds {
    match c {
        Credential::Sys(s) => Creds {
            uid: s.uid,
            gid: s.gid,
            gids: s.gids.clone(),
        },
        _ => Creds {
            uid: 65534,
            gid: 65534,
            gids: Vec::new(),
        },
    }
}

pub struct NfsService {
    pub server: Arc<Server>,
    /// How quick namespace changes are lately: where they run (`crate::placement`).
    pub pace: Arc<MetadataPace>,
    /// Transactional COMPOUNDs running now: while there are any, every request may wait
    /// for their locks, so all run on the blocking pool (`crate::placement`).
    transactions: Arc<AtomicUsize>,
    /// The NFSv3 front end's own state: its duplicate request cache.
    pub v3: Arc<crate::v3::V3>,
    /// MOUNT's list of mounts (DUMP).
    pub mounts: Arc<crate::mount::Mounts>,
}

/// One running transactional COMPOUND, counted in [`NfsService`] until dropped.
struct TxnRunning(Arc<AtomicUsize>);

impl TxnRunning {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        TxnRunning(count.clone())
    }
}

impl Drop for TxnRunning {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl NfsService {
    pub fn new(server: Arc<Server>) -> Self {
        NfsService {
            server,
            pace: Arc::default(),
            transactions: Arc::default(),
            v3: Arc::default(),
            mounts: Arc::default(),
        }
    }
}

impl RpcService for NfsService {
    fn programs(&self) -> Vec<(u32, u32, u32)> {
        vec![
            (NFS_PROGRAM, crate::v3::NFS_V3, NFS_V4),
            (
                crate::mount::MOUNT_PROGRAM,
                crate::mount::MOUNT_V3,
                crate::mount::MOUNT_V3,
            ),
            (
                crate::nlm::NLM_PROGRAM,
                crate::nlm::NLM_V4,
                crate::nlm::NLM_V4,
            ),
            (
                crate::nlm::NSM_PROGRAM,
                crate::nlm::NSM_V1,
                crate::nlm::NSM_V1,
            ),
        ]
    }

    fn call(&self, info: CallInfo, args: Bytes) -> impl Future<Output = ReplyBody> + Send {
        let server = self.server.clone();
        async move {
            // Who is calling, for the export rules (ADR 0043).
            let caller = crate::access::caller_of(&server, &info).await;
            if info.prog == crate::mount::MOUNT_PROGRAM {
                server.metrics.mount_calls.fetch_add(1, Ordering::Relaxed);
                return crate::mount::call(
                    &server,
                    &self.mounts,
                    caller,
                    info.peer,
                    info.proc_num,
                    args,
                )
                .await;
            }
            if info.prog == crate::nlm::NLM_PROGRAM {
                return crate::nlm::procs::call(&server, info, args).await;
            }
            if info.prog == crate::nlm::NSM_PROGRAM {
                return crate::nlm::nsm::call(&server, info.peer.ip(), info.proc_num, args).await;
            }
            if info.vers == crate::v3::NFS_V3 {
                let transactions =
                    self.transactions.load(Ordering::Relaxed) > 0 || !server.txns.is_empty();
                let creds = call_creds(&server, &info);
                return crate::v3::dispatch::call(
                    &self.v3,
                    &server,
                    &self.pace,
                    transactions,
                    caller,
                    creds,
                    info,
                    args,
                )
                .await;
            }
            match info.proc_num {
                PROC_NULL => ReplyBody::Success(Bytes::new()),
                p if p == PROC_COMPOUND || TxnProc::of_procedure(p).is_some() => {
                    let proc = TxnProc::of_procedure(p).unwrap_or(TxnProc::Plain);
                    let txn = proc.is_txn();
                    if txn && !server.cfg.txn {
                        // `--no-txn`: answer as a server that never heard of them.
                        return ReplyBody::ProcUnavail;
                    }
                    let creds = call_creds(&server, &info);
                    let conn = info.conn_id;
                    let alone = info.alone;
                    server.stats.compounds.fetch_add(1, Ordering::Relaxed);
                    // Decoded once: placement reads the ops, the executor runs them.
                    let req = match crate::compound::Request::decode(args) {
                        Ok(req) => req,
                        Err(e) => {
                            tracing::warn!(peer = %info.peer, "{e}");
                            return ReplyBody::GarbageArgs;
                        }
                    };
                    let blocking = crate::placement::needs_pool(
                        crate::placement::with_truncation(req.blocking(), alone, || {
                            req.truncates_a_file(&server)
                        }),
                        txn,
                        self.transactions.load(Ordering::Relaxed) > 0 || !server.txns.is_empty(),
                    );
                    let pace = self.pace.clone();
                    let running = txn.then(|| TxnRunning::start(&self.transactions));
                    let run = move || {
                        let started = Instant::now();
                        let waited = WaitClock::fresh();
                        let reply = crate::compound::execute_request_from(
                            &server, caller, creds, conn, req, proc, &waited,
                        );
                        if txn {
                            // The COMPOUND's status word: NFS4_OK when it committed.
                            let status =
                                crate::errors::status_word(&reply.prefix(4), 0).unwrap_or(-1);
                            server.metrics.transaction(status);
                        }
                        pace.record(blocking, started.elapsed().saturating_sub(waited.total()));
                        drop(running);
                        reply
                    };
                    let result = match self.pace.place(blocking, alone) {
                        // Run to completion here: no handoff (ADR 0004).
                        Some(_inline) => Ok(crate::waitmode::on_reader(alone, run)),
                        None => {
                            tokio::task::spawn_blocking(|| crate::recall::on_blocking_pool(run))
                                .await
                        }
                    };
                    match result {
                        Ok(reply) => ReplyBody::SuccessParts(reply),
                        Err(e) => {
                            tracing::error!(peer = %info.peer, "COMPOUND task failed: {e}");
                            ReplyBody::SystemErr
                        }
                    }
                }
                _ => ReplyBody::ProcUnavail,
            }
        }
    }

    fn connection_opened(&self, conn_id: u64, back_channel: &txnfs_rpc::BackChannel) {
        self.server.metrics.connection_opened();
        self.server
            .callbacks
            .connection_opened(conn_id, back_channel);
    }

    fn connection_closed(&self, conn_id: u64) {
        self.server.metrics.connection_closed();
        self.server.connection_closed(conn_id);
    }
}

/// Serve until `shutdown` resolves: the RPC transport plus lease housekeeping.
pub async fn run(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    // RPC-with-TLS (ADR 0049): `txnfs serve` has checked the files already; a
    // server started otherwise learns of a bad one here, before it serves.
    // The server keeps it, so that a reload can replace the certificate.
    let tls = match (&server.cfg.tls, server.tls.get()) {
        (None, _) => None,
        (Some(_), Some(running)) => Some(running.clone()),
        (Some(files), None) => {
            let loaded = Arc::new(files.load().map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?);
            Some(server.tls.get_or_init(|| loaded).clone())
        }
    };
    let ticker = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(5));
            loop {
                t.tick().await;
                let s = server.clone();
                let _ = tokio::task::spawn_blocking(move || s.tick()).await;
            }
        })
    };
    let lease_breaks = watch_lease_breaks(&server);
    let nlm_waiters = tokio::spawn(crate::nlm::blocked::run(server.clone()));
    let notifications = crate::nlm::nsm::notify_all(&server);
    let gss = crate::kerberos::acceptor_for(&server)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    let cfg = txnfs_rpc::ServerConfig {
        gss,
        max_record_size: server.cfg.max_record_size,
        max_connections: server.cfg.max_connections,
        idle_timeout: server.cfg.idle_timeout(),
        in_flight_budget: server.stats.in_flight.clone(),
        tls,
        // Read by `txnfs stats` and the Prometheus endpoint.
        write_counts: server.metrics.write_counts.clone(),
        ..Default::default()
    };
    let cfg = txnfs_rpc::ServerConfig {
        // The configuration's, else the `TXNFS_BUSY_POLL_US` of measurements.
        busy_poll: match server.cfg.busy_poll_us {
            0 => cfg.busy_poll,
            us => std::time::Duration::from_micros(u64::from(us)),
        },
        ..cfg
    };
    let svc = Arc::new(NfsService::new(server.clone()));
    let reports = Arc::new(crate::report::Reports {
        server: server.clone(),
        v3: svc.v3.clone(),
    });
    let mut report_tasks = Vec::new();
    let state_dir = server.cfg.state_dir();
    match crate::report::control::spawn(&state_dir, reports.clone()) {
        Ok(t) => report_tasks.push(t),
        // Never a reason not to serve: `txnfs stats` then says it finds no server.
        Err(e) => tracing::warn!(
            "no control socket in {} ({e}): `txnfs stats` cannot reach this server",
            state_dir.display()
        ),
    }
    if let Some(addr) = server.cfg.metrics {
        let (bound, t) = crate::report::http::spawn(addr, reports).await?;
        tracing::info!("Prometheus metrics on http://{bound}/metrics");
        report_tasks.push(t);
    }
    let r = txnfs_rpc::serve(listener, svc, cfg, shutdown).await;
    for t in report_tasks {
        t.abort();
    }
    ticker.abort();
    nlm_waiters.abort();
    notifications.iter().for_each(|t| t.abort());
    if let Some(t) = lease_breaks {
        t.abort();
    }
    // Running copies stop before their next step; none keeps the process up.
    let left = server.offloads.stop(Duration::from_secs(5)).await;
    if left > 0 {
        tracing::warn!(
            copies = left,
            "asynchronous copies still running at shutdown"
        );
    }
    server.persist_clients();
    // The forgotten sessions and clients were appended without waiting: made durable
    // now, a clean restart finds the store as the clients left it.
    if let Some(store) = &server.session_store {
        crate::durable::sync_at_stop(store);
    }
    r
}

/// Handle SIGIO, the kernel's lease-break signal, before any lease can be taken (the
/// local backend takes none while SIGIO would end the process): each one makes the
/// server look for broken watches (ADR 0027). Once installed the handler stays for the
/// life of the process, so a late SIGIO never ends it.
fn watch_lease_breaks(server: &Arc<Server>) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::io()) {
        Ok(mut sigio) => {
            let server = server.clone();
            Some(tokio::spawn(async move {
                while sigio.recv().await.is_some() {
                    server.lease_breaks();
                }
            }))
        }
        Err(e) => {
            tracing::warn!(
                "cannot handle SIGIO ({e}): local exports grant no delegations \
                 (they could not be recalled for local writers)"
            );
            None
        }
    }
}
