//! `opsloop`: single-threaded NFSv4.1 operation loops with the nfs-rs client.
//!
//! For each server (`--url` + `--server-pid`, repeatable and paired in
//! order) it mounts the export, makes sure a test file of `--file-size`
//! bytes exists, and then, `--repeat` times, runs each operation loop
//! (`--ops`): `--warmup` unmeasured calls followed by `--iters` measured
//! ones, one call in flight at a time. Servers alternate per repeat (ABBA
//! order) so that slow drifts of the shared machine hit all of them alike.
//!
//! Per loop it records throughput, latency percentiles (hdrhistogram) and
//! the server's CPU time and context switches per operation from `/proc`.
//! It prints a table of medians over the repeats, the ratios of every
//! server to the baseline (the last one unless `--baseline`), and writes
//! everything to `--out` as JSON.
//!
//! Operations: `getattr` (GETATTR of the test file), `read` (4 KiB READ at
//! random 4 KiB-aligned offsets, the same sequence for every server),
//! `read0` (4 KiB READ at offset 0).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use nfs_rs::Mount;
use serde::Serialize;
use txnfs_bench::{
    clock_ticks_per_sec, median, pattern, read_memory, Memory, Proc, ProcSample, XorShift,
};

const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
const READ_SIZE: u32 = 4096;
/// Seed of the test file's contents (checked on every READ).
const DATA_SEED: u64 = 0x0074_786e_6673;

#[derive(Parser, Debug)]
#[command(
    about = "Single-threaded NFSv4.1 GETATTR / 4 KiB READ loops with nfs-rs: \
             ops/s, latency percentiles, server CPU and context switches per op",
    after_help = "EXAMPLE:\n  opsloop --name txnfs --url nfs://127.0.0.1:20490/ --server-pid 1234 \\\n          \
                  --name ganesha --url nfs://127.0.0.1:20491/export --server-pid 1240 \\\n          \
                  --iters 20000 --repeat 5 --out results.json\n\n\
                  Missing URL options default to version=4.1&noresvport=true&uid=0&gid=0."
)]
struct Args {
    /// nfs:// URL of an export (repeatable, one per server).
    #[arg(long, required = true)]
    url: Vec<String>,
    /// PID of the server process behind the URL of the same position.
    #[arg(long = "server-pid", required = true)]
    server_pid: Vec<u32>,
    /// Label of the server of the same position (default: server1, server2, ...).
    #[arg(long)]
    name: Vec<String>,
    /// Server the ratios are relative to (default: the last one).
    #[arg(long)]
    baseline: Option<String>,
    /// Measured operations per loop.
    #[arg(long, default_value_t = 20_000)]
    iters: u64,
    /// Unmeasured operations before each loop.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,
    /// Loops per server and operation.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Comma-separated operations: getattr, read (random 4 KiB-aligned), read0.
    #[arg(long, default_value = "getattr,read,read0", value_delimiter = ',')]
    ops: Vec<Op>,
    /// Test file, relative to the export root (created if missing or of the wrong size).
    #[arg(long, default_value = "opsloop.dat")]
    file: String,
    /// Size of the test file in bytes (a multiple of 4096).
    #[arg(long, default_value_t = 1 << 20)]
    file_size: u64,
    /// Seed of the random read offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up a loop after this many seconds.
    #[arg(long, default_value_t = 600)]
    loop_timeout: u64,
    /// Seconds to let servers settle before the idle RSS reading after the runs.
    #[arg(long, default_value_t = 2)]
    settle: u64,
    /// Where to write the JSON results.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Getattr,
    Read,
    Read0,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Getattr => "getattr",
            Op::Read => "read",
            Op::Read0 => "read0",
        }
    }
}

struct Server {
    name: String,
    url: String,
    pid: u32,
    mount: Box<dyn Mount>,
    fh: Bytes,
}

#[derive(Clone, Debug, Default, Serialize)]
struct Latency {
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    mean_us: f64,
}

#[derive(Clone, Debug, Serialize)]
struct LoopResult {
    server: String,
    op: Op,
    repeat: u32,
    iters: u64,
    elapsed_s: f64,
    ops_per_s: f64,
    latency: Latency,
    /// utime+stime from /proc/<pid>/stat (clock-tick resolution).
    server_cpu_us_per_op: f64,
    /// Sum of /proc/<pid>/task/*/schedstat run time (ns resolution).
    server_sched_cpu_us_per_op: f64,
    server_utime_ticks: u64,
    server_stime_ticks: u64,
    server_vol_ctxsw_per_op: f64,
    server_invol_ctxsw_per_op: f64,
    server_ctxsw_per_op: f64,
    server_threads_started: u32,
    server_threads_exited: u32,
    client_cpu_us_per_op: f64,
    client_ctxsw_per_op: f64,
    error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
struct Summary {
    server: String,
    op: Op,
    runs_ok: usize,
    ops_per_s: Option<f64>,
    p50_us: Option<f64>,
    p90_us: Option<f64>,
    p99_us: Option<f64>,
    server_cpu_us_per_op: Option<f64>,
    server_sched_cpu_us_per_op: Option<f64>,
    server_ctxsw_per_op: Option<f64>,
    client_cpu_us_per_op: Option<f64>,
    /// Lowest and highest ops/s of the repeats (spread).
    ops_per_s_min: Option<f64>,
    ops_per_s_max: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
struct Ratio {
    server: String,
    baseline: String,
    op: Op,
    ops_per_s: Option<f64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    server_cpu_us_per_op: Option<f64>,
    server_sched_cpu_us_per_op: Option<f64>,
    server_ctxsw_per_op: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
struct ServerInfo {
    name: String,
    url: String,
    pid: u32,
    memory_at_start: Memory,
    memory_after_runs: Option<Memory>,
}

#[derive(Serialize)]
struct Report {
    iters: u64,
    warmup: u64,
    repeat: u32,
    file: String,
    file_size: u64,
    read_size: u32,
    clk_tck: u64,
    servers: Vec<ServerInfo>,
    runs: Vec<LoopResult>,
    summary: Vec<Summary>,
    ratios: Vec<Ratio>,
    errors: Vec<String>,
}

/// Fill in the URL options nfs-rs needs for an unprivileged NFSv4.1 mount
/// when the caller did not give them.
fn complete_url(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut opts: Vec<String> = query
        .split('&')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for (key, default) in [
        ("version", "4.1"),
        ("noresvport", "true"),
        ("uid", "0"),
        ("gid", "0"),
    ] {
        if !opts.iter().any(|o| o.split('=').next() == Some(key)) {
            opts.push(format!("{key}={default}"));
        }
    }
    format!("{base}?{}", opts.join("&"))
}

async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = nfs_rs::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e} ({e:?})")),
        Err(_) => Err(format!("{what}: timed out after {limit:?}")),
    }
}

/// Mount the export and make sure the test file exists with the expected
/// size and contents; returns the mount and the file handle.
async fn setup(
    url: &str,
    file: &str,
    size: u64,
    data: &Bytes,
) -> Result<(Box<dyn Mount>, Bytes), String> {
    let mount = within(
        &format!("mount {url}"),
        MOUNT_TIMEOUT,
        nfs_rs::parse_url_and_mount(url),
    )
    .await?;
    let m = &*mount;
    let existing = match tokio::time::timeout(SETUP_TIMEOUT, m.lookup_path(file)).await {
        Ok(Ok(obj)) => Some(obj.fh),
        Ok(Err(_)) => None,
        Err(_) => return Err(format!("lookup {file}: timed out")),
    };
    let fh = match existing {
        Some(fh)
            if within("getattr", SETUP_TIMEOUT, m.getattr(fh.clone()))
                .await?
                .filesize
                == size =>
        {
            fh
        }
        _ => {
            let obj = within(
                &format!("create {file}"),
                SETUP_TIMEOUT,
                m.create_path(file, Some(0o644)),
            )
            .await?;
            let written = within(
                &format!("write {size} bytes to {file}"),
                SETUP_TIMEOUT,
                nfs_rs::write_all(m, obj.fh.clone(), 0, data.clone()),
            )
            .await?;
            if written != size {
                return Err(format!("write {file}: wrote {written} of {size} bytes"));
            }
            within("commit", SETUP_TIMEOUT, m.commit(obj.fh.clone(), 0, 0)).await?;
            within("close", SETUP_TIMEOUT, m.close(obj.fh.clone())).await?;
            obj.fh
        }
    };
    let attr = within("getattr", SETUP_TIMEOUT, m.getattr(fh.clone())).await?;
    if attr.filesize != size {
        return Err(format!(
            "{file}: size {} after setup, expected {size}",
            attr.filesize
        ));
    }
    // Read the whole file once: checks the contents and warms the server's
    // caches the same way for every server.
    let mut off = 0u64;
    while off < size {
        let chunk = within("read", SETUP_TIMEOUT, m.read(fh.clone(), off, 65536)).await?;
        if chunk.is_empty() {
            return Err(format!("{file}: short read at offset {off}"));
        }
        let end = off as usize + chunk.len();
        if data.get(off as usize..end) != Some(&chunk[..]) {
            return Err(format!("{file}: wrong contents at offset {off}"));
        }
        off = end as u64;
    }
    Ok((mount, fh))
}

/// One operation; returns an error string on failure or wrong data.
async fn one_op(
    m: &dyn Mount,
    fh: &Bytes,
    op: Op,
    rng: &mut XorShift,
    blocks: u64,
    data: &Bytes,
) -> Result<(), String> {
    match op {
        Op::Getattr => m
            .getattr(fh.clone())
            .await
            .map(|_| ())
            .map_err(|e| format!("GETATTR: {e} ({e:?})")),
        Op::Read | Op::Read0 => {
            let off = if op == Op::Read {
                (rng.next_u64() % blocks) * READ_SIZE as u64
            } else {
                0
            };
            let got = m
                .read(fh.clone(), off, READ_SIZE)
                .await
                .map_err(|e| format!("READ offset {off}: {e} ({e:?})"))?;
            let want = data.get(off as usize..off as usize + READ_SIZE as usize);
            if want != Some(&got[..]) {
                return Err(format!(
                    "READ offset {off}: {} bytes, wrong length or contents",
                    got.len()
                ));
            }
            Ok(())
        }
    }
}

struct LoopOutcome {
    hist: Histogram<u64>,
    elapsed: Duration,
    done: u64,
    error: Option<String>,
}

#[allow(clippy::too_many_arguments)]
async fn run_loop(
    hist: &Histogram<u64>,
    m: &dyn Mount,
    fh: &Bytes,
    op: Op,
    iters: u64,
    seed: u64,
    blocks: u64,
    data: &Bytes,
) -> LoopOutcome {
    let mut hist = hist.clone();
    let mut rng = XorShift::new(seed);
    let start = Instant::now();
    let mut error = None;
    let mut done = 0;
    while done < iters {
        let t0 = Instant::now();
        if let Err(e) = one_op(m, fh, op, &mut rng, blocks, data).await {
            error = Some(format!("after {done} successful ops: {e}"));
            break;
        }
        hist.saturating_record(t0.elapsed().as_nanos().min(u64::MAX as u128) as u64);
        done += 1;
    }
    LoopOutcome {
        hist,
        elapsed: start.elapsed(),
        done,
        error,
    }
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    hist: &Histogram<u64>,
    s: &Server,
    op: Op,
    repeat: u32,
    args: &Args,
    blocks: u64,
    data: &Bytes,
    clk_tck: u64,
) -> LoopResult {
    let m = &*s.mount;
    let limit = Duration::from_secs(args.loop_timeout);
    let seed = args.seed.wrapping_add(repeat as u64);
    let mut result = LoopResult {
        server: s.name.clone(),
        op,
        repeat,
        iters: 0,
        elapsed_s: 0.0,
        ops_per_s: f64::NAN,
        latency: Latency::default(),
        server_cpu_us_per_op: f64::NAN,
        server_sched_cpu_us_per_op: f64::NAN,
        server_utime_ticks: 0,
        server_stime_ticks: 0,
        server_vol_ctxsw_per_op: f64::NAN,
        server_invol_ctxsw_per_op: f64::NAN,
        server_ctxsw_per_op: f64::NAN,
        server_threads_started: 0,
        server_threads_exited: 0,
        client_cpu_us_per_op: f64::NAN,
        client_ctxsw_per_op: f64::NAN,
        error: None,
    };

    // Warm-up (a different offset sequence than the measured loop).
    let warm = run_loop(hist, m, &s.fh, op, args.warmup, !seed, blocks, data);
    match tokio::time::timeout(limit, warm).await {
        Ok(w) if w.error.is_none() => {}
        Ok(w) => {
            result.error = Some(format!("warm-up: {}", w.error.unwrap_or_default()));
            return result;
        }
        Err(_) => {
            result.error = Some(format!("warm-up: timed out after {limit:?}"));
            return result;
        }
    }

    let before = ProcSample::read(Proc::Pid(s.pid));
    let client_before = ProcSample::read(Proc::SelfProc);
    let outcome = tokio::time::timeout(
        limit,
        run_loop(hist, m, &s.fh, op, args.iters, seed, blocks, data),
    )
    .await;
    let after = ProcSample::read(Proc::Pid(s.pid));
    let client_after = ProcSample::read(Proc::SelfProc);

    let outcome = match outcome {
        Ok(o) => o,
        Err(_) => {
            result.error = Some(format!("timed out after {limit:?}"));
            return result;
        }
    };
    result.error = outcome.error;
    let n = outcome.done;
    result.iters = n;
    result.elapsed_s = outcome.elapsed.as_secs_f64();
    if n == 0 {
        return result;
    }
    let nf = n as f64;
    result.ops_per_s = nf / result.elapsed_s;
    let h = &outcome.hist;
    let us = |ns: u64| ns as f64 / 1000.0;
    result.latency = Latency {
        p50_us: us(h.value_at_quantile(0.50)),
        p90_us: us(h.value_at_quantile(0.90)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1000.0,
    };
    let tick_us = 1e6 / clk_tck as f64;
    match (&before, &after) {
        (Ok(b), Ok(a)) => {
            let d = b.delta_to(a);
            result.server_utime_ticks = d.utime_ticks;
            result.server_stime_ticks = d.stime_ticks;
            result.server_cpu_us_per_op = (d.utime_ticks + d.stime_ticks) as f64 * tick_us / nf;
            result.server_sched_cpu_us_per_op = d.run_ns as f64 / 1000.0 / nf;
            result.server_vol_ctxsw_per_op = d.voluntary as f64 / nf;
            result.server_invol_ctxsw_per_op = d.involuntary as f64 / nf;
            result.server_ctxsw_per_op = (d.voluntary + d.involuntary) as f64 / nf;
            result.server_threads_started = d.threads_started;
            result.server_threads_exited = d.threads_exited;
        }
        (Err(e), _) | (_, Err(e)) => {
            let msg = format!("reading /proc/{}: {e}", s.pid);
            result.error = Some(match result.error.take() {
                Some(prev) => format!("{prev}; {msg}"),
                None => msg,
            });
        }
    }
    if let (Ok(b), Ok(a)) = (&client_before, &client_after) {
        let d = b.delta_to(a);
        result.client_cpu_us_per_op = (d.utime_ticks + d.stime_ticks) as f64 * tick_us / nf;
        result.client_ctxsw_per_op = (d.voluntary + d.involuntary) as f64 / nf;
    }
    result
}

fn summarize(runs: &[LoopResult], server: &str, op: Op) -> Summary {
    let ok: Vec<&LoopResult> = runs
        .iter()
        .filter(|r| r.server == server && r.op == op && r.error.is_none() && r.iters > 0)
        .collect();
    let med = |f: &dyn Fn(&LoopResult) -> f64| median(&ok.iter().map(|r| f(r)).collect::<Vec<_>>());
    let ops: Vec<f64> = ok.iter().map(|r| r.ops_per_s).collect();
    Summary {
        server: server.to_string(),
        op,
        runs_ok: ok.len(),
        ops_per_s: median(&ops),
        p50_us: med(&|r| r.latency.p50_us),
        p90_us: med(&|r| r.latency.p90_us),
        p99_us: med(&|r| r.latency.p99_us),
        server_cpu_us_per_op: med(&|r| r.server_cpu_us_per_op),
        server_sched_cpu_us_per_op: med(&|r| r.server_sched_cpu_us_per_op),
        server_ctxsw_per_op: med(&|r| r.server_ctxsw_per_op),
        client_cpu_us_per_op: med(&|r| r.client_cpu_us_per_op),
        ops_per_s_min: ops.iter().copied().reduce(f64::min),
        ops_per_s_max: ops.iter().copied().reduce(f64::max),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

fn fmt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

fn print_tables(report: &Report) {
    println!();
    println!(
        "medians over {} repeats of {} ops (warm-up {}), {} B reads of a {} B file, CLK_TCK {}",
        report.repeat,
        report.iters,
        report.warmup,
        report.read_size,
        report.file_size,
        report.clk_tck
    );
    println!(
        "{:<10} {:<8} {:>4} {:>10} {:>19} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "server",
        "op",
        "ok",
        "ops/s",
        "ops/s min..max",
        "p50 us",
        "p90 us",
        "p99 us",
        "srvCPU us",
        "srvSch us",
        "srvCS/op",
        "cliCPU us"
    );
    for s in &report.summary {
        println!(
            "{:<10} {:<8} {:>4} {:>10} {:>19} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
            s.server,
            s.op.name(),
            s.runs_ok,
            fmt(s.ops_per_s, 0),
            format!("{}..{}", fmt(s.ops_per_s_min, 0), fmt(s.ops_per_s_max, 0)),
            fmt(s.p50_us, 1),
            fmt(s.p90_us, 1),
            fmt(s.p99_us, 1),
            fmt(s.server_cpu_us_per_op, 1),
            fmt(s.server_sched_cpu_us_per_op, 1),
            fmt(s.server_ctxsw_per_op, 2),
            fmt(s.client_cpu_us_per_op, 1),
        );
    }
    if !report.ratios.is_empty() {
        println!();
        println!(
            "{:<20} {:<8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10}",
            "ratio", "op", "ops/s", "p50", "p99", "srvCPU/op", "srvSch/op", "srvCS/op"
        );
        for r in &report.ratios {
            println!(
                "{:<20} {:<8} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10}",
                format!("{}/{}", r.server, r.baseline),
                r.op.name(),
                fmt(r.ops_per_s, 3),
                fmt(r.p50_us, 3),
                fmt(r.p99_us, 3),
                fmt(r.server_cpu_us_per_op, 3),
                fmt(r.server_sched_cpu_us_per_op, 3),
                fmt(r.server_ctxsw_per_op, 3),
            );
        }
    }
    println!();
    println!(
        "{:<10} {:>8} {:>14} {:>14} {:>14} {:>8}",
        "server", "pid", "RSS start KiB", "RSS after KiB", "HWM KiB", "threads"
    );
    for s in &report.servers {
        let after = s.memory_after_runs;
        println!(
            "{:<10} {:>8} {:>14} {:>14} {:>14} {:>8}",
            s.name,
            s.pid,
            s.memory_at_start.vm_rss_kib,
            after.map_or("-".into(), |m| m.vm_rss_kib.to_string()),
            after.map_or("-".into(), |m| m.vm_hwm_kib.to_string()),
            after.map_or("-".into(), |m| m.threads.to_string()),
        );
    }
    println!(
        "\nsrvCPU: utime+stime of /proc/PID/stat (1/CLK_TCK resolution); srvSch: sum of \
         /proc/PID/task/*/schedstat run time; srvCS: voluntary+involuntary context switches \
         summed over /proc/PID/task/*/status; cliCPU: this client process."
    );
    for e in &report.errors {
        println!("ERROR: {e}");
    }
}

async fn run(args: Args) -> Result<bool, String> {
    if args.url.len() != args.server_pid.len() {
        return Err(format!(
            "{} --url but {} --server-pid: give one PID per URL",
            args.url.len(),
            args.server_pid.len()
        ));
    }
    if !args.name.is_empty() && args.name.len() != args.url.len() {
        return Err("give one --name per --url, or none".into());
    }
    if args.file_size < READ_SIZE as u64 || !args.file_size.is_multiple_of(READ_SIZE as u64) {
        return Err(format!(
            "--file-size must be a positive multiple of {READ_SIZE}"
        ));
    }
    if args.iters == 0 || args.repeat == 0 || args.ops.is_empty() {
        return Err("--iters, --repeat and --ops must not be zero or empty".into());
    }
    let names: Vec<String> = if args.name.is_empty() {
        (1..=args.url.len()).map(|i| format!("server{i}")).collect()
    } else {
        args.name.clone()
    };
    let baseline = match &args.baseline {
        Some(b) if names.contains(b) => b.clone(),
        Some(b) => return Err(format!("--baseline {b:?} is not one of the --name values")),
        None => names.last().cloned().unwrap_or_default(),
    };
    let clk_tck = clock_ticks_per_sec();
    let size = usize::try_from(args.file_size).map_err(|_| "--file-size too large".to_string())?;
    let data = Bytes::from(pattern(DATA_SEED, size));
    let blocks = args.file_size / READ_SIZE as u64;
    // Latencies in ns, 1 ns .. 60 s, 3 significant digits.
    let hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;

    // Idle memory of each server before this client touches it.
    let mut infos = Vec::new();
    for ((name, url), &pid) in names.iter().zip(&args.url).zip(&args.server_pid) {
        if !Proc::Pid(pid).alive() {
            return Err(format!("server {name}: no live process {pid}"));
        }
        let mem = read_memory(Proc::Pid(pid)).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        infos.push(ServerInfo {
            name: name.clone(),
            url: complete_url(url),
            pid,
            memory_at_start: mem,
            memory_after_runs: None,
        });
    }

    let mut servers = Vec::new();
    for info in &infos {
        eprintln!(
            "[{}] mounting {} and preparing {}",
            info.name, info.url, args.file
        );
        let (mount, fh) = setup(&info.url, &args.file, args.file_size, &data)
            .await
            .map_err(|e| format!("server {}: setup failed: {e}", info.name))?;
        servers.push(Server {
            name: info.name.clone(),
            url: info.url.clone(),
            pid: info.pid,
            mount,
            fh,
        });
    }

    let mut runs = Vec::new();
    let mut errors = Vec::new();
    for repeat in 0..args.repeat {
        let mut order: Vec<usize> = (0..servers.len()).collect();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for &i in &order {
            let s = &servers[i];
            for &op in &args.ops {
                if !Proc::Pid(s.pid).alive() {
                    let e = format!("server {} (pid {}) is gone", s.name, s.pid);
                    eprintln!("ERROR: {e}");
                    errors.push(e);
                    continue;
                }
                let r = measure(&hist, s, op, repeat, &args, blocks, &data, clk_tck).await;
                eprintln!(
                    "[{}] repeat {} {:<7} {:>8.0} ops/s  p50 {:>7.1} us  p99 {:>7.1} us  \
                     srv CPU {:>6.1} us/op  srv CS {:>5.2}/op  cli CPU {:>6.1} us/op{}",
                    s.name,
                    repeat + 1,
                    op.name(),
                    r.ops_per_s,
                    r.latency.p50_us,
                    r.latency.p99_us,
                    r.server_cpu_us_per_op,
                    r.server_ctxsw_per_op,
                    r.client_cpu_us_per_op,
                    r.error
                        .as_deref()
                        .map(|e| format!("  ERROR: {e}"))
                        .unwrap_or_default()
                );
                if let Some(e) = &r.error {
                    errors.push(format!(
                        "server {} ({}) {} repeat {}: {e}",
                        s.name,
                        s.url,
                        op.name(),
                        repeat + 1
                    ));
                }
                runs.push(r);
            }
        }
    }

    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    for info in &mut infos {
        info.memory_after_runs = read_memory(Proc::Pid(info.pid)).ok();
    }
    for s in &servers {
        if let Err(e) = within("umount", MOUNT_TIMEOUT, s.mount.umount()).await {
            eprintln!("[{}] warning: {e}", s.name);
        }
    }

    let mut summary = Vec::new();
    for name in &names {
        for &op in &args.ops {
            summary.push(summarize(&runs, name, op));
        }
    }
    let mut ratios = Vec::new();
    for name in names.iter().filter(|n| **n != baseline) {
        for &op in &args.ops {
            let find = |n: &str| summary.iter().find(|s| s.server == n && s.op == op);
            if let (Some(a), Some(b)) = (find(name), find(&baseline)) {
                ratios.push(Ratio {
                    server: name.clone(),
                    baseline: baseline.clone(),
                    op,
                    ops_per_s: ratio(a.ops_per_s, b.ops_per_s),
                    p50_us: ratio(a.p50_us, b.p50_us),
                    p99_us: ratio(a.p99_us, b.p99_us),
                    server_cpu_us_per_op: ratio(a.server_cpu_us_per_op, b.server_cpu_us_per_op),
                    server_sched_cpu_us_per_op: ratio(
                        a.server_sched_cpu_us_per_op,
                        b.server_sched_cpu_us_per_op,
                    ),
                    server_ctxsw_per_op: ratio(a.server_ctxsw_per_op, b.server_ctxsw_per_op),
                });
            }
        }
    }
    let report = Report {
        iters: args.iters,
        warmup: args.warmup,
        repeat: args.repeat,
        file: args.file.clone(),
        file_size: args.file_size,
        read_size: READ_SIZE,
        clk_tck,
        servers: infos,
        runs,
        summary,
        ratios,
        errors,
    };
    print_tables(&report);
    if let Some(out) = &args.out {
        // NaN (a failed measurement) is written as null by serde_json.
        let json = serde_json::to_string_pretty(&report).map_err(|e| format!("json: {e}"))?;
        std::fs::write(out, json + "\n").map_err(|e| format!("write {}: {e}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(report.errors.is_empty())
}

fn main() -> ExitCode {
    let args = Args::parse();
    // One thread: the client's reader task and the loop share it, so the
    // client adds no cross-thread wake-ups of its own.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("opsloop: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("opsloop: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::complete_url;

    #[test]
    fn url_defaults_are_added_once() {
        assert_eq!(
            complete_url("nfs://127.0.0.1:2049/"),
            "nfs://127.0.0.1:2049/?version=4.1&noresvport=true&uid=0&gid=0"
        );
        assert_eq!(
            complete_url("nfs://h:1/export?uid=1000&version=4.1"),
            "nfs://h:1/export?uid=1000&version=4.1&noresvport=true&gid=0"
        );
    }
}
