//! The report's mountstats and system sections (ADR 0053): per request type the
//! requests, messages, round-trip and queue times (slot wait, batch wait) with the
//! transport's counters, and what client and server processes cost per request and per
//! second — for every run whose results carry them (our client's runs).

use std::fmt::Write;

use crate::compare::Comparison;
use crate::stats::fmt_num;
use txnfs_bench::results::Repeat;
use txnfs_bench::sysstats::{totals, ProcSecond};

/// The per request type table of the runs at `delay`, or nothing when no run has one.
/// Figures are the last repeat's (the earlier repeats are in the results files).
pub fn wire_section(cmp: &Comparison, delay: f64) -> String {
    let mut rows = String::new();
    for run in cmp.runs.iter().filter(|r| r.delay_ms == delay) {
        let Some(rep) = run.result.repeats.last() else {
            continue;
        };
        let Some(w) = &rep.wire else { continue };
        for (kind, o) in &w.per_type {
            let _ = writeln!(
                rows,
                "| `{}` | {} | {kind} | {} | {} | {} | {} | {} |",
                run.workload,
                run.server,
                o.requests,
                o.messages,
                fmt_num(o.rtt_us),
                fmt_num(o.slot_wait_us),
                fmt_num(o.batch_wait_us)
            );
        }
        let t = w.transport;
        let _ = writeln!(
            rows,
            "| `{}` | {} | *transport* | {} sent | {} received | {} requests/message | \
             {} on the wire | |",
            run.workload,
            run.server,
            t.messages_sent,
            t.messages_received,
            fmt_num(t.requests_per_message),
            fmt_num(t.on_the_wire)
        );
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "Per request type as the client saw it (the /proc/self/mountstats view, last \
         repeat): mean round-trip time per message, mean session slot wait per message, \
         mean batch queue wait per request, µs:\n\n",
    );
    md.push_str(
        "| workload | server | request | requests | messages | RTT | slot wait | batch wait |\n",
    );
    md.push_str("|---|---|---|---:|---:|---:|---:|---:|\n");
    md.push_str(&rows);
    md.push('\n');
    md
}

/// CPU (user + system) µs and context switches per request of one process's series.
fn per_request(series: &[ProcSecond], requests: u64) -> (String, String, String) {
    let t = totals(series);
    let n = requests.max(1) as f64;
    (
        fmt_num((t.user_ms + t.system_ms) * 1000.0 / n),
        fmt_num((t.ctx_voluntary + t.ctx_involuntary) as f64 / n),
        format!("{} MiB", t.rss_kib / 1024),
    )
}

fn system_row(rep: &Repeat) -> Option<String> {
    if rep.system.is_empty() {
        return None;
    }
    let client: Vec<ProcSecond> = rep.system.iter().map(|s| s.client).collect();
    let server: Vec<ProcSecond> = rep.system.iter().filter_map(|s| s.server).collect();
    let (cc, cx, cm) = per_request(&client, rep.compounds);
    let (sc, sx, sm) = if server.is_empty() {
        ("–".into(), "–".into(), "–".into())
    } else {
        per_request(&server, rep.compounds)
    };
    Some(format!(
        "{} | {cc} | {cx} | {cm} | {sc} | {sx} | {sm}",
        rep.system.len()
    ))
}

/// What the processes cost at `delay`, from the once-a-second series.
pub fn system_section(cmp: &Comparison, delay: f64) -> String {
    let mut rows = String::new();
    for run in cmp.runs.iter().filter(|r| r.delay_ms == delay) {
        if let Some(row) = run.result.repeats.last().and_then(system_row) {
            let _ = writeln!(rows, "| `{}` | {} | {row} |", run.workload, run.server);
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "Processes, from the once-a-second /proc samples (last repeat): CPU µs and \
         context switches (voluntary + involuntary, every thread) per request, peak RSS:\n\n",
    );
    md.push_str("| workload | server | samples | client CPU µs/req | client ctx/req | client RSS | server CPU µs/req | server ctx/req | server RSS |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    md.push_str(&rows);
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use txnfs_bench::results::Results;
    use txnfs_bench::sysstats::SysSecond;
    use txnfs_bench::wire::{OpWire, Wire};

    #[test]
    fn sections_show_the_wire_and_the_cost_per_request() {
        let mut wire = Wire::default();
        wire.per_type.insert(
            "READ".into(),
            OpWire {
                requests: 100,
                messages: 25,
                rtt_us: 812.5,
                slot_wait_us: 3.0,
                batch_wait_us: 41.0,
                ..OpWire::default()
            },
        );
        wire.transport.messages_sent = 25;
        wire.transport.requests_per_message = 4.0;
        let second = ProcSecond {
            user_ms: 30.0,
            system_ms: 20.0,
            ctx_voluntary: 150,
            ctx_involuntary: 50,
            rss_kib: 4096,
        };
        let rep = Repeat {
            compounds: 100,
            wire: Some(wire),
            system: vec![SysSecond {
                t: 1.0,
                client: second,
                server: Some(second),
                batch_level: None,
            }],
            ..Repeat::default()
        };
        let res = Results {
            workload: "randread".into(),
            server: Some("txnfs".into()),
            repeats: vec![rep],
            ..Results::default()
        };
        let cmp = Comparison::from_results(vec![("txnfs".into(), None, res)]);
        let w = wire_section(&cmp, 0.0);
        assert!(
            w.contains("| `randread` | txnfs | READ | 100 | 25 | 812.5 | 3.00 | 41.00 |"),
            "{w}"
        );
        assert!(w.contains("4.00 requests/message"), "{w}");
        let s = system_section(&cmp, 0.0);
        // 50 ms of CPU over 100 requests = 500 µs; 200 switches = 2 per request.
        assert!(
            s.contains("| 1 | 500.0 | 2.00 | 4 MiB | 500.0 | 2.00 | 4 MiB |"),
            "{s}"
        );
        assert!(wire_section(&cmp, 10.0).is_empty());
    }
}
