//! The comparison matrix: for each server (started here, one at a time) ×
//! delay × workload, run `txnfs-bench run` as a subprocess, collect its
//! results JSON, and compute the ratios of each server to the baseline.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use txnfs_bench::driver::NfsVersion;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::results::{BenchResult, Metric};
use crate::servers::{find_workspace_bin, log_tail, RunningServer, ServerKind, ServerOpts};
use crate::stats::{Ratio, Summary};

/// What was asked for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub workloads: Vec<String>,
    pub servers: Vec<String>,
    pub delays_ms: Vec<f64>,
    pub repeat: Option<u32>,
    /// Arguments passed through to every `txnfs-bench run`.
    pub extra_args: Vec<String>,
    pub bench_bin: Option<String>,
    /// The server every other one is divided by.
    pub baseline: String,
}

/// The machine the comparison ran on.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MachineInfo {
    pub cpu_model: Option<String>,
    pub cpus: Option<usize>,
    pub mem_total: Option<String>,
    pub uname: Option<String>,
    pub date: Option<String>,
    pub git_commit: Option<String>,
}

impl MachineInfo {
    /// From `/proc/cpuinfo`, `/proc/meminfo`, `uname -a`, `date -u` and git.
    pub fn collect() -> MachineInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name") || l.starts_with("Model"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string());
        let cpus = std::thread::available_parallelism().ok().map(|n| n.get());
        let mem_total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .map(|l| l["MemTotal:".len()..].trim().to_string())
        });
        let root = crate::servers::workspace_root();
        let git_commit = command_line(
            Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(["describe", "--always", "--dirty"]),
        );
        MachineInfo {
            cpu_model,
            cpus,
            mem_total,
            uname: command_line(Command::new("uname").arg("-a")),
            date: command_line(Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])),
            git_commit,
        }
    }
}

fn command_line(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// A server as it was run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerInfo {
    pub name: String,
    pub version: Option<String>,
    pub url: Option<String>,
    pub pid: Option<u32>,
}

/// One `txnfs-bench run`: a workload at one delay against one server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub server: String,
    pub delay_ms: f64,
    pub workload: String,
    /// The results file it was read from (relative to the output directory
    /// when inside it).
    pub file: Option<String>,
    /// Parsed results.
    pub result: BenchResult,
    /// The results JSON exactly as written (fields this crate ignores included).
    pub raw: serde_json::Value,
}

/// A run that failed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunError {
    pub server: String,
    pub delay_ms: f64,
    pub workload: String,
    pub error: String,
}

/// `server / baseline` of one metric for one workload at one delay.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RatioRow {
    pub delay_ms: f64,
    pub workload: String,
    pub metric: Metric,
    pub server: String,
    pub baseline: String,
    pub server_estimate: Option<Summary>,
    pub baseline_estimate: Option<Summary>,
    pub ratio: Option<Ratio>,
}

/// Everything a comparison produced (`compare.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Comparison {
    pub settings: Settings,
    pub machine: MachineInfo,
    pub servers: Vec<ServerInfo>,
    pub runs: Vec<Run>,
    pub errors: Vec<RunError>,
    /// How the ratio CIs were computed.
    pub ratio_ci_method: String,
    pub ratios: Vec<RatioRow>,
}

/// Documented in `compare.json` next to the ratios.
pub const RATIO_CI_METHOD: &str = "ratio of means a/b; 95% half-width by the delta method: \
     |R|*sqrt((ci_a/a)^2 + (ci_b/b)^2) (independent runs); `bounds` is the conservative \
     interval [(a-ci_a)/(b+ci_b), (a+ci_a)/(b-ci_b)]";

/// The default baseline: `ganesha` when compared, else the last server.
pub fn default_baseline(servers: &[String]) -> String {
    if servers.iter().any(|s| s == "ganesha") {
        "ganesha".into()
    } else {
        servers.last().cloned().unwrap_or_default()
    }
}

/// `asked` in its order, then each value of `found` that is not in the list
/// yet, in the order first seen.
fn asked_then_found<'a, T: Clone + PartialEq + 'a>(
    asked: &[T],
    found: impl Iterator<Item = &'a T>,
) -> Vec<T> {
    let mut out = asked.to_vec();
    for v in found {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

impl Comparison {
    /// The run of `server` on `workload` at `delay_ms`.
    pub fn run(&self, server: &str, delay_ms: f64, workload: &str) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.server == server && r.delay_ms == delay_ms && r.workload == workload)
    }

    /// Workloads in the order asked for, then any others found in the runs.
    pub fn workloads(&self) -> Vec<String> {
        asked_then_found(
            &self.settings.workloads,
            self.runs.iter().map(|r| &r.workload),
        )
    }

    /// Servers in the order asked for, then any others found in the runs.
    pub fn server_names(&self) -> Vec<String> {
        asked_then_found(&self.settings.servers, self.runs.iter().map(|r| &r.server))
    }

    /// Delays in the order asked for, then any others found in the runs.
    pub fn delays(&self) -> Vec<f64> {
        asked_then_found(
            &self.settings.delays_ms,
            self.runs.iter().map(|r| &r.delay_ms),
        )
    }

    /// A comparison of existing results (no servers run): each result's
    /// server is its `server` field, else the name given with it.
    pub fn from_results(results: Vec<(String, Option<String>, BenchResult)>) -> Comparison {
        let mut cmp = Comparison {
            machine: MachineInfo::collect(),
            ..Comparison::default()
        };
        for (name, file, result) in results {
            let server = result.server.clone().unwrap_or(name);
            let delay_ms = result.delay_ms;
            if !cmp.settings.servers.contains(&server) {
                cmp.settings.servers.push(server.clone());
                cmp.servers.push(ServerInfo {
                    name: server.clone(),
                    url: Some(result.target.clone()).filter(|t| !t.is_empty()),
                    ..ServerInfo::default()
                });
            }
            if !cmp.settings.workloads.contains(&result.workload) {
                cmp.settings.workloads.push(result.workload.clone());
            }
            if !cmp.settings.delays_ms.contains(&delay_ms) {
                cmp.settings.delays_ms.push(delay_ms);
            }
            let raw = serde_json::to_value(&result).unwrap_or_default();
            cmp.runs.push(Run {
                server,
                delay_ms,
                workload: result.workload.clone(),
                file,
                result,
                raw,
            });
        }
        cmp.settings.baseline = default_baseline(&cmp.settings.servers);
        cmp.compute_ratios();
        cmp
    }

    /// Fill `ratios`: every non-baseline server against the baseline, for
    /// every workload, delay and metric that both have.
    pub fn compute_ratios(&mut self) {
        self.ratio_ci_method = RATIO_CI_METHOD.into();
        let baseline = self.settings.baseline.clone();
        let mut rows = Vec::new();
        for delay in self.delays() {
            for workload in self.workloads() {
                let Some(base) = self.run(&baseline, delay, &workload) else {
                    continue;
                };
                for server in self.server_names() {
                    if server == baseline {
                        continue;
                    }
                    let Some(run) = self.run(&server, delay, &workload) else {
                        continue;
                    };
                    for metric in Metric::ALL {
                        let a = run.result.estimate(metric);
                        let b = base.result.estimate(metric);
                        if a.is_none() && b.is_none() {
                            continue;
                        }
                        let ratio = match (&a, &b) {
                            (Some(a), Some(b)) => Ratio::of(a, b),
                            _ => None,
                        };
                        rows.push(RatioRow {
                            delay_ms: delay,
                            workload: workload.clone(),
                            metric,
                            server: server.clone(),
                            baseline: baseline.clone(),
                            server_estimate: a,
                            baseline_estimate: b,
                            ratio,
                        });
                    }
                }
            }
        }
        self.ratios = rows;
    }

    /// The ratio row of `server` for a metric, workload and delay.
    pub fn ratio(
        &self,
        server: &str,
        delay_ms: f64,
        workload: &str,
        metric: Metric,
    ) -> Option<&RatioRow> {
        self.ratios.iter().find(|r| {
            r.server == server
                && r.delay_ms == delay_ms
                && r.workload == workload
                && r.metric == metric
        })
    }

    /// A plain-text table of ops/s per server and the ratios, per delay.
    pub fn text_table(&self) -> String {
        let servers = self.server_names();
        let baseline = &self.settings.baseline;
        let others: Vec<&String> = servers.iter().filter(|s| *s != baseline).collect();
        let mut out = String::new();
        for delay in self.delays() {
            out.push_str(&format!(
                "\ndelay {} ms: ops/s (mean ± 95% CI)\n",
                fmt_delay(delay)
            ));
            let mut header = vec!["workload".to_string()];
            header.extend(servers.iter().cloned());
            header.extend(others.iter().map(|s| format!("{s}/{baseline}")));
            let mut rows = vec![header];
            for w in self.workloads() {
                let mut row = vec![w.clone()];
                for s in &servers {
                    row.push(
                        self.run(s, delay, &w)
                            .and_then(|r| r.result.estimate(Metric::OpsPerS))
                            .map(|e| e.display())
                            .unwrap_or_else(|| "–".into()),
                    );
                }
                for s in &others {
                    row.push(
                        self.ratio(s, delay, &w, Metric::OpsPerS)
                            .and_then(|r| r.ratio.as_ref())
                            .map(|r| r.display())
                            .unwrap_or_else(|| "–".into()),
                    );
                }
                rows.push(row);
            }
            out.push_str(&align(&rows));
        }
        if !self.errors.is_empty() {
            out.push_str("\nfailed runs:\n");
            for e in &self.errors {
                out.push_str(&format!(
                    "  {} {} delay={}ms: {}\n",
                    e.server,
                    e.workload,
                    fmt_delay(e.delay_ms),
                    e.error.lines().next().unwrap_or("")
                ));
            }
        }
        out
    }
}

/// `10` for 10.0, `0.5` for 0.5.
pub fn fmt_delay(d: f64) -> String {
    format!("{d}")
}

fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One server configuration of a comparison: a server kind under a label,
/// with runner arguments and `txnfs serve` arguments of its own (e.g.
/// `txnfs-txn`: txnfs, every run with `--txn`). `--servers` takes `KIND` or
/// `LABEL=KIND`; `--run-arg LABEL=ARG` and `--server-arg LABEL=ARG` add to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    pub label: String,
    pub kind: ServerKind,
    /// Appended to every `bench run` against this configuration.
    pub run_args: Vec<String>,
    /// Appended to `txnfs serve` (txnfs only).
    pub serve_args: Vec<String>,
}

impl From<ServerKind> for ServerSpec {
    fn from(kind: ServerKind) -> Self {
        ServerSpec {
            label: kind.name().into(),
            kind,
            run_args: Vec::new(),
            serve_args: Vec::new(),
        }
    }
}

impl std::str::FromStr for ServerSpec {
    type Err = anyhow::Error;
    /// `txnfs`, `ganesha`, or `LABEL=KIND` (`txnfs-txn=txnfs`).
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        match s.split_once('=') {
            None => Ok(ServerSpec::from(s.parse::<ServerKind>()?)),
            Some((label, kind)) => {
                let label = label.trim();
                if label.is_empty()
                    || !label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                {
                    bail!("bad server label {label:?} (letters, digits, - _ .)");
                }
                Ok(ServerSpec {
                    label: label.into(),
                    ..ServerSpec::from(kind.parse::<ServerKind>()?)
                })
            }
        }
    }
}

impl std::fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.label == self.kind.name() {
            write!(f, "{}", self.label)
        } else {
            write!(f, "{} ({})", self.label, self.kind)
        }
    }
}

/// Parse `--servers`, then attach each `LABEL=ARG` of `run_args` and
/// `serve_args` to its configuration. Labels must be unique and known.
pub fn server_specs(
    servers: &[String],
    run_args: &[String],
    serve_args: &[String],
) -> Result<Vec<ServerSpec>> {
    let mut specs: Vec<ServerSpec> = Vec::new();
    for s in servers.iter().filter(|s| !s.trim().is_empty()) {
        let spec: ServerSpec = s.parse()?;
        if specs.iter().any(|o| o.label == spec.label) {
            bail!("server {} given twice in --servers", spec.label);
        }
        specs.push(spec);
    }
    for (list, what, serve) in [
        (run_args, "--run-arg", false),
        (serve_args, "--server-arg", true),
    ] {
        for a in list {
            let Some((label, arg)) = a.split_once('=') else {
                bail!("{what} takes LABEL=ARG, got {a:?}");
            };
            let Some(spec) = specs.iter_mut().find(|s| s.label == label.trim()) else {
                bail!("{what} {a:?}: no server labelled {label:?} in --servers");
            };
            if serve {
                if spec.kind != ServerKind::Txnfs {
                    bail!("{what} {a:?}: only txnfs takes server arguments");
                }
                spec.serve_args.push(arg.to_string());
            } else {
                spec.run_args.push(arg.to_string());
            }
        }
    }
    Ok(specs)
}

/// `--versions`: every configuration once per NFS version, as `LABEL-vVERSION`, each
/// run through the nfs-rs driver speaking that version (seed 001's v3 vs v4.1: one
/// client library, two protocols). Arguments already given stay.
pub fn per_version(specs: Vec<ServerSpec>, versions: &[NfsVersion]) -> Vec<ServerSpec> {
    if versions.is_empty() {
        return specs;
    }
    let mut out = Vec::new();
    for spec in specs {
        for v in versions {
            let mut s = spec.clone();
            s.label = format!("{}-v{v}", spec.label);
            s.run_args
                .extend(["--driver=nfs-rs".to_string(), format!("--nfs-version={v}")]);
            out.push(s);
        }
    }
    out
}

/// How to run the matrix.
#[derive(Clone, Debug)]
pub struct MatrixOpts {
    pub workloads: Vec<String>,
    pub servers: Vec<ServerSpec>,
    pub delays_ms: Vec<f64>,
    pub repeat: Option<u32>,
    pub extra_args: Vec<String>,
    /// Output directory (runs/ below it holds each run's output and log).
    pub out: PathBuf,
    /// `txnfs-bench`; `None`: [`find_bench_bin`].
    pub bench_bin: Option<PathBuf>,
    /// Arguments before `run ...` (`["bench"]` when the runner is the `txnfs` binary).
    pub bench_prefix: Vec<String>,
    pub server_opts: ServerOpts,
}

/// `$TXNFS_BENCH_BIN`, `<target>/release/txnfs-bench` or `<target>/debug/txnfs-bench`.
pub fn find_bench_bin() -> Result<PathBuf> {
    find_workspace_bin("TXNFS_BENCH_BIN", "txnfs-bench")
        .map_err(|e| anyhow::anyhow!("{e}: cargo build --release -p txnfs-bench"))
}

/// The arguments of one `txnfs-bench run` of `workload` at `delay_ms`
/// against `server`, writing into `dir`:
/// `run WORKLOAD --server NAME --target URL --delay-ms D [--repeat R]
/// --server-pid PID --out DIR [passthrough args]`.
pub fn bench_args(
    opts: &MatrixOpts,
    spec: &ServerSpec,
    server: &RunningServer,
    workload: &str,
    delay_ms: f64,
    dir: &Path,
) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        workload.to_string(),
        "--server".into(),
        spec.label.clone(),
        "--target".into(),
        server.url(),
        "--delay-ms".into(),
        fmt_delay(delay_ms),
    ];
    if let Some(r) = opts.repeat {
        args.push("--repeat".into());
        args.push(r.to_string());
    }
    args.push("--server-pid".into());
    args.push(server.pid.to_string());
    args.push("--out".into());
    args.push(dir.display().to_string());
    args.extend(opts.extra_args.iter().cloned());
    args.extend(spec.run_args.iter().cloned());
    args
}

/// The results in a run's output directory (every `*.json` below it, one
/// level of subdirectories deep) whose workload matches.
pub fn collect_results(dir: &Path, workload: &str) -> Result<Vec<(PathBuf, serde_json::Value)>> {
    let mut files = Vec::new();
    let mut dirs = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            let p = entry.path();
            if p.is_dir() && depth < 2 {
                dirs.push((p, depth + 1));
            } else if p.extension().is_some_and(|e| e == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let items = match value {
            serde_json::Value::Array(items) => items,
            v => vec![v],
        };
        for item in items {
            let w = item.get("workload").and_then(|w| w.as_str());
            if w == Some(workload) || (w.is_some() && workload.is_empty()) {
                out.push((f.clone(), item));
            }
        }
    }
    Ok(out)
}

/// Run one `txnfs-bench run` and read its result.
fn run_one(
    bench: &Path,
    spec: &ServerSpec,
    server: &RunningServer,
    workload: &str,
    delay_ms: f64,
    opts: &MatrixOpts,
    dir: &Path,
) -> Result<Run> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join("bench.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut args = opts.bench_prefix.clone();
    args.extend(bench_args(opts, spec, server, workload, delay_ms, dir));
    std::fs::write(
        dir.join("command.txt"),
        format!("{} {}\n", bench.display(), args.join(" ")),
    )?;
    let mut child = Command::new(bench)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("running {}", bench.display()))?;
    crate::servers::register_child(child.id(), None);
    let status = child.wait();
    crate::servers::unregister_child(child.id());
    let status = status.with_context(|| format!("waiting for {}", bench.display()))?;
    if !status.success() {
        bail!(
            "{} {} exited with {status}; log {}:\n{}",
            bench.display(),
            args.join(" "),
            log_path.display(),
            log_tail(&log_path, 20)
        );
    }
    let mut found = collect_results(dir, workload)?;
    let Some((file, raw)) = found.pop() else {
        bail!(
            "{} wrote no results JSON for workload {workload} under {}; log tail:\n{}",
            bench.display(),
            dir.display(),
            log_tail(&log_path, 20)
        );
    };
    let result: BenchResult = serde_json::from_value(raw.clone())
        .with_context(|| format!("parsing results {}", file.display()))?;
    let file = file
        .strip_prefix(&opts.out)
        .unwrap_or(&file)
        .display()
        .to_string();
    Ok(Run {
        server: spec.label.clone(),
        delay_ms,
        workload: workload.into(),
        file: Some(file),
        result,
        raw,
    })
}

/// Run the whole matrix: each server is started once (one at a time), then
/// every delay × workload is run against it, then it is stopped. A run that
/// fails is recorded in `errors` and the matrix goes on; a server that cannot
/// be started is an error.
pub fn run_matrix(opts: &MatrixOpts) -> Result<Comparison> {
    if opts.workloads.is_empty() {
        bail!("no workloads given");
    }
    if opts.servers.is_empty() {
        bail!("no servers given");
    }
    let bench = match &opts.bench_bin {
        Some(b) => b.clone(),
        None => find_bench_bin()?,
    };
    // Fail before running anything when a server binary is missing.
    for spec in &opts.servers {
        match spec.kind {
            ServerKind::Txnfs => {
                if opts.server_opts.txnfs_bin.is_none() {
                    crate::servers::find_txnfs_bin()?;
                }
            }
            ServerKind::Ganesha => {
                if opts.server_opts.ganesha_bin.is_none()
                    && crate::servers::which("ganesha.nfsd").is_none()
                {
                    bail!("ganesha.nfsd not found: apt-get install nfs-ganesha nfs-ganesha-vfs");
                }
            }
        }
    }
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;

    let server_names: Vec<String> = opts.servers.iter().map(|k| k.label.clone()).collect();
    let mut cmp = Comparison {
        settings: Settings {
            workloads: opts.workloads.clone(),
            servers: server_names.clone(),
            delays_ms: opts.delays_ms.clone(),
            repeat: opts.repeat,
            extra_args: opts.extra_args.clone(),
            bench_bin: Some(bench.display().to_string()),
            baseline: default_baseline(&server_names),
        },
        machine: MachineInfo::collect(),
        ..Comparison::default()
    };
    let total = opts.servers.len() * opts.delays_ms.len() * opts.workloads.len();
    let mut n = 0;
    for spec in &opts.servers {
        let kind = spec;
        eprintln!("== starting {kind}");
        let mut server_opts = opts.server_opts.clone();
        server_opts
            .txnfs_args
            .extend(spec.serve_args.iter().cloned());
        let mut server = RunningServer::start(spec.kind, &server_opts)
            .with_context(|| format!("{kind} could not be started"))?;
        eprintln!(
            "== {kind} pid {} at {} (export {}){}",
            server.pid,
            server.url(),
            server.export_dir.display(),
            server
                .version
                .as_deref()
                .map(|v| format!(", {v}"))
                .unwrap_or_default()
        );
        cmp.servers.push(ServerInfo {
            name: spec.label.clone(),
            version: server.version.clone(),
            url: Some(server.url()),
            pid: Some(server.pid),
        });
        for &delay in &opts.delays_ms {
            for workload in &opts.workloads {
                n += 1;
                eprint!(
                    "[{n}/{total}] {kind} {workload} delay={}ms ... ",
                    fmt_delay(delay)
                );
                let _ = std::io::stderr().flush();
                let dir = opts
                    .out
                    .join("runs")
                    .join(&spec.label)
                    .join(format!("{}ms", fmt_delay(delay)))
                    .join(workload);
                let started = Instant::now();
                let outcome = if server.is_running() {
                    run_one(&bench, spec, &server, workload, delay, opts, &dir)
                } else {
                    Err(anyhow::anyhow!(
                        "{kind} (pid {}) is no longer running; log tail:\n{}",
                        server.pid,
                        server.log_tail(20)
                    ))
                };
                let secs = started.elapsed().as_secs_f64();
                match outcome {
                    Ok(run) => {
                        let ops = run
                            .result
                            .estimate(Metric::OpsPerS)
                            .map(|e| format!("{} ops/s", e.display()))
                            .unwrap_or_else(|| "no ops/s".into());
                        let failed = run.result.failed().len();
                        let checks = if failed > 0 {
                            format!(", {failed} FAILED checks")
                        } else {
                            String::new()
                        };
                        eprintln!("{ops}{checks} ({secs:.1} s)");
                        cmp.runs.push(run);
                    }
                    Err(e) => {
                        eprintln!("FAILED ({secs:.1} s)");
                        eprintln!("{e:#}");
                        cmp.errors.push(RunError {
                            server: spec.label.clone(),
                            delay_ms: delay,
                            workload: workload.clone(),
                            error: format!("{e:#}"),
                        });
                    }
                }
            }
        }
        if let Err(e) = server.stop() {
            eprintln!("warning: {e:#}");
        }
        eprintln!("== stopped {kind}");
    }
    cmp.compute_ratios();
    Ok(cmp)
}

#[cfg(test)]
mod spec_tests {
    use super::*;

    #[test]
    fn server_configurations() {
        let s = server_specs(
            &["txnfs-txn=txnfs".into(), "txnfs".into(), "ganesha".into()],
            &[
                "txnfs-txn=--txn".into(),
                "txnfs-txn=--files-per-txn=4".into(),
            ],
            &["txnfs-txn=--no-delegations".into()],
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].label, "txnfs-txn");
        assert_eq!(s[0].kind, ServerKind::Txnfs);
        assert_eq!(s[0].run_args, ["--txn", "--files-per-txn=4"]);
        assert_eq!(s[0].serve_args, ["--no-delegations"]);
        assert_eq!(s[1], ServerSpec::from(ServerKind::Txnfs));
        assert_eq!(s[2].kind, ServerKind::Ganesha);
        assert!(server_specs(&["txnfs".into(), "txnfs".into()], &[], &[]).is_err());
        assert!(server_specs(&["txnfs".into()], &["other=--txn".into()], &[]).is_err());
        assert!(server_specs(&["ganesha".into()], &[], &["ganesha=--x".into()]).is_err());
        assert!(server_specs(&["a b=txnfs".into()], &[], &[]).is_err());
    }
}
