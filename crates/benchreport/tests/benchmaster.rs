//! Benchmaster's measurements against a real txnfs server on 127.0.0.1 (ADR 0053): the
//! per request type round-trip and queue times with transport counters, the
//! once-a-second system series, clients in separate processes released together, and
//! the sweep with its plots. Each test runs for a second or two; it measures nothing
//! about speed, it checks that every figure is there and adds up.
//!
//! Build txnfs first (`cargo build -p txnfs-cli`); without it the tests say SKIPPED.

use txnfs_bench::runner::{self, RunConfig};
use txnfs_bench::workload::StopAt;
use txnfs_bench::workloads::{self, Params};
use txnfs_benchreport::servers::{self, RunningServer, ServerKind, ServerOpts};
use txnfs_e2e::peer;

fn txnfs() -> Option<RunningServer> {
    let bin = servers::find_txnfs_bin().ok();
    peer::require("the txnfs binary", bin, "cargo build -p txnfs-cli")?;
    Some(RunningServer::start(ServerKind::Txnfs, &ServerOpts::default()).expect("start txnfs"))
}

#[test]
fn run_records_wire_times_transport_and_system_series() {
    let Some(server) = txnfs() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let params = Params {
        files: Some(4),
        file_size: Some(64 * 1024),
        ..Params::default()
    };
    let w = workloads::by_name("randread", &params).unwrap();
    let mut cfg = RunConfig::new(server.url().parse().unwrap());
    cfg.clients = 2;
    cfg.threads = 4;
    cfg.slots = 2;
    cfg.batch = "static:4".parse().unwrap();
    cfg.stop = Some(StopAt::Duration(std::time::Duration::from_millis(1500)));
    cfg.server_pid = Some(server.pid);
    cfg.verbose = false;
    let res = rt.block_on(runner::run(w, &cfg)).expect("bench run");
    let rep = &res.repeats[0];
    assert!(rep.ops > 0, "no reads done");

    let wire = rep.wire.as_ref().expect("our client reports wire figures");
    let read = wire
        .per_type
        .get("READ")
        .expect("READ in the per-type table");
    // The counters are read just after the start barrier and just after the workers end,
    // so a batch that left in between may straddle an edge: within 5 %.
    assert!(
        read.requests * 100 >= rep.ops * 95 && read.requests * 95 <= rep.ops * 100,
        "{read:?} for {} reads",
        rep.ops
    );
    assert!(read.messages > 0 && read.messages <= read.requests);
    assert!(read.rtt_us > 0.0 && read.bytes_received > read.requests * 4096);
    assert!(read.batched > 0, "static:4 sends reads through the queue");
    assert!(read.batch_wait_us > 0.0);
    let t = wire.transport;
    assert!(t.messages_sent >= read.messages && t.messages_received > 0);
    assert!(t.requests_per_message > 1.0, "batches carry several: {t:?}");
    assert!(t.on_the_wire >= 1.0);
    // Two slots for 4 threads each: some messages wait for a slot, and mean slot wait
    // is counted per message.
    assert!(read.slot_wait_us >= 0.0);

    assert!(!rep.system.is_empty(), "a sample at least at the end");
    assert!(rep.system.iter().all(|s| s.server.is_some()));
    let server_cpu: f64 = rep
        .system
        .iter()
        .filter_map(|s| s.server)
        .map(|s| s.user_ms + s.system_ms)
        .sum();
    assert!(server_cpu > 0.0, "the server worked: {:?}", rep.system);
    let client = rep.client.expect("client cost per request");
    assert!(client.cpu_us_per_op > 0.0 && client.ctx_switches_per_op > 0.0);
    assert!(res.summary.client_cpu_us_per_op.is_some());
    let text = txnfs_bench::cli::report(&res);
    assert!(
        text.contains("slot wait") && text.contains("on the wire"),
        "{text}"
    );
    assert!(text.contains("system ("), "{text}");
}

/// `bench run --out DIR ARGS` through the binary; the one results file it wrote.
fn bench_run_json(args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_txnfs-bench"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("run txnfs-bench");
    assert!(status.success(), "txnfs-bench run {args:?}: {status}");
    let file = std::fs::read_dir(out.path())
        .unwrap()
        .next()
        .expect("a results file")
        .unwrap()
        .path();
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

#[test]
fn processes_start_together_and_add_up() {
    let Some(server) = txnfs() else { return };
    let pid = server.pid.to_string();
    let v = bench_run_json(&[
        "randread",
        "--target",
        &server.url(),
        "--processes",
        "2",
        "--threads",
        "2",
        "--files",
        "4",
        "--file-size",
        "64k",
        "--duration",
        "1",
        "--server-pid",
        &pid,
    ]);
    assert_eq!(v["processes"], 2);
    assert_eq!(v["clients"], 2, "one client in each of two processes");
    let rep = &v["repeats"][0];
    let skew = &rep["start_skew"];
    assert_eq!(skew["processes"], 2, "{skew}");
    let (mean, max) = (
        skew["mean_ms"].as_f64().unwrap(),
        skew["max_ms"].as_f64().unwrap(),
    );
    assert!(mean >= 0.0 && max >= mean, "{skew}");
    assert!(rep["ops"].as_u64().unwrap() > 0);
    assert!(
        rep["wire"]["per_type"]["READ"]["requests"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        rep["server"]["cpu_us_per_op"].as_f64().unwrap() > 0.0,
        "{rep}"
    );
    assert!(rep["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true));
}

/// `--launch`: process 0 starts through a launch command of the user's (here a script
/// that notes its arguments, then runs the binary), process 1 as `local`.
#[test]
fn processes_start_through_launch_commands() {
    let Some(server) = txnfs() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("launch.sh");
    let noted = dir.path().join("launched");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            noted.display(),
            servers::find_txnfs_bin()
                .expect("the txnfs binary")
                .display()
        ),
    )
    .unwrap();
    let launch = format!("sh '{}'", script.display());
    let v = bench_run_json(&[
        "randread",
        "--target",
        &server.url(),
        "--processes",
        "2",
        "--launch",
        &launch,
        "--launch",
        "local",
        "--files",
        "4",
        "--file-size",
        "64k",
        "--duration",
        "1",
    ]);
    assert_eq!(v["processes"], 2);
    let rep = &v["repeats"][0];
    assert_eq!(rep["start_skew"]["processes"], 2, "{rep}");
    assert!(rep["ops"].as_u64().unwrap() > 0);
    let lines = std::fs::read_to_string(&noted).expect("the launch command ran");
    assert_eq!(
        lines.lines().count(),
        1,
        "one process of two launched: {lines}"
    );
    assert!(
        lines.starts_with("bench run randread") && lines.contains("--gate"),
        "the launch command gets the child's arguments: {lines}"
    );
    assert!(!lines.contains("--launch") && !lines.contains("--processes"));
}

#[test]
fn a_tiny_sweep_draws_each_batch_mode_with_error_bars() {
    let Some(server) = txnfs() else { return };
    let out = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_txnfs-bench"))
        .args(["sweep", "randread", "--target", &server.url()])
        .args(["--server-pid", &server.pid.to_string()])
        .args([
            "--threads",
            "1,2",
            "--delay-ms",
            "0",
            "--batch",
            "none,static:2",
        ])
        .args(["--repeat", "2", "--duration", "0.5", "--out"])
        .arg(out.path())
        .args(["--", "--files", "4", "--file-size", "64k"])
        .output()
        .expect("run txnfs-bench sweep");
    assert!(o.status.success(), "{o:?}");
    // The repeats interleave, the modes' order rotating: a drift of the machine falls
    // on both modes alike.
    let order: Vec<String> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("sweep: "))
        .map(String::from)
        .collect();
    assert_eq!(
        order,
        [
            "1 threads, 0 ms, batch none, repeat 1 of 2",
            "1 threads, 0 ms, batch static:2, repeat 1 of 2",
            "2 threads, 0 ms, batch none, repeat 1 of 2",
            "2 threads, 0 ms, batch static:2, repeat 1 of 2",
            "1 threads, 0 ms, batch static:2, repeat 2 of 2",
            "1 threads, 0 ms, batch none, repeat 2 of 2",
            "2 threads, 0 ms, batch static:2, repeat 2 of 2",
            "2 threads, 0 ms, batch none, repeat 2 of 2",
        ]
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("sweep.json")).unwrap()).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "2 threads × 1 delay × 2 modes");
    for c in cells {
        assert!(c["ops_per_s"]["mean"].as_f64().unwrap() > 0.0, "{c}");
        assert_eq!(c["ops_per_s"]["n"], 2);
        assert!(c["ops_per_s"]["ci95"].is_number(), "two repeats give a CI");
        assert!(c["slot_wait_us"]["mean"].is_number());
    }
    let svg = std::fs::read_to_string(out.path().join("sweep-ops-0ms.svg")).unwrap();
    for series in ["batch none", "batch static:2"] {
        assert!(svg.lines().any(|l| l.trim() == series), "{series} missing");
    }
    assert!(out.path().join("sweep-slotwait-0ms.svg").is_file());
    let md = std::fs::read_to_string(out.path().join("sweep.md")).unwrap();
    assert!(md.contains("| 0 | static:2 | 2 |"), "{md}");
}

#[test]
fn the_seeds_preset_puts_the_published_figure_beside_ours() {
    let Some(server) = txnfs() else { return };
    let out = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_txnfs-bench"))
        .args([
            "seeds",
            "--only",
            "deleg-locked",
            "--quick",
            "--target",
            &server.url(),
        ])
        .args(["--server-pid", &server.pid.to_string(), "--out"])
        .arg(out.path())
        .output()
        .expect("run txnfs-bench seeds");
    assert!(o.status.success(), "{o:?}");
    let md = std::fs::read_to_string(out.path().join("seeds.md")).unwrap();
    let row = md
        .lines()
        .find(|l| l.starts_with("| deleg-locked |"))
        .unwrap_or_else(|| panic!("no deleg-locked row:\n{md}"));
    assert!(
        row.contains("seed 001 §5.2, Table 1") && row.contains("3,009"),
        "{row}"
    );
    // Ours: with read delegations the ten locked reads of a file cost one OPEN and one
    // READ, and no LOCK goes to the server.
    assert!(row.contains("LOCK 0), delegations on"), "{row}");
    assert!(out.path().join("deleg-locked/sweep.json").is_file());
}
