//! `txnfs bench seeds` (ADR 0053): the seeds' figures that this machine can rerun,
//! each a named sweep with the published finding (quoted from the seed text, with its
//! section and figure) and ours computed from the sweep, side by side in `seeds.md`.
//!
//! What cannot be rerun here is not listed: the seeds' hardware (10GbE, five clients,
//! SSD RAID), NFSv3 against the Linux kernel client, Hash-Cast. Ours are a debug or
//! release txnfs on loopback with our client: the shapes compare, the numbers do not.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::stats::fmt_num;
use crate::sweep::{Cell, Sweep, SweepArgs};

/// Run the seeds' figures that can be rerun here.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "EXAMPLES:
  txnfs bench seeds --list
  txnfs bench seeds --only deleg-locked --quick
  txnfs bench seeds --out /tmp/seeds

Each preset is a `txnfs bench sweep`; without --target a txnfs server is started on
127.0.0.1 for each. --quick runs a tiny grid (two thread counts, one delay, half a
second, two repeats) to check the machinery, not to measure.")]
pub struct SeedsArgs {
    /// Print the presets and what each reproduces, run nothing.
    #[arg(long)]
    pub list: bool,
    /// Run only these presets (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// A tiny grid per preset.
    #[arg(long)]
    pub quick: bool,
    /// nfs://host:port/path of a running server (default: start txnfs per preset).
    #[arg(long)]
    pub target: Option<String>,
    /// PID of the server at --target.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Output directory (default <target>/bench/seeds).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One rerunnable figure.
pub struct Preset {
    pub name: &'static str,
    /// Seed, section and figure.
    pub source: &'static str,
    /// The published finding, in the seed's words and numbers.
    pub published: &'static str,
    workload: &'static str,
    threads: &'static [usize],
    delays: &'static [f64],
    batch: &'static [&'static str],
    run_args: &'static [&'static str],
    /// Our figure, from the sweep.
    ours: fn(&Sweep) -> String,
}

pub const PRESETS: &[Preset] = &[
    Preset {
        name: "tyche-batching",
        source: "seed 004 §VI.D, Fig. 5(a) (4 KB random reads)",
        published: "dynamic batching beats no batching by up to 44.2 % at high concurrency \
                    and by 28.1 % at 32 outstanding requests; static batching is poor at \
                    low concurrency (batches leave when max_delay expires)",
        workload: "randread",
        threads: &[1, 2, 4, 8, 16, 32, 64, 128],
        delays: &[0.0],
        batch: &["none", "static:2", "static:8", "static:64", "dynamic"],
        run_args: &["--io-size", "4k"],
        ours: batching_gain,
    },
    Preset {
        name: "slots-vs-threads",
        source: "seed 001 §4.2, Fig. 10 and 11 (empty-file creation)",
        published: "waiting for a session slot began at 32 threads; at 512 threads the mean \
                    wait was 2,500 ms (12,500× the 0.2 ms RTT); with 10 ms delay the wait \
                    was short beside the RTT",
        workload: "create",
        threads: &[1, 4, 16, 32, 64, 128, 256, 512],
        delays: &[10.0],
        batch: &["none"],
        run_args: &["--slots", "16"],
        ours: slot_wait,
    },
    Preset {
        name: "deleg-locked",
        source: "seed 001 §5.2, Table 1 (locked reads, 1,000 files × 10)",
        published: "NFSv4.1 sent 88,009 requests with delegations off and 3,009 with them on \
                    (1,000 OPEN, 1,000 READ, no LOCK); NFSv3 60,008",
        workload: "locked",
        threads: &[1],
        delays: &[0.0],
        batch: &["none"],
        run_args: &[],
        ours: locked_requests,
    },
    Preset {
        name: "cached-reads",
        source: "seed 001 §4.1, Fig. 6 and 7 (small files read over and over)",
        published: "with delegations NFSv4.1 was 2× NFSv3 once cached and made 8.3× fewer \
                    requests; V3's were 95 % GETATTR revalidations",
        workload: "cachedread",
        threads: &[1, 16],
        delays: &[0.0, 10.0],
        batch: &["none"],
        run_args: &[],
        ours: cached_reads,
    },
    Preset {
        name: "listing",
        source: "seed 001 §4.3, Fig. 12 (single-threaded directory listing)",
        published: "NFSv4.1 was 15 % slower than NFSv3 at zero delay and within 94-99 % of it \
                    with 1-40 ms delay",
        workload: "listing",
        threads: &[1],
        delays: &[0.0, 1.0, 10.0, 40.0],
        batch: &["none"],
        run_args: &[],
        ours: listing_by_delay,
    },
];

fn ops(c: &Cell) -> Option<f64> {
    c.ops_per_s.map(|s| s.mean)
}

fn cell<'a>(s: &'a Sweep, batch: &str, threads: usize) -> Option<&'a Cell> {
    s.cells
        .iter()
        .find(|c| c.batch == batch && c.threads == threads)
}

fn batching_gain(s: &Sweep) -> String {
    let mut best: Option<(usize, f64)> = None;
    for c in s.cells.iter().filter(|c| c.batch == "dynamic") {
        let (Some(d), Some(n)) = (ops(c), cell(s, "none", c.threads).and_then(ops)) else {
            continue;
        };
        let gain = (d / n - 1.0) * 100.0;
        if best.is_none_or(|(_, g)| gain > g) {
            best = Some((c.threads, gain));
        }
    }
    let at = |t: usize, b: &str| -> String {
        match (
            cell(s, b, t).and_then(ops),
            cell(s, "none", t).and_then(ops),
        ) {
            (Some(x), Some(n)) => format!("{:+.1} %", (x / n - 1.0) * 100.0),
            _ => "–".into(),
        }
    };
    match best {
        Some((t, g)) => format!(
            "dynamic vs none: best {g:+.1} % at {t} threads, {} at 32; static:64 vs none at 1 \
             thread: {}",
            at(32, "dynamic"),
            at(1, "static:64")
        ),
        None => "no dynamic/none pair measured".into(),
    }
}

fn slot_wait(s: &Sweep) -> String {
    let waits: Vec<String> = s
        .cells
        .iter()
        .filter_map(|c| {
            Some(format!(
                "{} threads {} ms",
                c.threads,
                fmt_num(c.slot_wait_us?.mean / 1000.0)
            ))
        })
        .collect();
    let rtt = s
        .cells
        .iter()
        .filter_map(|c| c.rtt_us)
        .map(|r| r.mean)
        .fold(0.0, f64::max);
    format!(
        "mean slot wait per message: {} (largest RTT {} ms)",
        waits.join(", "),
        fmt_num(rtt / 1000.0)
    )
}

/// Requests per iteration, scaled to the seed's 10,000 iterations per client.
fn locked_requests(s: &Sweep) -> String {
    let Some(rep) = s
        .cells
        .first()
        .and_then(|c| c.result.as_ref()?.repeats.last())
    else {
        return "no result".into();
    };
    let per = |n: u64| n as f64 * 10_000.0 / rep.ops.max(1) as f64;
    let op = |k: &str| per(rep.op_counts.get(k).copied().unwrap_or(0));
    format!(
        "{} requests per 10,000 locked reads (OPEN {}, READ {}, LOCK {}), delegations on",
        fmt_num(per(rep.compounds)),
        fmt_num(op("OPEN")),
        fmt_num(op("READ")),
        fmt_num(op("LOCK"))
    )
}

fn cached_reads(s: &Sweep) -> String {
    let parts: Vec<String> = s
        .cells
        .iter()
        .filter_map(|c| {
            let rep = c.result.as_ref()?.repeats.last()?;
            Some(format!(
                "{} threads at {} ms: {} ops/s, {} READs per 100 reads",
                c.threads,
                fmt_num(c.delay_ms),
                fmt_num(ops(c)?),
                fmt_num(
                    rep.op_counts.get("READ").copied().unwrap_or(0) as f64 * 100.0
                        / rep.ops.max(1) as f64
                )
            ))
        })
        .collect();
    parts.join("; ")
}

fn listing_by_delay(s: &Sweep) -> String {
    let parts: Vec<String> = s
        .cells
        .iter()
        .filter_map(|c| {
            Some(format!(
                "{} ms: {} ops/s",
                fmt_num(c.delay_ms),
                fmt_num(ops(c)?)
            ))
        })
        .collect();
    parts.join(", ")
}

impl Preset {
    fn sweep_args(&self, a: &SeedsArgs, out: PathBuf) -> SweepArgs {
        let (threads, delays, repeat, duration) = if a.quick {
            let t: Vec<usize> = self
                .threads
                .iter()
                .copied()
                .filter(|t| *t <= 4)
                .take(2)
                .collect();
            (t, vec![self.delays[0]], 2, 0.5)
        } else {
            (self.threads.to_vec(), self.delays.to_vec(), 3, 5.0)
        };
        let mut run_args: Vec<String> = self.run_args.iter().map(|s| s.to_string()).collect();
        if a.quick {
            run_args.extend(["--scale", "0.01"].map(String::from));
        }
        SweepArgs {
            workload: self.workload.into(),
            target: a.target.clone(),
            threads,
            delay_ms: delays,
            batch: self.batch.iter().map(|s| s.to_string()).collect(),
            repeat,
            duration,
            out: Some(out),
            server_pid: a.server_pid,
            minor: None,
            run_args,
        }
    }
}

/// `--list`: one preset per line.
pub fn list() -> String {
    let mut s = String::new();
    for p in PRESETS {
        let _ = writeln!(s, "{:<18} {} — {}", p.name, p.source, p.workload);
    }
    s
}

/// Run the chosen presets and write `seeds.md`; returns its text.
pub fn main(a: SeedsArgs) -> Result<String> {
    if a.list {
        return Ok(list());
    }
    if let Some(bad) = a
        .only
        .iter()
        .find(|n| !PRESETS.iter().any(|p| p.name == *n))
    {
        bail!("no preset {bad:?} (see txnfs bench seeds --list)");
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| crate::servers::target_dir().join("bench").join("seeds"));
    let mut md = String::from(
        "# The seeds' figures, rerun here\n\n\
         Published: the seed's finding (its hardware, Linux's client and server). Ours: \
         txnfs on this machine, loopback, our client — compare shapes, not numbers.\n\n\
         | preset | reproduces | published | ours | files |\n|---|---|---|---|---|\n",
    );
    let mut failed = Vec::new();
    for p in PRESETS
        .iter()
        .filter(|p| a.only.is_empty() || a.only.iter().any(|n| n == p.name))
    {
        let dir = out.join(p.name);
        let ours = match crate::sweep::main(p.sweep_args(&a, dir)) {
            Ok((sweep, _)) => (p.ours)(&sweep),
            Err(e) => {
                failed.push(p.name);
                format!("failed: {}", format!("{e:#}").replace('\n', " "))
            }
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | [{n}/sweep.md]({n}/sweep.md) |",
            p.name,
            p.source,
            p.published,
            ours.replace('|', "/"),
            n = p.name
        );
    }
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("seeds.md"), &md)?;
    if !failed.is_empty() {
        bail!(
            "presets failed: {} (see {})",
            failed.join(", "),
            out.join("seeds.md").display()
        );
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    fn c(batch: &str, threads: usize, ops: f64) -> Cell {
        Cell {
            threads,
            delay_ms: 0.0,
            batch: batch.into(),
            ops_per_s: Some(Summary::new(ops, None, 1)),
            slot_wait_us: None,
            rtt_us: None,
            requests_per_message: None,
            error: None,
            result: None,
        }
    }

    #[test]
    fn batching_gain_finds_the_best_thread_count() {
        let s = Sweep {
            cells: vec![
                c("none", 1, 100.0),
                c("dynamic", 1, 99.0),
                c("none", 32, 1000.0),
                c("dynamic", 32, 1500.0),
                c("static:64", 1, 20.0),
            ],
            ..Sweep::default()
        };
        let t = batching_gain(&s);
        assert!(t.contains("best +50.0 % at 32 threads"), "{t}");
        assert!(t.contains("+50.0 % at 32"), "{t}");
        assert!(t.contains("at 1 thread: -80.0 %"), "{t}");
    }

    #[test]
    fn presets_are_named_once_and_cite_their_seed() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(PRESETS[..i].iter().all(|q| q.name != p.name));
            assert!(p.source.starts_with("seed 00"), "{}", p.name);
            assert!(
                txnfs_bench::workloads::NAMES.contains(&p.workload),
                "{}",
                p.workload
            );
        }
    }
}
