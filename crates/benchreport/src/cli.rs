//! The `txnfs-bench` command line: `run`, `list` and `ganesha-conf` (crates/bench) and
//! `compare`. `txnfs bench ARGS` runs this binary with ARGS (ADR 0031).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::compare::{self, Comparison, MatrixOpts};
use crate::report;
use crate::results::BenchResult;
use crate::servers::ServerOpts;

/// Start each server on loopback, run the same workloads against each with
/// `txnfs bench run`, print the ratios, and write `compare.json`, SVG plots
/// and `report.md`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "EXAMPLES:
  txnfs bench compare randread -- --duration 3
  txnfs bench compare getattr randread --delay-ms 0,10 --repeat 3
  txnfs bench compare getattr randread -- --driver nfs-rs --duration 5
  txnfs bench compare tree-ls tree-cp tree-rm -- --scale 0.05
  txnfs bench compare smallfiles --servers txnfs,ganesha --out /tmp/cmp -- --threads 4
  txnfs bench compare getattr randread --versions 3,4.1 -- --duration 5
  txnfs bench compare writefiles --servers txnfs-txn=txnfs,txnfs,ganesha --run-arg txnfs-txn=--txn -- --files-per-txn 16
  txnfs bench compare --from-results txnfs.json ganesha.json --out /tmp/report

Workloads are those of `txnfs bench list`; arguments after `--` go to every
`txnfs bench run` (e.g. --driver nfs-rs, --duration, --clients, --threads).
Servers run on 127.0.0.1 on free ports with fresh exports in temporary
directories: txnfs (--txnfs-bin, else $TXNFS_BIN, which `txnfs bench` sets
to itself, else the txnfs beside this binary or in target/) and NFS-Ganesha
(ganesha.nfsd, the shared configuration of `txnfs bench ganesha-conf`: FSAL
VFS, NFSv4.1, graceless, pNFS off). The runner is this binary's `run` (or
--bench-bin, or $TXNFS_BENCH_BIN). TXNFS_COMPARE_KEEP=1 (or --keep) keeps
the servers' directories and logs.")]
pub struct CompareArgs {
    /// Workloads to run (see `txnfs bench list`).
    #[arg(value_name = "WORKLOAD", required_unless_present = "from_results")]
    pub workloads: Vec<String>,

    /// Servers to compare, comma-separated (txnfs, ganesha); `LABEL=KIND`
    /// names a further configuration of a server (e.g. `txnfs-txn=txnfs`
    /// with `--run-arg txnfs-txn=--txn`).
    #[arg(long, value_delimiter = ',', default_value = "txnfs,ganesha")]
    pub servers: Vec<String>,

    /// `LABEL=ARG`: an extra `bench run` argument for the runs against the
    /// configuration LABEL only (repeatable), e.g. `--run-arg txnfs-txn=--txn`.
    #[arg(long = "run-arg", value_name = "LABEL=ARG", allow_hyphen_values = true)]
    pub run_args: Vec<String>,

    /// `LABEL=ARG`: an extra `txnfs serve` argument for the txnfs
    /// configuration LABEL only (repeatable), e.g. `--server-arg txnfs-notxn=--no-txn`.
    #[arg(
        long = "server-arg",
        value_name = "LABEL=ARG",
        allow_hyphen_values = true
    )]
    pub server_args: Vec<String>,

    /// Run every server once per NFS version, comma-separated (3, 4.0, 4.1), through
    /// the nfs-rs driver (the same client library for each version); the results name
    /// the configurations LABEL-v3, LABEL-v4.1 ... NFS-Ganesha then serves NFSv3 too.
    #[arg(long, value_delimiter = ',', value_name = "VERSIONS")]
    pub versions: Vec<txnfs_bench::driver::NfsVersion>,

    /// Added network delay in milliseconds, comma-separated list.
    #[arg(long = "delay-ms", value_delimiter = ',', default_value = "0")]
    pub delay_ms: Vec<f64>,

    /// Repeats per run (passed to the runner; its default when not given).
    #[arg(long)]
    pub repeat: Option<u32>,

    /// Output directory (default <target>/bench/compare).
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// Server the others are divided by (default ganesha, else the last one).
    #[arg(long)]
    pub baseline: Option<String>,

    /// The runner binary, called as `BIN run ...` (default: this binary).
    #[arg(long, value_name = "PATH")]
    pub bench_bin: Option<PathBuf>,

    /// The txnfs binary.
    #[arg(long, value_name = "PATH")]
    pub txnfs_bin: Option<PathBuf>,

    /// An extra argument for `txnfs serve` (repeatable), e.g. `--txnfs-arg=--no-delegations`.
    #[arg(long = "txnfs-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub txnfs_args: Vec<String>,

    /// Turn NFS-Ganesha's delegations on (`NFSv4 { Delegations = true; }` and
    /// `Delegations = RW` on the export); off by default, as Ganesha ships.
    #[arg(long)]
    pub ganesha_delegations: bool,

    /// Keep the servers' temporary directories (exports, logs).
    #[arg(long)]
    pub keep: bool,

    /// Seconds a server may take to answer an RPC NULL after starting.
    #[arg(long, default_value_t = 10)]
    pub start_timeout: u64,

    /// Do not run anything: build the report from existing results JSON
    /// files (server from each file's "server" field, else its file name).
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "workloads")]
    pub from_results: Vec<PathBuf>,

    /// Arguments after `--` are passed to every `txnfs bench run`.
    #[arg(last = true, value_name = "RUNNER_ARGS")]
    pub bench_args: Vec<String>,
}

/// Run the comparison (or render existing results) and write the outputs.
pub fn main(args: CompareArgs) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| crate::servers::target_dir().join("bench").join("compare"));
    if args.delay_ms.iter().any(|d| !d.is_finite() || *d < 0.0) {
        bail!("--delay-ms takes non-negative numbers");
    }
    let mut cmp = if !args.from_results.is_empty() {
        let mut results = Vec::new();
        for f in &args.from_results {
            let name = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "server".into());
            for r in BenchResult::read_file(f)? {
                results.push((name.clone(), Some(f.display().to_string()), r));
            }
        }
        Comparison::from_results(results)
    } else {
        let servers = compare::per_version(
            compare::server_specs(&args.servers, &args.run_args, &args.server_args)?,
            &args.versions,
        );
        let opts = MatrixOpts {
            workloads: args.workloads.clone(),
            servers,
            delays_ms: args.delay_ms.clone(),
            repeat: args.repeat,
            extra_args: args.bench_args.clone(),
            out: out.clone(),
            bench_bin: args.bench_bin.clone(),
            bench_prefix: Vec::new(),
            server_opts: ServerOpts {
                txnfs_bin: args.txnfs_bin.clone(),
                txnfs_args: args.txnfs_args.clone(),
                ganesha_delegations: args.ganesha_delegations,
                ganesha_nfsv3: args.versions.contains(&txnfs_bench::driver::NfsVersion::V3),
                keep: args.keep,
                start_timeout: std::time::Duration::from_secs(args.start_timeout),
                ..ServerOpts::default()
            },
        };
        crate::servers::install_signal_cleanup();
        compare::run_matrix(&opts)?
    };
    if let Some(b) = &args.baseline {
        if !cmp.server_names().contains(b) {
            bail!("--baseline {b} is not among the servers compared");
        }
        cmp.settings.baseline = b.clone();
        cmp.compute_ratios();
    }
    let written = report::write_all(&cmp, &out)
        .with_context(|| format!("writing the report into {}", out.display()))?;
    print!("{}", cmp.text_table());
    eprintln!(
        "\nwrote {}, {} and {} plots in {}",
        written.json.display(),
        written.report.display(),
        written.bar_charts.len() + written.line_charts.len(),
        out.display()
    );
    if !cmp.errors.is_empty() {
        bail!(
            "{} of {} runs failed (see {})",
            cmp.errors.len(),
            cmp.errors.len() + cmp.runs.len(),
            written.report.display()
        );
    }
    Ok(())
}

/// The `txnfs-bench` binary's arguments.
#[derive(clap::Parser, Debug)]
#[command(
    name = "txnfs-bench",
    version,
    about = "Benchmarks of NFSv4 servers: run a workload, or compare txnfs with NFS-Ganesha",
    long_about = "Benchmarks of NFSv4 servers: run a workload against a server, list the \
                  workloads, or start txnfs and NFS-Ganesha on loopback and compare them. \
                  `txnfs bench ARGS` runs this binary with ARGS."
)]
pub struct ToolArgs {
    /// NFS version the runner's clients speak: 4.2 or 4.1 (default: the highest the
    /// server accepts).
    #[arg(long, global = true, value_name = "VERSION", value_parser = parse_vers)]
    pub vers: Option<u32>,
    #[command(subcommand)]
    pub cmd: ToolCmd,
}

/// The subcommands of `txnfs-bench`.
#[derive(clap::Subcommand, Debug)]
pub enum ToolCmd {
    /// Run a workload against an NFSv4.1 server: ops/s, MB/s, per-op counts and
    /// latencies, server CPU and context switches per op (mean ± 95% CI over repeats).
    Run(Box<txnfs_bench::cli::RunArgs>),
    /// List the workloads (and the client libraries each runs with).
    List,
    /// Print the NFS-Ganesha configuration every txnfs tool uses.
    GaneshaConf(txnfs_bench::cli::GaneshaConfArgs),
    /// Start txnfs and NFS-Ganesha on loopback, run the same workloads against both and
    /// write ratios, JSON, SVG plots and a Markdown report.
    Compare(Box<CompareArgs>),
    /// Run one workload over threads × delay × batch mode with repeats: line plots with
    /// 95 % CI error bars (SVG), a table and JSON.
    Sweep(Box<crate::sweep::SweepArgs>),
    /// Rerun the seeds' figures that can be rerun here (named sweeps) and write the
    /// published finding beside ours.
    Seeds(Box<crate::seeds::SeedsArgs>),
}

/// `4.1` / `4.2` to a minor version.
fn parse_vers(s: &str) -> std::result::Result<u32, String> {
    match s {
        "4.2" => Ok(2),
        "4.1" => Ok(1),
        _ => Err(format!(
            "'{s}': the runner speaks NFS 4.2 and 4.1 (leave --vers out for the highest)"
        )),
    }
}

/// Run one `txnfs-bench` command.
pub fn tool_main(args: ToolArgs) -> Result<()> {
    let bench = |cmd| -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        rt.block_on(txnfs_bench::cli::main(txnfs_bench::cli::BenchArgs { cmd }))
    };
    match args.cmd {
        ToolCmd::Run(mut r) => {
            r.minor = args.vers;
            bench(txnfs_bench::cli::BenchCmd::Run(r))
        }
        ToolCmd::List => bench(txnfs_bench::cli::BenchCmd::List),
        ToolCmd::GaneshaConf(g) => bench(txnfs_bench::cli::BenchCmd::GaneshaConf(g)),
        ToolCmd::Sweep(mut a) => {
            a.minor = args.vers;
            let (sweep, files) = crate::sweep::main(*a)?;
            print!("{}", crate::sweep::table(&sweep));
            for f in files {
                eprintln!("wrote {}", f.display());
            }
            Ok(())
        }
        ToolCmd::Seeds(a) => {
            print!("{}", crate::seeds::main(*a)?);
            Ok(())
        }
        ToolCmd::Compare(mut c) => {
            let me = std::env::current_exe().context("locating this binary")?;
            if c.bench_bin.is_none() && std::env::var_os("TXNFS_BENCH_BIN").is_none() {
                c.bench_bin = Some(me.clone());
            }
            if c.txnfs_bin.is_none() && std::env::var_os("TXNFS_BIN").is_none() {
                c.txnfs_bin = me.parent().map(|d| d.join("txnfs")).filter(|p| p.is_file());
            }
            if let Some(v) = args.vers {
                c.bench_args.push("--vers".into());
                c.bench_args.push(format!("4.{v}"));
            }
            main(*c)
        }
    }
}
