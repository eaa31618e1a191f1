//! The server's request counters ([`Stats`]) and their snapshot for reports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Operation counters (like /proc/self/mountstats on the server side).
pub struct Stats {
    pub ops: Vec<AtomicU64>,
    pub compounds: AtomicU64,
    pub replays: AtomicU64,
    /// Requests whose handler panicked: answered NFS4ERR_SERVERFAULT (ADR 0029).
    pub panics: AtomicU64,
    /// The transport's budget of bytes in flight (ADR 0029): its gauge and peak.
    pub in_flight: Arc<txnfs_rpc::InFlightBudget>,
}

impl Stats {
    pub(super) fn new(in_flight_bytes: usize) -> Self {
        Stats {
            ops: (0..80).map(|_| AtomicU64::new(0)).collect(),
            compounds: AtomicU64::new(0),
            replays: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            in_flight: txnfs_rpc::InFlightBudget::new(in_flight_bytes),
        }
    }

    pub fn count(&self, op: u32) {
        if let Some(c) = self.ops.get(op as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters now: COMPOUNDs, replies served from the reply cache, and the ops
    /// COMPOUNDs carried (counted when the executor reaches them), by name.
    pub fn snapshot(&self) -> StatsSnapshot {
        let ops = self
            .ops
            .iter()
            .enumerate()
            .filter_map(|(n, c)| {
                let count = c.load(Ordering::Relaxed);
                let op = crate::nfs::nfs_opnum4::from_i32(n as i32)?;
                (count > 0).then(|| (txnfs_proto::ops::op_name(op), count))
            })
            .collect();
        StatsSnapshot {
            compounds: self.compounds.load(Ordering::Relaxed),
            replays: self.replays.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            in_flight_bytes: self.in_flight.in_use(),
            in_flight_peak: self.in_flight.peak(),
            ops,
        }
    }
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub compounds: u64,
    pub replays: u64,
    /// Requests whose handler panicked (answered NFS4ERR_SERVERFAULT).
    pub panics: u64,
    /// Bytes of requests and replies in flight now, and the most ever (never above
    /// `Config::max_in_flight_bytes`).
    pub in_flight_bytes: usize,
    pub in_flight_peak: usize,
    /// (op name, times the executor reached it), in opnum order; ops never seen are
    /// left out.
    pub ops: Vec<(&'static str, u64)>,
}
