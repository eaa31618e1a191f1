//! Clients as separate processes (`txnfs bench run --processes N`, ADR 0053): the
//! parent starts N copies of this binary's `run` with the same arguments and the hidden
//! `--gate`, waits until every one has prepared (`READY`), gives them all one start
//! instant a little ahead, samples the server from that instant until the last `DONE`,
//! then gathers each process's results and merges them. The measured start skew is each
//! process's release time against the agreed instant (seed 001 §3 measured its own
//! Benchmaster's: mean 235 ms, max 432 ms).
//!
//! Each process works in its own directory with its own data set, as separate
//! machines' clients would. `--launch CMD` starts a process through a command of the
//! user's (`ssh host2 txnfs`, a container runtime, …) so clients can run on other
//! machines: the protocol is the process's stdin and stdout, whatever carries them.

use crate::gate::{self, unix_ns};
use crate::results::{Latency, Repeat, Results, StartSkew, SummaryBlock};
use crate::sysstats::{ProcSecond, Sampler, SysSecond};
use crate::wire::{OpWire, Wire};
use crate::{Proc, ProcSample};
use anyhow::{anyhow, bail, Context};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// How far ahead of "all ready" the start instant is: time for the START lines to
/// reach every process and for each to arm its timer.
pub const START_LEAD: Duration = Duration::from_millis(200);

/// Options of the parent that the children must not see, with whether each takes a
/// value: the children get `--gate` instead, and the parent alone samples the server
/// and writes the results.
const PARENT_ONLY: [(&str, bool); 5] = [
    ("--processes", true),
    ("--launch", true),
    ("--out", true),
    ("--server-pid", true),
    ("--strict", false),
];

/// The children's arguments: this process's, without the parent's own options.
pub fn child_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let name = a.split('=').next().unwrap_or("");
        match PARENT_ONLY.iter().find(|(n, _)| *n == name) {
            Some((_, takes_value)) => skip_value = *takes_value && !a.contains('='),
            None => out.push(a),
        }
    }
    out.push("--gate".into());
    out.push("--quiet".into());
    out
}

struct ChildProc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    index: usize,
}

impl ChildProc {
    /// Read lines until one starts with `word`; other lines are passed to stderr.
    fn expect(&mut self, word: &str) -> anyhow::Result<String> {
        loop {
            let mut line = String::new();
            let n = self
                .stdout
                .read_line(&mut line)
                .with_context(|| format!("reading process {}", self.index))?;
            if n == 0 {
                let status = self.child.wait().ok();
                bail!(
                    "client process {} ended before {word} ({})",
                    self.index,
                    status.map_or("status unknown".into(), |s| s.to_string())
                );
            }
            if let Some(rest) = line.strip_prefix(word) {
                return Ok(rest.trim().to_string());
            }
            eprint!("[process {}] {line}", self.index);
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // Only a child still running (an error on the way) is stopped, by its PID.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The command that starts client process `index`: `exe` itself, or the launch command
/// of its turn (round robin) run by `sh -c` with `bench` and `args` after it (`local`
/// is `exe`).
fn client_command(
    exe: &std::path::Path,
    launch: &[String],
    index: usize,
    args: &[String],
) -> Command {
    match launch.get(index % launch.len().max(1)).map(String::as_str) {
        None | Some("local") => {
            let mut c = Command::new(exe);
            c.args(args);
            c
        }
        // The launch command starts `txnfs` (there, `txnfs bench run ...` runs the bench
        // binary beside it); `args` begin with `run`.
        Some(cmd) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("{cmd} bench \"$@\""))
                .arg("sh")
                .args(args);
            c
        }
    }
}

/// Run `n` client processes of `exe` (or started by the `launch` commands) with `args`
/// (the `run` command line) through `repeat` gated repeats; `server_pid` is sampled by
/// this process.
pub fn run(
    exe: &std::path::Path,
    launch: &[String],
    args: &[String],
    n: usize,
    repeat: usize,
    server_pid: Option<u32>,
) -> anyhow::Result<Results> {
    if n == 0 {
        bail!("--processes must be at least 1");
    }
    let mut kids = Vec::new();
    for index in 0..n {
        let mut child = client_command(exe, launch, index, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting client process {index}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("client process {index} has no pipes");
        };
        kids.push(ChildProc {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            index,
        });
    }
    let mut windows = Vec::new();
    for _ in 0..repeat {
        for k in &mut kids {
            k.expect(gate::READY)?;
        }
        let at = unix_ns() + START_LEAD.as_nanos() as u64;
        for k in &mut kids {
            writeln!(k.stdin, "{} {at}", gate::START)
                .and_then(|_| k.stdin.flush())
                .with_context(|| format!("starting process {}", k.index))?;
        }
        std::thread::sleep(Duration::from_nanos(at.saturating_sub(unix_ns())));
        let before = server_pid.and_then(|p| ProcSample::read(Proc::Pid(p)).ok());
        let sampler = server_pid.map(|p| Sampler::start(Some(p)));
        for k in &mut kids {
            k.expect(gate::DONE)?;
        }
        let after = server_pid.and_then(|p| ProcSample::read(Proc::Pid(p)).ok());
        let series = sampler.map(Sampler::finish).unwrap_or_default();
        windows.push((at, before.zip(after), series));
    }
    let mut results = Vec::new();
    for k in &mut kids {
        let json = k.expect(gate::RESULT)?;
        let r: Results = serde_json::from_str(&json)
            .with_context(|| format!("results of client process {}", k.index))?;
        let status = k.child.wait()?;
        if !status.success() {
            bail!("client process {} failed: {status}", k.index);
        }
        results.push(r);
    }
    let mut merged = results
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no results"))?;
    merged.repeats = Vec::new();
    for (r, (agreed, server, series)) in windows.into_iter().enumerate() {
        let parts: Vec<&Repeat> = results.iter().filter_map(|x| x.repeats.get(r)).collect();
        let mut rep = merge_repeats(&parts);
        let starts: Vec<u64> = parts.iter().filter_map(|p| p.start_unix_ns).collect();
        rep.start_skew = StartSkew::of(agreed, &starts);
        rep.agreed_start_unix_ns = Some(agreed);
        if let Some((b, a)) = server {
            rep.server = Some(crate::runner::cost_per_request(&b, &a, rep.compounds));
        }
        for (s, srv) in rep.system.iter_mut().zip(&series) {
            s.server = srv.server;
        }
        merged.repeats.push(rep);
    }
    merged.clients *= n;
    merged.processes = Some(n);
    merged.summary = SummaryBlock::of(&merged.repeats);
    Ok(merged)
}

fn weighted(parts: &[(f64, u64)]) -> f64 {
    let n: u64 = parts.iter().map(|p| p.1).sum();
    if n == 0 {
        0.0
    } else {
        parts.iter().map(|(v, w)| v * *w as f64).sum::<f64>() / n as f64
    }
}

/// One repeat of several processes as one: counts and throughputs add up (the
/// processes ran at the same time), means are weighted by their counts, and the
/// percentiles and maxima are the highest of the processes' (an upper bound: the
/// histograms themselves stay in the processes).
pub fn merge_repeats(parts: &[&Repeat]) -> Repeat {
    let mut m = Repeat::default();
    for p in parts {
        m.duration_s = m.duration_s.max(p.duration_s);
        m.ops += p.ops;
        m.bytes += p.bytes;
        m.ops_per_s += p.ops_per_s;
        m.mb_per_s += p.mb_per_s;
        m.compounds += p.compounds;
        if let Some(s) = p.rpc_messages {
            *m.rpc_messages.get_or_insert(0) += s;
        }
        m.batch_level = m.batch_level.max(p.batch_level);
        if m.per_second.len() < p.per_second.len() {
            m.per_second.resize(p.per_second.len(), Default::default());
        }
        for (i, (a, b)) in m.per_second.iter_mut().zip(&p.per_second).enumerate() {
            a.t = i as u64;
            a.ops += b.ops;
            a.bytes += b.bytes;
        }
        for (k, v) in &p.op_counts {
            *m.op_counts.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &p.op_bytes {
            *m.op_bytes.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &p.counters {
            *m.counters.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &p.errors {
            *m.errors.entry(k.clone()).or_default() += v;
        }
        m.checks.extend(p.checks.iter().cloned());
        if m.system.len() < p.system.len() {
            m.system.resize(p.system.len(), SysSecond::default());
        }
        for (a, b) in m.system.iter_mut().zip(&p.system) {
            a.t = a.t.max(b.t);
            add_proc(&mut a.client, &b.client);
        }
    }
    let kinds: std::collections::BTreeSet<&String> =
        parts.iter().flat_map(|p| p.latency_us.keys()).collect();
    for k in kinds {
        let ls: Vec<&Latency> = parts.iter().filter_map(|p| p.latency_us.get(k)).collect();
        let max = |f: fn(&Latency) -> f64| ls.iter().map(|l| f(l)).fold(0.0, f64::max);
        m.latency_us.insert(
            k.clone(),
            Latency {
                count: ls.iter().map(|l| l.count).sum(),
                mean: weighted(&ls.iter().map(|l| (l.mean, l.count)).collect::<Vec<_>>()),
                p50: max(|l| l.p50),
                p90: max(|l| l.p90),
                p99: max(|l| l.p99),
                max: max(|l| l.max),
            },
        );
    }
    let costs: Vec<_> = parts
        .iter()
        .filter_map(|p| p.client.map(|c| (c, p.compounds)))
        .collect();
    if !costs.is_empty() {
        m.client = Some(crate::results::ServerCost {
            cpu_us_per_op: weighted(
                &costs
                    .iter()
                    .map(|(c, n)| (c.cpu_us_per_op, *n))
                    .collect::<Vec<_>>(),
            ),
            ctx_switches_per_op: weighted(
                &costs
                    .iter()
                    .map(|(c, n)| (c.ctx_switches_per_op, *n))
                    .collect::<Vec<_>>(),
            ),
        });
    }
    let wires: Vec<&Wire> = parts.iter().filter_map(|p| p.wire.as_ref()).collect();
    if !wires.is_empty() {
        m.wire = Some(merge_wires(&wires));
    }
    m
}

fn add_proc(a: &mut ProcSecond, b: &ProcSecond) {
    a.user_ms += b.user_ms;
    a.system_ms += b.system_ms;
    a.ctx_voluntary += b.ctx_voluntary;
    a.ctx_involuntary += b.ctx_involuntary;
    a.rss_kib += b.rss_kib;
}

fn merge_wires(wires: &[&Wire]) -> Wire {
    let mut out = Wire::default();
    let kinds: std::collections::BTreeSet<&String> =
        wires.iter().flat_map(|w| w.per_type.keys()).collect();
    for k in kinds {
        let os: Vec<&OpWire> = wires.iter().filter_map(|w| w.per_type.get(k)).collect();
        let sum = |f: fn(&OpWire) -> u64| os.iter().map(|o| f(o)).sum::<u64>();
        out.per_type.insert(
            k.clone(),
            OpWire {
                requests: sum(|o| o.requests),
                messages: sum(|o| o.messages),
                bytes_sent: sum(|o| o.bytes_sent),
                bytes_received: sum(|o| o.bytes_received),
                batched: sum(|o| o.batched),
                no_reply: sum(|o| o.no_reply),
                rtt_us: weighted(
                    &os.iter()
                        .map(|o| (o.rtt_us, o.messages))
                        .collect::<Vec<_>>(),
                ),
                slot_wait_us: weighted(
                    &os.iter()
                        .map(|o| (o.slot_wait_us, o.messages))
                        .collect::<Vec<_>>(),
                ),
                batch_wait_us: weighted(
                    &os.iter()
                        .map(|o| (o.batch_wait_us, o.requests))
                        .collect::<Vec<_>>(),
                ),
            },
        );
    }
    let t = &mut out.transport;
    for w in wires {
        t.messages_sent += w.transport.messages_sent;
        t.messages_received += w.transport.messages_received;
    }
    let pairs = |f: fn(&Wire) -> f64| -> Vec<(f64, u64)> {
        wires
            .iter()
            .map(|w| (f(w), w.transport.messages_sent))
            .collect()
    };
    t.requests_per_message = weighted(&pairs(|w| w.transport.requests_per_message));
    t.on_the_wire = weighted(&pairs(|w| w.transport.on_the_wire));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_options_stay_with_the_parent() {
        let args = [
            "run",
            "randread",
            "--processes",
            "3",
            "--target",
            "nfs://x/",
            "--out=/tmp/o",
            "--server-pid",
            "12",
            "--strict",
            "--launch",
            "ssh h2 txnfs",
            "--launch=local",
            "--threads",
            "2",
        ]
        .map(String::from);
        assert_eq!(
            child_args(args),
            [
                "run",
                "randread",
                "--target",
                "nfs://x/",
                "--threads",
                "2",
                "--gate",
                "--quiet"
            ]
        );
    }

    #[test]
    fn repeats_of_processes_add_up() {
        let rep = |ops: u64, mean: f64, p99: f64, rtt: f64| {
            let mut r = Repeat {
                duration_s: 2.0,
                ops,
                ops_per_s: ops as f64 / 2.0,
                compounds: ops,
                ..Repeat::default()
            };
            r.latency_us.insert(
                "READ".into(),
                Latency {
                    count: ops,
                    mean,
                    p99,
                    ..Latency::default()
                },
            );
            let mut w = Wire::default();
            w.per_type.insert(
                "READ".into(),
                OpWire {
                    requests: ops,
                    messages: ops,
                    rtt_us: rtt,
                    ..OpWire::default()
                },
            );
            w.transport.messages_sent = ops;
            w.transport.requests_per_message = 1.0;
            r.wire = Some(w);
            r
        };
        let (a, b) = (rep(100, 10.0, 50.0, 8.0), rep(300, 20.0, 40.0, 16.0));
        let m = merge_repeats(&[&a, &b]);
        assert_eq!(m.ops, 400);
        assert_eq!(m.ops_per_s, 200.0);
        let l = m.latency_us["READ"];
        assert_eq!(l.count, 400);
        assert!((l.mean - 17.5).abs() < 1e-9, "weighted by count");
        assert_eq!(l.p99, 50.0, "highest of the processes'");
        let w = m.wire.unwrap();
        assert!((w.per_type["READ"].rtt_us - 14.0).abs() < 1e-9);
        assert_eq!(w.transport.messages_sent, 400);
        assert_eq!(w.transport.requests_per_message, 1.0);
    }
}
