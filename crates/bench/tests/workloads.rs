//! Every workload end to end at tiny scale against txnfs and NFS-Ganesha:
//! the per-op count rules of each workload hold, and the results JSON has
//! the schema the compare report reads.
//!
//! txnfs: build it first (`cargo build -p txnfs-cli`, or set TXNFS_BIN).
//! Ganesha: `ganesha.nfsd` must be installed.

use std::time::Instant;
use txnfs_bench::driver::{Driver, NfsVersion};
use txnfs_bench::results::Results;
use txnfs_bench::runner::{self, RunConfig, Target};
use txnfs_bench::workload::StopAt;
use txnfs_bench::workloads::{self, Params};
use txnfs_client::BatchMode;
use txnfs_e2e::{ServerGuard, ServerKind};

struct Case {
    name: &'static str,
    clients: usize,
    threads: usize,
    ops: Option<u64>,
    params: Params,
    delay_ms: f64,
    repeat: usize,
    sample_self: bool,
    driver: Driver,
    /// The nfs-rs driver's protocol version (NFSv3 cases run against txnfs only: the
    /// harness's Ganesha serves NFSv4).
    nfs_version: NfsVersion,
    batch: BatchMode,
}

fn case(name: &'static str) -> Case {
    Case {
        name,
        clients: 1,
        threads: 2,
        ops: None,
        params: Params {
            files: Some(12),
            file_size: Some(4096),
            ..Params::default()
        },
        delay_ms: 0.0,
        repeat: 1,
        sample_self: false,
        driver: Driver::Txnfs,
        nfs_version: NfsVersion::V41,
        batch: BatchMode::None,
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Random read through the delay proxy, 2 clients, server sampling (of
    // this process: the path is the same for a real server PID), 2 repeats.
    let mut c = case("randread");
    c.clients = 2;
    c.ops = Some(40);
    c.params.file_size = Some(256 << 10);
    c.delay_ms = 1.0;
    c.repeat = 2;
    c.sample_self = true;
    v.push(c);
    let mut c = case("randwrite");
    c.ops = Some(30);
    c.params.file_size = Some(256 << 10);
    c.params.io_size = Some(16 << 10);
    v.push(c);
    let mut c = case("randwrite");
    c.ops = Some(20);
    c.params.file_size = Some(64 << 10);
    c.params.sync = true;
    v.push(c);
    let mut c = case("seqread");
    c.params.file_size = Some(1 << 20);
    c.params.io_size = Some(128 << 10);
    v.push(c);
    let mut c = case("seqwrite");
    c.params.file_size = Some(1 << 20);
    c.params.io_size = Some(256 << 10);
    v.push(c);
    let mut c = case("smallfiles");
    c.ops = Some(30);
    v.push(c);
    for size in [0, 4096, 16384] {
        let mut c = case("create");
        c.params.file_size = Some(size);
        c.params.files = Some(15);
        c.threads = 3;
        v.push(c);
    }
    let mut c = case("listing");
    c.params.files = Some(60);
    c.ops = Some(20);
    v.push(c);
    let mut c = case("locked");
    c.params.files = Some(4);
    v.push(c);
    let mut c = case("deleg");
    c.clients = 3;
    c.threads = 1;
    v.push(c);
    let mut c = case("cachedread");
    c.params.files = Some(3);
    c.params.file_size = Some(8192);
    c.ops = Some(12);
    c.threads = 1;
    v.push(c);
    for p in ["fileserver", "webserver", "mailserver"] {
        let mut c = case(p);
        c.ops = Some(6);
        c.params.file_size = Some(8 << 10);
        v.push(c);
    }
    let mut c = case("writefiles");
    c.params.file_size = Some(1536 << 10); // two WRITEs per file
    c.params.files = Some(4);
    v.push(c);
    let mut c = case("readfiles");
    c.params.file_size = Some(1024);
    v.push(c);
    for t in ["tree-ls", "tree-cp", "tree-rm"] {
        let mut c = case(t);
        c.threads = 1;
        c.params.files = Some(80);
        c.params.file_size = Some(2048);
        c.params.set.insert("dirs".into(), "10".into());
        c.params.set.insert("trees".into(), "2".into());
        v.push(c);
        let mut c = case(t);
        c.threads = 1;
        c.driver = Driver::NfsRs;
        c.params.files = Some(40);
        c.params.file_size = Some(2048);
        c.params.set.insert("dirs".into(), "6".into());
        c.params.set.insert("trees".into(), "2".into());
        v.push(c);
    }
    // GETATTR and 4 KiB READ loops, with both client libraries (what the
    // retired opsloop measured), sampling this process as the "server".
    for driver in [Driver::Txnfs, Driver::NfsRs] {
        let mut c = case("getattr");
        c.ops = Some(50);
        c.driver = driver;
        c.sample_self = driver == Driver::NfsRs;
        v.push(c);
        let mut c = case("randread");
        c.ops = Some(50);
        c.params.file_size = Some(256 << 10);
        c.driver = driver;
        v.push(c);
    }
    // The same loops over NFSv3 (seed 001's v3 vs v4.1, through one client library).
    for name in ["getattr", "randread"] {
        let mut c = case(name);
        c.ops = Some(50);
        c.params.file_size = Some(256 << 10);
        c.driver = Driver::NfsRs;
        c.nfs_version = NfsVersion::V3;
        v.push(c);
    }
    // Seed 001's write and metadata workloads through nfs-rs, over NFSv4.1 and NFSv3.
    for vers in [NfsVersion::V41, NfsVersion::V3] {
        for name in ["randwrite", "create", "smallfiles"] {
            let mut c = case(name);
            c.ops = Some(30);
            if name == "randwrite" {
                c.params.file_size = Some(256 << 10);
            }
            c.driver = Driver::NfsRs;
            c.nfs_version = vers;
            v.push(c);
        }
    }
    // 4 KiB reads of 8 threads batched by our client (ADR 0044): the per-op rules
    // hold whatever shares a COMPOUND.
    for batch in [BatchMode::Static(4), BatchMode::Dynamic] {
        let mut c = case("randread");
        c.ops = Some(200);
        c.threads = 8;
        c.params.file_size = Some(256 << 10);
        c.batch = batch;
        v.push(c);
    }
    v
}

fn check_schema(v: &serde_json::Value, what: &str) {
    for k in [
        "workload", "server", "target", "delay_ms", "clients", "threads", "params", "repeats",
        "summary",
    ] {
        assert!(v.get(k).is_some(), "{what}: results lack {k:?}");
    }
    let reps = v["repeats"].as_array().expect("repeats is an array");
    assert!(!reps.is_empty(), "{what}: no repeats");
    for r in reps {
        for k in [
            "duration_s",
            "ops",
            "bytes",
            "ops_per_s",
            "mb_per_s",
            "per_second",
            "op_counts",
            "op_bytes",
            "latency_us",
            "server",
            "checks",
        ] {
            assert!(r.get(k).is_some(), "{what}: repeat lacks {k:?}");
        }
        for (op, l) in r["latency_us"].as_object().expect("latency_us object") {
            for k in ["count", "mean", "p50", "p90", "p99", "max"] {
                assert!(l[k].is_number(), "{what}: latency_us.{op}.{k}");
            }
            assert!(l["p50"].as_f64() <= l["max"].as_f64(), "{what}: p50 <= max");
        }
        for s in r["per_second"].as_array().expect("per_second array") {
            for k in ["t", "ops", "bytes"] {
                assert!(s[k].is_u64(), "{what}: per_second.{k}");
            }
        }
        let total: u64 = r["per_second"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["ops"].as_u64().unwrap())
            .sum();
        assert_eq!(
            Some(total),
            r["ops"].as_u64(),
            "{what}: per-second ops add up"
        );
        // (NFSv3 procedures carry no SEQUENCE.)
        assert!(
            r["compounds"].as_u64() > Some(0)
                && (r["op_counts"]["SEQUENCE"].as_u64() > Some(0) || v["nfs_version"] == "3"),
            "{what}: counted COMPOUNDs"
        );
    }
    let s = &v["summary"];
    for k in ["ops_per_s", "mb_per_s"] {
        for f in ["mean", "ci95", "n"] {
            assert!(s[k].get(f).is_some(), "{what}: summary.{k}.{f}");
        }
    }
    assert!(s.get("cpu_us_per_op").is_some() && s.get("ctx_switches_per_op").is_some());
}

async fn run_all(kind: ServerKind) {
    let server = ServerGuard::start(kind);
    let path = server.export_path();
    let target: Target = format!("nfs://127.0.0.1:{}{path}", server.port())
        .parse()
        .expect("target");
    let mut failures = Vec::new();
    for c in cases() {
        if c.nfs_version == NfsVersion::V3 && kind != ServerKind::Txnfs {
            continue;
        }
        let t = Instant::now();
        let what = format!(
            "{kind:?} {} with {} (NFSv{}, batch {}) {:?}",
            c.name,
            c.driver,
            c.nfs_version,
            c.batch,
            (c.params.file_size, c.params.sync)
        );
        let w = workloads::by_name(c.name, &c.params).expect("workload");
        let mut cfg = RunConfig::new(target.clone());
        cfg.clients = c.clients;
        cfg.threads = c.threads;
        cfg.stop = c.ops.map(StopAt::Ops);
        cfg.delay_ms = c.delay_ms;
        cfg.repeat = c.repeat;
        cfg.driver = c.driver;
        cfg.nfs_version = c.nfs_version;
        cfg.batch = c.batch;
        cfg.server_label = Some(format!("{kind:?}").to_lowercase());
        if c.sample_self {
            cfg.server_pid = Some(std::process::id());
        }
        let res = runner::run(w, &cfg).await;
        let res = match res {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{what}: run failed: {e:#}"));
                continue;
            }
        };
        eprintln!(
            "{what}: {} ops, {:.0} ops/s, {} checks, {:.2} s",
            res.repeats[0].ops,
            res.repeats[0].ops_per_s,
            res.repeats[0].checks.len(),
            t.elapsed().as_secs_f64()
        );
        if !res.all_checks_ok() {
            failures.push(format!("{what}: {:?}", res.failed_checks()));
        }
        assert_eq!(res.repeats.len(), c.repeat, "{what}");
        assert!(res.repeats.iter().all(|r| r.ops > 0), "{what}: did work");
        if c.sample_self {
            assert!(res.repeats[0].server.is_some(), "{what}: server sampled");
            assert!(res.summary.cpu_us_per_op.is_some());
            assert_eq!(res.summary.ops_per_s.unwrap().n, c.repeat as u64);
        }
        if c.repeat > 1 {
            assert!(res.summary.ops_per_s.unwrap().ci95.is_some());
        }
        if c.delay_ms > 0.0 {
            assert!(
                res.repeats[0].counters.get("proxy_rpc_calls") >= Some(&res.repeats[0].compounds),
                "{what}: traffic went through the delay proxy"
            );
        }
        assert_eq!(res.driver, c.driver, "{what}: driver recorded");
        if c.nfs_version == NfsVersion::V3 {
            assert_eq!(res.nfs_version.as_deref(), Some("3"), "{what}");
            let ops = &res.repeats[0].op_counts;
            assert!(
                !ops.contains_key("SEQUENCE") && !ops.contains_key("PUTFH"),
                "{what}: {ops:?}"
            );
        }
        if let BatchMode::Static(_) = c.batch {
            let r = &res.repeats[0];
            let sent = r.rpc_messages.expect("our client counts its COMPOUNDs");
            assert!(
                sent < r.compounds,
                "{what}: {sent} COMPOUNDs for {} requests: nothing batched",
                r.compounds
            );
        }
        if kind == ServerKind::Txnfs {
            delegations_used(&res, c.name, &what, &mut failures);
        }
        let json = serde_json::to_value(&res).expect("serialize");
        check_schema(&json, &what);
    }
    // Clean-up removed every workload directory.
    let left: Vec<_> = std::fs::read_dir(server.export_dir())
        .expect("export dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    if !left.is_empty() {
        failures.push(format!("{kind:?}: left behind {left:?}"));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\nserver log tail:\n{}",
        failures.len(),
        failures.join("\n"),
        server.log_tail(20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_workloads_txnfs() {
    run_all(ServerKind::Txnfs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_workloads_ganesha() {
    run_all(ServerKind::Ganesha).await;
}

/// txnfs grants delegations to our client (its back channel answers): the workloads
/// built on them must show it, or they measured nothing of it.
fn delegations_used(res: &Results, name: &str, what: &str, failures: &mut Vec<String>) {
    let r = &res.repeats[0];
    let op = |o: &str| r.op_counts.get(o).copied().unwrap_or(0);
    match name {
        // Every file read again under its delegation: fewer READs than iterations.
        "locked" if r.counters.get("delegations").copied().unwrap_or(0) == 0 => {
            failures.push(format!("{what}: no read delegation granted"))
        }
        "cachedread" if op("READ") >= r.ops => failures.push(format!(
            "{what}: {} READs for {} reads: nothing served from the delegation cache",
            op("READ"),
            r.ops
        )),
        "deleg" if r.counters.get("group_a_delegations").copied().unwrap_or(0) == 0 => {
            failures.push(format!("{what}: group A got no read delegation to recall"))
        }
        _ => {}
    }
}

/// Tyche's Fig. 8 shape (`--set join_threads`): the joiner starts late and reads
/// 128 KiB at a time while the others read 4 KiB, batched dynamically; the per-op
/// rules hold, the joiner's bytes are there, and none before it joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_joiners_of_another_size() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let target: Target = format!("nfs://127.0.0.1:{}{}", server.port(), server.export_path())
        .parse()
        .expect("target");
    let mut params = Params {
        file_size: Some(1 << 20),
        ..Params::default()
    };
    for (k, v) in [
        ("join_threads", "1"),
        ("join_io", "128k"),
        ("join_every_ms", "1200"),
    ] {
        params.set.insert(k.into(), v.into());
    }
    let w = workloads::by_name("randread", &params).expect("workload");
    let mut cfg = RunConfig::new(target);
    cfg.threads = 4;
    cfg.batch = BatchMode::Dynamic;
    cfg.stop = Some(StopAt::Duration(std::time::Duration::from_millis(2500)));
    let res = runner::run(w, &cfg).await.expect("run");
    let r = &res.repeats[0];
    assert!(res.all_checks_ok(), "{:?}", res.failed_checks());
    let big = (r.bytes - r.ops * 4096) / ((128 << 10) - 4096);
    assert!(
        big > 0,
        "the joiner read: {} bytes in {} READs",
        r.bytes,
        r.ops
    );
    // Three 4 KiB readers alone in the first second: every byte there is theirs.
    // A READ's bytes are stamped when its reply arrives and its iteration a moment
    // later, so a READ that straddles the second's end puts 4 KiB here and its op
    // in the next second: at most one per reader. One joiner READ would add 124 KiB.
    let first = &r.per_second[0];
    let readers = cfg.threads as u64 - 1;
    assert!(
        first.bytes >= first.ops * 4096
            && first.bytes - first.ops * 4096 <= readers * 4096
            && first.bytes % 4096 == 0,
        "nobody joined before 1.2 s: {first:?}"
    );
    // The once-a-second series carries the batch level.
    assert!(
        !r.system.is_empty()
            && r.system
                .iter()
                .all(|s| s.batch_level.is_some_and(|l| l >= 1)),
        "{:?}",
        r.system
    );
    // And the nfs-rs driver refuses the setting instead of ignoring it.
    let w = workloads::by_name("randread", &params).expect("workload");
    let mut cfg = RunConfig::new(
        format!("nfs://127.0.0.1:{}{}", server.port(), server.export_path())
            .parse()
            .expect("target"),
    );
    cfg.driver = Driver::NfsRs;
    cfg.stop = Some(StopAt::Ops(4));
    let e = runner::run(w, &cfg).await.expect_err("refused");
    assert!(format!("{e:#}").contains("join_threads"), "{e:#}");
}

/// `--set depth=N` (Tyche's "threads × 4 outstanding", a sequential reader's
/// readahead): one worker keeps N requests in flight, every one checked and counted;
/// out of range, or with nfs-rs, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_keeps_depth_requests_in_flight() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let target: Target = format!("nfs://127.0.0.1:{}{}", server.port(), server.export_path())
        .parse()
        .expect("target");
    let mut on_the_wire = Vec::new();
    for depth in ["1", "4"] {
        let mut params = Params {
            file_size: Some(1 << 20),
            io_size: Some(64 << 10),
            ..Params::default()
        };
        params.set.insert("depth".into(), depth.into());
        let w = workloads::by_name("seqread", &params).expect("workload");
        let mut cfg = RunConfig::new(target.clone());
        cfg.threads = 1;
        cfg.stop = Some(StopAt::Ops(64));
        let res = runner::run(w, &cfg).await.expect("run");
        assert!(res.all_checks_ok(), "{:?}", res.failed_checks());
        let r = &res.repeats[0];
        assert!(r.ops >= 64, "depth {depth}: {} ops", r.ops);
        assert_eq!(r.bytes, r.ops * (64 << 10), "depth {depth}: whole READs");
        assert_eq!(
            r.op_counts.get("READ").copied(),
            Some(r.ops),
            "depth {depth}"
        );
        let wire = r.wire.as_ref().expect("wire view");
        on_the_wire.push(wire.transport.on_the_wire);
        if depth == "4" {
            assert_eq!(res.params["depth"], 4, "{}", res.params);
        }
    }
    assert!(
        on_the_wire[1] >= on_the_wire[0] + 1.5,
        "messages on the wire at depth 1 and 4: {on_the_wire:?}"
    );
    for (driver, depth, why) in [
        (Driver::Txnfs, "0", "between 1 and 64"),
        (Driver::NfsRs, "2", "our client only"),
    ] {
        let mut params = Params::default();
        params.set.insert("depth".into(), depth.into());
        let e = match workloads::by_name("randread", &params) {
            Err(e) => e,
            Ok(w) => {
                let mut cfg = RunConfig::new(target.clone());
                cfg.driver = driver;
                cfg.stop = Some(StopAt::Ops(4));
                runner::run(w, &cfg).await.expect_err("refused")
            }
        };
        assert!(format!("{e:#}").contains(why), "{e:#}");
    }
}
