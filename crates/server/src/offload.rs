//! Asynchronous intra-server COPY (RFC 7862 §4.4-4.6, §15.2, §15.8, §15.9, §16.1;
//! ADR 0026): a COPY the client lets run asynchronously is answered at once with a
//! copy stateid, and the bytes move on a thread of their own, one step
//! (`Config::async_copy_chunk`) at a time through the backend's `clone_range`. Between
//! steps the job publishes its progress (OFFLOAD_STATUS), looks for a cancel
//! (OFFLOAD_CANCEL, its client's state purged, the server stopping) and recalls any
//! delegation another client was granted on the destination meanwhile. When it ends,
//! CB_OFFLOAD tells the client on its back channel.
//!
//! Copy stateids are the client's, minted here and known only here: the boot epoch
//! and a counter with [`COPY_ID_BIT`] set, a bit neither the open table (small
//! counters) nor the delegation table (the top bit) ever sets, so no other stateid
//! check accepts one and a copy stateid names nothing else. One not in the registry,
//! another client's, or a forged one is NFS4ERR_BAD_STATEID.
//!
//! A finished copy is kept `keep` (two leases) after it ended, so OFFLOAD_STATUS can
//! still report it to a client whose CB_OFFLOAD was lost; OFFLOAD_CANCEL forgets it at
//! once, as knfsd does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use txnfs_backend::{BackendError, FileKey, OpCtx};
use txnfs_state::{Access, ClientId, FileId};

use crate::callback::{cb_compound, CallbackFailure};
use crate::export::Export;
use crate::nfs::*;
use crate::recall::Recall;

/// Counter bit of a copy stateid (the delegation table uses `1 << 63`).
pub const COPY_ID_BIT: u64 = 1 << 62;
/// Copies running at once on the server; beyond, COPY runs synchronously.
pub const MAX_RUNNING: usize = 16;
/// Copies (running or finished, not yet forgotten) one client may have; beyond, its
/// COPY runs synchronously.
pub const MAX_PER_CLIENT: usize = 64;
/// How long a step that meets a transaction's lock (`Conflict`) keeps retrying
/// before the copy fails with NFS4ERR_DELAY.
const CONFLICT_PATIENCE: Duration = Duration::from_secs(10);

/// What a COPY has checked and hands to [`Offloads::start`].
pub struct CopyRequest {
    pub client: ClientId,
    pub export: Arc<Export>,
    pub src: FileKey,
    pub dst: FileKey,
    /// The destination's wire handle (CB_OFFLOAD's `coa_fh`).
    pub dst_fh: Bytes,
    /// The destination's state id (delegation recalls between steps).
    pub dst_file: FileId,
    pub src_off: u64,
    pub dst_off: u64,
    /// Bytes to copy (never 0: the COPY resolved "to end of file").
    pub len: u64,
    /// The caller's context, outside any COMPOUND (`compound` 0).
    pub cx: OpCtx,
}

/// How a copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Done,
    Failed(nfsstat4),
    Cancelled,
}

/// One asynchronous copy.
pub struct CopyJob {
    id: u64,
    client: ClientId,
    stateid: stateid4,
    req: CopyRequest,
    /// Bytes copied so far.
    copied: AtomicU64,
    /// Set by OFFLOAD_CANCEL, the purge of the client's state, or shutdown.
    cancelled: AtomicBool,
    state: Mutex<JobState>,
}

#[derive(Debug, Default)]
struct JobState {
    /// The final status and when it was reached.
    done: Option<(nfsstat4, Instant)>,
    /// CB_OFFLOAD is being sent: the entry is not reaped meanwhile.
    delivering: bool,
    /// The client answered CB_OFFLOAD.
    delivered: bool,
}

impl CopyJob {
    fn state(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What OFFLOAD_STATUS reports of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyStatus {
    /// Bytes copied so far.
    pub copied: u64,
    /// The copy's outcome, once it has one.
    pub done: Option<nfsstat4>,
    /// The client answered its CB_OFFLOAD.
    pub delivered: bool,
}

/// What a copy job reaches of the server that owns its [`Offloads`] (the server
/// implements it): recall-and-wait for the destination's delegations, the back
/// channels, the clock and the configuration ([`Recall`]), and the directory
/// notifications of the destination's new attributes.
pub trait CopyHost: Send + Sync + 'static {
    /// The registry the job belongs to.
    fn offloads(&self) -> &Offloads;
    /// The server as recall-and-wait sees it.
    fn recall(&self) -> Recall<'_>;
    /// This instance's boot epoch (in copy stateids).
    fn boot_epoch(&self) -> u32;
    /// The write verifier (CB_OFFLOAD's `wr_writeverf`).
    fn write_verf(&self) -> [u8; 8];
    /// The attributes of `key` changed by `client`'s copy: notify the directory
    /// delegations that follow it (`crate::dirnotify`).
    fn attrs_changed(
        &self,
        cx: &OpCtx,
        client: Option<ClientId>,
        now: Instant,
        export: &Arc<Export>,
        key: &FileKey,
    );
}

/// The server's asynchronous copies.
#[derive(Default)]
pub struct Offloads {
    jobs: Mutex<HashMap<u64, Arc<CopyJob>>>,
    next: AtomicU64,
    running: AtomicUsize,
    stopping: AtomicBool,
}

/// One of the `MAX_RUNNING` places, given back when a job's thread ends (or when the
/// job never started).
struct Running(Arc<dyn CopyHost>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.offloads().running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Offloads {
    fn jobs(&self) -> MutexGuard<'_, HashMap<u64, Arc<CopyJob>>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Copies whose threads still run.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Copies known (running, or finished and not yet forgotten).
    pub fn tracked(&self) -> usize {
        self.jobs().len()
    }

    /// The copy stateid of counter `id`.
    fn stateid(epoch: u32, id: u64) -> stateid4 {
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&epoch.to_be_bytes());
        other[4..].copy_from_slice(&(id | COPY_ID_BIT).to_be_bytes());
        stateid4 { seqid: 1, other }
    }

    /// The copy `sid` names, if it is `client`'s and its destination is `dst`
    /// (OFFLOAD_STATUS and OFFLOAD_CANCEL name the copy by both, RFC 7862 §15.8.3,
    /// §15.9.3); anything else is NFS4ERR_BAD_STATEID.
    fn find(
        &self,
        epoch: u32,
        client: ClientId,
        sid: &stateid4,
        dst: &FileKey,
    ) -> Result<Arc<CopyJob>, nfsstat4> {
        let bad = nfsstat4::NFS4ERR_BAD_STATEID;
        let mut e = [0u8; 4];
        e.copy_from_slice(&sid.other[..4]);
        let mut n = [0u8; 8];
        n.copy_from_slice(&sid.other[4..]);
        let n = u64::from_be_bytes(n);
        if u32::from_be_bytes(e) != epoch || n & (COPY_ID_BIT | 1 << 63) != COPY_ID_BIT {
            return Err(bad);
        }
        let job = self.jobs().get(&(n & !COPY_ID_BIT)).cloned().ok_or(bad)?;
        if job.client != client || (sid.seqid != 0 && sid.seqid != job.stateid.seqid) {
            return Err(bad);
        }
        if job.req.dst != *dst {
            return Err(bad);
        }
        Ok(job)
    }

    /// Start copying `req` in the background: its copy stateid, or `None` when it
    /// cannot run asynchronously (no runtime to send CB_OFFLOAD on, the server
    /// stopping, too many copies running or kept for the client, no thread): the
    /// caller then copies synchronously. The source and destination are held in the
    /// backend (`Backend::hold`) until the copy ends, so a REMOVE meanwhile does not
    /// pull them away.
    pub fn start(&self, srv: Arc<dyn CopyHost>, req: CopyRequest) -> Option<stateid4> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        if self.stopping.load(Ordering::Acquire) {
            return None;
        }
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let guard = Running(srv.clone());
        if self
            .jobs()
            .values()
            .filter(|j| j.client == req.client)
            .count()
            >= MAX_PER_CLIENT
        {
            return None;
        }
        let be = &req.export.backend;
        be.hold(&req.cx, &req.src).ok()?;
        if be.hold(&req.cx, &req.dst).is_err() {
            be.release(&req.cx, &req.src);
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let job = Arc::new(CopyJob {
            id,
            client: req.client,
            stateid: Self::stateid(srv.boot_epoch(), id),
            req,
            copied: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            state: Mutex::new(JobState::default()),
        });
        self.jobs().insert(id, job.clone());
        let sid = job.stateid.clone();
        let (srv2, job2) = (srv.clone(), job.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("txnfs-copy-{}", job.id))
            .spawn(move || {
                let _running = guard;
                let _rt = rt.enter();
                run(&srv2, &job2, &rt);
            });
        if let Err(e) = spawned {
            tracing::warn!("no thread for an asynchronous copy, copying synchronously: {e}");
            self.jobs().remove(&job.id);
            release(&job);
            return None;
        }
        tracing::debug!(
            client = format_args!("{:#x}", job.client),
            id = job.id,
            bytes = job.req.len,
            "asynchronous copy started"
        );
        Some(sid)
    }

    /// OFFLOAD_STATUS of `client`'s copy `sid` to `dst`.
    pub fn status(
        &self,
        epoch: u32,
        client: ClientId,
        sid: &stateid4,
        dst: &FileKey,
    ) -> Result<CopyStatus, nfsstat4> {
        let job = self.find(epoch, client, sid, dst)?;
        let st = job.state();
        Ok(CopyStatus {
            copied: job.copied.load(Ordering::Acquire),
            done: st.done.map(|(s, _)| s),
            delivered: st.delivered,
        })
    }

    /// OFFLOAD_CANCEL of `client`'s copy `sid` to `dst`: a running copy stops before
    /// its next step and sends no CB_OFFLOAD; a finished one is forgotten. Either way
    /// the stateid is gone (knfsd answers the same).
    pub fn cancel(
        &self,
        epoch: u32,
        client: ClientId,
        sid: &stateid4,
        dst: &FileKey,
    ) -> Result<(), nfsstat4> {
        let job = self.find(epoch, client, sid, dst)?;
        job.cancelled.store(true, Ordering::Release);
        self.jobs().remove(&job.id);
        tracing::debug!(id = job.id, "asynchronous copy cancelled by its client");
        Ok(())
    }

    /// `client`'s state was purged (lease expiry, DESTROY_CLIENTID): its copies stop
    /// and are forgotten.
    pub fn cancel_client(&self, client: ClientId) {
        let mut jobs = self.jobs();
        jobs.retain(|_, j| {
            if j.client != client {
                return true;
            }
            j.cancelled.store(true, Ordering::Release);
            false
        });
    }

    /// Forget finished copies that ended more than `keep` before `now` (and whose
    /// CB_OFFLOAD is not still being sent).
    pub fn reap(&self, now: Instant, keep: Duration) {
        self.jobs().retain(|_, j| {
            let st = j.state();
            match st.done {
                Some((_, at)) => st.delivering || now.saturating_duration_since(at) < keep,
                None => true,
            }
        });
    }

    /// The server stops: no copy starts any more, every running one is cancelled, and
    /// this waits (at most `wait`) for their threads to notice, which they do before
    /// their next step. Returns the copies still running.
    pub async fn stop(&self, wait: Duration) -> usize {
        self.stopping.store(true, Ordering::Release);
        for j in self.jobs().drain().map(|(_, j)| j) {
            j.cancelled.store(true, Ordering::Release);
        }
        let deadline = tokio::time::Instant::now() + wait;
        while self.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.running()
    }
}

/// Give back the holds [`Offloads::start`] took.
fn release(job: &CopyJob) {
    let be = &job.req.export.backend;
    be.release(&job.req.cx, &job.req.dst);
    be.release(&job.req.cx, &job.req.src);
}

/// The job's thread: the steps, then the destination's notifications and CB_OFFLOAD.
fn run(srv: &Arc<dyn CopyHost>, job: &Arc<CopyJob>, rt: &tokio::runtime::Handle) {
    // Recalls between steps wait on this thread, as on a blocking-pool thread.
    let end = crate::waitmode::on_blocking_pool(|| steps(&**srv, job));
    release(job);
    let copied = job.copied.load(Ordering::Acquire);
    if copied > 0 {
        let r = &job.req;
        srv.attrs_changed(
            &r.cx,
            Some(r.client),
            srv.recall().clock.now(),
            &r.export,
            &r.dst,
        );
    }
    let status = match end {
        End::Done => nfsstat4::NFS4_OK,
        End::Failed(s) => s,
        End::Cancelled => {
            tracing::debug!(id = job.id, copied, "asynchronous copy stopped");
            return;
        }
    };
    {
        let mut st = job.state();
        st.done = Some((status, srv.recall().clock.now()));
        st.delivering = true;
    }
    tracing::debug!(id = job.id, copied, ?status, "asynchronous copy finished");
    let (srv, job) = (srv.clone(), job.clone());
    rt.spawn(async move { deliver(&srv, &job, status).await });
}

/// Copy step by step until done, failed or cancelled.
fn steps(srv: &dyn CopyHost, job: &CopyJob) -> End {
    let r = &job.req;
    let host = srv.recall();
    let chunk = host.cfg.async_copy_chunk.max(1).div_ceil(4096) * 4096;
    let mut done = 0u64;
    let mut conflict_since: Option<Instant> = None;
    while done < r.len {
        if job.cancelled.load(Ordering::Acquire) {
            return End::Cancelled;
        }
        // A delegation granted to another client on the destination since the last
        // step (its holder would cache stale data) is recalled first.
        match host.clear_delegations(
            host.clock.now(),
            Some(r.client),
            r.dst_file,
            Access::Modify,
            &crate::placement::WaitClock::default(),
        ) {
            Ok(()) => {}
            // Revoked after the recall wait, or no thread to hold: look again.
            Err(nfsstat4::NFS4ERR_DELAY) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return End::Failed(e),
        }
        let n = chunk.min(r.len - done);
        match r.export.backend.clone_range(
            &r.cx,
            &r.src,
            r.src_off + done,
            &r.dst,
            r.dst_off + done,
            n,
        ) {
            Ok(_) => {
                conflict_since = None;
                done += n;
                job.copied.store(done, Ordering::Release);
            }
            // A transaction holds the destination or the source: wait for it.
            Err(BackendError::Conflict) => {
                let since = *conflict_since.get_or_insert_with(Instant::now);
                if since.elapsed() > CONFLICT_PATIENCE {
                    return End::Failed(nfsstat4::NFS4ERR_DELAY);
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return End::Failed(crate::errors::backend_status(&e)),
        }
        if let Some(p) = host.cfg.async_copy_pause {
            std::thread::sleep(p);
        }
    }
    End::Done
}

/// The CB_OFFLOAD of a finished copy (RFC 7862 §16.1).
fn cb_offload(srv: &dyn CopyHost, job: &CopyJob, status: nfsstat4) -> nfs_cb_argop4 {
    let copied = job.copied.load(Ordering::Acquire);
    let info = match status {
        nfsstat4::NFS4_OK => offload_info4::NFS4_OK(write_response4 {
            wr_callback_id: Vec::new(),
            wr_count: copied,
            // As the synchronous COPY: the bytes may still be in the page cache, and
            // the client COMMITs (the verifier tells it whether a restart lost them).
            wr_committed: stable_how4::UNSTABLE4,
            wr_writeverf: srv.write_verf(),
        }),
        s => offload_info4::default(s, copied),
    };
    nfs_cb_argop4::OP_CB_OFFLOAD(CB_OFFLOAD4args {
        coa_fh: job.req.dst_fh.clone(),
        coa_stateid: job.stateid.clone(),
        coa_offload_info: info,
    })
}

/// Send CB_OFFLOAD to a session of the copy's client with a back channel, retrying
/// while the client reconnects or answers NFS4ERR_DELAY, for at most a lease.
async fn deliver(srv: &Arc<dyn CopyHost>, job: &Arc<CopyJob>, status: nfsstat4) {
    let host = srv.recall();
    let give_up = tokio::time::Instant::now() + Duration::from_secs(host.cfg.lease_time.into());
    let mut pause = Duration::from_millis(50);
    let delivered = loop {
        if job.cancelled.load(Ordering::Acquire) {
            break false;
        }
        let r = match host.callbacks.session_of(job.client) {
            Some(s) => {
                let op = cb_offload(&**srv, job, status);
                let r = cb_compound(&s, vec![op], host.cfg.callback_timeout()).await;
                s.observe(&r);
                r.and_then(|res| match res.into_iter().next() {
                    Some(nfs_cb_resop4::OP_CB_OFFLOAD(CB_OFFLOAD4res { cor_status }))
                        if cor_status != nfsstat4::NFS4_OK =>
                    {
                        Err(CallbackFailure::Status(cor_status))
                    }
                    _ => Ok(()),
                })
            }
            None => Err(CallbackFailure::NoBackChannel),
        };
        match r {
            Ok(()) => break true,
            Err(CallbackFailure::Status(nfsstat4::NFS4ERR_DELAY))
            | Err(CallbackFailure::Sequence(nfsstat4::NFS4ERR_DELAY)) => {}
            Err(e @ (CallbackFailure::Status(_) | CallbackFailure::Sequence(_))) => {
                tracing::info!(id = job.id, "CB_OFFLOAD refused: {e}");
                break false;
            }
            Err(e) => tracing::debug!(id = job.id, "CB_OFFLOAD not delivered yet: {e}"),
        }
        if tokio::time::Instant::now() >= give_up {
            tracing::info!(
                client = format_args!("{:#x}", job.client),
                id = job.id,
                "CB_OFFLOAD not delivered within a lease: the client can still ask OFFLOAD_STATUS"
            );
            break false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    };
    let mut st = job.state();
    st.delivering = false;
    st.delivered = delivered;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_stateids_are_neither_open_nor_delegation_stateids() {
        let sid = Offloads::stateid(7, 1);
        let core = txnfs_state::Stateid {
            seqid: sid.seqid,
            other: sid.other,
        };
        assert!(!txnfs_state::deleg::DelegTable::is_deleg(&core));
        assert!(!core.is_special());
        let (epoch, n) = core.epoch_and_id();
        assert_eq!((epoch, n & COPY_ID_BIT), (7, COPY_ID_BIT));
    }
}
