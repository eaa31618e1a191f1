//! The driver: one seeded run of several clients against one in-process server, with
//! lost replies, retransmissions, cut connections, lease expiry on a simulated clock,
//! server restarts, and delegations: CB_RECALLs delivered (returned at once, late, or
//! lost and revoked by the lease timer). Invariants are checked as every reply arrives,
//! on the server's delegation table after every step, and by an audit at the end; the
//! first violation stops the run and names the seed and step.

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
    /// Recalled delegations the lease timer revoked (the model predicted each).
    pub deleg_revoked: u64,
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
}

impl Mix {
    fn draw(rng: &mut Rng) -> Mix {
        let pick = |rng: &mut Rng, v: &[u64]| v[rng.index(v.len())];
        Mix {
            restart: pick(rng, &[0, 2, 5, 20]),
            expire: pick(rng, &[0, 2, 5, 20]),
            cut: pick(rng, &[0, 10, 30, 100]),
            lose: pick(rng, &[0, 60, 120, 300]) as u32,
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
        })
    }

    fn note(&self, what: &str) {
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

    fn server(&self) -> Result<&SimServer, Violation> {
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
        let now = self.now();
        self.clients[ci].last_contact = now;
        self.stats.compounds += 1;
        // The request bytes are part of the run: equal seeds send equal bytes.
        self.digest(crate::fault::token(b'q', &bytes));
        let conn = self.clients[ci].conn;
        let reply = self.server()?.call(conn, bytes).ok_or_else(|| {
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
                Ok(())
            }
            other => Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("PUTROOTFH+GETFH failed: {other:?}"),
            )),
        }
    }

    /// SEQUENCE + ops on a random slot, outside the model (setup and audit reads).
    pub(crate) fn send_ops(
        &mut self,
        ci: usize,
        ops: Vec<nfs_argop4>,
    ) -> Result<(Bytes, COMPOUND4res), Violation> {
        let (bytes, _) = self.frame(ci, ops)?;
        let out = self.call(ci, bytes)?;
        self.after_sequence(ci, &out.1)?;
        Ok(out)
    }

    /// Encode SEQUENCE(slot, next seqid) + ops; returns the bytes and the slot.
    fn frame(&mut self, ci: usize, ops: Vec<nfs_argop4>) -> Result<(Bytes, u32), Violation> {
        let busy: Vec<u32> = self.clients[ci].pending.iter().map(|p| p.slot).collect();
        let free: Vec<u32> = (0..SLOTS).filter(|s| !busy.contains(s)).collect();
        let slot = free
            .get(self.rng.index(free.len()))
            .copied()
            .ok_or_else(|| Violation::new(ViolationKind::Harness, "every slot is busy"))?;
        let s = self.clients[ci]
            .session
            .as_ref()
            .ok_or_else(|| Violation::new(ViolationKind::Harness, "no session"))?;
        let seq = s.slots[slot as usize].wrapping_add(1);
        let mut all = vec![wire::sequence(s.sid, slot, seq, SLOTS - 1)];
        all.extend(ops);
        Ok((wire::compound(all), slot))
    }

    /// Judge the SEQUENCE result: a new request on a live session must pass; a dead
    /// session must be refused. Returns whether the compound ran.
    fn after_sequence(&mut self, ci: usize, res: &COMPOUND4res) -> Result<bool, Violation> {
        let st = res.resarray.first().map(status_of).unwrap_or(res.status);
        let c = &mut self.clients[ci];
        if st == nfsstat4::NFS4_OK {
            if c.expect_dead {
                return Err(Violation::new(
                    ViolationKind::StaleStateSurvived,
                    format!("client {ci}: its session still works after lease expiry or restart"),
                ));
            }
            if let (Some(s), Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)))) =
                (c.session.as_mut(), res.resarray.first())
            {
                s.slots[ok.sr_slotid as usize] = ok.sr_sequenceid;
            }
            // CB_PATH_DOWN_SESSION and CB_PATH_DOWN exactly while the (only) session's
            // back channel is down.
            let flags = match res.resarray.first() {
                Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok))) => ok.sr_status_flags,
                _ => 0,
            };
            let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
            let want_down = if c.path == CbPath::Down { down } else { 0 };
            if flags & down != want_down {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "client {ci}: SEQUENCE status flags {flags:#x} with its back channel {:?}",
                        c.path
                    ),
                ));
            }
            // SEQ4_STATUS_RECALLABLE_STATE_REVOKED exactly while the client has a
            // revoked delegation it has not freed.
            let inc = c.incarnation;
            let want = self.model.has_revoked((ci, inc));
            if revoked_flag(res) != want {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "client {ci}: SEQUENCE {} RECALLABLE_STATE_REVOKED, the model {} a revoked delegation",
                        if want { "lacks" } else { "carries" },
                        if want { "has" } else { "has no" }
                    ),
                ));
            }
            return Ok(true);
        }
        if st == nfsstat4::NFS4ERR_BADSESSION && c.expect_dead {
            c.lose_session();
            return Ok(false);
        }
        Err(Violation::new(
            if st == nfsstat4::NFS4ERR_BADSESSION {
                ViolationKind::SessionLost
            } else {
                ViolationKind::UnexpectedStatus
            },
            format!("client {ci}: SEQUENCE answered {st:?}"),
        ))
    }

    /// Send an intent's compound; with `lose`, the client does not see the reply.
    pub(crate) fn send(
        &mut self,
        ci: usize,
        intent: Intent,
        ops: Vec<nfs_argop4>,
        lose: bool,
    ) -> Result<(), Violation> {
        // Unanswered requests are retransmitted first unless this one may overtake
        // them (on another slot, independent of what their replies say).
        let c = &self.clients[ci];
        let overtake = c.pending.len() < SLOTS as usize - 1
            && intent.may_pipeline(&c.pending)
            && self.rng.chance(700);
        if !overtake && !c.pending.is_empty() {
            // The request was built from what the client knew before those replies;
            // it decides again after hearing them.
            return self.retransmit(ci, true);
        }
        if !c.pending.is_empty() {
            self.stats.overtakes += 1;
        }
        if self.clients[ci].session.is_none() {
            return Ok(());
        }
        self.digest(intent.code() as u64);
        let (bytes, slot) = self.frame(ci, ops)?;
        let injected = self.ledger.injected();
        let now = self.now();
        self.call_now = now;
        self.expect_recalls.clear();
        let (reply, res) = self.call(ci, bytes.clone())?;
        if !self.after_sequence(ci, &res)? {
            return self.take_recalls(None);
        }
        self.clients[ci].last_renew = now;
        let faulted = self.ledger.injected() > injected;
        self.stats.faults += self.ledger.injected() - injected;
        if self.trace {
            eprintln!(
                "step {} t={:?} client {ci} conn {} {intent:?}{} -> {:?} {:?}",
                self.step,
                now,
                self.clients[ci].conn,
                if lose { " (reply lost)" } else { "" },
                res.status,
                res.resarray.iter().map(status_of).collect::<Vec<_>>()
            );
        }
        self.check_tokens(&intent, "first execution")?;
        crate::oracle::judge(self, ci, &intent, &res, faulted)?;
        self.take_recalls(Some(&intent))?;
        let pending = Pending {
            slot,
            bytes,
            first_reply: reply,
            intent,
        };
        if lose {
            self.clients[ci].pending.push(pending);
            return Ok(());
        }
        if revoked_flag(&res) {
            self.clients[ci].saw_revoked_flag = true;
        }
        crate::oracle::absorb(&mut self.clients[ci], &pending.intent, &res);
        if self.rng.chance(30) {
            // A spurious retransmission (the client timed out too early).
            self.clients[ci].pending.push(pending);
            let last = self.clients[ci].pending.len() - 1;
            self.retransmit_one(ci, last, false)?;
        }
        Ok(())
    }

    /// Invariant 1 from effects: no request's effect was applied more than once.
    fn check_tokens(&self, intent: &Intent, when: &str) -> Result<(), Violation> {
        for t in intent.tokens() {
            let n = self.ledger.applied(t);
            if n > 1 {
                return Err(Violation::new(
                    ViolationKind::ExecutedTwice,
                    format!("{intent:?} was applied {n} times by the backend ({when})"),
                ));
            }
        }
        Ok(())
    }

    /// Retransmit every unanswered request of a client, in a random order.
    pub(crate) fn retransmit(&mut self, ci: usize, absorb: bool) -> Result<(), Violation> {
        while !self.clients[ci].pending.is_empty() {
            let i = self.rng.index(self.clients[ci].pending.len());
            self.retransmit_one(ci, i, absorb)?;
        }
        Ok(())
    }

    /// Retransmit one unanswered request: same bytes, must get the same reply.
    fn retransmit_one(&mut self, ci: usize, i: usize, absorb: bool) -> Result<(), Violation> {
        if i >= self.clients[ci].pending.len() {
            return Ok(());
        }
        let p = self.clients[ci].pending.remove(i);
        self.stats.retransmissions += 1;
        let (reply, res) = self.call(ci, p.bytes.clone())?;
        // A replay executes nothing and recalls nothing.
        self.expect_recalls.clear();
        self.take_recalls(None)?;
        let seq_ok = res.resarray.first().map(status_of) == Some(nfsstat4::NFS4_OK);
        if !seq_ok || self.clients[ci].expect_dead {
            // A dead session (server restart, lease expiry) must refuse it, and then the
            // reply is lost for good; a live one must not.
            return self.after_sequence(ci, &res).map(|_| ());
        }
        self.check_tokens(&p.intent, "after a retransmission")?;
        if reply != p.first_reply {
            return Err(Violation::new(
                ViolationKind::ExecutedTwice,
                format!(
                    "retransmission of {:?} got a different reply than the first (status {:?}, first {:?}): executed again",
                    p.intent,
                    res.status,
                    decode(&p.first_reply).map(|r| r.status)
                ),
            ));
        }
        if absorb {
            crate::oracle::absorb(&mut self.clients[ci], &p.intent, &res);
        }
        Ok(())
    }

    /// Make sure client `ci` has a session, re-establishing it as a real client does
    /// after BADSESSION: CREATE_SESSION on the old id (must be STALE_CLIENTID), then
    /// EXCHANGE_ID and CREATE_SESSION.
    pub(crate) fn ensure_session(&mut self, ci: usize) -> Result<(), Violation> {
        if self.clients[ci].session.is_some() && self.clients[ci].expect_dead {
            // Find out the way a client does: its next SEQUENCE must be refused.
            self.send(ci, Intent::Renew, Vec::new(), false)?;
        }
        if self.clients[ci].session.is_some() {
            return Ok(());
        }
        if let Some(old) = self.clients[ci].old_clientid.take() {
            let (_, res) = self.call(
                ci,
                wire::compound(vec![wire::create_session(old, 1, SLOTS, false)]),
            )?;
            let st = res.resarray.first().map(status_of).unwrap_or(res.status);
            if st != nfsstat4::NFS4ERR_STALE_CLIENTID {
                return Err(Violation::new(
                    ViolationKind::StaleStateSurvived,
                    format!("client {ci}: CREATE_SESSION on its dead client id answered {st:?}"),
                ));
            }
        }
        let c = &self.clients[ci];
        let (_, res) = self.call(
            ci,
            wire::compound(vec![wire::exchange_id(&c.owner, c.verifier)]),
        )?;
        let Some(nfs_resop4::OP_EXCHANGE_ID(EXCHANGE_ID4res::NFS4_OK(e))) = res.resarray.first()
        else {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: EXCHANGE_ID failed: {:?}", res.status),
            ));
        };
        if e.eir_flags & EXCHGID4_FLAG_CONFIRMED_R != 0 {
            return Err(Violation::new(
                ViolationKind::StaleStateSurvived,
                format!("client {ci}: EXCHANGE_ID found a confirmed record that should be gone"),
            ));
        }
        let (clientid, seq) = (e.eir_clientid, e.eir_sequenceid);
        // A client with a working back channel binds its connection for callbacks;
        // some others ask for one that never answers (it stays "probing": no
        // delegations either).
        let back = self.clients[ci].callback_up || self.rng.chance(500);
        let cs = wire::compound(vec![wire::create_session(clientid, seq, SLOTS, back)]);
        let (reply, res) = self.call(ci, cs.clone())?;
        let Some(nfs_resop4::OP_CREATE_SESSION(CREATE_SESSION4res::NFS4_OK(s))) =
            res.resarray.first()
        else {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: CREATE_SESSION failed: {:?}", res.status),
            ));
        };
        let sid = s.csr_sessionid;
        if self.rng.chance(300) {
            // The CREATE_SESSION reply was lost: its replay must be the same session.
            self.stats.retransmissions += 1;
            let (again, _) = self.call(ci, cs)?;
            if again != reply {
                return Err(Violation::new(
                    ViolationKind::ExecutedTwice,
                    format!("client {ci}: a replayed CREATE_SESSION got a different reply"),
                ));
            }
        }
        if self.clients[ci].callback_up && !self.server()?.assume_callback_path(&sid, true) {
            return Err(Violation::new(
                ViolationKind::Harness,
                format!("client {ci}: CREATE_SESSION with CONN_BACK_CHAN bound no back channel"),
            ));
        }
        let now = self.now();
        let c = &mut self.clients[ci];
        c.path = match (c.callback_up, back) {
            (true, _) => CbPath::Up,
            (false, true) => CbPath::Probing,
            (false, false) => CbPath::None,
        };
        c.session = Some(Session {
            clientid,
            sid,
            slots: vec![0; SLOTS as usize],
        });
        c.incarnation += 1;
        c.expect_dead = false;
        c.last_renew = now;
        c.last_contact = now;
        // The simulated clients reclaim nothing; without RECLAIM_COMPLETE every OPEN
        // and LOCK would be refused with NFS4ERR_GRACE (RFC 8881 §18.51.3).
        let (_, res) = self.send_ops(
            ci,
            vec![nfs_argop4::OP_RECLAIM_COMPLETE(RECLAIM_COMPLETE4args {
                rca_one_fs: false,
            })],
        )?;
        if res.status != nfsstat4::NFS4_OK {
            return Err(Violation::new(
                ViolationKind::UnexpectedStatus,
                format!("client {ci}: RECLAIM_COMPLETE answered {:?}", res.status),
            ));
        }
        Ok(())
    }

    /// Renew every live client whose lease is half gone (what a real client's renewer
    /// does), except `silent`.
    pub(crate) fn keepalive_all(&mut self, silent: Option<usize>) -> Result<(), Violation> {
        let half = self.lease() / 2;
        for ci in 0..self.clients.len() {
            let c = &self.clients[ci];
            if Some(ci) == silent || c.session.is_none() || c.expect_dead {
                continue;
            }
            if self.now().saturating_sub(c.last_renew) > half {
                self.retransmit(ci, true)?;
                if self.clients[ci].session.is_some() {
                    self.send(ci, Intent::Renew, Vec::new(), false)?;
                }
            }
        }
        Ok(())
    }

    /// Drop the server (a crash: sessions, opens and locks are gone) and start a new
    /// one on the same state directory and backend.
    fn restart(&mut self) -> Result<(), Violation> {
        self.note("server restart");
        self.stats.restarts += 1;
        self.server = None;
        self.server = Some(
            SimServer::start(&self.setup)
                .map_err(|e| Violation::new(ViolationKind::Harness, e.to_string()))?,
        );
        self.model.restart();
        self.recalls.clear();
        let s = &self.stats;
        self.deleg_base = (s.delegations_granted, s.deleg_recalled, s.deleg_returns);
        for c in &mut self.clients {
            if c.session.is_some() {
                c.expect_dead = true;
            }
            // Stateids kept from an earlier loss are now of an earlier instance too.
            c.dead_by_restart = true;
        }
        Ok(())
    }

    /// One client goes silent; the others keep renewing while the clock passes its
    /// lease. Half the time the others probe its state right away, inside the server's
    /// courtesy time (the courteous server must release it for their conflicting
    /// requests); otherwise the clock passes the courtesy lease too and the timer fires
    /// first. Either way the silent client's state must be gone for the probes
    /// (invariant 5: no state of an expired client survives a conflicting request) and
    /// its next SEQUENCE must be refused.
    fn expire_one(&mut self) -> Result<(), Violation> {
        let live: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].session.is_some() && !self.clients[i].expect_dead)
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let ci = live[self.rng.index(live.len())];
        let courtesy = self.rng.chance(500);
        let last_contact = self.clients[ci].last_contact;
        // The server keeps a silent client for two leases (one courtesy lease).
        let expired = last_contact + self.lease() + Duration::from_secs(1);
        let released = last_contact + self.lease() * 2 + Duration::from_secs(1);
        let deadline = if courtesy { expired } else { released };
        while self.now() <= deadline {
            self.clock.advance(self.lease() / 4);
            self.keepalive_all(Some(ci))?;
        }
        if courtesy {
            self.note(&format!(
                "client {ci} silent past its lease, within the courtesy time"
            ));
            self.stats.courtesy_expiries += 1;
        } else {
            self.tick()?;
            self.note(&format!("client {ci} silent past its lease; tick"));
        }
        self.stats.expiries += 1;
        let inc = self.clients[ci].incarnation;
        let held_locks: Vec<_> = self
            .model
            .locks
            .iter()
            .filter(|l| l.owner.0 == ci && l.owner.1 == inc)
            .cloned()
            .collect();
        let held_opens: Vec<_> = self
            .model
            .opens
            .iter()
            .filter(|o| o.owner.0 == ci && o.owner.1 == inc)
            .map(|o| o.file.clone())
            .collect();
        let held_delegs: Vec<_> = self
            .model
            .delegs
            .iter()
            .filter(|d| d.holder == (ci, inc))
            .map(|d| d.file.clone())
            .collect();
        self.model.forget_client(ci, inc);
        self.clients[ci].expect_dead = true;
        self.clients[ci].dead_by_restart = false;
        self.grants_uncertain = true;
        let probed = crate::actions::probe_released(self, ci, held_locks, held_opens, held_delegs);
        self.grants_uncertain = false;
        probed?;
        if courtesy {
            // Whatever no probe conflicted with goes at the lease-expiry tick.
            while self.now() <= released {
                self.clock.advance(self.lease() / 4);
                self.keepalive_all(Some(ci))?;
            }
            self.tick()?;
        }
        Ok(())
    }

    fn cut_connection(&mut self) -> Result<(), Violation> {
        let ci = self.rng.index(self.clients.len());
        self.note(&format!("client {ci}: connection cut"));
        self.stats.cut_connections += 1;
        if let Some(s) = &self.server {
            s.connection_closed(self.clients[ci].conn);
        }
        self.clients[ci].conn = self.next_conn;
        self.next_conn += 1;
        // The back channel rode on that connection: down until the client binds a new
        // one (the transport would notice the close; the simulation has none).
        let c = &self.clients[ci];
        if c.path == CbPath::Up && !c.expect_dead {
            let sid = c.session.as_ref().map(|s| s.sid);
            if let Some(sid) = sid {
                if !self.server()?.assume_callback_path(&sid, false) {
                    return Err(Violation::new(
                        ViolationKind::Harness,
                        format!("client {ci}: its session has no back channel to take down"),
                    ));
                }
                self.clients[ci].path = CbPath::Down;
                self.stats.cb_paths_down += 1;
            }
        }
        Ok(())
    }

    /// A client whose back channel went down binds its new connection for callbacks
    /// (BIND_CONN_TO_SESSION, RFC 8881 §18.34); the probe is answered at once here.
    fn rebind_back_channel(&mut self, ci: usize) -> Result<(), Violation> {
        let Some(sid) = self.clients[ci].session.as_ref().map(|s| s.sid) else {
            return Ok(());
        };
        let (_, res) = self.call(ci, wire::compound(vec![wire::bind_conn_back(sid)]))?;
        match res.resarray.first() {
            Some(nfs_resop4::OP_BIND_CONN_TO_SESSION(BIND_CONN_TO_SESSION4res::NFS4_OK(ok)))
                if matches!(
                    ok.bctsr_dir,
                    channel_dir_from_server4::CDFS4_BACK | channel_dir_from_server4::CDFS4_BOTH
                ) => {}
            other => {
                return Err(Violation::new(
                    ViolationKind::UnexpectedStatus,
                    format!("client {ci}: BIND_CONN_TO_SESSION for the back channel: {other:?}"),
                ))
            }
        }
        if !self.server()?.assume_callback_path(&sid, true) {
            return Err(Violation::new(
                ViolationKind::Harness,
                format!("client {ci}: BIND_CONN_TO_SESSION bound no back channel"),
            ));
        }
        self.note(&format!("client {ci}: back channel bound again"));
        self.clients[ci].path = CbPath::Up;
        self.stats.cb_rebinds += 1;
        Ok(())
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
        crate::actions::audit(self, ci)
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

    /// The CB_RECALLs the server asked for during the last COMPOUND: after a judged
    /// request (`intent`), exactly the ones the oracle expected; they join the
    /// queue of recalls to deliver.
    fn take_recalls(&mut self, intent: Option<&Intent>) -> Result<(), Violation> {
        let got = self.server()?.take_recalls();
        let mut want = std::mem::take(&mut self.expect_recalls);
        if let Some(intent) = intent {
            let mut others: Vec<[u8; 12]> = got.iter().map(|r| r.stateid.other).collect();
            others.sort_unstable();
            want.sort_unstable();
            if others != want {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "{intent:?}: the server recalled {} delegation(s), the model expected {}",
                        others.len(),
                        want.len()
                    ),
                ));
            }
        }
        for r in got {
            let holder = self.model.deleg(&r.stateid).map(|i| {
                let d = &self.model.delegs[i];
                (d.holder, d.file.clone())
            });
            let Some(((hi, inc), file)) = holder else {
                continue;
            };
            let clientid = self.clients[hi].session.as_ref().map(|s| s.clientid);
            if clientid != Some(r.client) || file != r.fh {
                return Err(Violation::new(
                    ViolationKind::DelegationConflict,
                    format!(
                        "a CB_RECALL went to client id {} for {:?}, the delegation is client {hi}'s (id {clientid:?}) on another file",
                        r.client, r.stateid
                    ),
                ));
            }
            self.recalls.push(RecallMsg {
                ci: hi,
                inc,
                sid: r.stateid,
                fh: r.fh,
            });
        }
        Ok(())
    }

    /// Deliver one queued CB_RECALL: its holder returns the delegation at once,
    /// some steps later, or never (the callback was lost: the lease timer revokes it
    /// and the holder learns that from SEQUENCE and DELEGRETURN).
    fn deliver_recall(&mut self) -> Result<(), Violation> {
        let i = self.rng.index(self.recalls.len());
        let c = &self.clients[self.recalls[i].ci];
        if c.path == CbPath::Down && !c.expect_dead && c.incarnation == self.recalls[i].inc {
            // Its back channel is down: the server keeps trying until the client
            // binds a new connection (the recall stays queued).
            return Ok(());
        }
        let r = self.recalls.remove(i);
        let c = &self.clients[r.ci];
        if c.session.is_none() || c.expect_dead || c.incarnation != r.inc {
            return Ok(());
        }
        self.stats.recalls_delivered += 1;
        let fate = self.rng.below(100);
        self.note(&format!("CB_RECALL to client {} (fate {fate})", r.ci));
        if fate < 45 {
            self.deleg_return(r.ci, r.fh, r.sid)
        } else if fate < 75 {
            let due = self.step + 1 + self.rng.below(200);
            self.clients[r.ci].returns_due.push((due, r.fh, r.sid));
            Ok(())
        } else {
            Ok(())
        }
    }

    /// Late DELEGRETURNs whose step has come.
    fn due_returns(&mut self) -> Result<(), Violation> {
        for ci in 0..self.clients.len() {
            let step = self.step;
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.clients[ci].returns_due)
                .into_iter()
                .partition(|(at, _, _)| *at <= step);
            self.clients[ci].returns_due = later;
            for (_, fh, sid) in due {
                if self.clients[ci].session.is_none() {
                    break;
                }
                self.deleg_return(ci, fh, sid)?;
            }
        }
        Ok(())
    }

    /// Client `ci` returns its delegation `sid` of `file` (the reply may be lost).
    pub(crate) fn deleg_return(
        &mut self,
        ci: usize,
        file: Bytes,
        sid: stateid4,
    ) -> Result<(), Violation> {
        if !self.model.obj(&file).is_some_and(|o| o.alive) {
            // The holder removed the file itself; the handle may be stale.
            return Ok(());
        }
        let lose = self.rng.chance(self.mix.lose);
        let ops = vec![wire::putfh(&file), wire::delegreturn(&sid)];
        self.send(ci, Intent::DelegReturn { file, sid }, ops, lose)
    }

    /// Invariant 6 on the server's own tables, after every step.
    fn check_delegations(&mut self) -> Result<(), Violation> {
        if self.cfg.break_delegations && self.step.is_multiple_of(7) {
            let ids: Vec<u64> = self
                .clients
                .iter()
                .filter(|c| !c.expect_dead)
                .filter_map(|c| c.session.as_ref().map(|s| s.clientid))
                .collect();
            let srv = self.server()?;
            for id in ids {
                if srv.open_behind_delegation(id) {
                    break;
                }
            }
        }
        let (n, shared) = self
            .server()?
            .check_delegations()
            .map_err(|e| Violation::new(ViolationKind::DelegationConflict, e))?;
        self.stats.deleg_files_checked += n as u64;
        self.stats.deleg_shared_checked += shared as u64;
        // The server's counters agree with what the replies showed the model: every
        // grant was in an OPEN reply, every recall expected, every return judged.
        let (granted, recalled, returned, _) = self.server()?.deleg_counts();
        let s = &self.stats;
        let (g0, c0, r0) = self.deleg_base;
        let seen = (
            s.delegations_granted - g0,
            s.deleg_recalled - c0,
            s.deleg_returns - r0,
        );
        if (granted, recalled, returned) != seen {
            return Err(Violation::new(
                ViolationKind::DelegationConflict,
                format!(
                    "the server counts (granted, recalled, returned) = {:?}, the replies showed {seen:?}",
                    (granted, recalled, returned)
                ),
            ));
        }
        Ok(())
    }
}

/// Whether a reply's SEQUENCE carries SEQ4_STATUS_RECALLABLE_STATE_REVOKED.
fn revoked_flag(res: &COMPOUND4res) -> bool {
    matches!(
        res.resarray.first(),
        Some(nfs_resop4::OP_SEQUENCE(SEQUENCE4res::NFS4_OK(ok)))
            if ok.sr_status_flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0
    )
}
