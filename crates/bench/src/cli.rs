//! The `txnfs bench` command line: `bench run <workload> --target nfs://host:port/path ...`.

use crate::driver::Driver;
use crate::runner::{self, RunConfig, Target};
use crate::workload::StopAt;
use crate::workloads::{self, parse_size, Params};
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use txnfs_rpc::gss::GssClientConfig;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Run a workload against an NFSv4.1 server and report ops/s, MB/s,
    /// per-op counts and latencies (mean ± 95% CI over repeats).
    Run(Box<RunArgs>),
    /// List the workloads.
    List,
    /// Print the NFS-Ganesha configuration every txnfs tool uses (FSAL VFS,
    /// NFSv4.1, graceless, pNFS off, one export at /export).
    GaneshaConf(GaneshaConfArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct GaneshaConfArgs {
    /// TCP port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Host directory exported as /export.
    #[arg(long)]
    pub export: PathBuf,
    /// Ganesha's recovery (state) directory.
    #[arg(long)]
    pub recovery_root: PathBuf,
    /// Grant read and write delegations (Ganesha's default is none), e.g. for
    /// scripts/deleg-tail.sh's writer-latency comparison.
    #[arg(long)]
    pub delegations: bool,
}

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "EXAMPLES:
  txnfs bench run randread --target nfs://127.0.0.1:2049/ --duration 5
  txnfs bench run getattr --target nfs://127.0.0.1:2049/ --driver nfs-rs --server-pid \"$(pidof -s txnfs)\"
  txnfs bench run randread --target nfs://127.0.0.1:2049/export --driver nfs-rs --file-size 4k
  txnfs bench run getattr --target nfs://127.0.0.1:2049/ --driver nfs-rs --nfs-version 3
  txnfs bench run tree-cp --target nfs://127.0.0.1:2049/ --scale 0.01 --delay-ms 10
  txnfs bench run smallfiles --target nfs://127.0.0.1:2049/ --clients 4 --threads 2 --repeat 2 --duration 2
  txnfs bench run writefiles --target nfs://127.0.0.1:2049/ --txn --files-per-txn 16 --file-size 4k
  txnfs bench run writefiles --target nfs://127.0.0.1:2049/ --files-per-txn 16 --clients 8 --sharing 100
  txnfs bench run randread --target nfs://127.0.0.1:2049/ --threads 32 --batch dynamic --duration 5
  txnfs bench run randread --target nfs://127.0.0.1:2049/ --processes 2 --threads 4 --duration 2
  txnfs bench run randread --target nfs://127.0.0.1:2049/ --processes 2 --launch local --launch \"nice -n 5 txnfs\"

Workloads: `txnfs bench list` (with the client libraries each runs with).
--driver nfs-rs runs the timed part through the third-party nfs-rs client,
one call at a time; set-up and clean-up always use txnfs's own client.
--txn runs the workloads that have a transactional mode (writefiles,
readfiles, tree-cp, tree-rm) with transactional COMPOUNDs; without it the
same files go through the plain vectorized client, as many per COMPOUND.")]
pub struct RunArgs {
    /// Workload name (see `bench list`).
    pub workload: String,
    /// nfs://host:port/path: the workload works in its own new directory
    /// under path (removed afterwards).
    #[arg(long)]
    pub target: String,
    /// Clients, each with its own NFSv4.1 session.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Threads per client (sharing the client's session).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Delay added each way by a built-in TCP proxy, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Timed part length in seconds (default: the workload's natural op count).
    #[arg(long, conflicts_with = "ops")]
    pub duration: Option<f64>,
    /// Total iterations over all workers.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Repeat the run (prepare, run, clean up) this many times.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Write `<workload>-<unix time>.json` into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// PID of a local server process: report its CPU µs and context switches per request.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Label of the server in the results (e.g. txnfs, ganesha).
    #[arg(long)]
    pub server: Option<String>,
    /// Multiply the workload's default sizes and counts.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Number of files (workloads with a file set).
    #[arg(long)]
    pub files: Option<u64>,
    /// File size (4096, 4k, 16M ...).
    #[arg(long, value_parser = parse_size)]
    pub file_size: Option<u64>,
    /// I/O size per READ/WRITE (4k .. 1M).
    #[arg(long, value_parser = parse_size)]
    pub io_size: Option<u64>,
    /// FILE_SYNC writes (like O_SYNC) instead of UNSTABLE + COMMIT.
    #[arg(long)]
    pub sync: bool,
    /// Session slots each client asks for.
    #[arg(long, default_value_t = 64)]
    pub slots: u32,
    /// The NFSv4 minor version the clients speak (the binary's global `--vers`; None:
    /// the highest the server accepts).
    #[arg(skip)]
    pub minor: Option<u32>,
    /// Run the workload's changes as transactional COMPOUNDs (ADR 0021):
    /// writefiles, readfiles, tree-cp, tree-rm. Needs a txnfs server with
    /// transactions; any other server makes the run fail (never run plainly).
    #[arg(long)]
    pub txn: bool,
    /// Files per transaction (with --txn) or per COMPOUND (plain, through the
    /// vectorized client): writefiles, readfiles.
    #[arg(long, value_name = "N")]
    pub files_per_txn: Option<u64>,
    /// Sharing degree in percent (writefiles with --files-per-txn): the share
    /// of each iteration's files that every client writes in common.
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    pub sharing: f64,
    /// Workload-specific setting key=value (repeatable; see `bench list`).
    #[arg(long = "set", value_parser = parse_kv)]
    pub set: Vec<(String, String)>,
    /// Client library of the timed part: txnfs (our client) or nfs-rs (the
    /// third-party crate, one call at a time; see `bench list`).
    #[arg(long, value_enum, default_value_t = Driver::Txnfs)]
    pub driver: Driver,
    /// The NFS version `--driver nfs-rs` speaks: 3 (MOUNT on the target's port, or
    /// at `nfs://HOST:PORT/PATH?mountport=N`), 4.0 or 4.1.
    #[arg(long, default_value = "4.1", value_name = "VERSION")]
    pub nfs_version: crate::driver::NfsVersion,
    /// Batch the requests of each client's threads into shared COMPOUNDs (Tyche's
    /// adaptive batching, ADR 0044): none, static:N (N requests per COMPOUND, or fewer
    /// after 5 ms) or dynamic (the level follows measured throughput).
    #[arg(long, default_value = "none", value_name = "MODE")]
    pub batch: txnfs_client::BatchMode,
    /// Our client speaks RPC-with-TLS (RFC 9289) to the server, to measure what TLS
    /// costs; the server's certificate must be signed by --tls-ca and carry the
    /// target's IP address.
    #[arg(long, requires = "tls_ca")]
    pub tls: bool,
    /// The CA (PEM) that signed the server's certificate (with --tls).
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// Our client's security flavour: AUTH_SYS, or Kerberos v5 (RPCSEC_GSS, ADR 0051)
    /// with the caller's ticket (`KRB5CCNAME`, as after `kinit`) and the service
    /// none (krb5), integrity (krb5i) or privacy (krb5p), to measure what each costs.
    /// The service principal is `nfs@` the target's address.
    #[arg(long, default_value = "sys", value_name = "sys|krb5|krb5i|krb5p")]
    pub sec: txnfs_client::Sec,
    /// Run the clients in N separate processes of this binary (each with --clients and
    /// --threads of its own and its own data set), released at one agreed instant; the
    /// results add them up and report how far apart they started.
    #[arg(long, value_name = "N")]
    pub processes: Option<usize>,
    /// With --processes: start client process i with the i-th of these commands (round
    /// robin; `local` is this binary on this machine). CMD must start `txnfs`: it runs
    /// under `sh -c` with `bench run` and this run's arguments after it, e.g.
    /// `--launch "ssh -T host2 /usr/local/bin/txnfs"`; the target must then be
    /// reachable from there, and the start skew is only as good as the clocks' sync.
    #[arg(long, value_name = "CMD", requires = "processes")]
    pub launch: Vec<String>,
    /// A client process of --processes: wait for the parent's start instant.
    #[arg(long, hide = true)]
    pub gate: bool,
    /// Fail (exit status 2) when a per-op count check fails.
    #[arg(long)]
    pub strict: bool,
    /// Less output.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

impl RunArgs {
    pub fn params(&self) -> Params {
        Params {
            scale: self.scale,
            files: self.files,
            file_size: self.file_size,
            io_size: self.io_size,
            sync: self.sync,
            set: self.set.iter().cloned().collect::<BTreeMap<_, _>>(),
            txn: self.txn,
            files_per_txn: self.files_per_txn,
            sharing: self.sharing / 100.0,
        }
    }

    pub fn config(&self) -> anyhow::Result<RunConfig> {
        let target: Target = self.target.parse()?;
        if self.nfs_version != crate::driver::NfsVersion::V41 && self.driver != Driver::NfsRs {
            bail!("--nfs-version chooses the version of --driver nfs-rs (our client speaks 4.2 or 4.1: --vers)");
        }
        let stop = match (self.duration, self.ops) {
            (Some(d), _) if d > 0.0 => Some(StopAt::Duration(Duration::from_secs_f64(d))),
            (Some(_), _) => bail!("--duration must be positive"),
            (None, Some(k)) => Some(StopAt::Ops(k)),
            (None, None) => None,
        };
        Ok(RunConfig {
            clients: self.clients,
            threads: self.threads,
            delay_ms: self.delay_ms,
            stop,
            repeat: self.repeat,
            server_pid: self.server_pid,
            server_label: self.server.clone(),
            slots: self.slots,
            minor: self.minor,
            verbose: !self.quiet,
            driver: self.driver,
            batch: self.batch,
            nfs_version: self.nfs_version,
            tls: self.tls_config()?,
            gss: self.gss_config(&target)?,
            target,
            gate: self.gate,
        })
    }
}

impl RunArgs {
    /// The RPCSEC_GSS configuration of `--sec krb5|krb5i|krb5p` (our client only).
    fn gss_config(&self, target: &Target) -> anyhow::Result<Option<GssClientConfig>> {
        let gss = self.sec.gss_config(&target.addr.ip().to_string());
        if gss.is_some() && self.driver != Driver::Txnfs {
            bail!("--sec is for our client (--driver txnfs)");
        }
        Ok(gss)
    }

    /// The TLS configuration of `--tls --tls-ca FILE` (our client only).
    fn tls_config(&self) -> anyhow::Result<Option<txnfs_rpc::ClientTls>> {
        let (true, Some(ca)) = (self.tls, &self.tls_ca) else {
            return Ok(None);
        };
        if self.driver != Driver::Txnfs {
            bail!("--tls is for our client (--driver txnfs); nfs-rs speaks no TLS");
        }
        Ok(Some(
            txnfs_rpc::ClientTls::from_pem_files(ca, None).context("--tls-ca")?,
        ))
    }
}

/// Run `bench run` and return the results (also written to `--out`).
pub async fn run(args: &RunArgs) -> anyhow::Result<crate::results::Results> {
    let w = workloads::by_name(&args.workload, &args.params())?;
    let cfg = args.config()?;
    let res = match args.processes {
        Some(n) => {
            let exe = std::env::current_exe().context("locating this binary")?;
            let child_args = crate::processes::child_args(std::env::args().skip(1));
            let (repeat, pid) = (cfg.repeat, cfg.server_pid);
            let launch = args.launch.clone();
            tokio::task::spawn_blocking(move || {
                crate::processes::run(&exe, &launch, &child_args, n, repeat, pid)
            })
            .await??
        }
        None => runner::run(w, &cfg).await?,
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let path = dir.join(format!("{}-{secs}.json", res.workload));
        std::fs::write(&path, serde_json::to_vec_pretty(&res)?)
            .with_context(|| format!("write {}", path.display()))?;
        if !args.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(res)
}

/// Human-readable summary of results.
pub fn report(res: &crate::results::Results) -> String {
    let mut s = String::new();
    let fmt = |o: &Option<crate::stats::Summary>| match o {
        Some(x) => x.to_string(),
        None => "-".into(),
    };
    s.push_str(&format!(
        "{} on {} with {} ({} clients × {} threads, delay {} ms)\n",
        res.workload,
        res.target,
        match &res.nfs_version {
            Some(v) => format!("{} (NFSv{v})", res.driver),
            None => res.driver.to_string(),
        },
        res.clients,
        res.threads,
        res.delay_ms
    ));
    if let Some(n) = res.processes {
        s.push_str(&format!("  in {n} client processes\n"));
    }
    for (i, r) in res.repeats.iter().enumerate() {
        if let Some(k) = r.start_skew {
            s.push_str(&format!(
                "  start skew (repeat {}): mean {:.2} ms, max {:.2} ms from the agreed instant; \
                 spread {:.2} ms over {} processes\n",
                i + 1,
                k.mean_ms,
                k.max_ms,
                k.spread_ms,
                k.processes
            ));
        }
    }
    s.push_str(&format!("  ops/s      {}\n", fmt(&res.summary.ops_per_s)));
    s.push_str(&format!("  MB/s       {}\n", fmt(&res.summary.mb_per_s)));
    if res.summary.cpu_us_per_op.is_some() {
        s.push_str(&format!(
            "  server CPU µs/request {}\n  server ctx switches/request {}\n",
            fmt(&res.summary.cpu_us_per_op),
            fmt(&res.summary.ctx_switches_per_op)
        ));
    }
    if res.summary.client_cpu_us_per_op.is_some() {
        s.push_str(&format!(
            "  client CPU µs/request {}\n  client ctx switches/request {}\n",
            fmt(&res.summary.client_cpu_us_per_op),
            fmt(&res.summary.client_ctx_switches_per_op)
        ));
    }
    if let Some(last) = res.repeats.last() {
        s.push_str("  requests (last repeat): type count mean/p50/p99 µs\n");
        for (k, l) in &last.latency_us {
            s.push_str(&format!(
                "    {k:<12} {:>8} {:>9.1} {:>9.1} {:>9.1}\n",
                l.count, l.mean, l.p50, l.p99
            ));
        }
        let ops: Vec<String> = last
            .op_counts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        s.push_str(&format!("  ops: {}\n", ops.join(" ")));
        if let Some(w) = &last.wire {
            s.push_str(&w.table());
        }
        s.push_str(&crate::sysstats::summary_line(&last.system));
        if let Some(sent) = last.rpc_messages {
            let per = last.compounds as f64 / sent.max(1) as f64;
            let level = last
                .batch_level
                .map(|l| format!(", batch level {l} at the end"))
                .unwrap_or_default();
            s.push_str(&format!(
                "  on the wire: {sent} COMPOUNDs for {} requests ({per:.2} per COMPOUND; batch {}{level})\n",
                last.compounds, res.batch
            ));
        }
    }
    for r in &res.repeats {
        for c in &r.checks {
            if !c.ok {
                s.push_str(&format!("  CHECK FAILED: {} ({})\n", c.rule, c.detail));
            }
        }
    }
    if res.all_checks_ok() {
        s.push_str("  all per-op checks passed\n");
    }
    s
}

/// `bench list`: one workload per line, its name first, then the client
/// libraries it runs with.
pub fn list() -> String {
    let mut s = String::new();
    for n in workloads::NAMES {
        let drivers = workloads::by_name(n, &Params::default())
            .map(|w| {
                w.drivers()
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        s.push_str(&format!("{n:<12} drivers: {drivers}\n"));
    }
    s
}

/// Entry point of `txnfs bench`.
pub async fn main(args: BenchArgs) -> anyhow::Result<()> {
    match args.cmd {
        BenchCmd::List => {
            print!("{}", list());
            Ok(())
        }
        BenchCmd::GaneshaConf(a) => {
            let mut conf =
                txnfs_testbed::ganesha::Config::single(a.port, &a.export, &a.recovery_root);
            conf.delegations = a.delegations;
            print!("{}", conf.render());
            Ok(())
        }
        BenchCmd::Run(a) => {
            let res = run(&a).await?;
            if a.gate {
                // A client process of --processes: its results go to the parent.
                crate::gate::say(&format!(
                    "{} {}",
                    crate::gate::RESULT,
                    serde_json::to_string(&res)?
                ))?;
                return Ok(());
            }
            print!("{}", report(&res));
            if a.strict && !res.all_checks_ok() {
                eprintln!("per-op checks failed: {:?}", res.failed_checks());
                std::process::exit(2);
            }
            Ok(())
        }
    }
}
