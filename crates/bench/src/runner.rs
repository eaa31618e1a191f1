//! Runs a workload: N clients (each its own NFSv4.1 session) × T threads,
//! started together on a barrier, optionally through a [`DelayProxy`],
//! repeated R times, with the server process's CPU time and context switches
//! sampled from /proc around the timed part.

use crate::driver::{self, Driver, NfsVersion};
use crate::gate;
use crate::nfs;
use crate::proxy::DelayProxy;
use crate::recorder::Recorder;
use crate::results::{Repeat, Results, ServerCost, SummaryBlock};
use crate::sysstats::Sampler;
use crate::wire::Wire;
use crate::workload::{Expectation, RunStats, Setup, Shared, StopAt, Worker, Workload};
use crate::{Proc, ProcSample};
use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};
use txnfs_client::{BatchMode, Client, ClientConfig, Fs};

/// `nfs://host[:port]/path`: the server and the directory (relative to the
/// pseudo root) under which the workload makes its own directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
    pub url: String,
    /// `?mountport=N`: where an NFSv3 client finds MOUNT (default: the NFS port).
    pub mount_port: Option<u16>,
}

impl std::str::FromStr for Target {
    type Err = anyhow::Error;

    fn from_str(url: &str) -> anyhow::Result<Target> {
        let rest = url
            .strip_prefix("nfs://")
            .ok_or_else(|| anyhow!("target {url:?} must start with nfs://"))?;
        let mut mount_port = None;
        if let Some((_, query)) = rest.split_once('?') {
            for kv in query.split('&') {
                match kv.split_once('=') {
                    Some(("mountport", v)) => {
                        mount_port = Some(
                            v.parse()
                                .map_err(|_| anyhow!("target {url:?}: bad mountport {v:?}"))?,
                        )
                    }
                    _ => bail!("target {url:?}: unknown query {kv:?} (only mountport=N)"),
                }
            }
        }
        let rest = rest.split('?').next().unwrap_or("");
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if hostport.is_empty() {
            bail!("target {url:?} has no host");
        }
        let with_port = if hostport.starts_with('[') {
            if hostport.contains("]:") {
                hostport.to_string()
            } else {
                format!("{hostport}:2049")
            }
        } else if hostport.contains(':') {
            hostport.to_string()
        } else {
            format!("{hostport}:2049")
        };
        let addr = with_port
            .to_socket_addrs()
            .with_context(|| format!("resolve {with_port}"))?
            .next()
            .ok_or_else(|| anyhow!("{with_port} resolves to no address"))?;
        let path = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect::<Vec<_>>()
            .join("/");
        Ok(Target {
            addr,
            path,
            url: url.to_string(),
            mount_port,
        })
    }
}

/// How to run a workload.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub target: Target,
    pub clients: usize,
    pub threads: usize,
    /// Delay added each way by the proxy (0: no proxy).
    pub delay_ms: f64,
    /// None: the workload's default number of iterations.
    pub stop: Option<StopAt>,
    pub repeat: usize,
    /// Local server process to sample.
    pub server_pid: Option<u32>,
    /// Label of the server for the results ("txnfs", "ganesha").
    pub server_label: Option<String>,
    /// Session slots each client asks for.
    pub slots: u32,
    /// NFSv4 minor version (None: negotiated, the highest).
    pub minor: Option<u32>,
    /// Print progress to stderr.
    pub verbose: bool,
    /// The client library of the timed part.
    pub driver: Driver,
    /// How the workers' clients batch concurrent requests (ADR 0044).
    pub batch: BatchMode,
    /// The protocol version of the nfs-rs driver.
    pub nfs_version: NfsVersion,
    /// RPC-with-TLS for our client's connections (ADR 0049); the server's certificate
    /// is checked against the IP address connected to.
    pub tls: Option<txnfs_rpc::ClientTls>,
    /// RPCSEC_GSS (Kerberos) for our client's connections (ADR 0051).
    pub gss: Option<txnfs_rpc::gss::GssClientConfig>,
    /// A client process of `--processes`: wait at the start gate for the parent's
    /// start instant ([`crate::gate`]).
    pub gate: bool,
}

impl RunConfig {
    pub fn new(target: Target) -> RunConfig {
        RunConfig {
            target,
            clients: 1,
            threads: 1,
            delay_ms: 0.0,
            stop: None,
            repeat: 1,
            server_pid: None,
            server_label: None,
            slots: 64,
            minor: None,
            verbose: false,
            driver: Driver::Txnfs,
            batch: BatchMode::None,
            nfs_version: NfsVersion::V41,
            tls: None,
            gss: None,
            gate: false,
        }
    }
}

static CLIENT_SEQ: AtomicU64 = AtomicU64::new(0);

async fn connect(
    addr: SocketAddr,
    slots: u32,
    minor: Option<u32>,
    batch: BatchMode,
    tls: Option<txnfs_rpc::ClientTls>,
    gss: Option<txnfs_rpc::gss::GssClientConfig>,
    what: &str,
) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::new(addr);
    cfg.tls = tls;
    cfg.gss = gss;
    cfg.slots = slots;
    cfg.minor = minor;
    cfg.batch.mode = batch;
    let n = CLIENT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    cfg.owner = Some(Bytes::from(format!(
        "txnfs-bench/{}/{nanos}/{n}/{what}",
        std::process::id()
    )));
    Client::connect(cfg)
        .await
        .with_context(|| format!("connect {what} to {addr}"))
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// CPU µs and context switches per request of a process (the server, or this client).
pub(crate) fn cost_per_request(
    before: &ProcSample,
    after: &ProcSample,
    requests: u64,
) -> ServerCost {
    let d = before.delta_to(after);
    let cpu_us = if d.run_ns > 0 {
        d.run_ns as f64 / 1000.0
    } else {
        (d.utime_ticks + d.stime_ticks) as f64 * 1e6 / crate::clock_ticks_per_sec() as f64
    };
    let n = requests.max(1) as f64;
    ServerCost {
        cpu_us_per_op: cpu_us / n,
        ctx_switches_per_op: (d.voluntary + d.involuntary) as f64 / n,
    }
}

/// Run `w` as configured: every repeat prepares, runs and cleans up.
pub async fn run(w: Arc<dyn Workload>, cfg: &RunConfig) -> anyhow::Result<Results> {
    if cfg.clients == 0 || cfg.threads == 0 || cfg.repeat == 0 {
        bail!("--clients, --threads and --repeat must be at least 1");
    }
    w.validate(cfg.clients, cfg.threads)?;
    if !w.drivers().contains(&cfg.driver) {
        let known: Vec<&str> = w.drivers().iter().map(|d| d.name()).collect();
        bail!(
            "workload {} does not run with --driver {} (it runs with: {})",
            w.name(),
            cfg.driver,
            known.join(", ")
        );
    }
    let proxy = if cfg.delay_ms > 0.0 {
        let p = DelayProxy::start(
            "127.0.0.1:0".parse().expect("valid address"),
            cfg.target.addr,
            Duration::from_secs_f64(cfg.delay_ms / 1000.0),
        )
        .await
        .context("start delay proxy")?;
        Some(p)
    } else {
        None
    };
    let worker_addr = proxy.as_ref().map(|p| p.addr()).unwrap_or(cfg.target.addr);
    let mut repeats = Vec::new();
    for r in 0..cfg.repeat {
        if cfg.verbose {
            eprintln!("{}: repeat {}/{}", w.name(), r + 1, cfg.repeat);
        }
        let calls_before = proxy.as_ref().map(|p| p.rpc_calls());
        let mut rep = run_once(w.clone(), cfg, worker_addr).await?;
        if let (Some(p), Some(b)) = (&proxy, calls_before) {
            rep.counters
                .insert("proxy_rpc_calls".into(), p.rpc_calls().saturating_sub(b));
        }
        if cfg.verbose {
            eprintln!(
                "  {:.1} ops/s, {:.2} MB/s, {} ops in {:.2} s, checks {}",
                rep.ops_per_s,
                rep.mb_per_s,
                rep.ops,
                rep.duration_s,
                if rep.checks.iter().all(|c| c.ok) {
                    "ok"
                } else {
                    "FAILED"
                }
            );
        }
        repeats.push(rep);
    }
    if let Some(p) = &proxy {
        p.stop();
    }
    Ok(Results {
        workload: w.name().to_string(),
        server: cfg.server_label.clone(),
        target: cfg.target.url.clone(),
        delay_ms: cfg.delay_ms,
        clients: cfg.clients,
        threads: cfg.threads,
        driver: cfg.driver,
        batch: cfg.batch.to_string(),
        nfs_version: (cfg.driver == Driver::NfsRs).then(|| cfg.nfs_version.to_string()),
        processes: None,
        params: w.params(),
        summary: SummaryBlock::of(&repeats),
        repeats,
    })
}

async fn run_once(
    w: Arc<dyn Workload>,
    cfg: &RunConfig,
    worker_addr: SocketAddr,
) -> anyhow::Result<Repeat> {
    let setup_client = connect(
        cfg.target.addr,
        cfg.slots,
        cfg.minor,
        BatchMode::None,
        cfg.tls.clone(),
        cfg.gss.clone(),
        "setup",
    )
    .await?;
    let parent = nfs::lookup_or_create_dir(&setup_client, &cfg.target.path)
        .await
        .with_context(|| format!("target directory {:?}", cfg.target.path))?;
    let name = format!(
        "txnfs-bench-{}-{}-{}",
        w.name(),
        std::process::id(),
        unix_nanos()
    );
    let base_fh = nfs::mkdir(&setup_client, &parent, &name).await?;
    let base = if cfg.target.path.is_empty() {
        name
    } else {
        format!("{}/{name}", cfg.target.path)
    };
    let setup = Setup {
        fs: Fs::new(setup_client.clone()),
        client: setup_client,
        base,
        base_fh,
        clients: cfg.clients,
        threads: cfg.threads,
        owner: Bytes::from(format!("bench-setup-{}", std::process::id())),
    };
    let outcome = timed_part(w.clone(), cfg, worker_addr, &setup).await;
    // Clean up whatever happened.
    let c1 = w.cleanup(&setup).await;
    let c2 = setup
        .fs
        .vremove(std::slice::from_ref(&setup.base), true)
        .await
        .into_iter()
        .next()
        .unwrap_or(Ok(()));
    let _ = tokio::time::timeout(Duration::from_secs(5), setup.client.close()).await;
    let rep = outcome?;
    c1.context("workload clean-up")?;
    c2.with_context(|| format!("remove {}", setup.base))?;
    Ok(rep)
}

async fn timed_part(
    w: Arc<dyn Workload>,
    cfg: &RunConfig,
    worker_addr: SocketAddr,
    setup: &Setup,
) -> anyhow::Result<Repeat> {
    let t = Instant::now();
    w.prepare(setup).await.context("prepare")?;
    // The data set's writer gives its delegations back before the workers start: else
    // their first opens would recall them and the files cool down (no delegation for a
    // few seconds, ADR 0017) — a cost of the set-up, not of the workload.
    setup.client.return_delegations().await;
    if cfg.verbose {
        eprintln!("  prepared in {:.2} s", t.elapsed().as_secs_f64());
    }
    let mut clients = Vec::new();
    for c in 0..cfg.clients {
        clients.push(
            connect(
                worker_addr,
                cfg.slots,
                cfg.minor,
                cfg.batch,
                cfg.tls.clone(),
                cfg.gss.clone(),
                &format!("client{c}"),
            )
            .await?,
        );
    }
    let mut mounts = Vec::new();
    if cfg.driver == Driver::NfsRs {
        let ids = ClientConfig::new(worker_addr);
        for _ in 0..cfg.clients {
            mounts.push(
                driver::mount_nfsrs(
                    worker_addr,
                    &cfg.target.path,
                    (ids.uid, ids.gid),
                    cfg.nfs_version,
                    cfg.target.mount_port,
                )
                .await?,
            );
        }
    }
    let stop = cfg.stop.unwrap_or(StopAt::Ops(w.default_ops()));
    let nworkers = cfg.clients * cfg.threads;
    let shared = Arc::new(Shared {
        issued: AtomicU64::new(0),
        stop,
        barrier: tokio::sync::Barrier::new(nworkers + 1),
    });
    // NFSv3 handles need not be NFSv4's (NFS-Ganesha's differ): an NFSv3 worker gets
    // the working directory's handle through its own MOUNT and LOOKUPs.
    let mut v3_bases = Vec::new();
    if cfg.driver == Driver::NfsRs && cfg.nfs_version == NfsVersion::V3 {
        let rel = setup
            .base
            .strip_prefix(cfg.target.path.as_str())
            .unwrap_or(&setup.base)
            .trim_start_matches('/');
        for m in &mounts {
            let fh = m
                .lookup_path(rel)
                .await
                .map_err(|e| anyhow!("NFSv3 LOOKUP of {rel:?}: {e}"))?
                .fh;
            v3_bases.push(fh);
        }
    }
    let mut tasks = Vec::new();
    for (ci, client) in clients.iter().enumerate() {
        for ti in 0..cfg.threads {
            let mut wk = Worker::new(
                client.clone(),
                (&setup.base, &setup.base_fh),
                (ci, ti),
                (cfg.clients, cfg.threads),
                shared.clone(),
            );
            wk.driver = cfg.driver;
            wk.nfsrs_mount = mounts.get(ci).cloned();
            wk.nfs_version = cfg.nfs_version;
            if let Some(fh) = v3_bases.get(ci) {
                wk.base_fh = fh.clone();
            }
            wk.rec.sessionless = cfg.driver == Driver::NfsRs && cfg.nfs_version != NfsVersion::V41;
            let w = w.clone();
            tasks.push(tokio::spawn(async move {
                let r = w.run(&mut wk).await;
                // Never leave the others waiting at the barrier.
                wk.ready().await;
                (r, wk.rec)
            }));
        }
    }
    let agreed_start = match cfg.gate {
        true => Some(gate::wait_for_start().await?),
        false => None,
    };
    shared.barrier.wait().await;
    let t0 = Instant::now();
    let started = gate::unix_ns();
    let level = (cfg.batch != BatchMode::None).then(|| {
        let clients = clients.clone();
        Box::new(move || {
            clients
                .iter()
                .filter_map(|c| c.batch_stats())
                .map(|b| b.level)
                .max()
        }) as crate::sysstats::LevelProbe
    });
    let sampler = Sampler::start_with(cfg.server_pid, level);
    let times_before: Vec<_> = clients.iter().map(|c| c.op_times()).collect();
    let client_before = ProcSample::read(Proc::SelfProc).ok();
    let sent_before: u64 = clients.iter().map(|c| c.stats().compounds).sum();
    let proc_before = cfg
        .server_pid
        .map(|p| ProcSample::read(Proc::Pid(p)))
        .transpose()
        .context("read server /proc")?;
    let mut merged = Recorder::new(t0);
    let mut first_err = None;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await {
            Ok((r, rec)) => {
                merged.merge(&rec);
                if let Err(e) = r {
                    first_err.get_or_insert(e.context(format!(
                        "worker {} (client {}, thread {})",
                        i,
                        i / cfg.threads,
                        i % cfg.threads
                    )));
                }
            }
            Err(e) => {
                first_err.get_or_insert(anyhow!("worker {i} panicked: {e}"));
            }
        }
    }
    let duration = t0.elapsed();
    if cfg.gate {
        gate::say(gate::DONE)?;
    }
    let times_after: Vec<_> = clients.iter().map(|c| c.op_times()).collect();
    let client_after = ProcSample::read(Proc::SelfProc).ok();
    let system = sampler.finish();
    // COMPOUNDs on the wire in the timed part (and the workers' untimed last steps):
    // fewer than requests when batching packs several into one.
    let sent: u64 = clients.iter().map(|c| c.stats().compounds).sum::<u64>() - sent_before;
    let batch_level = clients
        .iter()
        .filter_map(|c| c.batch_stats())
        .map(|b| b.level)
        .max();
    let proc_after = cfg
        .server_pid
        .map(|p| ProcSample::read(Proc::Pid(p)))
        .transpose()
        .context("read server /proc")?;
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
    for m in mounts {
        let _ = tokio::time::timeout(Duration::from_secs(5), m.umount()).await;
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let server = match (&proc_before, &proc_after) {
        (Some(b), Some(a)) => Some(cost_per_request(b, a, merged.compounds)),
        _ => None,
    };
    let stats = RunStats {
        rec: merged,
        driver: cfg.driver,
        clients: cfg.clients,
        threads: cfg.threads,
        duration,
    };
    let mut checks = w.expected_ops(&stats);
    checks.push(Expectation::that(
        "no NFS op failed",
        stats.rec.errors.is_empty(),
        format!("{:?}", stats.rec.errors),
    ));
    if let StopAt::Ops(k) = stop {
        // A transaction that conflicted on every try (shared files, a loaded machine)
        // used its iteration without completing it: counted apart, not lost.
        let given_up = stats
            .rec
            .counters
            .get("txn_conflicts")
            .copied()
            .unwrap_or(0);
        checks.push(Expectation::eq(
            "iterations + transactions given up == op budget",
            stats.iterations() + given_up,
            k,
        ));
    }
    let mut rep = Repeat::from_recorder(&stats.rec, duration.as_secs_f64(), server, checks);
    if cfg.driver == Driver::Txnfs {
        rep.rpc_messages = Some(sent);
        rep.wire = Some(Wire::of(&times_before, &times_after));
    }
    if let (Some(b), Some(a)) = (&client_before, &client_after) {
        rep.client = Some(cost_per_request(b, a, stats.rec.compounds));
    }
    rep.system = system;
    rep.start_unix_ns = Some(started);
    rep.agreed_start_unix_ns = agreed_start;
    rep.batch_level = batch_level;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t: Target = "nfs://127.0.0.1:2050/export/dir?mountport=2051"
            .parse()
            .unwrap();
        assert_eq!(t.addr, "127.0.0.1:2050".parse().unwrap());
        assert_eq!(t.path, "export/dir");
        assert_eq!(t.mount_port, Some(2051));
        assert!("nfs://127.0.0.1:2050/export?x=1".parse::<Target>().is_err());
        assert!("nfs://127.0.0.1:2050/export?mountport=x"
            .parse::<Target>()
            .is_err());
        let t: Target = "nfs://127.0.0.1".parse().unwrap();
        assert_eq!(t.addr.port(), 2049);
        assert_eq!(t.path, "");
        let t: Target = "nfs://127.0.0.1:9/".parse().unwrap();
        assert_eq!(t.path, "");
        assert!("http://x/".parse::<Target>().is_err());
        assert!("nfs:///x".parse::<Target>().is_err());
    }
}
