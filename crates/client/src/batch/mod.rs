//! Adaptive batching of many callers' small requests (Tyche, seed 004 §VI; ADR 0044).
//!
//! With [`BatchMode::Static`] or [`BatchMode::Dynamic`], a COMPOUND that
//! [`batchable`] accepts (a PUTFH and independent READ / WRITE / GETATTR / ACCESS /
//! COMMIT on it) joins the batch being filled instead of going out alone: requests of
//! different callers go in one COMPOUND (`SEQUENCE, PUTFH a, READ, PUTFH b, READ, ...`),
//! sent by the caller whose request fills it to the batch level, or by the first caller
//! whose wait reaches `max_delay`, within the session's limits (ops, request and reply
//! size). No batcher task stands between the callers. Each part begins with its own
//! PUTFH, so no part sees another's current filehandle.
//!
//! The reply is cut back into each caller's reply. A COMPOUND stops at its first failed
//! op: the parts before it get their results, the part holding it gets its own results
//! up to the failure (what it would have got alone), and the parts after it, which never
//! ran, are sent again on their own. A batch that fails as a whole (no reply) is sent
//! again part by part, each caller then getting its own outcome.
//!
//! The level is fixed (`static:N`) or moved once per interval by the
//! [`controller::Controller`] from the measured throughput and the average number of
//! outstanding requests (`dynamic`). At level 1 a request skips the queue and is sent
//! by its caller as without batching, so level 1 costs one atomic load and the
//! throughput accounting.

pub mod controller;

use crate::client::{Client, Limits};
use crate::compound::{Compound, Reply, CURRENT_STATEID};
use crate::ClientError;
pub use controller::{Controller, ControllerSettings};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::oneshot;
use txnfs_proto::nfs4::*;

/// How requests of concurrent callers are batched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchMode {
    /// Every request is its own COMPOUND.
    #[default]
    None,
    /// Batches of this many requests (or fewer after `max_delay`).
    Static(u32),
    /// The level follows throughput ([`controller`]).
    Dynamic,
}

impl fmt::Display for BatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchMode::None => f.write_str("none"),
            BatchMode::Static(n) => write!(f, "static:{n}"),
            BatchMode::Dynamic => f.write_str("dynamic"),
        }
    }
}

/// A batch mode that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("batch mode {0:?}: expected none, static:N (N from 1 to 1024) or dynamic")]
pub struct BadBatchMode(String);

impl FromStr for BatchMode {
    type Err = BadBatchMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadBatchMode(s.to_string());
        match s {
            "none" => Ok(BatchMode::None),
            "dynamic" => Ok(BatchMode::Dynamic),
            _ => {
                let n = s.strip_prefix("static:").ok_or_else(bad)?;
                let n: u32 = n.parse().map_err(|_| bad())?;
                if (1..=1024).contains(&n) {
                    Ok(BatchMode::Static(n))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

/// [`crate::ClientConfig::batch`]: the mode and the controller's settings (whose
/// `max_delay` also bounds a static batch's wait).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchConfig {
    pub mode: BatchMode,
    pub settings: ControllerSettings,
}

/// What the batcher did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// The batch level now.
    pub level: u32,
    /// COMPOUNDs that carried more than one caller's request.
    pub messages: u64,
    /// Requests carried in those.
    pub requests: u64,
    /// Requests sent again alone because their batch stopped before them.
    pub resent: u64,
    /// Times the controller changed the level.
    pub level_changes: u64,
    /// Requests the dynamic level's measure counted (none in static mode).
    pub measured: u64,
}

/// Whether `c` may share a COMPOUND with other callers' requests: it starts with PUTFH,
/// holds only ops that depend on nothing but their filehandle, and names its stateids
/// (the current stateid would leak between parts).
pub(crate) fn batchable(c: &Compound) -> bool {
    let ops = c.ops();
    matches!(ops.first(), Some(nfs_argop4::OP_PUTFH(_)))
        && ops.len() > 1
        && ops.iter().all(|o| match o {
            nfs_argop4::OP_PUTFH(_)
            | nfs_argop4::OP_GETATTR(_)
            | nfs_argop4::OP_ACCESS(_)
            | nfs_argop4::OP_COMMIT(_) => true,
            nfs_argop4::OP_READ(a) => a.stateid != CURRENT_STATEID,
            nfs_argop4::OP_READ_PLUS(a) => a.rpa_stateid != CURRENT_STATEID,
            nfs_argop4::OP_WRITE(a) => a.stateid != CURRENT_STATEID,
            _ => false,
        })
}

/// Bytes a request and its reply take at most, roughly (headers per op, the payload).
fn sizes(c: &Compound) -> (u64, u64) {
    let (mut req, mut rep) = (0u64, 0u64);
    for o in c.ops() {
        req += 32;
        rep += 32;
        match o {
            nfs_argop4::OP_PUTFH(a) => req += a.object.len() as u64,
            nfs_argop4::OP_WRITE(a) => req += a.data.len() as u64,
            nfs_argop4::OP_READ(a) => rep += a.count as u64,
            nfs_argop4::OP_READ_PLUS(a) => rep += a.rpa_count as u64 + 64,
            nfs_argop4::OP_GETATTR(_) => rep += 512,
            _ => {}
        }
    }
    (req, rep)
}

/// Payload bytes a request moved (its WRITE data and its reply's READ data).
fn payload(c: &Compound, r: &Reply) -> u64 {
    let w: u64 = c
        .ops()
        .iter()
        .map(|o| match o {
            nfs_argop4::OP_WRITE(a) => a.data.len() as u64,
            _ => 0,
        })
        .sum();
    let rd: u64 = r
        .results
        .iter()
        .map(|o| match o {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(ok)) => ok.data.len() as u64,
            _ => 0,
        })
        .sum();
    w + rd
}

struct Pending {
    ops: Compound,
    reply: oneshot::Sender<Result<Reply, ClientError>>,
    since: Instant,
}

/// The controller and the start of the interval being measured (locked once per
/// interval, by the call that ends it).
struct Window {
    controller: Controller,
    /// `None` until the first call is counted: the first interval begins with it, not
    /// with the client, which may be made long before its callers start.
    started: Option<Instant>,
}

/// A value alone on its cache lines (128 bytes: two lines, as the adjacent-line
/// prefetcher pairs them). Every call reads `level`; in the dynamic mode every message
/// (every call at level 1) adds to the `measure` and reads `revise_at`. On shared lines
/// an add on one core made the other core's next read miss: at 64 callers, when each
/// call still added, apart they moved about 6 % more (median of six runs; ADR 0044
/// addendum).
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Shards of the measure: a thread adds to its own (`shard`), so that no line moves
/// between cores on every message; the call that ends the interval sums them.
const SHARDS: usize = 8;

/// This thread's shard of the measure (threads take them in turn).
fn shard() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// What the interval measured so far, counted without a lock by each batch's sender
/// (`send_batch`; by each call at level 1), in its thread's shard. Written together,
/// so on one line.
#[derive(Default)]
struct Measure {
    /// Payload bytes plus one per request completed (so a run without data still
    /// measures something, in the same unit every interval).
    work: AtomicU64,
    /// The requests' summed time in flight, whose ratio to the interval is the mean
    /// number outstanding (Little).
    in_flight_ns: AtomicU64,
    /// Requests counted since the start (for [`BatchStats::measured`]). A part sent
    /// again alone after its batch's sender gave up (`received`) is not counted.
    requests: AtomicU64,
}

pub(crate) struct Batcher {
    cfg: BatchConfig,
    level: Padded<AtomicU32>,
    window: Mutex<Window>,
    measure: [Padded<Measure>; SHARDS],
    /// When the next interval ends, in nanoseconds since `origin`.
    revise_at: Padded<AtomicU64>,
    origin: Instant,
    forming: Mutex<Forming>,
    messages: AtomicU64,
    requests: AtomicU64,
    resent: AtomicU64,
    level_changes: AtomicU64,
}

/// The batch being filled, if any, and which one it is: a caller whose `max_delay`
/// runs out sends the batch it joined, never a later one.
#[derive(Default)]
struct Forming {
    fill: Option<Filling>,
    generation: u64,
}

impl Batcher {
    /// `None` for [`BatchMode::None`].
    pub(crate) fn new(cfg: BatchConfig) -> Option<Batcher> {
        let level = match cfg.mode {
            BatchMode::None => return None,
            BatchMode::Static(n) => n.max(1),
            BatchMode::Dynamic => 1,
        };
        let now = Instant::now();
        Some(Batcher {
            cfg,
            level: Padded(AtomicU32::new(level)),
            window: Mutex::new(Window {
                controller: Controller::new(cfg.settings),
                started: None,
            }),
            measure: std::array::from_fn(|_| Padded(Measure::default())),
            // Due at once: the first call counted begins the first interval.
            revise_at: Padded(AtomicU64::new(0)),
            origin: now,
            forming: Mutex::default(),
            messages: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            level_changes: AtomicU64::new(0),
        })
    }

    fn level(&self) -> u32 {
        self.level.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> BatchStats {
        BatchStats {
            level: self.level(),
            messages: self.messages.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            resent: self.resent.load(Ordering::Relaxed),
            level_changes: self.level_changes.load(Ordering::Relaxed),
            measured: self
                .measure
                .iter()
                .map(|m| m.requests.load(Ordering::Relaxed))
                .sum(),
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forming(&self) -> std::sync::MutexGuard<'_, Forming> {
        self.forming.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send `c` (batchable) in a batch, or alone at level 1.
    pub(crate) async fn call(&self, client: &Client, c: &Compound) -> Result<Reply, ClientError> {
        if self.level() > 1 {
            // Counted by the batch's sender, once per message (`send_batch`).
            return self.join(client, c).await;
        }
        // Only the dynamic level needs each call's time in flight (static counts nothing).
        let start = self.dynamic().then(Instant::now);
        let r = client.send_alone(c).await;
        if let Some(start) = start {
            self.count(start, c, &r, Instant::now());
        }
        r
    }

    fn dynamic(&self) -> bool {
        self.cfg.mode == BatchMode::Dynamic
    }

    /// Add one request to the interval's measure: its payload and its time in flight
    /// (from `since`, when its caller asked, to `now`), and end the interval if due.
    fn count(&self, since: Instant, c: &Compound, r: &Result<Reply, ClientError>, now: Instant) {
        let work = r.as_ref().map_or(0, |reply| payload(c, reply) + 1);
        self.add(1, nanos(now - since), work, now);
    }

    /// Add `requests` requests, their summed time in flight and their work.
    fn add(&self, requests: u64, in_flight_ns: u64, work: u64, now: Instant) {
        let m = &self.measure[shard()];
        m.in_flight_ns.fetch_add(in_flight_ns, Ordering::Relaxed);
        m.work.fetch_add(work, Ordering::Relaxed);
        m.requests.fetch_add(requests, Ordering::Relaxed);
        self.revise(now);
    }

    /// Put `c` in the batch being filled (or start one) and wait for its reply.
    ///
    /// No batcher task stands between the callers (ADR 0044 addendum: waking one per
    /// batch made level 2 slower than no batching): the caller whose request fills the
    /// batch sends it, and the caller who started it sends it as it is if it is still
    /// filling at its `max_delay`. Only that caller arms a timer.
    async fn join(&self, client: &Client, c: &Compound) -> Result<Reply, ClientError> {
        let (tx, mut rx) = oneshot::channel();
        let since = Instant::now();
        let p = Pending {
            ops: c.clone(),
            reply: tx,
            since,
        };
        let limits = client.limits();
        let level = self.level().max(1) as usize;
        let (generation, started, no_room, full) = {
            let mut forming = self.forming();
            let mut no_room = None;
            let started = match forming.fill.as_mut() {
                Some(f) if f.fits(&p, &limits) => {
                    f.push(p);
                    false
                }
                _ => {
                    // No batch, or no room in it for `c`: that one goes as it is.
                    no_room = forming.fill.take();
                    let mut f = Filling::default();
                    f.push(p);
                    forming.fill = Some(f);
                    forming.generation += 1;
                    true
                }
            };
            let full = match &forming.fill {
                Some(f) if f.parts.len() >= level => forming.fill.take(),
                _ => None,
            };
            (forming.generation, started, no_room, full)
        };
        if let Some(f) = no_room {
            tokio::spawn(send_batch(client.clone(), f.parts));
        }
        if let Some(f) = full {
            self.send(client, f.parts).await;
        } else if started {
            // The caller who started the batch sends it if it is still filling at its
            // `max_delay`, or (the guard) if this caller gives up before then.
            let mut leader = Leader {
                batcher: self,
                client,
                generation,
            };
            let deadline = tokio::time::Instant::from_std(since + self.cfg.settings.max_delay);
            if let Ok(r) = tokio::time::timeout_at(deadline, &mut rx).await {
                leader.generation = 0;
                return self.received(client, c, r).await;
            }
            leader.generation = 0;
            if let Some(parts) = self.take_forming(generation) {
                self.send(client, parts).await;
            }
        }
        let r = rx.await;
        self.received(client, c, r).await
    }

    /// The batch `generation` if it is still filling.
    fn take_forming(&self, generation: u64) -> Option<Vec<Pending>> {
        let mut forming = self.forming();
        if forming.generation == generation {
            forming.fill.take().map(|f| f.parts)
        } else {
            None
        }
    }

    /// Send a batch. One that may repeat harmlessly (no WRITE) is sent from the caller's
    /// own task; one with a WRITE is sent from a task of its own, so that a caller who
    /// gives up (drops its future) cannot abandon other callers' writes half-sent.
    async fn send(&self, client: &Client, parts: Vec<Pending>) {
        let writes = parts.iter().any(|p| {
            p.ops
                .ops()
                .iter()
                .any(|o| matches!(o, nfs_argop4::OP_WRITE(_)))
        });
        if writes {
            tokio::spawn(send_batch(client.clone(), parts));
        } else {
            send_batch(client.clone(), parts).await;
        }
    }

    /// A part's reply, or (its batch's sender dropped before replying: only a batch
    /// without WRITEs, sent by a caller who gave up) the part sent again alone.
    async fn received(
        &self,
        client: &Client,
        c: &Compound,
        r: Result<Result<Reply, ClientError>, oneshot::error::RecvError>,
    ) -> Result<Reply, ClientError> {
        match r {
            Ok(r) => r,
            Err(_) => {
                self.resent.fetch_add(1, Ordering::Relaxed);
                client.send_alone(c).await
            }
        }
    }

    /// At the end of an interval, let the controller set the next level (dynamic only).
    /// One atomic load per call; the call that ends the interval takes the lock.
    fn revise(&self, now: Instant) {
        let t = nanos(now - self.origin);
        let due = self.revise_at.load(Ordering::Relaxed);
        // Claimed by one call: the others see no deadline until the next is set.
        if t < due
            || self
                .revise_at
                .compare_exchange(due, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let mut w = self.window();
        let (mut work, mut in_flight) = (0u64, 0u64);
        for m in &self.measure {
            work = work.saturating_add(m.work.swap(0, Ordering::Relaxed));
            in_flight = in_flight.saturating_add(m.in_flight_ns.swap(0, Ordering::Relaxed));
        }
        // The first call counted begins the first interval: what it measured began
        // before it, and is dropped.
        let level = w.started.replace(now).map(|started| {
            let secs = now.duration_since(started).as_secs_f64();
            let outstanding = in_flight as f64 / 1e9 / secs;
            let level = w.controller.on_interval(work as f64 / secs, outstanding);
            tracing::trace!(
                throughput = work as f64 / secs,
                outstanding,
                secs,
                level,
                "batch interval"
            );
            // Never wait for more requests than there were callers: with one caller a
            // level of 2 (a probe) would hold each request for `max_delay` and gain
            // nothing.
            level.min((outstanding.ceil() as u32).max(1))
        });
        let next = t.saturating_add(nanos(w.controller.interval()));
        drop(w);
        self.revise_at.store(next, Ordering::Relaxed);
        let Some(level) = level else {
            return;
        };
        if self.level.swap(level, Ordering::Relaxed) != level {
            self.level_changes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("batch level {level}");
        }
    }
}

/// A duration in nanoseconds (saturating: centuries).
fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The caller who started a batch, while it waits for the batch to fill: if its
/// future is dropped then (the caller gave up), the batch leaves from a task of its
/// own, or the callers who joined it would wait for ever. Generation 0: disarmed.
struct Leader<'a> {
    batcher: &'a Batcher,
    client: &'a Client,
    generation: u64,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if self.generation == 0 {
            return;
        }
        if let Some(parts) = self.batcher.take_forming(self.generation) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(send_batch(self.client.clone(), parts));
            }
        }
    }
}

/// The batch being filled, within the session's limits.
#[derive(Default)]
struct Filling {
    parts: Vec<Pending>,
    ops: u64,
    request: u64,
    reply: u64,
}

impl Filling {
    /// Room for `p` under `limits` (one op of each COMPOUND is the SEQUENCE; 512 bytes
    /// of RPC and COMPOUND headers).
    fn fits(&self, p: &Pending, limits: &Limits) -> bool {
        let (req, rep) = sizes(&p.ops);
        // (+ 1: the SEQUENCE)
        self.ops + (p.ops.len() as u64) < u64::from(limits.max_ops)
            && self.request + req + 512 <= limits.max_request as u64
            && self.reply + rep + 512 <= limits.max_response as u64
    }

    fn push(&mut self, p: Pending) {
        let (req, rep) = sizes(&p.ops);
        self.ops += p.ops.len() as u64;
        self.request += req;
        self.reply += rep;
        self.parts.push(p);
    }
}

/// The reply of the part at `at..at + n` of a batch's reply `r`; `None` if that part
/// did not run (an earlier part failed, or the reply is short).
fn part_reply(r: &Reply, at: usize, n: usize) -> Option<Reply> {
    let end = at + n;
    let ok = |results: &[_]| Reply {
        status: nfsstat4::NFS4_OK,
        results: results.to_vec(),
        sent: n,
    };
    match r.failed() {
        None => (r.results.len() >= end).then(|| ok(&r.results[at..end])),
        Some((f, _)) if f >= end => Some(ok(&r.results[at..end])),
        Some((f, s)) if f >= at => Some(Reply {
            status: s,
            results: r.results[at..=f].to_vec(),
            sent: n,
        }),
        Some(_) => None,
    }
}

async fn send_batch(client: Client, parts: Vec<Pending>) {
    // Each part's time in the queue, counted under its own type (mountstats' queue time).
    let now = Instant::now();
    let waits: Vec<_> = parts
        .iter()
        .map(|p| (crate::optimes::request_type(&p.ops.ops), now - p.since))
        .collect();
    client.inner.op_times.batched(&waits);
    // The dynamic level's measure is counted here, once per message for all its parts,
    // not by each caller: at 64 callers, counting per call (two clock reads and adds to
    // shared counters) cost the client about 0.3 µs per request (3.83 against 3.54,
    // medians of eight runs; static:8 3.31; ADR 0044 addendum).
    let batcher = client.batcher().filter(|b| b.dynamic());
    if parts.len() == 1 {
        for p in parts {
            let r = client.send_alone(&p.ops).await;
            if let Some(b) = batcher {
                b.count(p.since, &p.ops, &r, Instant::now());
            }
            let _ = p.reply.send(r);
        }
        return;
    }
    let mut all = Compound::new();
    for p in &parts {
        for o in p.ops.ops() {
            all.op(o.clone());
        }
    }
    if let Some(b) = client.batcher() {
        b.messages.fetch_add(1, Ordering::Relaxed);
        b.requests.fetch_add(parts.len() as u64, Ordering::Relaxed);
    }
    let reply = client.send_alone(&all).await.ok();
    let mut at = 0;
    let answered: Vec<_> = parts
        .into_iter()
        .map(|p| {
            let n = p.ops.len();
            at += n;
            let r = reply.as_ref().and_then(|r| part_reply(r, at - n, n));
            (p, r)
        })
        .collect();
    if let Some(b) = batcher {
        // Counted before any caller wakes, so a caller sees its own request counted.
        let now = Instant::now();
        let (mut counted, mut in_flight_ns, mut work) = (0u64, 0u64, 0u64);
        for (p, r) in &answered {
            if let Some(r) = r {
                counted += 1;
                in_flight_ns = in_flight_ns.saturating_add(nanos(now - p.since));
                work += payload(&p.ops, r) + 1;
            }
        }
        b.add(counted, in_flight_ns, work, now);
    }
    for (p, r) in answered {
        match r {
            Some(r) => {
                let _ = p.reply.send(Ok(r));
            }
            None => {
                if let Some(b) = client.batcher() {
                    b.resent.fetch_add(1, Ordering::Relaxed);
                }
                let c = client.clone();
                tokio::spawn(async move {
                    let r = c.send_alone(&p.ops).await;
                    if let Some(b) = c.batcher().filter(|b| b.dynamic()) {
                        b.count(p.since, &p.ops, &r, Instant::now());
                    }
                    let _ = p.reply.send(r);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn modes_parse_and_print() {
        for s in ["none", "dynamic", "static:1", "static:64"] {
            assert_eq!(s.parse::<BatchMode>().unwrap().to_string(), s);
        }
        for s in [
            "",
            "static",
            "static:0",
            "static:x",
            "static:5000",
            "Dynamic",
        ] {
            assert!(s.parse::<BatchMode>().is_err(), "{s:?} parsed");
        }
    }

    fn fh(n: u8) -> Bytes {
        Bytes::from(vec![n; 16])
    }

    /// What the dynamic mode writes per message (the `measure`) and what it reads
    /// (`level`, `revise_at`) sit on cache lines of their own: no two of them
    /// within 128 bytes of each other, nor of the batch being filled.
    #[test]
    fn the_counters_every_call_touches_share_no_cache_line() {
        let b = Batcher::new(BatchConfig {
            mode: BatchMode::Dynamic,
            settings: ControllerSettings::default(),
        })
        .expect("a batcher");
        let at = |p: *const u8| p as usize;
        let mut hot = vec![
            at((&*b.level as *const AtomicU32).cast()),
            at((&*b.revise_at as *const AtomicU64).cast()),
            at((&b.forming as *const Mutex<Forming>).cast()),
        ];
        hot.extend(
            b.measure
                .iter()
                .map(|m| at((&**m as *const Measure).cast())),
        );
        for (i, x) in hot.iter().enumerate() {
            for y in &hot[i + 1..] {
                assert!(x.abs_diff(*y) >= 128, "{x:#x} and {y:#x} share a line");
            }
        }
    }

    /// A client may be made long before its callers start, or just before: the first
    /// interval begins with the first call counted, and the first climb starts when it
    /// ends, one interval after that call (an interval begun with the client was only
    /// a reference, and four of noise at level 1 followed it).
    #[test]
    fn the_first_interval_begins_with_the_first_call() {
        let settings = ControllerSettings::default();
        let interval = settings.start_interval;
        for after in [interval / 2, std::time::Duration::from_secs(10)] {
            let b = Batcher::new(BatchConfig {
                mode: BatchMode::Dynamic,
                settings,
            })
            .expect("a batcher");
            let first = b.origin + after;
            b.add(1, 0, 4097, first);
            assert_eq!(b.window().started, Some(first), "begun by the first call");
            assert_eq!(b.level(), 1);
            // 64 outstanding, as many requests as one interval holds at 64 callers.
            let in_flight = nanos(interval) * 64;
            b.add(640, in_flight, 640 * 4097, first + interval / 2);
            assert_eq!(b.level(), 1, "{after:?}: within the first interval");
            b.add(640, in_flight, 640 * 4097, first + interval);
            assert_eq!(b.level(), 2, "{after:?}: the climb starts");
            assert_eq!(b.stats().level_changes, 1);
        }
    }

    #[test]
    fn only_independent_requests_are_batchable() {
        let sid = stateid4 {
            seqid: 3,
            other: [7; 12],
        };
        let mut read = Compound::new();
        read.putfh(&fh(1));
        read.read(sid.clone(), 0, 4096);
        assert!(batchable(&read));
        let mut cur = Compound::new();
        cur.putfh(&fh(1));
        cur.read(CURRENT_STATEID, 0, 4096);
        assert!(!batchable(&cur), "the current stateid leaks between parts");
        let mut open = Compound::new();
        open.putfh(&fh(1));
        open.open(b"x", 1, b"o", None);
        assert!(!batchable(&open));
        let mut bare = Compound::new();
        bare.getattr(vec![1]);
        assert!(!batchable(&bare), "no PUTFH of its own");
    }

    fn res_read(ok: bool) -> nfs_resop4 {
        if ok {
            nfs_resop4::OP_READ(READ4res::NFS4_OK(READ4resok {
                eof: false,
                data: Bytes::from_static(b"abcd"),
            }))
        } else {
            nfs_resop4::OP_READ(READ4res::default(nfsstat4::NFS4ERR_BAD_STATEID))
        }
    }

    fn res_putfh() -> nfs_resop4 {
        nfs_resop4::OP_PUTFH(PUTFH4res {
            status: nfsstat4::NFS4_OK,
        })
    }

    #[test]
    fn a_failed_part_gets_its_error_earlier_parts_their_results_later_parts_none() {
        // Three parts of PUTFH + READ; the second READ fails.
        let r = Reply {
            status: nfsstat4::NFS4ERR_BAD_STATEID,
            results: vec![res_putfh(), res_read(true), res_putfh(), res_read(false)],
            sent: 6,
        };
        let first = part_reply(&r, 0, 2).unwrap();
        assert_eq!(first.status, nfsstat4::NFS4_OK);
        assert_eq!(first.read(1).unwrap().0, Bytes::from_static(b"abcd"));
        let second = part_reply(&r, 2, 2).unwrap();
        assert_eq!(second.failed(), Some((1, nfsstat4::NFS4ERR_BAD_STATEID)));
        assert!(part_reply(&r, 4, 2).is_none(), "never ran: sent again");
        let all_ok = Reply {
            status: nfsstat4::NFS4_OK,
            results: vec![res_putfh(), res_read(true), res_putfh(), res_read(true)],
            sent: 4,
        };
        assert!(part_reply(&all_ok, 2, 2).unwrap().read(1).is_ok());
        assert!(part_reply(&all_ok, 4, 2).is_none(), "short reply");
    }

    #[test]
    fn a_batch_stays_within_the_session_limits() {
        let limits = Limits {
            max_ops: 8,
            max_request: 1 << 20,
            max_response: 16 << 10,
            max_response_cached: 4096,
            slots: 8,
        };
        let sid = stateid4 {
            seqid: 1,
            other: [1; 12],
        };
        let pending = |count: u32| {
            let mut c = Compound::new();
            c.putfh(&fh(2));
            c.read(sid.clone(), 0, count);
            Pending {
                ops: c,
                reply: oneshot::channel().0,
                since: Instant::now(),
            }
        };
        let mut f = Filling {
            parts: Vec::new(),
            ops: 0,
            request: 0,
            reply: 0,
        };
        for _ in 0..3 {
            let p = pending(1024);
            assert!(f.fits(&p, &limits));
            f.push(p);
        }
        // 6 ops + SEQUENCE: a fourth part would make 9 > 8.
        assert!(!f.fits(&pending(1024), &limits));
        let mut g = Filling {
            parts: Vec::new(),
            ops: 0,
            request: 0,
            reply: 0,
        };
        g.push(pending(12 << 10));
        assert!(
            !g.fits(&pending(4096), &limits),
            "reply would exceed 16 KiB"
        );
    }
}
