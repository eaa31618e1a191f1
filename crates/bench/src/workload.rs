//! The [`Workload`] trait and what a workload gets to work with: a [`Setup`]
//! (untimed: prepare and clean up the data set through a setup client) and a
//! [`Worker`] (one thread of one client: its client's session, a recorder and
//! the stop condition).

use crate::nfs;
use crate::recorder::Recorder;
use anyhow::Context;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_client::{Client, Compound, Fs, Reply};

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// When the timed part ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StopAt {
    /// After this long (every worker stops starting iterations).
    Duration(Duration),
    /// After this many iterations in total, over all workers.
    Ops(u64),
}

/// One rule about the op counts of a run, checked by CI.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Expectation {
    pub rule: String,
    pub ok: bool,
    #[serde(deserialize_with = "detail_text")]
    pub detail: String,
}

/// A check's detail read back: null is empty, a non-string is its JSON text.
fn detail_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => String::new(),
        v => v.to_string(),
    })
}

impl Expectation {
    pub fn eq(rule: impl Into<String>, actual: u64, expected: u64) -> Expectation {
        Expectation {
            rule: rule.into(),
            ok: actual == expected,
            detail: format!("{actual} == {expected}"),
        }
    }

    pub fn ge(rule: impl Into<String>, actual: u64, min: u64) -> Expectation {
        Expectation {
            rule: rule.into(),
            ok: actual >= min,
            detail: format!("{actual} >= {min}"),
        }
    }

    pub fn le(rule: impl Into<String>, actual: u64, max: u64) -> Expectation {
        Expectation {
            rule: rule.into(),
            ok: actual <= max,
            detail: format!("{actual} <= {max}"),
        }
    }

    pub fn that(rule: impl Into<String>, ok: bool, detail: impl Into<String>) -> Expectation {
        Expectation {
            rule: rule.into(),
            ok,
            detail: detail.into(),
        }
    }
}

/// What a finished run measured (all workers merged), for [`Workload::expected_ops`].
#[derive(Clone, Debug)]
pub struct RunStats {
    pub rec: Recorder,
    /// The client library that ran the timed part.
    pub driver: crate::driver::Driver,
    pub clients: usize,
    pub threads: usize,
    pub duration: Duration,
}

impl RunStats {
    /// Ops of this name sent (over all COMPOUNDs).
    pub fn ops(&self, op: &str) -> u64 {
        self.rec.op_count(op)
    }
    pub fn iterations(&self) -> u64 {
        self.rec.iterations
    }
    pub fn counter(&self, key: &str) -> u64 {
        self.rec.counter(key)
    }
    pub fn requests(&self, kind: &str) -> u64 {
        self.rec.requests_of(kind)
    }

    /// The check that `op` was sent exactly once per iteration.
    pub fn once_per_iteration(&self, op: &str) -> Expectation {
        Expectation::eq(
            format!("{op} == iterations"),
            self.ops(op),
            self.iterations(),
        )
    }
}

/// The untimed side: one client that prepares and cleans up the data set.
pub struct Setup {
    pub client: Client,
    pub fs: Fs,
    /// The workload's own directory, relative to the pseudo root (for [`Fs`]).
    pub base: String,
    pub base_fh: Bytes,
    pub clients: usize,
    pub threads: usize,
    /// An open-owner for the setup's opens.
    pub owner: Bytes,
}

impl Setup {
    /// Path of `rel` under the workload's directory, for [`Fs`] calls.
    pub fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base)
    }

    /// Send COMPOUNDs with up to `parallel` in flight; fail on the first error.
    pub async fn send_all(&self, cs: Vec<Compound>, parallel: usize) -> anyhow::Result<()> {
        let mut it = cs.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < parallel.max(1) {
                let Some(c) = it.next() else { break };
                let client = self.client.clone();
                running.spawn(async move {
                    let r = client.compound(&c).await?;
                    nfs::check(&r, nfs::primary_op(&c))
                });
            }
            match running.join_next().await {
                None => return Ok(()),
                Some(r) => r.context("setup task")??,
            }
        }
    }
}

/// State shared by the workers of one run.
pub(crate) struct Shared {
    pub issued: AtomicU64,
    pub stop: StopAt,
    pub barrier: tokio::sync::Barrier,
}

/// One worker: thread `thread` of client `client`.
pub struct Worker {
    /// The session of this worker's client (shared by its threads).
    pub client: Client,
    pub base: String,
    pub base_fh: Bytes,
    pub client_idx: usize,
    pub thread_idx: usize,
    pub clients: usize,
    pub threads: usize,
    /// A distinct open-owner (and lock-owner) name per worker.
    pub owner: Bytes,
    pub rec: Recorder,
    /// The client library of the timed part.
    pub driver: crate::driver::Driver,
    /// This worker's client's nfs-rs mount (with the nfs-rs driver).
    pub(crate) nfsrs_mount: Option<crate::driver::NfsRsMount>,
    /// The protocol version of that mount.
    pub nfs_version: crate::driver::NfsVersion,
    pub(crate) shared: Arc<Shared>,
    pub(crate) timed: bool,
    recording: bool,
    deadline: Option<Instant>,
}

impl Worker {
    pub(crate) fn new(
        client: Client,
        setup: (&str, &Bytes),
        idx: (usize, usize),
        shape: (usize, usize),
        shared: Arc<Shared>,
    ) -> Worker {
        Worker {
            client,
            base: setup.0.to_string(),
            base_fh: setup.1.clone(),
            client_idx: idx.0,
            thread_idx: idx.1,
            clients: shape.0,
            threads: shape.1,
            owner: Bytes::from(format!(
                "bench-{}-c{}-t{}",
                std::process::id(),
                idx.0,
                idx.1
            )),
            rec: Recorder::new(Instant::now()),
            driver: crate::driver::Driver::Txnfs,
            nfsrs_mount: None,
            nfs_version: Default::default(),
            shared,
            timed: false,
            recording: true,
            deadline: None,
        }
    }

    /// Index of this worker among all (client-major).
    pub fn global_idx(&self) -> usize {
        self.client_idx * self.threads + self.thread_idx
    }

    pub fn workers(&self) -> usize {
        self.clients * self.threads
    }

    /// Per-worker setup is done: wait for every worker (time-aligned start),
    /// then the timed part begins. Called at most once; the runner calls it
    /// for a worker whose `run` returned without calling it.
    pub async fn ready(&mut self) {
        if self.timed {
            return;
        }
        self.shared.barrier.wait().await;
        let now = Instant::now();
        self.rec.reset(now);
        self.deadline = match self.shared.stop {
            StopAt::Duration(d) => Some(now + d),
            StopAt::Ops(_) => None,
        };
        self.timed = true;
    }

    /// Whether the timed part has started.
    pub fn is_timed(&self) -> bool {
        self.timed
    }

    fn recording(&self) -> bool {
        self.timed && self.recording
    }

    /// Stop (false) or resume (true) recording, e.g. for untimed clean-up
    /// of per-worker state after the last iteration.
    pub fn set_recording(&mut self, on: bool) {
        self.recording = on;
    }

    /// Claim the next iteration: its global index (unique over all workers),
    /// or `None` when the run is over (deadline passed or op budget used up).
    pub fn next_iter(&mut self) -> Option<u64> {
        if let Some(d) = self.deadline {
            if Instant::now() >= d {
                return None;
            }
        }
        let i = self.shared.issued.fetch_add(1, Ordering::Relaxed);
        match self.shared.stop {
            StopAt::Ops(k) if i >= k => None,
            _ => Some(i),
        }
    }

    /// The iteration claimed last is complete.
    pub fn done(&mut self) {
        if self.recording() {
            self.rec.iteration();
        }
    }

    /// Send a COMPOUND and record it (once timed). The reply may carry a failed op.
    pub async fn call_raw(&mut self, c: &Compound) -> anyhow::Result<Reply> {
        let t = Instant::now();
        let r = self.client.compound(c).await;
        self.record_reply(c, r, t.elapsed())
    }

    /// Record a COMPOUND sent without [`Worker::call_raw`] (several in flight at once),
    /// its result `r` after `lat`, as `call_raw` does.
    pub fn record_reply(
        &mut self,
        c: &Compound,
        r: Result<Reply, txnfs_client::ClientError>,
        lat: Duration,
    ) -> anyhow::Result<Reply> {
        if self.recording() {
            let kind = nfs::primary_op(c);
            let bytes = nfs::write_bytes(c) + r.as_ref().map(nfs::read_bytes).unwrap_or(0);
            self.rec.request(kind, nfs::op_names(c), lat, bytes);
            match &r {
                Ok(reply) => {
                    if let Some((_, s)) = reply.failed() {
                        self.rec.error(&format!("{kind}:{s:?}"));
                    }
                }
                Err(_) => self.rec.error(&format!("{kind}:transport")),
            }
        }
        Ok(r?)
    }

    /// Record one request sent some other way (e.g. through nfs-rs), once
    /// timed; `ok: false` counts it as an error of its kind.
    pub fn record_request<'o>(
        &mut self,
        kind: &str,
        ops: impl IntoIterator<Item = &'o str>,
        latency: Duration,
        bytes: u64,
        ok: bool,
    ) {
        if self.recording() {
            self.rec.request(kind, ops, latency, bytes);
            if !ok {
                self.rec.error(&format!("{kind}:error"));
            }
        }
    }

    /// Record the latency of one whole-tree (or other composite) operation
    /// of kind `kind` whose requests were recorded one by one: a latency
    /// entry only, no request, op or byte counts.
    pub fn record_tree_op(&mut self, kind: &str, latency: Duration) {
        if self.recording() {
            self.rec.latency_only(kind, latency);
        }
    }

    /// Send a COMPOUND, record it, fail if an op failed.
    pub async fn call(&mut self, c: &Compound) -> anyhow::Result<Reply> {
        let r = self.call_raw(c).await?;
        nfs::check(&r, nfs::primary_op(c))?;
        Ok(r)
    }

    /// Record work done outside [`Worker::call`] (e.g. through the vectorized
    /// [`Fs`]): the client's op counters from `before` to `after` (shared by
    /// the client's threads, so exact only with one thread per client).
    pub fn record_stats_delta(
        &mut self,
        kind: &str,
        before: &txnfs_client::Stats,
        after: &txnfs_client::Stats,
        latency: Duration,
        bytes: u64,
    ) {
        if !self.recording() {
            return;
        }
        let compounds = after.compounds.saturating_sub(before.compounds);
        for (op, n) in &after.ops {
            let d = n.saturating_sub(before.ops.get(op).copied().unwrap_or(0));
            if d > 0 && *op != "SEQUENCE" {
                *self.rec.op_counts.entry(op.to_string()).or_default() += d;
            }
        }
        // One request entry for the whole call; SEQUENCE counts the COMPOUNDs.
        self.rec.request(kind, std::iter::empty(), latency, bytes);
        self.rec.compounds += compounds.saturating_sub(1);
        *self.rec.op_counts.entry("SEQUENCE".into()).or_default() += compounds.saturating_sub(1);
    }

    /// A vectorized file-system handle over this worker's client.
    pub fn fs(&self) -> Fs {
        Fs::new(self.client.clone())
    }

    pub fn count(&mut self, key: &str, n: u64) {
        if self.recording() {
            self.rec.count(key, n);
        }
    }
}

/// A benchmark workload. Futures are boxed so workloads can be trait objects.
pub trait Workload: Send + Sync {
    fn name(&self) -> &str;

    /// The parameters in effect (for the results file).
    fn params(&self) -> serde_json::Value;

    /// Iterations of one run when neither a duration nor an op budget is given.
    fn default_ops(&self) -> u64;

    /// Reject client/thread shapes the workload cannot run with.
    fn validate(&self, _clients: usize, _threads: usize) -> anyhow::Result<()> {
        Ok(())
    }

    /// Create the data set (untimed) under `s.base`.
    fn prepare<'a>(&'a self, s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>>;

    /// One worker: optional per-worker setup, then [`Worker::ready`], then
    /// iterations while [`Worker::next_iter`] gives some.
    fn run<'a>(&'a self, w: &'a mut Worker) -> BoxFut<'a, anyhow::Result<()>>;

    /// Untimed clean-up beyond removing `s.base` (which the runner does).
    fn cleanup<'a>(&'a self, _s: &'a Setup) -> BoxFut<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether the workload has a transactional mode (`--txn`, [`crate::workloads::Params::txn`]).
    fn supports_txn(&self) -> bool {
        false
    }

    /// The client libraries this workload can run its timed part with.
    fn drivers(&self) -> &'static [crate::driver::Driver] {
        &[crate::driver::Driver::Txnfs]
    }

    /// Rules the op counts of a run must satisfy.
    fn expected_ops(&self, stats: &RunStats) -> Vec<Expectation>;
}
