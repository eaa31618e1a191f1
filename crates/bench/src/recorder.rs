//! What one worker measured, mergeable across workers: per NFS op type the
//! count, bytes and an HDR latency histogram (the /proc/self/mountstats view),
//! per-second ops/bytes, workload iterations and free-form counters.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Per op type (request type, named after the main op of the COMPOUND).
#[derive(Clone, Debug)]
pub struct OpStat {
    /// Requests of this type.
    pub count: u64,
    /// Payload bytes (READ data received, WRITE data sent).
    pub bytes: u64,
    /// Round-trip latency in nanoseconds.
    pub hist: Histogram<u64>,
}

impl OpStat {
    fn new() -> OpStat {
        OpStat {
            count: 0,
            bytes: 0,
            hist: Histogram::new(3).expect("3 significant digits is valid"),
        }
    }
}

/// One second of a run: workload ops (iterations) and payload bytes completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Second {
    pub ops: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug)]
pub struct Recorder {
    start: Instant,
    /// Request types (COMPOUNDs by main op): count, bytes, latency.
    pub requests: BTreeMap<String, OpStat>,
    /// Every op sent, per op name (SEQUENCE = one per COMPOUND).
    pub op_counts: BTreeMap<String, u64>,
    /// COMPOUNDs sent.
    pub compounds: u64,
    /// Completed workload iterations ("ops" of the results).
    pub iterations: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    pub per_second: Vec<Second>,
    /// Workload-specific counters (e.g. "files_created", "open_conflicts").
    pub counters: BTreeMap<String, u64>,
    /// Op failures per "OP:STATUS".
    pub errors: BTreeMap<String, u64>,
    /// Requests carry no SEQUENCE (NFSv3 procedures, NFSv4.0 COMPOUNDs).
    pub sessionless: bool,
}

impl Recorder {
    pub fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            requests: BTreeMap::new(),
            op_counts: BTreeMap::new(),
            compounds: 0,
            iterations: 0,
            bytes: 0,
            per_second: Vec::new(),
            counters: BTreeMap::new(),
            errors: BTreeMap::new(),
            sessionless: false,
        }
    }

    /// Restart the clock (the timed part begins) and forget everything so far.
    pub fn reset(&mut self, start: Instant) {
        let sessionless = self.sessionless;
        *self = Recorder::new(start);
        self.sessionless = sessionless;
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    fn second(&mut self, at: Instant) -> &mut Second {
        let s = at.saturating_duration_since(self.start).as_secs() as usize;
        if self.per_second.len() <= s {
            self.per_second.resize(s + 1, Second::default());
        }
        &mut self.per_second[s]
    }

    /// One COMPOUND of type `kind` with these ops, taking `latency`, moving `bytes`.
    pub fn request<'a>(
        &mut self,
        kind: &str,
        ops: impl IntoIterator<Item = &'a str>,
        latency: Duration,
        bytes: u64,
    ) {
        self.compounds += 1;
        if !self.sessionless {
            *self.op_counts.entry("SEQUENCE".into()).or_default() += 1;
        }
        for op in ops {
            *self.op_counts.entry(op.to_string()).or_default() += 1;
        }
        let st = self
            .requests
            .entry(kind.to_string())
            .or_insert_with(OpStat::new);
        st.count += 1;
        st.bytes += bytes;
        let ns = (latency.as_nanos() as u64).max(1);
        // The histogram grows as needed (`record` resizes; `saturating_record`
        // would clamp to the current range).
        if st.hist.record(ns).is_err() {
            st.hist.saturating_record(ns);
        }
        self.bytes += bytes;
        self.second(Instant::now()).bytes += bytes;
    }

    /// A latency sample of `kind` that is not a request of its own (a
    /// composite operation whose requests were recorded separately).
    pub fn latency_only(&mut self, kind: &str, latency: Duration) {
        let st = self
            .requests
            .entry(kind.to_string())
            .or_insert_with(OpStat::new);
        st.count += 1;
        let ns = (latency.as_nanos() as u64).max(1);
        if st.hist.record(ns).is_err() {
            st.hist.saturating_record(ns);
        }
    }

    /// One workload iteration completed now.
    pub fn iteration(&mut self) {
        self.iterations += 1;
        self.second(Instant::now()).ops += 1;
    }

    pub fn count(&mut self, key: &str, n: u64) {
        *self.counters.entry(key.to_string()).or_default() += n;
    }

    pub fn error(&mut self, key: &str) {
        *self.errors.entry(key.to_string()).or_default() += 1;
    }

    /// Add another worker's measurements (per-second series aligned on each
    /// recorder's own start, which the runner makes the same instant).
    pub fn merge(&mut self, o: &Recorder) {
        for (k, v) in &o.requests {
            let st = self.requests.entry(k.clone()).or_insert_with(OpStat::new);
            st.count += v.count;
            st.bytes += v.bytes;
            st.hist
                .add(&v.hist)
                .expect("auto-resizing histograms merge");
        }
        for (k, v) in &o.op_counts {
            *self.op_counts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        self.compounds += o.compounds;
        self.iterations += o.iterations;
        self.bytes += o.bytes;
        if self.per_second.len() < o.per_second.len() {
            self.per_second
                .resize(o.per_second.len(), Second::default());
        }
        for (a, b) in self.per_second.iter_mut().zip(&o.per_second) {
            a.ops += b.ops;
            a.bytes += b.bytes;
        }
    }

    pub fn op_count(&self, op: &str) -> u64 {
        self.op_counts.get(op).copied().unwrap_or(0)
    }

    pub fn counter(&self, key: &str) -> u64 {
        self.counters.get(key).copied().unwrap_or(0)
    }

    /// Requests of type `kind`.
    pub fn requests_of(&self, kind: &str) -> u64 {
        self.requests.get(kind).map(|s| s.count).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_everything() {
        let t0 = Instant::now();
        let mut a = Recorder::new(t0);
        a.request("READ", ["PUTFH", "READ"], Duration::from_micros(100), 4096);
        a.iteration();
        a.count("x", 2);
        let mut b = Recorder::new(t0);
        b.request("READ", ["PUTFH", "READ"], Duration::from_micros(300), 4096);
        b.request("OPEN", ["PUTFH", "OPEN"], Duration::from_micros(50), 0);
        b.iteration();
        b.iteration();
        a.merge(&b);
        assert_eq!(a.compounds, 3);
        assert_eq!(a.op_count("PUTFH"), 3);
        assert_eq!(a.op_count("SEQUENCE"), 3);
        assert_eq!(a.op_count("READ"), 2);
        assert_eq!(a.requests_of("READ"), 2);
        assert_eq!(a.requests["READ"].bytes, 8192);
        assert_eq!(a.requests["READ"].hist.len(), 2);
        assert!(a.requests["READ"].hist.max() >= 299_000);
        assert_eq!(a.iterations, 3);
        assert_eq!(a.bytes, 8192);
        assert_eq!(a.counter("x"), 2);
        assert_eq!(a.per_second[0].ops, 3);
        assert_eq!(a.per_second[0].bytes, 8192);
    }
}
