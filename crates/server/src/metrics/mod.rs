//! What the server counts for its administrator (ADR 0045): per NFSv4 op and NFSv3
//! procedure a latency histogram and the failures by status, bytes moved per export,
//! connections, and transactional COMPOUNDs by outcome. Everything else an admin sees
//! (sessions, slots, reply cache, delegations, the v3 reply cache) is read from where
//! it already lives when a report is made (`crate::report`), so the data path pays only
//! relaxed atomic adds here: two clock reads and three adds per op.
//!
//! `crate::report` turns them into text for the control socket and the Prometheus
//! endpoint.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (the last bucket is +Inf).
pub const BUCKETS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// A latency histogram of fixed buckets, filled with relaxed atomic adds.
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

/// A histogram at one moment: per-bucket (not cumulative) counts, their total and sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum_us: u64,
}

impl HistogramSnapshot {
    /// The upper bound (µs) of the bucket holding quantile `q`; `None` when empty,
    /// `u64::MAX` for the +Inf bucket.
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(BUCKETS_US.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(BUCKETS_US.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().sum(),
            buckets,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// One op (or procedure): its latency and its failures.
#[derive(Default)]
pub struct OpMetrics {
    pub latency: Histogram,
    pub errors: AtomicU64,
}

/// Bytes and calls of READ and WRITE on one export.
#[derive(Default)]
pub struct ExportIo {
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

/// NFSv4 opnums counted (every op of RFC 7862 and the transaction ops fit).
const V4_OPS: usize = 80;
/// NFSv3 procedures (RFC 1813: 0 to 21).
const V3_PROCS: usize = 22;

/// The server's counters (see the module documentation).
pub struct Metrics {
    v4: Vec<OpMetrics>,
    v3: Vec<OpMetrics>,
    /// (version, op or procedure, status) → failures, for the rare path.
    statuses: Mutex<BTreeMap<(u8, u32, i32), u64>>,
    /// By export id: the exports the server started with and those a reload added
    /// (ADR 0048; a removed export's counters stay, and go on if it comes back).
    exports: std::sync::RwLock<BTreeMap<u16, std::sync::Arc<ExportIo>>>,
    pub connections_open: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub txn_committed: AtomicU64,
    pub txn_failed: AtomicU64,
    pub mount_calls: AtomicU64,
    /// The transport's gathered writes (ADR 0052): handed to the RPC server when it
    /// starts (`service::run`), read by the reports.
    pub write_counts: std::sync::Arc<txnfs_rpc::WriteCounts>,
}

impl Metrics {
    /// Counters for the exports with these ids.
    pub fn new(exports: impl IntoIterator<Item = u16>) -> Metrics {
        Metrics {
            v4: (0..V4_OPS).map(|_| OpMetrics::default()).collect(),
            v3: (0..V3_PROCS).map(|_| OpMetrics::default()).collect(),
            statuses: Mutex::default(),
            exports: std::sync::RwLock::new(
                exports
                    .into_iter()
                    .map(|id| (id, Default::default()))
                    .collect(),
            ),
            connections_open: AtomicU64::new(0),
            connections_accepted: AtomicU64::new(0),
            txn_committed: AtomicU64::new(0),
            txn_failed: AtomicU64::new(0),
            mount_calls: AtomicU64::new(0),
            write_counts: Default::default(),
        }
    }

    fn op(&self, version: u8, n: u32, took: Duration, status: i32) {
        let table = if version == 3 { &self.v3 } else { &self.v4 };
        let Some(m) = table.get(n as usize) else {
            return;
        };
        m.latency.record(took);
        if status != 0 {
            m.errors.fetch_add(1, Ordering::Relaxed);
            *self
                .statuses
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((version, n, status))
                .or_default() += 1;
        }
    }

    /// An NFSv4 op ran for `took` and ended with `status` (0: NFS4_OK).
    pub fn v4_op(&self, opnum: u32, took: Duration, status: i32) {
        self.op(4, opnum, took, status);
    }

    /// An NFSv3 procedure ran for `took` and answered `status` (0: NFS3_OK).
    pub fn v3_proc(&self, proc_num: u32, took: Duration, status: i32) {
        self.op(3, proc_num, took, status);
    }

    /// Counters for an export a reload added (none when it has them already).
    pub fn add_export(&self, id: u16) {
        self.exports
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id)
            .or_default();
    }

    pub fn read(&self, export: u16, bytes: usize) {
        self.with_export_io(export, |e| {
            e.reads.fetch_add(1, Ordering::Relaxed);
            e.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        });
    }

    pub fn wrote(&self, export: u16, bytes: usize) {
        self.with_export_io(export, |e| {
            e.writes.fetch_add(1, Ordering::Relaxed);
            e.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        });
    }

    /// Counts on export `id`'s counters under the map's read lock: no `Arc` to clone
    /// and drop per READ or WRITE.
    fn with_export_io(&self, id: u16, count: impl FnOnce(&ExportIo)) {
        let exports = self.exports.read().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = exports.get(&id) {
            count(e);
        }
    }

    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        // (never below zero, whatever the order of the hooks)
        let _ = self
            .connections_open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// A transactional COMPOUND ended: its status word (0: committed).
    pub fn transaction(&self, status: i32) {
        if status == 0 {
            self.txn_committed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.txn_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn v4_table(&self) -> &[OpMetrics] {
        &self.v4
    }

    pub(crate) fn v3_table(&self) -> &[OpMetrics] {
        &self.v3
    }

    pub(crate) fn export_io(&self, id: u16) -> Option<std::sync::Arc<ExportIo>> {
        self.exports
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Failures by (version, op or procedure, status).
    pub fn statuses(&self) -> BTreeMap<(u8, u32, i32), u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        let h = Histogram::default();
        for us in [10, 60, 60, 900, 20_000_000] {
            h.record(Duration::from_micros(us));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.buckets[0], 1, "≤ 50 µs");
        assert_eq!(s.buckets[1], 2, "≤ 100 µs");
        assert_eq!(s.buckets[4], 1, "≤ 1 ms");
        assert_eq!(*s.buckets.last().unwrap(), 1, "+Inf");
        assert_eq!(s.quantile_bound_us(0.5), Some(100));
        assert_eq!(s.quantile_bound_us(0.8), Some(1_000));
        assert_eq!(s.quantile_bound_us(1.0), Some(u64::MAX));
        assert_eq!(HistogramSnapshot::default().quantile_bound_us(0.5), None);
    }

    #[test]
    fn failures_are_counted_by_status() {
        let m = Metrics::new([1, 2]);
        m.v4_op(25, Duration::from_micros(5), 0);
        m.v4_op(25, Duration::from_micros(5), 10008);
        m.v3_proc(6, Duration::from_micros(5), 70);
        m.v3_proc(99, Duration::from_micros(5), 70); // out of range: ignored
        assert_eq!(m.v4_table()[25].errors.load(Ordering::Relaxed), 1);
        assert_eq!(m.v4_table()[25].latency.snapshot().count, 2);
        let s = m.statuses();
        assert_eq!(s.get(&(4, 25, 10008)), Some(&1));
        assert_eq!(s.get(&(3, 6, 70)), Some(&1));
        assert_eq!(s.len(), 2);
        m.read(1, 4096);
        m.read(7, 4096); // unknown export: ignored
        assert_eq!(
            m.export_io(1).unwrap().read_bytes.load(Ordering::Relaxed),
            4096
        );
        m.connection_closed();
        assert_eq!(m.connections_open.load(Ordering::Relaxed), 0);
    }
}
