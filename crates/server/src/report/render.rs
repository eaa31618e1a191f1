//! The server's counters as text: the Prometheus exposition format (`prometheus`), an
//! nfsstat-like summary (`summary`) and the client table (`clients`).

use crate::metrics::{HistogramSnapshot, Metrics, OpMetrics, BUCKETS_US};
use crate::server::Server;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use txnfs_state::DelegStats;

/// What the reports read besides [`Metrics`], gathered under the core's lock once.
struct Gathered {
    clients: usize,
    sessions: usize,
    /// Fore-channel slots executing a request now, and granted, over all sessions.
    slots_in_use: u64,
    slots_granted: u64,
    reply_cache_reserved: usize,
    opens: usize,
    lock_states: usize,
    locks: usize,
    deleg: DelegStats,
    in_grace: bool,
}

fn gather(srv: &Server) -> Option<Gathered> {
    let now = srv.clock.now();
    let core = srv.core().ok()?;
    let (clients, sessions) = core.sessions().counts();
    let t = core.table().stats();
    let (slots_in_use, slots_granted) = core.sessions().slot_counts();
    Some(Gathered {
        clients,
        sessions,
        slots_in_use,
        slots_granted,
        reply_cache_reserved: core.sessions().reply_cache_reserved(),
        opens: t.opens,
        lock_states: t.lock_states,
        locks: t.locks,
        deleg: core.delegations().stats(),
        in_grace: core.in_grace(now),
    })
}

fn v4_name(n: usize) -> Option<&'static str> {
    let op = crate::nfs::nfs_opnum4::from_i32(n as i32)?;
    Some(txnfs_proto::ops::op_name(op))
}

fn v3_name(n: usize) -> Option<&'static str> {
    crate::v3::procs::proc3(n as u32).map(|p| p.name)
}

/// (version, name, metrics, snapshot) of every op or procedure that ran at least once.
fn ran(m: &Metrics) -> Vec<(u8, &'static str, &OpMetrics, HistogramSnapshot)> {
    let mut v = Vec::new();
    for (version, table, name) in [
        (
            4u8,
            m.v4_table(),
            v4_name as fn(usize) -> Option<&'static str>,
        ),
        (3u8, m.v3_table(), v3_name),
    ] {
        for (i, om) in table.iter().enumerate() {
            let snap = om.latency.snapshot();
            if snap.count == 0 {
                continue;
            }
            if let Some(n) = name(i) {
                v.push((version, n, om, snap));
            }
        }
    }
    v
}

/// The Prometheus text exposition format (version 0.0.4). `drc`: the NFSv3 reply
/// cache's counters, where the caller has them.
pub fn prometheus(srv: &Server, drc: Option<crate::v3::drc::DrcStats>) -> String {
    let m = &srv.metrics;
    let mut s = String::with_capacity(8192);
    let family = |s: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    family(
        &mut s,
        "txnfs_op_duration_seconds",
        "histogram",
        "Time the server spent on each NFSv4 op and NFSv3 procedure.",
    );
    let ops = ran(m);
    for (version, name, _, h) in &ops {
        let labels = format!("version=\"{version}\",op=\"{name}\"");
        let mut cumulative = 0;
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative += n;
            let le = match BUCKETS_US.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".into(),
            };
            let _ = writeln!(
                s,
                "txnfs_op_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            s,
            "txnfs_op_duration_seconds_sum{{{labels}}} {}\ntxnfs_op_duration_seconds_count{{{labels}}} {}",
            h.sum_us as f64 / 1e6,
            h.count
        );
    }
    family(
        &mut s,
        "txnfs_op_errors_total",
        "counter",
        "NFSv4 ops and NFSv3 procedures that failed, by status.",
    );
    for ((version, n, status), count) in m.statuses() {
        let name = match version {
            3 => v3_name(n as usize),
            _ => v4_name(n as usize),
        }
        .unwrap_or("?");
        let st = status_name(version, status);
        let _ = writeln!(
            s,
            "txnfs_op_errors_total{{version=\"{version}\",op=\"{name}\",status=\"{st}\"}} {count}"
        );
    }
    family(
        &mut s,
        "txnfs_export_bytes_total",
        "counter",
        "READ and WRITE payload bytes, per export.",
    );
    let mut reqs = String::new();
    for e in srv.exports.snapshot().exports.values() {
        let Some(io) = m.export_io(e.id) else {
            continue;
        };
        for (dir, bytes, calls) in [
            ("read", &io.read_bytes, &io.reads),
            ("write", &io.write_bytes, &io.writes),
        ] {
            let _ = writeln!(
                s,
                "txnfs_export_bytes_total{{export=\"{}\",direction=\"{dir}\"}} {}",
                e.name,
                bytes.load(Ordering::Relaxed)
            );
            let _ = writeln!(
                reqs,
                "txnfs_export_io_total{{export=\"{}\",direction=\"{dir}\"}} {}",
                e.name,
                calls.load(Ordering::Relaxed)
            );
        }
    }
    family(
        &mut s,
        "txnfs_export_io_total",
        "counter",
        "READs and WRITEs, per export.",
    );
    s.push_str(&reqs);
    let st = srv.stats.snapshot();
    let one = |s: &mut String, name: &str, kind: &str, help: &str, v: f64| {
        family(s, name, kind, help);
        let _ = writeln!(s, "{name} {v}");
    };
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
    one(
        &mut s,
        "txnfs_compounds_total",
        "counter",
        "NFSv4 COMPOUNDs received.",
        st.compounds as f64,
    );
    one(
        &mut s,
        "txnfs_reply_cache_hits_total",
        "counter",
        "NFSv4 retransmissions answered from the session reply cache.",
        st.replays as f64,
    );
    one(
        &mut s,
        "txnfs_panics_total",
        "counter",
        "Requests whose handler panicked (answered SERVERFAULT).",
        st.panics as f64,
    );
    one(
        &mut s,
        "txnfs_in_flight_bytes",
        "gauge",
        "Request and reply bytes in flight.",
        st.in_flight_bytes as f64,
    );
    one(
        &mut s,
        "txnfs_connections",
        "gauge",
        "Open connections.",
        load(&m.connections_open),
    );
    one(
        &mut s,
        "txnfs_connections_accepted_total",
        "counter",
        "Connections accepted.",
        load(&m.connections_accepted),
    );
    let w = &m.write_counts;
    one(
        &mut s,
        "txnfs_transport_writes_total",
        "counter",
        "Gathered writes to client connections (writev, or one TLS write).",
        w.writes() as f64,
    );
    one(
        &mut s,
        "txnfs_transport_records_total",
        "counter",
        "RPC records sent in them (replies and callback CALLs).",
        w.records() as f64,
    );
    one(
        &mut s,
        "txnfs_transport_spliced_bytes_total",
        "counter",
        "READ data spliced from the page cache into sockets, never copied (ADR 0065).",
        w.spliced_bytes() as f64,
    );
    one(
        &mut s,
        "txnfs_transport_bytes_total",
        "counter",
        "Bytes sent in them, record marks included.",
        w.bytes() as f64,
    );
    one(
        &mut s,
        "txnfs_mount_calls_total",
        "counter",
        "MOUNT protocol calls.",
        load(&m.mount_calls),
    );
    one(
        &mut s,
        "txnfs_transactions_committed_total",
        "counter",
        "Transactional COMPOUNDs that committed.",
        load(&m.txn_committed),
    );
    one(
        &mut s,
        "txnfs_transactions_failed_total",
        "counter",
        "Transactional COMPOUNDs that failed (rolled back or refused).",
        load(&m.txn_failed),
    );
    // The `txn` layers' journals, per export that keeps one.
    let journals: Vec<_> = srv
        .exports
        .snapshot()
        .exports
        .values()
        .filter_map(|e| Some((e.name.clone(), e.backend.journal_stats()?)))
        .collect();
    for (name, kind, help, value) in [
        (
            "txnfs_journal_appended_bytes_total",
            "counter",
            "Bytes appended to the transaction journal (records and their frames), per export.",
            (|j: &txnfs_backend::JournalStats| j.appended_bytes) as fn(&_) -> u64,
        ),
        (
            "txnfs_journal_records_total",
            "counter",
            "Records appended to the transaction journal, per export.",
            |j| j.records,
        ),
        (
            "txnfs_journal_size_bytes",
            "gauge",
            "Length of the transaction journal file now (a rewind shortens it), per export.",
            |j| j.size,
        ),
    ] {
        family(&mut s, name, kind, help);
        for (export, j) in &journals {
            let _ = writeln!(s, "{name}{{export=\"{export}\"}} {}", value(j));
        }
    }
    if let Some(d) = drc {
        one(
            &mut s,
            "txnfs_v3_reply_cache_bytes",
            "gauge",
            "Bytes held by the NFSv3 duplicate request cache.",
            d.bytes as f64,
        );
        one(
            &mut s,
            "txnfs_v3_reply_cache_hits_total",
            "counter",
            "NFSv3 retransmissions answered from the duplicate request cache.",
            d.replays as f64,
        );
    }
    if let Some(g) = gather(srv) {
        one(
            &mut s,
            "txnfs_clients",
            "gauge",
            "Client records (NFSv4).",
            g.clients as f64,
        );
        one(
            &mut s,
            "txnfs_sessions",
            "gauge",
            "NFSv4.1+ sessions.",
            g.sessions as f64,
        );
        one(
            &mut s,
            "txnfs_session_slots_in_use",
            "gauge",
            "Fore-channel slots executing a request now, over all sessions.",
            g.slots_in_use as f64,
        );
        one(
            &mut s,
            "txnfs_session_slots",
            "gauge",
            "Fore-channel slots granted, over all sessions.",
            g.slots_granted as f64,
        );
        one(
            &mut s,
            "txnfs_reply_cache_reserved_bytes",
            "gauge",
            "Reply-cache bytes the sessions' slots reserve.",
            g.reply_cache_reserved as f64,
        );
        one(
            &mut s,
            "txnfs_opens",
            "gauge",
            "Open stateids.",
            g.opens as f64,
        );
        one(
            &mut s,
            "txnfs_lock_states",
            "gauge",
            "Lock stateids.",
            g.lock_states as f64,
        );
        one(
            &mut s,
            "txnfs_locks",
            "gauge",
            "Locked byte ranges.",
            g.locks as f64,
        );
        one(
            &mut s,
            "txnfs_in_grace",
            "gauge",
            "1 while the grace period runs.",
            if g.in_grace { 1.0 } else { 0.0 },
        );
        let d = g.deleg;
        one(
            &mut s,
            "txnfs_delegations",
            "gauge",
            "Delegations held now.",
            d.outstanding as f64,
        );
        family(
            &mut s,
            "txnfs_delegations_total",
            "counter",
            "Delegation events.",
        );
        for (ev, v) in [
            ("granted", d.granted),
            ("recalled", d.recalled),
            ("returned", d.returned),
            ("revoked_unreachable", d.revoked_unreachable),
            ("revoked_timeout", d.revoked_timeout),
            ("released", d.released),
        ] {
            let _ = writeln!(s, "txnfs_delegations_total{{event=\"{ev}\"}} {v}");
        }
        one(
            &mut s,
            "txnfs_delegation_recall_seconds_sum",
            "counter",
            "Sum of recall latencies (recall sent to DELEGRETURN).",
            d.recall_latency_us_sum as f64 / 1e6,
        );
        one(
            &mut s,
            "txnfs_delegation_recall_returns_total",
            "counter",
            "Recalled delegations returned.",
            d.recall_returns as f64,
        );
        one(
            &mut s,
            "txnfs_delegation_recall_seconds_max",
            "gauge",
            "Longest recall latency.",
            d.recall_latency_us_max as f64 / 1e6,
        );
    }
    // Changes made outside the server in delegated directories (ADR 0047).
    family(
        &mut s,
        "txnfs_outside_dir_changes_total",
        "counter",
        "Entry changes made outside the server in delegated directories, and what they caused.",
    );
    let o = &srv.dir_watches.stats;
    for (ev, v) in [
        ("seen", &o.changes),
        ("notified", &o.notified),
        ("recalled", &o.recalled),
    ] {
        let v = v.load(Ordering::Relaxed);
        let _ = writeln!(s, "txnfs_outside_dir_changes_total{{event=\"{ev}\"}} {v}");
    }
    s
}

/// An NFS status number as its name, for labels.
fn status_name(version: u8, status: i32) -> String {
    if version == 3 {
        return match txnfs_proto::nfs3::nfsstat3::from_i32(status) {
            Some(s) => format!("{s:?}"),
            None => status.to_string(),
        };
    }
    match crate::nfs::nfsstat4::from_i32(status) {
        Some(s) => format!("{s:?}"),
        None => status.to_string(),
    }
}

fn us(bound: Option<u64>) -> String {
    match bound {
        None => "-".into(),
        Some(u64::MAX) => ">10s".into(),
        Some(b) if b >= 1_000_000 => format!("≤{}s", b / 1_000_000),
        Some(b) if b >= 1_000 => format!("≤{}ms", b / 1_000),
        Some(b) => format!("≤{b}µs"),
    }
}

/// nfsstat-like: the server's totals, then per op and procedure its calls, share,
/// failures and latency (p50, p99 as bucket bounds).
pub fn summary(srv: &Server, drc: Option<crate::v3::drc::DrcStats>) -> String {
    let m = &srv.metrics;
    let mut s = String::new();
    let st = srv.stats.snapshot();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let _ = writeln!(
        s,
        "Server: {} connections open ({} accepted), {} COMPOUNDs, {} answered from the reply cache",
        load(&m.connections_open),
        load(&m.connections_accepted),
        st.compounds,
        st.replays
    );
    let w = &m.write_counts;
    let _ = writeln!(
        s,
        "Transport: {} writes, {} records ({:.2} records per write), {} bytes",
        w.writes(),
        w.records(),
        w.records() as f64 / w.writes().max(1) as f64,
        w.bytes()
    );
    if let Some(g) = gather(srv) {
        let _ = writeln!(
            s,
            "State: {} clients, {} sessions ({} of {} slots in use), {} opens, {} locks{}",
            g.clients,
            g.sessions,
            g.slots_in_use,
            g.slots_granted,
            g.opens,
            g.locks,
            if g.in_grace { ", in grace" } else { "" }
        );
        let d = g.deleg;
        let _ = writeln!(
            s,
            "Delegations: {} held; {} granted, {} recalled, {} returned, {} revoked ({} unreachable, {} timed out); longest recall {} ms",
            d.outstanding,
            d.granted,
            d.recalled,
            d.returned,
            d.revoked,
            d.revoked_unreachable,
            d.revoked_timeout,
            d.recall_latency_us_max / 1000
        );
    }
    let _ = write!(
        s,
        "Transactions: {} committed, {} failed",
        load(&m.txn_committed),
        load(&m.txn_failed)
    );
    match srv.exports.journal_stats() {
        Some(j) => {
            let _ = writeln!(
                s,
                "; journal: {} bytes in {} records appended, {} bytes long",
                j.appended_bytes, j.records, j.size
            );
        }
        None => s.push_str("; no journal\n"),
    }
    if let Some(d) = drc {
        let _ = writeln!(
            s,
            "NFSv3 reply cache: {} entries, {} bytes, {} replays",
            d.entries, d.bytes, d.replays
        );
    }
    for e in srv.exports.snapshot().exports.values() {
        if let Some(io) = m.export_io(e.id) {
            let _ = writeln!(
                s,
                "Export {}: {} READs ({} bytes), {} WRITEs ({} bytes)",
                e.name,
                load(&io.reads),
                load(&io.read_bytes),
                load(&io.writes),
                load(&io.write_bytes)
            );
        }
    }
    let ops = ran(m);
    for version in [4u8, 3] {
        let rows: Vec<_> = ops.iter().filter(|o| o.0 == version).collect();
        if rows.is_empty() {
            continue;
        }
        let total: u64 = rows.iter().map(|o| o.3.count).sum();
        let _ = writeln!(
            s,
            "\nNFSv{version} {}: {total} calls\n{:<22} {:>10} {:>6} {:>8} {:>9} {:>9}",
            if version == 4 { "ops" } else { "procedures" },
            "name",
            "calls",
            "%",
            "errors",
            "p50",
            "p99"
        );
        for (_, name, om, h) in rows {
            let _ = writeln!(
                s,
                "{name:<22} {:>10} {:>5.1}% {:>8} {:>9} {:>9}",
                h.count,
                100.0 * h.count as f64 / total.max(1) as f64,
                om.errors.load(Ordering::Relaxed),
                us(h.quantile_bound_us(0.5)),
                us(h.quantile_bound_us(0.99))
            );
        }
    }
    s
}

/// One line per NFSv4 client record.
pub fn clients(srv: &Server) -> String {
    let now = srv.clock.now();
    let Ok(core) = srv.core() else {
        return "the state core is unavailable\n".into();
    };
    let list = core.sessions().client_summaries(now);
    let rows: Vec<_> = list
        .into_iter()
        .map(|c| {
            let d = core.delegations().client_stats(c.id);
            (c, d.outstanding)
        })
        .collect();
    drop(core);
    let mut s = format!(
        "{:<18} {:>6} {:>8} {:>5} {:>11} {:>8} {:>11} {:>5} {:>9} {:>10} {:>12} {:>12}  owner\n",
        "client id",
        "uid",
        "sessions",
        "conns",
        "delegations",
        "idle s",
        "state",
        "slots",
        "compounds",
        "ops",
        "read B",
        "written B"
    );
    for (c, delegs) in rows {
        let owner: String = String::from_utf8_lossy(&c.owner)
            .chars()
            .map(|ch| if ch.is_control() { '?' } else { ch })
            .take(60)
            .collect();
        let state = match (c.confirmed, c.restored) {
            (false, _) => "unconfirmed",
            (true, true) => "restored",
            (true, false) => "active",
        };
        let _ = writeln!(
            s,
            "{:<18} {:>6} {:>8} {:>5} {:>11} {:>8} {:>11} {:>5} {:>9} {:>10} {:>12} {:>12}  {owner}",
            format!("{:016x}", c.id),
            c.uid,
            c.sessions,
            c.connections,
            delegs,
            c.idle.as_secs(),
            state,
            c.slots_in_use,
            c.compounds,
            c.ops,
            c.read_bytes,
            c.write_bytes
        );
    }
    s
}
