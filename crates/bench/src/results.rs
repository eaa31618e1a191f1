//! The results file (JSON). Other tools read these names: keep them stable.
//!
//! ```text
//! { "workload", "server", "target", "delay_ms", "clients", "threads", "driver", "params": {..},
//!   "repeats": [ { "duration_s", "ops", "bytes", "ops_per_s", "mb_per_s",
//!                  "per_second": [{"t","ops","bytes"}], "op_counts": {"READ": n, ..},
//!                  "op_bytes": {..}, "latency_us": {"READ": {"count","mean","p50","p90","p99","max"}},
//!                  "server": {"cpu_us_per_op","ctx_switches_per_op"} | null,
//!                  "client": {"cpu_us_per_op","ctx_switches_per_op"} | null,
//!                  "wire": {"per_type": {"READ": {"requests","messages","bytes_sent",
//!                           "bytes_received","rtt_us","slot_wait_us","batch_wait_us",
//!                           "batched","no_reply"}},
//!                           "transport": {"messages_sent","messages_received",
//!                           "requests_per_message","on_the_wire"}} | null,
//!                  "system": [{"t","client": {"user_ms","system_ms","ctx_voluntary",
//!                              "ctx_involuntary","rss_kib"},"server": {..} | null}],
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
//!
//! This is the one results type: `txnfs bench run` writes it and
//! `txnfs bench compare` reads it back (leniently: unknown fields are ignored,
//! missing ones take their defaults, so older files still load).

use crate::recorder::Recorder;
use crate::stats::Summary;
use crate::workload::Expectation;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Default, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct Results {
    pub workload: String,
    pub server: Option<String>,
    pub target: String,
    pub delay_ms: f64,
    pub clients: usize,
    pub threads: usize,
    /// The client library of the timed part (txnfs or nfs-rs).
    pub driver: crate::driver::Driver,
    /// How the clients batched concurrent requests: none, static:N, dynamic.
    pub batch: String,
    /// The NFS version the nfs-rs driver spoke ("3", "4.0", "4.1"); `None` with our
    /// client (which negotiates 4.2 or 4.1).
    pub nfs_version: Option<String>,
    /// With `--processes N`: the clients ran in N processes (`clients` counts all).
    pub processes: Option<usize>,
    pub params: serde_json::Value,
    pub repeats: Vec<Repeat>,
    pub summary: SummaryBlock,
}

#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PerSecond {
    pub t: u64,
    pub ops: u64,
    pub bytes: u64,
}

#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServerCost {
    pub cpu_us_per_op: f64,
    pub ctx_switches_per_op: f64,
}

#[derive(Clone, Default, Debug, Serialize, Deserialize)]
#[serde(default)]
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
    /// COMPOUNDs our clients put on the wire in the timed part (fewer than `compounds`
    /// when batching packed several requests into one); `None` with nfs-rs.
    pub rpc_messages: Option<u64>,
    /// The highest batch level of the clients at the end (with batching on).
    pub batch_level: Option<u32>,
    /// Workload-specific counters.
    pub counters: BTreeMap<String, u64>,
    /// Failed ops per "REQUEST:STATUS".
    pub errors: BTreeMap<String, u64>,
    /// What the client process (all its threads) cost per request.
    pub client: Option<ServerCost>,
    /// The mountstats view of our clients (`None` with nfs-rs).
    pub wire: Option<crate::wire::Wire>,
    /// Once a second: CPU, context switches and memory of client and server.
    pub system: Vec<crate::sysstats::SysSecond>,
    /// When the workers were released (Unix ns).
    pub start_unix_ns: Option<u64>,
    /// The start instant a `--processes` parent gave (Unix ns).
    pub agreed_start_unix_ns: Option<u64>,
    /// With `--processes`: how far the processes' starts were from the agreed instant.
    pub start_skew: Option<StartSkew>,
}

/// How far apart client processes started (seed 001 §3 reports mean 235 ms, max 432).
#[derive(Clone, Default, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StartSkew {
    pub processes: usize,
    /// Mean and largest |start − agreed instant|, ms.
    pub mean_ms: f64,
    pub max_ms: f64,
    /// Last start − first start, ms.
    pub spread_ms: f64,
}

impl StartSkew {
    /// From the agreed instant and each process's start (Unix ns).
    pub fn of(agreed_ns: u64, starts_ns: &[u64]) -> Option<StartSkew> {
        let first = *starts_ns.iter().min()?;
        let last = *starts_ns.iter().max()?;
        let off: Vec<f64> = starts_ns
            .iter()
            .map(|s| s.abs_diff(agreed_ns) as f64 / 1e6)
            .collect();
        Some(StartSkew {
            processes: starts_ns.len(),
            mean_ms: off.iter().sum::<f64>() / off.len() as f64,
            max_ms: off.iter().copied().fold(0.0, f64::max),
            spread_ms: (last - first) as f64 / 1e6,
        })
    }
}

#[derive(Clone, Default, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct SummaryBlock {
    pub ops_per_s: Option<Summary>,
    pub mb_per_s: Option<Summary>,
    pub cpu_us_per_op: Option<Summary>,
    pub ctx_switches_per_op: Option<Summary>,
    pub client_cpu_us_per_op: Option<Summary>,
    pub client_ctx_switches_per_op: Option<Summary>,
}

impl Repeat {
    /// A cost per request (COMPOUND) as a cost per workload op: servers that a
    /// client drives with different numbers of requests per op (our client packs
    /// a batch into one COMPOUND where NFS-Ganesha's limits take two) compare per
    /// op. Without a request count the value stays as it is.
    pub fn per_op(&self, per_request: f64) -> f64 {
        if self.ops > 0 && self.compounds > 0 {
            per_request * self.compounds as f64 / self.ops as f64
        } else {
            per_request
        }
    }

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
            rpc_messages: None,
            batch_level: None,
            counters: rec.counters.clone(),
            errors: rec.errors.clone(),
            client: None,
            wire: None,
            system: Vec::new(),
            start_unix_ns: None,
            agreed_start_unix_ns: None,
            start_skew: None,
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
            client_cpu_us_per_op: col(&|r| r.client.map(|s| s.cpu_us_per_op)),
            client_ctx_switches_per_op: col(&|r| r.client.map(|s| s.ctx_switches_per_op)),
        }
    }
}

impl Results {
    /// Read a results file holding one result object or an array of them.
    pub fn read_file(path: &Path) -> anyhow::Result<Vec<Results>> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Self::from_value(value).with_context(|| format!("reading results from {}", path.display()))
    }

    /// A result object, an array of them, or an object with a `results` array.
    pub fn from_value(value: serde_json::Value) -> anyhow::Result<Vec<Results>> {
        match value {
            serde_json::Value::Array(items) => items
                .into_iter()
                .map(|v| serde_json::from_value(v).map_err(Into::into))
                .collect(),
            serde_json::Value::Object(ref m) if !m.contains_key("workload") => {
                match m.get("results") {
                    Some(serde_json::Value::Array(items)) => items
                        .iter()
                        .map(|v| serde_json::from_value(v.clone()).map_err(Into::into))
                        .collect(),
                    _ => anyhow::bail!("no \"workload\" field and no \"results\" array"),
                }
            }
            v => Ok(vec![serde_json::from_value(v)?]),
        }
    }

    /// The per-repeat values of a metric (repeats lacking it are skipped).
    pub fn samples(&self, metric: Metric) -> Vec<f64> {
        self.repeats
            .iter()
            .filter_map(|r| match metric {
                Metric::OpsPerS => Some(r.ops_per_s),
                Metric::MbPerS => Some(r.mb_per_s),
                Metric::CpuUsPerOp => r.server.map(|s| r.per_op(s.cpu_us_per_op)),
                Metric::CtxSwitchesPerOp => r.server.map(|s| r.per_op(s.ctx_switches_per_op)),
            })
            .filter(|v| v.is_finite())
            .collect()
    }

    /// The summary's estimate of `metric`, or one computed from the repeats
    /// when the summary lacks it. The server's costs always come from the repeats:
    /// the summary has them per request, the comparison per workload op.
    pub fn estimate(&self, metric: Metric) -> Option<Summary> {
        let s = &self.summary;
        let from_summary = match metric {
            Metric::OpsPerS => s.ops_per_s,
            Metric::MbPerS => s.mb_per_s,
            Metric::CpuUsPerOp | Metric::CtxSwitchesPerOp => None,
        };
        from_summary
            .filter(|e| e.mean.is_finite())
            .or_else(|| Summary::of(&self.samples(metric)))
    }

    /// Checks that failed in any repeat: (repeat index, check).
    pub fn failed(&self) -> Vec<(usize, &Expectation)> {
        self.repeats
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.checks.iter().filter(|c| !c.ok).map(move |c| (i, c)))
            .collect()
    }

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

/// The metrics compared between servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    OpsPerS,
    MbPerS,
    CpuUsPerOp,
    CtxSwitchesPerOp,
}

impl Metric {
    pub const ALL: [Metric; 4] = [
        Metric::OpsPerS,
        Metric::MbPerS,
        Metric::CpuUsPerOp,
        Metric::CtxSwitchesPerOp,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Metric::OpsPerS => "ops_per_s",
            Metric::MbPerS => "mb_per_s",
            Metric::CpuUsPerOp => "cpu_us_per_op",
            Metric::CtxSwitchesPerOp => "ctx_switches_per_op",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Metric::OpsPerS => "ops/s",
            Metric::MbPerS => "MB/s",
            Metric::CpuUsPerOp => "server CPU µs/op",
            Metric::CtxSwitchesPerOp => "server ctx switches/op",
        }
    }

    /// Whether a larger value is better (throughput) or worse (cost).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::OpsPerS | Metric::MbPerS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "workload": "randread", "server": null, "target": "nfs://127.0.0.1:1/",
      "delay_ms": 10, "clients": 1, "threads": 4, "params": {"files": 100},
      "future_field": [1, 2, 3],
      "repeats": [
        {"duration_s": 2.0, "ops": 2000, "bytes": 4096000, "ops_per_s": 1000, "mb_per_s": 2.048,
         "per_second": [{"t": 0, "ops": 990, "bytes": 1}, {"t": 1, "ops": 1010, "bytes": 2}],
         "op_counts": {"READ": 1500, "OPEN": 500}, "op_bytes": {"READ": 4096000},
         "latency_us": {"READ": {"count": 1500, "mean": 900.5, "p50": 800, "p90": 1200, "p99": 2000, "max": 5000}},
         "server": {"cpu_us_per_op": 30.0, "ctx_switches_per_op": 2.5},
         "checks": [{"rule": "contents", "ok": true, "detail": null}]},
        {"duration_s": 2.0, "ops": 2200, "ops_per_s": 1100, "mb_per_s": 2.0, "server": null,
         "checks": [{"rule": "contents", "ok": false, "detail": "mismatch at 4096"}]}
      ],
      "summary": {"ops_per_s": {"mean": 1050, "ci95": 635.3, "n": 2}, "mb_per_s": null,
                  "cpu_us_per_op": null, "ctx_switches_per_op": null}
    }"#;

    /// A server driven with two COMPOUNDs per op costs twice its per-request
    /// figure per op, in the samples and in the estimate (the summary's
    /// per-request value is not used).
    #[test]
    fn server_costs_compare_per_op() {
        let v = serde_json::json!({
            "workload": "writefiles", "server": "ganesha", "target": "nfs://127.0.0.1:1/",
            "repeats": [
                {"duration_s": 1.0, "ops": 100, "compounds": 200, "ops_per_s": 100,
                 "server": {"cpu_us_per_op": 10.0, "ctx_switches_per_op": 3.0}, "checks": []}
            ],
            "summary": {"cpu_us_per_op": {"mean": 10.0, "ci95": 0.0, "n": 1}}
        });
        let r = &Results::from_value(v).unwrap()[0];
        assert_eq!(r.samples(Metric::CpuUsPerOp), vec![20.0]);
        assert_eq!(r.samples(Metric::CtxSwitchesPerOp), vec![6.0]);
        assert_eq!(r.estimate(Metric::CpuUsPerOp).unwrap().mean, 20.0);
    }

    #[test]
    fn parses_leniently() {
        let r = &Results::from_value(serde_json::from_str(SAMPLE).unwrap()).unwrap()[0];
        assert_eq!(r.workload, "randread");
        assert_eq!(r.server, None);
        assert_eq!(r.delay_ms, 10.0);
        assert_eq!(r.repeats.len(), 2);
        assert_eq!(r.repeats[0].op_counts["READ"], 1500);
        assert_eq!(r.repeats[0].latency_us["READ"].p99, 2000.0);
        assert_eq!(r.repeats[1].server, None);
        assert_eq!(r.samples(Metric::OpsPerS), vec![1000.0, 1100.0]);
        assert_eq!(r.samples(Metric::CpuUsPerOp), vec![30.0]);
        assert_eq!(r.estimate(Metric::OpsPerS).unwrap().mean, 1050.0);
        // mb_per_s is null in the summary: computed from the repeats.
        assert_eq!(r.estimate(Metric::MbPerS).unwrap().n, 2);
        assert_eq!(r.failed().len(), 1);
        assert_eq!(r.failed()[0].0, 1);
        assert_eq!(r.failed()[0].1.detail, "mismatch at 4096");
    }

    #[test]
    fn start_skew_from_offsets() {
        let ms = 1_000_000;
        // Agreed at 1000 ms; started at 1001, 1003 and 999 ms.
        let s = StartSkew::of(1000 * ms, &[1001 * ms, 1003 * ms, 999 * ms]).unwrap();
        assert_eq!(s.processes, 3);
        assert!((s.mean_ms - 5.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.max_ms, 3.0);
        assert_eq!(s.spread_ms, 4.0);
        assert!(StartSkew::of(0, &[]).is_none());
    }

    #[test]
    fn minimal_and_arrays() {
        let v: serde_json::Value =
            serde_json::from_str(r#"[{"workload": "a"}, {"workload": "b", "repeats": []}]"#)
                .unwrap();
        let rs = Results::from_value(v).unwrap();
        assert_eq!(rs.len(), 2);
        assert!(rs[0].estimate(Metric::OpsPerS).is_none());
        let v: serde_json::Value =
            serde_json::from_str(r#"{"results": [{"workload": "c"}]}"#).unwrap();
        assert_eq!(Results::from_value(v).unwrap()[0].workload, "c");
    }
}
