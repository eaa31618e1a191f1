//! The crash torture: rounds of concurrent transactional clients against a real
//! `txnfs serve` on a host directory, each round ended by `kill -9` at a random moment
//! or by a `TXNFS_TXN_FAULT` point inside the txn layer, then a restart (recovery) and a
//! check of the host directory against the model of acknowledged transactions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use txnfs_proto::nfs4::nfsstat4;

use crate::model::{
    content, diff, key_of, shared_file, snapshot, ClientModel, Plan, Rng, Tree, SHARED_DIR,
};
use crate::nfs::{session, status_of, CallError};
use crate::server::{signal_of, ServeSpec, ServerProc, Started};

/// The fault points of the txn layer (crates/backend/src/txn/mod.rs).
pub const FAULT_POINTS: [&str; 6] = [
    "after-journal",
    "between-ops",
    "before-commit",
    "after-commit",
    "during-undo",
    "during-recovery",
];

#[derive(Clone, Debug)]
pub struct Config {
    pub rounds: u32,
    pub seed: u64,
    pub clients: usize,
    /// Files under `shared/` that transactions of all clients overwrite together.
    pub shared: usize,
    pub bin: PathBuf,
    /// Keep the work directory (export, state, server log) even when all is well.
    pub keep: bool,
    /// Keep it when a violation is found (default).
    pub keep_on_violation: bool,
    /// Checker self-test: send the same ops as plain COMPOUNDs, which are not atomic, so
    /// the checks must find violations.
    pub plain: bool,
    /// Longest random `kill -9` delay.
    pub max_kill_ms: u64,
    /// How long a fault round waits for its point before it kills the server itself.
    pub fault_wait: Duration,
}

impl Config {
    pub fn new(rounds: u32, seed: u64, bin: PathBuf) -> Self {
        Config {
            rounds,
            seed,
            clients: 3,
            shared: 4,
            bin,
            keep: false,
            keep_on_violation: true,
            plain: false,
            max_kill_ms: 400,
            fault_wait: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub rounds: u32,
    /// Server deaths: kills, fault points that fired, recoveries that died.
    pub crashes: u64,
    pub kills: u64,
    /// Fault point → times it fired.
    pub fired: BTreeMap<String, u64>,
    /// Fault rounds whose point was not reached in time (the server was killed instead).
    pub missed: u64,
    /// Transactions answered NFS4_OK (checked complete on the host at once).
    pub acked: u64,
    /// Transactions that failed at their last op as planned (checked undone at once).
    pub failed_as_planned: u64,
    pub delays: u64,
    /// Transactions whose reply the crash took, found applied / not applied.
    pub inflight_committed: u64,
    pub inflight_rolled_back: u64,
    pub violations: Vec<String>,
    pub work_dir: Option<PathBuf>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fired: Vec<String> = self.fired.iter().map(|(p, n)| format!("{p} {n}")).collect();
        write!(
            f,
            "rounds {}, crashes {} (kill -9 {}, fault points fired: {}; missed {}), \
             transactions acknowledged {}, failed as planned {}, NFS4ERR_DELAY retries {}, \
             in-flight resolved: committed {}, rolled back {}, violations {}",
            self.rounds,
            self.crashes,
            self.kills,
            if fired.is_empty() {
                "none".into()
            } else {
                fired.join(", ")
            },
            self.missed,
            self.acked,
            self.failed_as_planned,
            self.delays,
            self.inflight_committed,
            self.inflight_rolled_back,
            self.violations.len()
        )
    }
}

#[derive(Clone, Debug)]
enum Mode {
    Kill {
        delay_ms: u64,
    },
    Fault {
        point: &'static str,
        n: u64,
    },
    /// Crash mid-transaction at `first`, then restart with `during-recovery:n`.
    Recovery {
        first: String,
        n: u64,
    },
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Kill { delay_ms } => write!(f, "kill -9 after {delay_ms} ms"),
            Mode::Fault { point, n } => write!(f, "fault {point}:{n}"),
            Mode::Recovery { first, n } => write!(f, "fault {first} + during-recovery:{n}"),
        }
    }
}

/// The first seven rounds cover a kill and every fault point once; later ones are
/// random.
fn schedule(round: u32, rng: &mut Rng, max_kill_ms: u64) -> Mode {
    let which = if round < 7 {
        round as u64
    } else if rng.chance(30) {
        0
    } else {
        rng.range(1, 6)
    };
    match which {
        0 => Mode::Kill {
            delay_ms: rng.range(5, max_kill_ms.max(5)),
        },
        6 => Mode::Recovery {
            first: format!(
                "{}:{}",
                if rng.chance(50) {
                    "between-ops"
                } else {
                    "after-journal"
                },
                rng.range(2, 8)
            ),
            n: if round < 7 { 1 } else { rng.range(1, 3) },
        },
        w => {
            let point = FAULT_POINTS[w as usize - 1];
            let n = match point {
                "after-journal" | "between-ops" => rng.range(1, 40),
                _ => rng.range(1, 8),
            };
            Mode::Fault { point, n }
        }
    }
}

/// A transaction whose reply the crash took.
#[derive(Clone, Debug)]
struct Inflight {
    kind: &'static str,
    shared_key: Option<u64>,
    pre: Tree,
    post: Tree,
}

#[derive(Default, Debug)]
struct Counts {
    acked: u64,
    failed: u64,
    delays: u64,
}

struct ClientEnd {
    model: ClientModel,
    inflight: Option<Inflight>,
    counts: Counts,
    violations: Vec<String>,
}

/// One client for one server run: transactions until the server dies or `stop`.
/// What one client of one server run is given besides its model.
struct ClientCtx {
    addr: std::net::SocketAddr,
    /// Its directory on the host.
    host_dir: PathBuf,
    fail_pct: u64,
    stop: Arc<AtomicBool>,
    owner: String,
    plain: bool,
}

async fn client_run(cx: ClientCtx, mut model: ClientModel, mut rng: Rng) -> ClientEnd {
    let ClientCtx {
        addr,
        host_dir,
        fail_pct,
        stop,
        owner,
        plain,
    } = cx;
    let end = |model, inflight, counts, violations| ClientEnd {
        model,
        inflight,
        counts,
        violations,
    };
    let mut counts = Counts::default();
    let mut violations = Vec::new();
    let Ok(mut s) = session(addr, owner.as_bytes()).await else {
        // The server died before we got a session: nothing was sent.
        return end(model, None, counts, violations);
    };
    let check = |tree: &Tree, what: &str, violations: &mut Vec<String>| match snapshot(&host_dir) {
        Ok(h) => {
            if let Some(d) = diff(&h, tree) {
                violations.push(format!("c{}: {what}: {d}", model_id(&host_dir)));
            }
        }
        Err(e) => violations.push(format!("c{}: {what}: {e}", model_id(&host_dir))),
    };
    while !stop.load(Ordering::SeqCst) && violations.is_empty() {
        let fail = rng.chance(fail_pct);
        let plan: Plan = model.plan(&mut rng, fail);
        let mut backoff = 2u64;
        loop {
            let sent = if plain {
                s.plain(plan.ops.clone()).await
            } else {
                s.txn(plan.ops.clone()).await
            };
            let r = match sent {
                Ok(r) => r,
                Err(e) if !lost_to_crash(&e) => {
                    violations.push(format!("c{}: {}: {e}", model.id, plan.kind));
                    return end(model, None, counts, violations);
                }
                Err(_) => {
                    // Lost to the crash: outcome unknown until the restart.
                    let inflight = Inflight {
                        kind: plan.kind,
                        shared_key: plan.shared_key,
                        pre: model.tree.clone(),
                        post: plan.post.clone(),
                    };
                    return end(model, Some(inflight), counts, violations);
                }
            };
            let last = r.resarray.last().map(status_of);
            match r.status {
                nfsstat4::NFS4_OK if !plan.fails => {
                    check(
                        &plan.post,
                        &format!("acknowledged {}", plan.kind),
                        &mut violations,
                    );
                    model.tree = plan.post.clone();
                    counts.acked += 1;
                }
                nfsstat4::NFS4ERR_NOENT
                    if plan.fails
                        && r.resarray.len() == plan.ops.len() + 1
                        && last == Some(nfsstat4::NFS4ERR_NOENT) =>
                {
                    check(
                        &model.tree,
                        &format!("failed {}", plan.kind),
                        &mut violations,
                    );
                    counts.failed += 1;
                }
                nfsstat4::NFS4ERR_DELAY => {
                    check(
                        &model.tree,
                        &format!("delayed {}", plan.kind),
                        &mut violations,
                    );
                    counts.delays += 1;
                    if !stop.load(Ordering::SeqCst) && violations.is_empty() {
                        tokio::time::sleep(Duration::from_millis(backoff)).await;
                        backoff = (backoff * 2).min(50);
                        continue;
                    }
                }
                other => {
                    violations.push(format!(
                        "c{}: {} answered {other:?} after {} of {} ops (planned to fail: {})",
                        model.id,
                        plan.kind,
                        r.resarray.len(),
                        plan.ops.len() + 1,
                        plan.fails
                    ));
                    check(&model.tree, "after an unexpected error", &mut violations);
                }
            }
            break;
        }
    }
    end(model, None, counts, violations)
}

/// A call error a server crash explains (the connection went away); anything else (an
/// RPC-level refusal, a hang, a reply that does not decode) is a violation.
fn lost_to_crash(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Rpc(txnfs_rpc::RpcError::Disconnected | txnfs_rpc::RpcError::Io(_))
    )
}

fn model_id(host_dir: &Path) -> String {
    host_dir
        .file_name()
        .map(|n| n.to_string_lossy().trim_start_matches('c').to_string())
        .unwrap_or_default()
}

/// Checks the host against each client's model (or in-flight transaction) after a
/// restart, and that the backup directory is empty; updates the models.
fn resolve(
    export: &Path,
    models: &mut [ClientModel],
    inflight: Vec<Option<Inflight>>,
    sum: &mut Summary,
) -> (u64, u64) {
    let (mut committed, mut rolled_back) = (0, 0);
    // The shared files: all one generation, untorn, written by a transaction that was
    // acknowledged or in flight (never by one planned to fail).
    let mut shared_now = None;
    let n_shared = models.first().map_or(0, |m| m.shared);
    if n_shared > 0 {
        match shared_state(export, n_shared) {
            Ok(k) => {
                let known = k == 0 || models.iter().any(|m| m.shared_keys.contains(&k));
                if !known {
                    sum.violations.push(format!(
                        "shared files hold generation {k:x}, which no transaction that could \
                         commit wrote"
                    ));
                }
                shared_now = Some(k);
            }
            Err(e) => sum
                .violations
                .push(format!("shared files after restart: {e}")),
        }
    }
    for (m, f) in models.iter_mut().zip(inflight) {
        let host = match snapshot(&export.join(m.dir_name())) {
            Ok(h) => h,
            Err(e) => {
                sum.violations
                    .push(format!("c{}: after restart: {e}", m.id));
                continue;
            }
        };
        match f {
            None => {
                if let Some(d) = diff(&host, &m.tree) {
                    sum.violations.push(format!(
                        "c{}: after restart, no transaction in flight: {d}",
                        m.id
                    ));
                }
            }
            Some(f) => {
                if f.shared_key.is_some() && f.shared_key == shared_now {
                    if let Some(d) = diff(&host, &f.post) {
                        sum.violations.push(format!(
                            "c{}: the shared files hold the in-flight {}'s generation, but its \
                             other changes are not all there: {d}",
                            m.id, f.kind
                        ));
                    }
                }
                if diff(&host, &f.post).is_none() {
                    if f.post != f.pre {
                        committed += 1;
                    } else {
                        rolled_back += 1;
                    }
                    m.tree = f.post;
                } else if let Some(d_pre) = diff(&host, &f.pre) {
                    let d_post = diff(&host, &f.post).unwrap_or_default();
                    sum.violations.push(format!(
                        "c{}: in-flight {} neither all nor nothing after restart: \
                         vs before: {d_pre}; vs after: {d_post}",
                        m.id, f.kind
                    ));
                } else {
                    rolled_back += 1;
                }
            }
        }
    }
    // Nothing else at the export root: the client directories and the hidden `.txnfs`.
    if let Ok(rd) = std::fs::read_dir(export) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n != ".txnfs" && n != SHARED_DIR && !models.iter().any(|m| m.dir_name() == n) {
                sum.violations
                    .push(format!("unexpected {n} at the export root after restart"));
            }
        }
    }
    let backup = export.join(".txnfs").join("backup");
    if let Ok(rd) = std::fs::read_dir(&backup) {
        let left: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !left.is_empty() {
            sum.violations.push(format!(
                ".txnfs/backup not empty after recovery: {} entries ({:?}...)",
                left.len(),
                &left[..left.len().min(5)]
            ));
        }
    }
    sum.inflight_committed += committed;
    sum.inflight_rolled_back += rolled_back;
    (committed, rolled_back)
}

/// The one generation all `n` shared files hold in full.
fn shared_state(export: &Path, n: usize) -> Result<u64, String> {
    let mut keys = Vec::new();
    for i in 0..n {
        let p = export.join(SHARED_DIR).join(shared_file(i));
        let b = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        match key_of(&b) {
            Some(k) if b == content(k) => keys.push(k),
            Some(k) => return Err(format!("s{i} is TORN (starts as {k:x}, {} bytes)", b.len())),
            None => return Err(format!("s{i} is TORN ({} bytes, no header)", b.len())),
        }
    }
    if keys.iter().any(|k| *k != keys[0]) {
        let ks: Vec<String> = keys.iter().map(|k| format!("{k:x}")).collect();
        return Err(format!("a MIX of generations: {}", ks.join(", ")));
    }
    Ok(keys[0])
}

/// Did the server log say it died at `point`?
fn log_says_died_at(log: &Path, from: u64, point: &str) -> bool {
    let Ok(b) = std::fs::read(log) else {
        return false;
    };
    let tail = String::from_utf8_lossy(&b[(from as usize).min(b.len())..]).into_owned();
    tail.contains(&format!("dying at {point}"))
}

fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

fn start_listening(spec: &ServeSpec, fault: Option<&str>) -> Result<ServerProc, String> {
    match spec.start(fault)? {
        Started::Listening(s) => Ok(s),
        Started::Exited(st) => Err(format!(
            "server exited while starting (fault {fault:?}): {st:?}; see {}",
            spec.log.display()
        )),
    }
}

/// Runs the torture; prints one line per round and returns the figures.
pub async fn run(cfg: Config) -> Summary {
    let mut sum = Summary::default();
    let mut rng = Rng(cfg.seed);
    let work = tempfile::Builder::new()
        .prefix("txnfs-torture-")
        .tempdir()
        .expect("temp dir");
    let export = work.path().join("export");
    let state = work.path().join("state");
    std::fs::create_dir_all(&export).expect("mkdir export");
    std::fs::create_dir_all(&state).expect("mkdir state");
    let spec = ServeSpec {
        bin: cfg.bin.clone(),
        export: Some(export.clone()),
        state_dir: state,
        log: work.path().join("server.log"),
    };
    println!(
        "txn torture: seed {} ({:#x}), {} rounds, {} clients, {} shared files, work dir {}{}",
        cfg.seed,
        cfg.seed,
        cfg.rounds,
        cfg.clients,
        cfg.shared,
        work.path().display(),
        if cfg.plain {
            " (checker self-test: PLAIN COMPOUNDs, violations expected)"
        } else {
            ""
        }
    );
    let mut models: Vec<ClientModel> = (0..cfg.clients).map(ClientModel::new).collect();
    for m in models.iter_mut() {
        std::fs::create_dir_all(export.join(m.dir_name())).expect("mkdir client dir");
        m.shared = cfg.shared;
    }
    if cfg.shared > 0 {
        std::fs::create_dir_all(export.join(SHARED_DIR)).expect("mkdir shared");
        for i in 0..cfg.shared {
            std::fs::write(export.join(SHARED_DIR).join(shared_file(i)), content(0))
                .expect("write shared file");
        }
    }
    let mut pending: Vec<Option<Inflight>> = vec![None; cfg.clients];
    let mut line = String::new();
    for round in 0..cfg.rounds {
        let mode = schedule(round, &mut rng, cfg.max_kill_ms);
        let fault = match &mode {
            Mode::Kill { .. } => None,
            Mode::Fault { point, n } => Some(format!("{point}:{n}")),
            Mode::Recovery { first, .. } => Some(first.clone()),
        };
        let log_from = log_len(&spec.log);
        let t0 = Instant::now();
        // This start also recovers what the previous round left.
        let mut srv = match start_listening(&spec, fault.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                sum.violations.push(format!("round {round}: {e}"));
                break;
            }
        };
        let recovery_ms = t0.elapsed().as_millis();
        let (c, rb) = resolve(&export, &mut models, std::mem::take(&mut pending), &mut sum);
        if !line.is_empty() {
            println!("{line}; after restart ({recovery_ms} ms): committed {c}, rolled back {rb}");
        }
        if !sum.violations.is_empty() {
            break;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let fail_pct = match &mode {
            Mode::Fault {
                point: "during-undo",
                ..
            } => 50,
            _ => 10,
        };
        let mut tasks = Vec::new();
        for m in &models {
            let seed = rng.next_u64();
            let cx = ClientCtx {
                addr: srv.addr,
                host_dir: export.join(m.dir_name()),
                fail_pct,
                stop: stop.clone(),
                owner: format!("torture-{}-{round}-{}", m.id, cfg.seed),
                plain: cfg.plain,
            };
            tasks.push(tokio::spawn(client_run(cx, m.clone(), Rng(seed))));
        }
        let t1 = Instant::now();
        let outcome = match &mode {
            Mode::Kill { delay_ms } => {
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                srv.kill9();
                sum.kills += 1;
                sum.crashes += 1;
                "killed".to_string()
            }
            Mode::Fault { .. } | Mode::Recovery { .. } => {
                let point = fault
                    .as_deref()
                    .unwrap_or_default()
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                loop {
                    if let Some(st) = srv.try_wait() {
                        let fired = signal_of(&st) == Some(6)
                            && log_says_died_at(&spec.log, log_from, &point);
                        if fired {
                            *sum.fired.entry(point.clone()).or_default() += 1;
                            sum.crashes += 1;
                            break format!("{point} fired after {} ms", t1.elapsed().as_millis());
                        }
                        sum.violations
                            .push(format!("round {round}: server died unexpectedly: {st:?}"));
                        break format!("server died: {st:?}");
                    }
                    if t1.elapsed() > cfg.fault_wait {
                        srv.kill9();
                        sum.missed += 1;
                        sum.kills += 1;
                        sum.crashes += 1;
                        break format!("{point} not reached; killed");
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        stop.store(true, Ordering::SeqCst);
        let mut counts = Counts::default();
        let mut inflight_n = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await {
                Ok(e) => {
                    counts.acked += e.counts.acked;
                    counts.failed += e.counts.failed;
                    counts.delays += e.counts.delays;
                    sum.violations.extend(e.violations);
                    inflight_n += e.inflight.is_some() as u32;
                    models[i] = e.model;
                    pending.push(e.inflight);
                }
                Err(e) => {
                    sum.violations.push(format!("client {i} panicked: {e}"));
                    pending.push(None);
                }
            }
        }
        drop(srv);
        let mut rec = String::new();
        if let Mode::Recovery { n, .. } = &mode {
            let from = log_len(&spec.log);
            let f = format!("during-recovery:{n}");
            match spec.start(Some(&f)) {
                Ok(Started::Exited(st))
                    if signal_of(&st) == Some(6)
                        && log_says_died_at(&spec.log, from, "during-recovery") =>
                {
                    *sum.fired.entry("during-recovery".into()).or_default() += 1;
                    sum.crashes += 1;
                    rec = ", recovery died at during-recovery".into();
                }
                Ok(Started::Exited(st)) => {
                    sum.violations
                        .push(format!("round {round}: recovery died unexpectedly: {st:?}"));
                }
                Ok(Started::Listening(_s)) => {
                    sum.missed += 1;
                    rec = ", during-recovery not reached (recovery had fewer steps)".into();
                }
                Err(e) => sum.violations.push(format!("round {round}: {e}")),
            }
        }
        sum.acked += counts.acked;
        sum.failed_as_planned += counts.failed;
        sum.delays += counts.delays;
        sum.rounds += 1;
        line = format!(
            "round {round:>4}: {mode:<42} {outcome}{rec}; acked {}, failed as planned {}, \
             delays {}, in flight {inflight_n}",
            counts.acked, counts.failed, counts.delays
        );
        if !sum.violations.is_empty() {
            println!("{line}");
            line.clear();
            break;
        }
    }
    // The last restart: recovery, then the final check.
    if sum.violations.is_empty() {
        let t0 = Instant::now();
        match start_listening(&spec, None) {
            Ok(srv) => {
                let ms = t0.elapsed().as_millis();
                let (c, rb) = resolve(&export, &mut models, pending, &mut sum);
                println!("{line}; after restart ({ms} ms): committed {c}, rolled back {rb}");
                drop(srv);
            }
            Err(e) => sum.violations.push(e),
        }
    }
    for v in &sum.violations {
        println!("VIOLATION: {v}");
    }
    let files: usize = models
        .iter()
        .map(|m| {
            m.tree
                .values()
                .filter(|n| matches!(n, crate::model::Node::File(_)))
                .count()
        })
        .sum();
    if sum.violations.is_empty() {
        println!("final state: {files} files in the model, all on the host as acknowledged");
    }
    if cfg.keep || (cfg.keep_on_violation && !sum.violations.is_empty()) {
        let p = work.keep();
        println!("work dir kept: {}", p.display());
        sum.work_dir = Some(p);
    }
    println!("summary: {sum}");
    sum
}
