//! The results file (JSON). Other tools read these names: keep them stable.
//!
//! ```text
//! { "workload", "server", "target", "delay_ms", "clients", "threads", "params": {..},
//!   "repeats": [ { "duration_s", "ops", "bytes", "ops_per_s", "mb_per_s",
//!                  "per_second": [{"t","ops","bytes"}], "op_counts": {"READ": n, ..},
//!                  "op_bytes": {..}, "latency_us": {"READ": {"count","mean","p50","p90","p99","max"}},
//!                  "server": {"cpu_us_per_op","ctx_switches_per_op"} | null,
//!                  "checks": [{"rule","ok","detail"}] } ],
//!   "summary": { "ops_per_s": {"mean","ci95","n"}, "mb_per_s": {..},
//!                "cpu_us_per_op": {..} | null, "ctx_switches_per_op": {..} | null } }
//! ```
//!
//! "ops" are workload iterations (one READ for random read, one file for file
//! creation, one open-lock-read-unlock-close for locked reads); "op_counts" are
//! NFS ops sent (every op of every COMPOUND, SEQUENCE = COMPOUNDs);
//! "latency_us" and "op_bytes" are per request type (a COMPOUND named after its
//! main op, as /proc/self/mountstats names requests). Server costs are per
//! request (COMPOUND).

use crate::recorder::Recorder;
use crate::stats::Summary;
use crate::workload::Expectation;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub workload: String,
    pub server: Option<String>,
    pub target: String,
    pub delay_ms: f64,
    pub clients: usize,
    pub threads: usize,
    pub params: serde_json::Value,
    pub repeats: Vec<Repeat>,
    pub summary: SummaryBlock,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct PerSecond {
    pub t: u64,
    pub ops: u64,
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct ServerCost {
    pub cpu_us_per_op: f64,
    pub ctx_switches_per_op: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Repeat {
    pub duration_s: f64,
    pub ops: u64,
    pub bytes: u64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    pub per_second: Vec<PerSecond>,
    pub op_counts: BTreeMap<String, u64>,
    pub op_bytes: BTreeMap<String, u64>,
    pub latency_us: BTreeMap<String, Latency>,
    pub server: Option<ServerCost>,
    pub checks: Vec<Expectation>,
    /// COMPOUNDs sent in the timed part.
    pub compounds: u64,
    /// Workload-specific counters.
    pub counters: BTreeMap<String, u64>,
    /// Failed ops per "REQUEST:STATUS".
    pub errors: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SummaryBlock {
    pub ops_per_s: Option<Summary>,
    pub mb_per_s: Option<Summary>,
    pub cpu_us_per_op: Option<Summary>,
    pub ctx_switches_per_op: Option<Summary>,
}

impl Repeat {
    pub fn from_recorder(
        rec: &Recorder,
        duration_s: f64,
        server: Option<ServerCost>,
        checks: Vec<Expectation>,
    ) -> Repeat {
        let secs = duration_s.max(1e-9);
        let latency_us = rec
            .requests
            .iter()
            .map(|(k, s)| {
                let h = &s.hist;
                let us = |ns: u64| ns as f64 / 1000.0;
                (
                    k.clone(),
                    Latency {
                        count: s.count,
                        mean: h.mean() / 1000.0,
                        p50: us(h.value_at_quantile(0.5)),
                        p90: us(h.value_at_quantile(0.9)),
                        p99: us(h.value_at_quantile(0.99)),
                        max: us(h.max()),
                    },
                )
            })
            .collect();
        Repeat {
            duration_s,
            ops: rec.iterations,
            bytes: rec.bytes,
            ops_per_s: rec.iterations as f64 / secs,
            mb_per_s: rec.bytes as f64 / 1e6 / secs,
            per_second: rec
                .per_second
                .iter()
                .enumerate()
                .map(|(t, s)| PerSecond {
                    t: t as u64,
                    ops: s.ops,
                    bytes: s.bytes,
                })
                .collect(),
            op_counts: rec.op_counts.clone(),
            op_bytes: rec
                .requests
                .iter()
                .filter(|(_, s)| s.bytes > 0)
                .map(|(k, s)| (k.clone(), s.bytes))
                .collect(),
            latency_us,
            server,
            checks,
            compounds: rec.compounds,
            counters: rec.counters.clone(),
            errors: rec.errors.clone(),
        }
    }
}

impl SummaryBlock {
    pub fn of(repeats: &[Repeat]) -> SummaryBlock {
        let col = |f: &dyn Fn(&Repeat) -> Option<f64>| -> Option<Summary> {
            let v: Vec<f64> = repeats.iter().filter_map(f).collect();
            Summary::of(&v)
        };
        SummaryBlock {
            ops_per_s: col(&|r| Some(r.ops_per_s)),
            mb_per_s: col(&|r| Some(r.mb_per_s)),
            cpu_us_per_op: col(&|r| r.server.map(|s| s.cpu_us_per_op)),
            ctx_switches_per_op: col(&|r| r.server.map(|s| s.ctx_switches_per_op)),
        }
    }
}

impl Results {
    /// Whether every check of every repeat passed.
    pub fn all_checks_ok(&self) -> bool {
        self.repeats.iter().all(|r| r.checks.iter().all(|c| c.ok))
    }

    /// The failed checks, as "repeat N: rule (detail)".
    pub fn failed_checks(&self) -> Vec<String> {
        self.repeats
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(move |c| format!("repeat {i}: {} ({})", c.rule, c.detail))
            })
            .collect()
    }
}
