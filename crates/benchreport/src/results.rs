//! The results JSON written by `txnfs-bench run` (crates/bench), read
//! leniently: unknown fields are ignored and everything that may be missing
//! is an `Option` or defaults to empty.
//!
//! ```text
//! { "workload", "server" (string or null), "target", "delay_ms", "clients", "threads",
//!   "params": {..},
//!   "repeats": [ { "duration_s", "ops", "bytes", "ops_per_s", "mb_per_s",
//!                  "per_second": [{"t","ops","bytes"}],
//!                  "op_counts": {"READ": n}, "op_bytes": {..},
//!                  "latency_us": {"READ": {"count","mean","p50","p90","p99","max"}},
//!                  "server": {"cpu_us_per_op","ctx_switches_per_op"} or null,
//!                  "checks": [{"rule","ok","detail"}] } ],
//!   "summary": { "ops_per_s": {"mean","ci95","n"}, "mb_per_s": {..},
//!                "cpu_us_per_op": {..} or null, "ctx_switches_per_op": {..} or null } }
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::stats::{self, Estimate};

/// One `txnfs-bench run` result: one workload against one target.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BenchResult {
    pub workload: String,
    pub server: Option<String>,
    pub target: Option<String>,
    pub delay_ms: Option<f64>,
    pub clients: Option<u64>,
    pub threads: Option<u64>,
    pub params: serde_json::Map<String, serde_json::Value>,
    pub repeats: Vec<Repeat>,
    pub summary: Option<Summary>,
}

/// One repeat of a workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Repeat {
    pub duration_s: Option<f64>,
    pub ops: Option<f64>,
    pub bytes: Option<f64>,
    pub ops_per_s: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub per_second: Vec<PerSecond>,
    pub op_counts: BTreeMap<String, f64>,
    pub op_bytes: BTreeMap<String, f64>,
    pub latency_us: BTreeMap<String, Latency>,
    pub server: Option<ServerCost>,
    pub checks: Vec<Check>,
}

/// Operations and bytes completed in one second of a repeat.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PerSecond {
    pub t: f64,
    pub ops: f64,
    pub bytes: f64,
}

/// Latency distribution of one operation type, microseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Latency {
    pub count: Option<f64>,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

/// Server cost per operation, from `/proc/<server pid>`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServerCost {
    pub cpu_us_per_op: Option<f64>,
    pub ctx_switches_per_op: Option<f64>,
}

/// One correctness check of a repeat.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Check {
    pub rule: String,
    pub ok: bool,
    pub detail: Option<serde_json::Value>,
}

/// Means over the repeats with their 95 % confidence half-widths.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Summary {
    pub ops_per_s: Option<Estimate>,
    pub mb_per_s: Option<Estimate>,
    pub cpu_us_per_op: Option<Estimate>,
    pub ctx_switches_per_op: Option<Estimate>,
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

impl BenchResult {
    /// Parse one result object.
    pub fn from_json(text: &str) -> Result<BenchResult> {
        Ok(serde_json::from_str(text)?)
    }

    /// Read a results file holding one result object or an array of them.
    pub fn read_file(path: &Path) -> Result<Vec<BenchResult>> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        Self::from_value(value).with_context(|| format!("reading results from {}", path.display()))
    }

    /// A result object, an array of them, or an object with a `results` array.
    pub fn from_value(value: serde_json::Value) -> Result<Vec<BenchResult>> {
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
                Metric::OpsPerS => r.ops_per_s.or_else(|| rate(r.ops, r.duration_s)),
                Metric::MbPerS => r
                    .mb_per_s
                    .or_else(|| rate(r.bytes, r.duration_s).map(|b| b / 1e6)),
                Metric::CpuUsPerOp => r.server.as_ref().and_then(|s| s.cpu_us_per_op),
                Metric::CtxSwitchesPerOp => r.server.as_ref().and_then(|s| s.ctx_switches_per_op),
            })
            .filter(|v| v.is_finite())
            .collect()
    }

    /// The summary's estimate of `metric`, or one computed from the repeats
    /// when the summary lacks it.
    pub fn estimate(&self, metric: Metric) -> Option<Estimate> {
        let from_summary = self.summary.as_ref().and_then(|s| match metric {
            Metric::OpsPerS => s.ops_per_s.clone(),
            Metric::MbPerS => s.mb_per_s.clone(),
            Metric::CpuUsPerOp => s.cpu_us_per_op.clone(),
            Metric::CtxSwitchesPerOp => s.ctx_switches_per_op.clone(),
        });
        from_summary
            .filter(|e| e.mean.is_finite())
            .or_else(|| stats::estimate(&self.samples(metric)))
    }

    /// Checks that failed in any repeat: (repeat index, check).
    pub fn failed_checks(&self) -> Vec<(usize, &Check)> {
        self.repeats
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.checks.iter().filter(|c| !c.ok).map(move |c| (i, c)))
            .collect()
    }
}

fn rate(count: Option<f64>, secs: Option<f64>) -> Option<f64> {
    match (count, secs) {
        (Some(c), Some(s)) if s > 0.0 => Some(c / s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "workload": "smallfile-read", "server": null, "target": "nfs://127.0.0.1:1/",
      "delay_ms": 10, "clients": 1, "threads": 4, "params": {"files": 100},
      "future_field": [1, 2, 3],
      "repeats": [
        {"duration_s": 2.0, "ops": 2000, "bytes": 4096000, "ops_per_s": 1000, "mb_per_s": 2.048,
         "per_second": [{"t": 0, "ops": 990, "bytes": 1}, {"t": 1, "ops": 1010, "bytes": 2}],
         "op_counts": {"READ": 1500, "OPEN": 500}, "op_bytes": {"READ": 4096000},
         "latency_us": {"READ": {"count": 1500, "mean": 900.5, "p50": 800, "p90": 1200, "p99": 2000, "max": 5000}},
         "server": {"cpu_us_per_op": 30.0, "ctx_switches_per_op": 2.5},
         "checks": [{"rule": "contents", "ok": true, "detail": null}]},
        {"duration_s": 2.0, "ops": 2200, "ops_per_s": 1100, "server": null,
         "checks": [{"rule": "contents", "ok": false, "detail": "mismatch at 4096"}]}
      ],
      "summary": {"ops_per_s": {"mean": 1050, "ci95": 635.3, "n": 2}, "mb_per_s": null,
                  "cpu_us_per_op": null, "ctx_switches_per_op": null}
    }"#;

    #[test]
    fn parses_leniently() {
        let r = BenchResult::from_json(SAMPLE).unwrap();
        assert_eq!(r.workload, "smallfile-read");
        assert_eq!(r.server, None);
        assert_eq!(r.delay_ms, Some(10.0));
        assert_eq!(r.repeats.len(), 2);
        assert_eq!(r.repeats[0].op_counts["READ"], 1500.0);
        assert_eq!(r.repeats[0].latency_us["READ"].p99, Some(2000.0));
        assert_eq!(r.repeats[1].server, None);
        assert_eq!(r.samples(Metric::OpsPerS), vec![1000.0, 1100.0]);
        assert_eq!(r.samples(Metric::CpuUsPerOp), vec![30.0]);
        let e = r.estimate(Metric::OpsPerS).unwrap();
        assert_eq!(e.mean, 1050.0);
        // mb_per_s is null in the summary: computed from the one repeat having it.
        let mb = r.estimate(Metric::MbPerS).unwrap();
        assert_eq!(mb.n, 1);
        assert_eq!(r.failed_checks().len(), 1);
        assert_eq!(r.failed_checks()[0].0, 1);
    }

    #[test]
    fn minimal_and_arrays() {
        let v: serde_json::Value =
            serde_json::from_str(r#"[{"workload": "a"}, {"workload": "b", "repeats": []}]"#)
                .unwrap();
        let rs = BenchResult::from_value(v).unwrap();
        assert_eq!(rs.len(), 2);
        assert!(rs[0].estimate(Metric::OpsPerS).is_none());
        let v: serde_json::Value =
            serde_json::from_str(r#"{"results": [{"workload": "c"}]}"#).unwrap();
        assert_eq!(BenchResult::from_value(v).unwrap()[0].workload, "c");
    }
}
