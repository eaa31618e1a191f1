//! `txnfs bench sweep` (ADR 0053): one workload over threads × delay × batch mode,
//! every cell a `bench run` with repeats, drawn as seed 001's and seed 004's line
//! plots (x: threads, logarithmic; one line per batch mode; 95 % CI error bars) with a
//! table of the same figures. Against `--target`, or a txnfs started on loopback.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::compare::fmt_delay;
use crate::servers::{RunningServer, ServerKind, ServerOpts};
use crate::stats::Summary;
use crate::sweep_plot::{ci_line_chart, CiLine};
use txnfs_bench::cli::RunArgs;
use txnfs_bench::results::{Repeat, Results, SummaryBlock};

/// Run one workload over a grid of threads, delays and batch modes; write
/// `sweep.json`, `sweep.md` and SVG line plots with 95 % CI error bars.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "EXAMPLES:
  txnfs bench sweep randread --threads 1,4,16 --delay-ms 0 --batch none,dynamic --repeat 2 --duration 1
  txnfs bench sweep randread --delay-ms 0,10 --batch none,static:8,dynamic --out /tmp/sweep
  txnfs bench sweep smallfiles --threads 1,2,4,8,16,32 --delay-ms 10 --batch none -- --slots 16

Every cell is a `txnfs bench run` (arguments after `--` go to each) of --duration
seconds, repeated --repeat times: the first repeat of every cell, then the second,
the batch modes of a point one after another in an order rotated every repeat, so
that a drift of the machine falls on every mode alike. Without --target a txnfs server is started on
127.0.0.1 for the sweep and stopped after it (its CPU and context switches are
sampled). The plots: ops/s and the mean session-slot wait per message against
threads, one per delay, a line per batch mode.")]
pub struct SweepArgs {
    /// The workload (see `txnfs bench list`).
    pub workload: String,
    /// nfs://host:port/path of a running server (default: start txnfs on loopback).
    #[arg(long)]
    pub target: Option<String>,
    /// Threads of the client, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256,512"
    )]
    pub threads: Vec<usize>,
    /// Added network delay per direction, ms, comma-separated.
    #[arg(long = "delay-ms", value_delimiter = ',', default_value = "0,1,10,40")]
    pub delay_ms: Vec<f64>,
    /// Batch modes (none, static:N, dynamic), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "none,static:8,dynamic")]
    pub batch: Vec<String>,
    /// Repeats per cell.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Seconds per repeat.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Output directory (default <target>/bench/sweep).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// PID of the server at --target, to sample its CPU and context switches.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The NFSv4 minor version (the binary's global `--vers`).
    #[arg(skip)]
    pub minor: Option<u32>,
    /// Arguments after `--` go to every `bench run`.
    #[arg(last = true, value_name = "RUN_ARGS")]
    pub run_args: Vec<String>,
}

/// One cell of the grid.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    pub threads: usize,
    pub delay_ms: f64,
    pub batch: String,
    pub ops_per_s: Option<Summary>,
    /// Mean session slot wait per message, µs (over all request types).
    pub slot_wait_us: Option<Summary>,
    /// Mean round-trip time per message, µs.
    pub rtt_us: Option<Summary>,
    pub requests_per_message: Option<Summary>,
    pub error: Option<String>,
    pub result: Option<Results>,
}

/// `sweep.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sweep {
    pub workload: String,
    pub target: String,
    pub cells: Vec<Cell>,
}

/// `bench run` arguments parsed on their own.
#[derive(Parser)]
struct RunOnly {
    #[command(flatten)]
    run: RunArgs,
}

/// A per-repeat figure from the wire table: `f(per_type)` weighted by messages.
fn per_message(rep: &Repeat, f: fn(&txnfs_bench::wire::OpWire) -> f64) -> Option<f64> {
    let w = rep.wire.as_ref()?;
    let n: u64 = w.per_type.values().map(|o| o.messages).sum();
    (n > 0).then(|| {
        w.per_type
            .values()
            .map(|o| f(o) * o.messages as f64)
            .sum::<f64>()
            / n as f64
    })
}

fn summarize(res: &Results, f: &dyn Fn(&Repeat) -> Option<f64>) -> Option<Summary> {
    Summary::of(&res.repeats.iter().filter_map(f).collect::<Vec<_>>())
}

impl Cell {
    fn of(threads: usize, delay_ms: f64, batch: &str, r: Result<Results>) -> Cell {
        let (result, error) = match r {
            Ok(res) => (Some(res), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        };
        let stat =
            |f: &dyn Fn(&Repeat) -> Option<f64>| result.as_ref().and_then(|r| summarize(r, f));
        Cell {
            threads,
            delay_ms,
            batch: batch.to_string(),
            ops_per_s: stat(&|r| Some(r.ops_per_s)),
            slot_wait_us: stat(&|r| per_message(r, |o| o.slot_wait_us)),
            rtt_us: stat(&|r| per_message(r, |o| o.rtt_us)),
            requests_per_message: stat(&|r| {
                r.wire.as_ref().map(|w| w.transport.requests_per_message)
            }),
            error,
            result,
        }
    }
}

/// The `bench run` command line of one cell.
fn cell_args(
    a: &SweepArgs,
    target: &str,
    pid: Option<u32>,
    t: usize,
    d: f64,
    b: &str,
) -> Vec<String> {
    let mut v: Vec<String> = ["run", &a.workload, "--target", target, "--quiet"]
        .map(String::from)
        .to_vec();
    for (k, val) in [
        ("--threads", t.to_string()),
        ("--delay-ms", d.to_string()),
        ("--batch", b.to_string()),
        // One repeat per run: `main` interleaves the repeats of the cells.
        ("--repeat", "1".to_string()),
        ("--duration", a.duration.to_string()),
    ] {
        v.push(k.into());
        v.push(val);
    }
    if let Some(p) = pid {
        v.push("--server-pid".into());
        v.push(p.to_string());
    }
    v.extend(a.run_args.iter().cloned());
    v
}

/// Run the sweep and write its outputs into the output directory; returns the sweep
/// and the files written.
pub fn main(a: SweepArgs) -> Result<(Sweep, Vec<PathBuf>)> {
    if a.run_args.iter().any(|x| x.starts_with("--processes")) {
        bail!("bench sweep runs its cells in this process: --processes is for bench run");
    }
    if a.threads.is_empty() || a.delay_ms.is_empty() || a.batch.is_empty() {
        bail!("--threads, --delay-ms and --batch need at least one value each");
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| crate::servers::target_dir().join("bench").join("sweep"));
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let mut server = None;
    let (target, pid) = match &a.target {
        Some(t) => (t.clone(), a.server_pid),
        None => {
            crate::servers::install_signal_cleanup();
            let s = RunningServer::start(ServerKind::Txnfs, &ServerOpts::default())?;
            let r = (s.url(), Some(s.pid));
            server = Some(s);
            r
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut sweep = Sweep {
        workload: a.workload.clone(),
        target: target.clone(),
        cells: Vec::new(),
    };
    // Repeat r of every cell runs before repeat r + 1, and the batch modes of one point
    // run one after another, in an order rotated every repeat: a shared machine drifts
    // (static:8 moved 243,000 and then 321,000 ops/s within minutes), and a cell's
    // repeats run back to back would give the drift to whichever mode ran at its time.
    let mut merged: Vec<Option<Result<Results>>> =
        (0..a.delay_ms.len() * a.batch.len() * a.threads.len())
            .map(|_| None)
            .collect();
    let at = |di: usize, bi: usize, ti: usize| (di * a.batch.len() + bi) * a.threads.len() + ti;
    for r in 0..a.repeat {
        for (di, &d) in a.delay_ms.iter().enumerate() {
            for (ti, &t) in a.threads.iter().enumerate() {
                for k in 0..a.batch.len() {
                    let bi = (k + r) % a.batch.len();
                    let b = &a.batch[bi];
                    let args = cell_args(&a, &target, pid, t, d, b);
                    eprintln!(
                        "sweep: {t} threads, {d} ms, batch {b}, repeat {} of {}",
                        r + 1,
                        a.repeat
                    );
                    let one = RunOnly::try_parse_from(&args)
                        .map_err(anyhow::Error::from)
                        .and_then(|mut p| {
                            p.run.minor = a.minor;
                            rt.block_on(txnfs_bench::cli::run(&p.run))
                        });
                    let cell = &mut merged[at(di, bi, ti)];
                    *cell = Some(match (cell.take(), one) {
                        (None, one) => one,
                        (Some(Ok(mut all)), Ok(one)) => {
                            all.repeats.extend(one.repeats);
                            all.summary = SummaryBlock::of(&all.repeats);
                            Ok(all)
                        }
                        (Some(Err(e)), _) | (Some(Ok(_)), Err(e)) => Err(e),
                    });
                }
            }
        }
    }
    for (di, &d) in a.delay_ms.iter().enumerate() {
        for (bi, b) in a.batch.iter().enumerate() {
            for (ti, &t) in a.threads.iter().enumerate() {
                let r = merged[at(di, bi, ti)]
                    .take()
                    .unwrap_or_else(|| Err(anyhow::anyhow!("no repeat ran")));
                sweep.cells.push(Cell::of(t, d, b, r));
            }
        }
    }
    if let Some(mut s) = server {
        s.stop()?;
    }
    let written = write_outputs(&sweep, &a, &out)?;
    let failed: Vec<String> = sweep
        .cells
        .iter()
        .filter_map(|c| {
            c.error
                .as_ref()
                .map(|e| format!("{} threads, {} ms, {}: {e}", c.threads, c.delay_ms, c.batch))
        })
        .collect();
    if !failed.is_empty() {
        bail!("{} cells failed:\n{}", failed.len(), failed.join("\n"));
    }
    Ok((sweep, written))
}

/// One plot per delay of `metric`, a line per batch mode.
fn plots(sweep: &Sweep, a: &SweepArgs, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    type Pick = fn(&Cell) -> Option<Summary>;
    let metrics: [(&str, &str, Pick); 2] = [
        ("ops", "ops/s", |c| c.ops_per_s),
        ("slotwait", "slot wait per message, µs", |c| c.slot_wait_us),
    ];
    for &d in &a.delay_ms {
        for (key, y_desc, pick) in metrics {
            let lines: Vec<CiLine> = a
                .batch
                .iter()
                .map(|b| CiLine {
                    label: format!("batch {b}"),
                    points: sweep
                        .cells
                        .iter()
                        .filter(|c| c.delay_ms == d && &c.batch == b)
                        .filter_map(|c| Some((c.threads as f64, pick(c)?)))
                        .collect(),
                })
                .collect();
            let path = out.join(format!("sweep-{key}-{}ms.svg", fmt_delay(d)));
            let title = format!("{} at {} ms delay: {y_desc}", sweep.workload, fmt_delay(d));
            ci_line_chart(&path, &title, "threads", y_desc, &lines)?;
            files.push(path);
        }
    }
    Ok(files)
}

/// The table of every cell (Markdown).
pub fn table(sweep: &Sweep) -> String {
    let show = |s: &Option<Summary>| s.map(|s| s.display()).unwrap_or_else(|| "–".into());
    let mut md = String::from(
        "| delay ms | batch | threads | ops/s | slot wait µs | RTT µs | requests/message |\n\
         |---:|---|---:|---:|---:|---:|---:|\n",
    );
    for c in &sweep.cells {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            fmt_delay(c.delay_ms),
            c.batch,
            c.threads,
            match &c.error {
                Some(_) => "failed".into(),
                None => show(&c.ops_per_s),
            },
            show(&c.slot_wait_us),
            show(&c.rtt_us),
            show(&c.requests_per_message)
        );
    }
    md
}

fn write_outputs(sweep: &Sweep, a: &SweepArgs, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = plots(sweep, a, out)?;
    let json = out.join("sweep.json");
    std::fs::write(&json, serde_json::to_vec_pretty(sweep)?)?;
    let mut md = format!(
        "# Sweep: {} on {}\n\nMean ± 95 % CI (Student t) over {} repeats of {} s per cell.\n\n",
        sweep.workload, sweep.target, a.repeat, a.duration
    );
    for f in &files {
        if let Some(name) = f.file_name() {
            let _ = writeln!(
                md,
                "![{}]({})\n",
                name.to_string_lossy(),
                name.to_string_lossy()
            );
        }
    }
    md.push_str(&table(sweep));
    let report = out.join("sweep.md");
    std::fs::write(&report, md)?;
    files.push(json);
    files.push(report);
    Ok(files)
}
