//! The driver: one seeded run of several clients against one in-process server, with
//! lost replies, retransmissions, cut connections, lease expiry on a simulated clock,
//! server restarts, and delegations: CB_RECALLs delivered (returned at once, late, or
//! lost and revoked by the lease timer). Invariants are checked as every reply arrives,
//! on the server's delegation table after every step, and by an audit at the end; the
//! first violation stops the run and names the seed and step.
//!
//! This file holds the run's types and the driver loop; `session` the sessions,
//! connections, retransmissions and the faults that break them; `deleg` the
//! delivery of CB_RECALLs and the checks of the server's delegation table.

mod deleg;
mod session;

use crate::client::{CbPath, Intent, Pending, Session, SimClient, SLOTS};
use crate::fault::{FaultBackend, FaultPlan, Ledger};
use crate::model::Model;
use crate::rng::Rng;
use crate::server_port::{prepare_state_dir, ServerSetup, SimServer};
use crate::wire::{self, decode, status_of};
use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use txnfs_backend::memory::MemoryBackend;
use txnfs_proto::nfs4::*;
use txnfs_state::clock::ManualClock;

/// Which invariant broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// (1) A slot request was executed twice: its effect was applied twice, or its
    /// retransmission got a different reply than the original.
    ExecutedTwice,
    /// (2) Acknowledged data does not read back.
    DataLost,
    /// (3) Conflicting byte-range locks granted, or a LOCK/LOCKT decided wrongly.
    LockConflict,
    /// (4) A directory's change counter went backwards.
    CinfoBackwards,
    /// (5) State of an expired or rebooted-away client still acts.
    StaleStateSurvived,
    /// (6) Delegations: two clients hold conflicting delegations, a delegation
    /// coexists with another client's conflicting open, a conflicting request was not
    /// answered DELAY (or a non-conflicting one was), a DELAY'd request changed
    /// something, a recall went missing, or a delegation stateid was judged wrongly.
    DelegationConflict,
    /// (7) Transactions: a committed transaction's effects are not all there, or an
    /// aborted, failed or crashed one left something behind.
    TxnAtomicity,
    /// A live client's session vanished.
    SessionLost,
    /// A status the RFC does not allow here.
    UnexpectedStatus,
    /// The server or the harness broke (garbage reply, setup failure).
    Harness,
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: ViolationKind,
    pub detail: String,
}

impl Violation {
    pub fn new(kind: ViolationKind, detail: impl Into<String>) -> Self {
        Violation {
            kind,
            detail: detail.into(),
        }
    }
}

/// A failed run: everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub step: u64,
    pub violation: Violation,
    pub break_reply_cache: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulation failed: seed={} step={} invariant={:?}: {}\n  replay: TXNFS_SIM_SEED={} TXNFS_SIM_STEPS={} {}cargo test -p txnfs-sim -- replay --nocapture",
            self.seed,
            self.step,
            self.violation.kind,
            self.violation.detail,
            self.seed,
            self.step,
            if self.break_reply_cache {
                "TXNFS_SIM_BREAK_REPLY_CACHE=1 "
            } else {
                ""
            },
        )
    }
}

/// What a run did (for the report line and the determinism check).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub steps: u64,
    pub compounds: u64,
    pub retransmissions: u64,
    /// Requests sent on another slot while earlier replies were still lost.
    pub overtakes: u64,
    pub restarts: u64,
    pub expiries: u64,
    /// Expiries whose state was probed inside the courtesy time (lease < silence <
    /// two leases), where only the conflicting requests release it.
    pub courtesy_expiries: u64,
    pub faults: u64,
    pub cut_connections: u64,
    /// Checks that found something to check (so a green run is not a vacuous one):
    /// bytes compared with the model, change_info4 values checked, LOCKs granted and
    /// denied as the model predicted, OPENs refused by a share reservation.
    pub bytes_verified: u64,
    pub cinfo_checked: u64,
    pub locks_granted: u64,
    pub locks_denied: u64,
    pub share_denied: u64,
    /// Stateids of dead sessions tried again and refused.
    pub stale_refused: u64,
    /// Delegations granted by OPEN (of them, write delegations).
    pub delegations_granted: u64,
    pub write_delegations: u64,
    /// Requests answered DELAY for another client's delegation, and the CB_RECALLs
    /// the server asked for (each checked against the model's expectation).
    pub deleg_delayed: u64,
    pub deleg_recalled: u64,
    /// CB_RECALLs delivered to their holder (then returned at once, later, or never).
    pub recalls_delivered: u64,
    /// DELEGRETURNs that returned a delegation.
    pub deleg_returns: u64,
    /// Delegations revoked (the model predicted each): recalled ones the lease timer
    /// revoked, and those revoked at once for a conflict because their holder's back
    /// channel was down.
    pub deleg_revoked: u64,
    /// Of those, the ones revoked at once (the holder could not be reached).
    pub deleg_revoked_unreachable: u64,
    /// DELEGRETURNs answered DELEG_REVOKED, and revoked delegations freed.
    pub deleg_revoked_seen: u64,
    pub deleg_freed: u64,
    /// Files with delegations checked by the delegation invariant (summed per step).
    pub deleg_files_checked: u64,
    /// Back channels taken down with their connection, and bound again
    /// (BIND_CONN_TO_SESSION).
    pub cb_paths_down: u64,
    pub cb_rebinds: u64,
    /// OPENs whose delegation (or none) was checked against the grant policy.
    pub grants_predicted: u64,
    /// Of those, files with more than one (read) delegation.
    pub deleg_shared_checked: u64,
    /// Conflicting requests on files an expired client held delegations on (they
    /// must not be DELAY'd).
    pub expired_deleg_probes: u64,
    /// READs and WRITEs with a live delegation stateid.
    pub deleg_io: u64,
    /// Transactions committed, aborted (of them, after an injected fault), cut short
    /// by a crash (and the changes they had made), rolled back by recovery, recoveries
    /// that crashed themselves, and entries of the transactions' directory checked.
    pub txn_committed: u64,
    pub txn_aborted: u64,
    pub txn_faulted: u64,
    pub txn_crashed: u64,
    pub txn_crashed_changes: u64,
    pub txn_recovered: u64,
    pub recovery_crashes: u64,
    pub txn_entries_checked: u64,
    /// Transactions answered NFS4ERR_DELAY for another open transaction's locks.
    pub txn_conflicts: u64,
    /// FNV-1a over every request's intent and every reply's statuses: equal digests
    /// mean the same run.
    pub digest: u64,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    pub steps: u64,
    pub clients: usize,
    pub break_reply_cache: bool,
    /// Inject backend faults (else the memory backend runs clean, only counted).
    pub faults: Option<FaultPlan>,
    pub lease_secs: u32,
    pub dir: PathBuf,
    /// Harness self-test only: now and then a client opens a file another client
    /// holds a delegation on behind the server's back (the state table directly, no
    /// recall); the delegation invariant must report it.
    pub break_delegations: bool,
    /// Harness self-test only: after a transaction aborts, its first change is made
    /// again outside of it (as a rollback that skipped it would leave it); the
    /// transaction invariant must report it.
    pub break_txn: bool,
}

impl SimConfig {
    /// The standard configuration of a seed: odd seeds run with faults.
    pub fn for_seed(seed: u64, steps: u64) -> Self {
        SimConfig {
            seed,
            steps,
            clients: 3,
            break_reply_cache: false,
            faults: (seed % 2 == 1).then_some(FaultPlan::standard()),
            lease_secs: 20,
            dir: scratch_dir(),
            break_delegations: false,
            break_txn: false,
        }
    }
}

/// Where state directories go: tmpfs when there is one (the server fsyncs them).
pub fn scratch_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TXNFS_SIM_DIR") {
        return PathBuf::from(d);
    }
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

pub struct Sim {
    pub(crate) cfg: SimConfig,
    pub(crate) rng: Rng,
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) setup: ServerSetup,
    pub(crate) server: Option<SimServer>,
    pub(crate) clients: Vec<SimClient>,
    pub(crate) model: Model,
    pub(crate) stats: Stats,
    pub(crate) step: u64,
    pub(crate) next_conn: u64,
    pub(crate) next_req: u64,
    /// Print every request and its statuses to stderr (TXNFS_SIM_TRACE=1).
    pub(crate) trace: bool,
    pub(crate) mix: Mix,
    /// Simulated time at which the COMPOUND being judged started (the server's `now`
    /// for it).
    pub(crate) call_now: Duration,
    /// Stateids (`other`) the oracle expects the judged request to have recalled.
    pub(crate) expect_recalls: Vec<[u8; 12]>,
    /// CB_RECALLs the server asked for, not yet delivered to their holders.
    pub(crate) recalls: Vec<RecallMsg>,
    /// (granted, recalled, returned) in `stats` when the running server started: the
    /// server's own counters must equal what the model saw since.
    pub(crate) deleg_base: (u64, u64, u64),
    /// The grant policy cannot be predicted right now: an expired client's state,
    /// which the model forgot, may still be on the server (while its release is
    /// probed).
    pub(crate) grants_uncertain: bool,
    /// The transactions' directory as the model knows it.
    pub(crate) tx: crate::txn::TxModel,
    /// Every entry a transaction touched (the end-of-run audit checks them all).
    pub(crate) tx_touched: Vec<(usize, Bytes)>,
    /// Transactions the simulation drove on the txn layer directly.
    pub(crate) next_direct: u64,
}

/// A CB_RECALL on its way to client `ci` (incarnation `inc`).
#[derive(Debug, Clone)]
pub(crate) struct RecallMsg {
    pub ci: usize,
    pub inc: u32,
    pub sid: stateid4,
    pub fh: Bytes,
}

/// How often each event happens in a run, per thousand steps (lost replies: per
/// thousand requests). Drawn per seed ("swarm testing", as TigerBeetle's VOPR does):
/// some runs restart often, some never, so rare interleavings of one kind get dense.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mix {
    pub restart: u64,
    pub expire: u64,
    pub cut: u64,
    pub lose: u32,
    /// Transactions per thousand steps, and of them, per thousand, the ones a crash
    /// cuts short.
    pub txn: u64,
    pub txn_crash: u32,
}

impl Mix {
    fn draw(rng: &mut Rng) -> Mix {
        let pick = |rng: &mut Rng, v: &[u64]| v[rng.index(v.len())];
        Mix {
            restart: pick(rng, &[0, 2, 5, 20]),
            expire: pick(rng, &[0, 2, 5, 20]),
            cut: pick(rng, &[0, 10, 30, 100]),
            lose: pick(rng, &[0, 60, 120, 300]) as u32,
            txn: pick(rng, &[10, 25, 50, 100]),
            txn_crash: pick(rng, &[0, 20, 60, 150]) as u32,
        }
    }
}

/// Run one seed to the end or to the first violation.
pub fn run(cfg: SimConfig) -> Result<Stats, Failure> {
    let seed = cfg.seed;
    let brk = cfg.break_reply_cache;
    let state_dir = cfg.dir.join(format!(
        "txnfs-sim-{}-{seed}-{}",
        std::process::id(),
        unique()
    ));
    let fail = |step, v| Failure {
        seed,
        step,
        violation: v,
        break_reply_cache: brk,
    };
    let mut sim = Sim::new(cfg, state_dir.clone()).map_err(|v| fail(0, v))?;
    let r = sim.run_steps();
    let _ = std::fs::remove_dir_all(&state_dir);
    r.map_err(|v| fail(sim.step, v))?;
    Ok(sim.stats.clone())
}

fn unique() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Sim {
    fn new(cfg: SimConfig, state_dir: PathBuf) -> Result<Sim, Violation> {
        crate::fault::adopt_thread();
        let mut rng = Rng::new(cfg.seed);
        let mix = Mix::draw(&mut rng);
        let clock = Arc::new(ManualClock::new());
        let ledger = Arc::new(Ledger::default());
        let backend = Arc::new(FaultBackend::new(
            Arc::new(MemoryBackend::new()),
            cfg.faults.unwrap_or_else(FaultPlan::none),
            rng.fork(),
            clock.clone(),
            ledger.clone(),
        ));
        prepare_state_dir(&state_dir, cfg.seed)
            .map_err(|e| Violation::new(ViolationKind::Harness, e.to_string()))?;
        let setup = ServerSetup {
            state_dir,
            backend,
            clock: clock.clone(),
            lease_secs: cfg.lease_secs,
            break_reply_cache: cfg.break_reply_cache,
        };
        let server = SimServer::start(&setup)
            .map_err(|e| Violation::new(ViolationKind::Harness, e.to_string()))?;
        // About half the clients have a back channel that works (and get delegations).
        let clients = (0..cfg.clients)
            .map(|i| SimClient::new(i, i as u64 + 1, rng.chance(500)))
            .collect();
        Ok(Sim {
            next_conn: cfg.clients as u64 + 1,
            cfg,
            rng,
            clock,
            ledger,
            setup,
            server: Some(server),
            clients,
            model: Model::default(),
            stats: Stats::default(),
            step: 0,
            next_req: 1,
            trace: std::env::var_os("TXNFS_SIM_TRACE").is_some(),
            mix,
            call_now: Duration::ZERO,
            expect_recalls: Vec::new(),
            recalls: Vec::new(),
            deleg_base: (0, 0, 0),
            grants_uncertain: false,
            tx: crate::txn::TxModel::default(),
            tx_touched: Vec::new(),
            next_direct: 0,
        })
    }

    pub(crate) fn note(&self, what: &str) {
        if self.trace {
            eprintln!("step {} t={:?} {what}", self.step, self.now());
        }
    }

    pub(crate) fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_secs(self.cfg.lease_secs as u64)
    }

    pub(crate) fn server(&self) -> Result<&SimServer, Violation> {
        self.server
            .as_ref()
            .ok_or_else(|| Violation::new(ViolationKind::Harness, "no server"))
    }

    pub(crate) fn digest(&mut self, v: u64) {
        for b in v.to_be_bytes() {
            self.stats.digest ^= b as u64;
            self.stats.digest = self.stats.digest.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Send raw bytes on a client's connection and decode the reply.
    pub(crate) fn call(
        &mut self,
        ci: usize,
        bytes: Bytes,
    ) -> Result<(Bytes, COMPOUND4res), Violation> {
        self.call_as(ci, bytes, false)
    }

    /// [`Sim::call`], as a transaction with `txn`.
    pub(crate) fn call_as(
        &mut self,
        ci: usize,
        bytes: Bytes,
        txn: bool,
    ) -> Result<(Bytes, COMPOUND4res), Violation> {
        let now = self.now();
        self.clients[ci].last_contact = now;
        self.stats.compounds += 1;
        // The request bytes are part of the run: equal seeds send equal bytes.
        self.digest(crate::fault::token(b'q', &bytes));
        let conn = self.clients[ci].conn;
        let reply = self.server()?.call(conn, bytes, txn).ok_or_else(|| {
            Violation::new(
                ViolationKind::Harness,
                "the server rejected a COMPOUND at the RPC level",
            )
        })?;
        let res = decode(&reply).ok_or_else(|| {
            Violation::new(
                ViolationKind::Harness,
                "the reply does not decode as COMPOUND4res",
            )
        })?;
        self.digest(res.status as i32 as u64);
        for r in &res.resarray {
            self.digest(status_of(r) as i32 as u64);
        }
        Ok((reply, res))
    }

    fn run_steps(&mut self) -> Result<(), Violation> {
        self.bootstrap()?;
        while self.step < self.cfg.steps {
            self.step += 1;
            self.digest(self.step);
            self.due_returns()?;
            let r = self.rng.below(1000);
            let m = self.mix;
            let base = m.restart + m.expire + m.cut;
            if r < m.restart {
                self.restart()?;
            } else if r < m.restart + m.expire {
                self.expire_one()?;
            } else if r < base {
                self.cut_connection()?;
            } else if r < base + 40 {
                self.tick()?;
            } else if r < base + 40 + 80 && !self.recalls.is_empty() {
                self.deliver_recall()?;
            } else if r < base + 120 + m.txn {
                let ci = self.rng.index(self.clients.len());
                self.txn_step(ci)?;
            } else {
                let ci = self.rng.index(self.clients.len());
                self.client_step(ci)?;
            }
            let dt = self.rng.below(300);
            self.clock.advance(Duration::from_millis(dt));
            self.keepalive_all(None)?;
            self.check_delegations()?;
        }
        self.stats.steps = self.step;
        self.audit()
    }

    /// The first client learns the root handle.
    fn bootstrap(&mut self) -> Result<(), Violation> {
        self.ensure_session(0)?;
        let ops = vec![nfs_argop4::OP_PUTROOTFH, nfs_argop4::OP_GETFH];
        let (_, res) = self.send_ops(0, ops)?;
        match res.resarray.get(2) {
            Some(nfs_resop4::OP_GETFH(GETFH4res::NFS4_OK(g))) => {
                self.model.root = g.object.clone();
                self.make_txn_area()
            }
            other => Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("PUTROOTFH+GETFH failed: {other:?}"),
            )),
        }
    }

    /// One action of one client.
    fn client_step(&mut self, ci: usize) -> Result<(), Violation> {
        let pending = self.clients[ci].pending.len();
        if pending > 0 && self.rng.chance(500) {
            let i = self.rng.index(pending);
            return self.retransmit_one(ci, i, true);
        }
        if self.clients[ci].session.is_none() {
            return self.ensure_session(ci);
        }
        let c = &self.clients[ci];
        if c.path == CbPath::Down && !c.expect_dead && self.rng.chance(400) {
            return self.rebind_back_channel(ci);
        }
        crate::actions::random_action(self, ci)
    }

    /// End of run: every live file reads back as the model says; every lock the model
    /// holds is seen by LOCKT from another owner.
    fn audit(&mut self) -> Result<(), Violation> {
        // Every client gives its delegations back first (as at unmount), so the
        // audit's reads are not DELAY'd by them.
        for ci in 0..self.clients.len() {
            self.retransmit(ci, true)?;
        }
        let held: Vec<_> = self
            .model
            .delegs
            .iter()
            .filter(|d| d.live())
            .map(|d| (d.holder, d.file.clone(), d.sid.clone()))
            .collect();
        for ((hi, inc), file, sid) in held {
            let c = &self.clients[hi];
            if c.session.is_none() || c.expect_dead || c.incarnation != inc {
                continue;
            }
            if !self.model.obj(&file).is_some_and(|o| o.alive) {
                // Removed by its holder: the handle is stale, nobody conflicts.
                continue;
            }
            let ops = vec![wire::putfh(&file), wire::delegreturn(&sid)];
            self.send(hi, Intent::DelegReturn { file, sid }, ops, false)?;
        }
        let ci = 0;
        self.retransmit(ci, true)?;
        self.ensure_session(ci)?;
        crate::actions::audit(self, ci)?;
        self.audit_tx()
    }

    /// The lease timer fires; the model revokes the recalls older than a lease.
    fn tick(&mut self) -> Result<(), Violation> {
        self.server()?.tick();
        let n = self.model.revoke_overdue(self.now(), self.lease());
        self.stats.deleg_revoked += n;
        if n > 0 {
            self.note(&format!("tick revoked {n} recalled delegation(s)"));
        }
        Ok(())
    }
}
