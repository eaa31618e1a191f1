//! Starting and stopping the real servers (txnfs from this workspace,
//! NFS-Ganesha from the system), and the matrix driver against them with a
//! fake `txnfs-bench`. A missing binary fails the test in CI and skips it (with a
//! `SKIPPED:` line) elsewhere (`txnfs_e2e::peer`): build txnfs with
//! `cargo build -p txnfs-cli`; Ganesha comes from `apt-get install nfs-ganesha
//! nfs-ganesha-vfs`.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use txnfs_benchreport::compare::{run_matrix, MatrixOpts};
use txnfs_benchreport::results::Metric;
use txnfs_benchreport::servers::{self, RunningServer, ServerKind, ServerOpts};
use txnfs_e2e::peer;
use txnfs_rpc::{Credential, RpcClient};

fn available() -> Vec<ServerKind> {
    let mut kinds = Vec::new();
    let txnfs = servers::find_txnfs_bin().ok();
    if peer::require("the txnfs binary", txnfs, "cargo build -p txnfs-cli").is_some() {
        kinds.push(ServerKind::Txnfs);
    }
    if peer::ganesha().is_some() {
        kinds.push(ServerKind::Ganesha);
    }
    kinds
}

fn rpc_null(addr: SocketAddr) -> Result<Bytes, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = RpcClient::connect(addr, Credential::None)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tokio::time::timeout(
            Duration::from_secs(5),
            client.call(100003, 4, 0, Bytes::new()),
        )
        .await
        .map_err(|_| "timeout".to_string())?
        .map_err(|e| format!("call: {e}"))
    })
}

#[test]
fn start_and_stop_real_servers() {
    for kind in available() {
        let mut server = RunningServer::start(kind, &ServerOpts::default())
            .unwrap_or_else(|e| panic!("{kind} did not start: {e:#}"));
        let (pid, addr) = (server.pid, server.addr());
        assert!(server.is_running());
        assert!(Path::new(&format!("/proc/{pid}")).exists());
        assert_eq!(server.export_path, kind.export_path());
        assert!(server.export_dir.is_dir());
        assert_eq!(
            server.url(),
            format!("nfs://127.0.0.1:{}{}", server.port, kind.export_path())
        );
        let reply = rpc_null(addr).unwrap_or_else(|e| panic!("{kind} NULL: {e}"));
        assert!(reply.is_empty(), "NULL returns no results");
        let work = server.work_dir().unwrap().to_path_buf();
        server.stop().unwrap();
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{kind} pid {pid} still there"
        );
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
            "{kind} port {} still answers",
            addr.port()
        );
        assert!(!work.exists(), "temporary directory kept");
        eprintln!("{kind}: started pid {pid} on {addr}, NULL ok, stopped");
    }
}

#[test]
fn start_timeout_is_a_clear_error() {
    // A "server" that runs but never listens.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("txnfs");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'fake 0.0'; exit 0; }\necho 'fake server: not listening'\nexec sleep 30\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opts = ServerOpts {
        txnfs_bin: Some(fake),
        start_timeout: Duration::from_millis(800),
        ..ServerOpts::default()
    };
    let err = RunningServer::start(ServerKind::Txnfs, &opts).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("did not answer an RPC NULL"), "{msg}");
    assert!(
        msg.contains("fake server: not listening"),
        "log tail missing: {msg}"
    );
}

/// A stand-in for `txnfs-bench run`: checks its arguments and the server
/// PID, writes a results JSON (txnfs 20 % faster than Ganesha).
const FAKE_BENCH: &str = r#"#!/bin/sh
set -eu
[ "$1" = run ] || { echo "expected run, got $1" >&2; exit 2; }
wl=$2; shift 2
target= delay= repeat=1 pid= out= extra= label=
while [ $# -gt 0 ]; do
  case $1 in
    --target) target=$2; shift 2;;
    --server) label=$2; shift 2;;
    --delay-ms) delay=$2; shift 2;;
    --repeat) repeat=$2; shift 2;;
    --server-pid) pid=$2; shift 2;;
    --out) out=$2; shift 2;;
    *) extra="$extra $1"; shift;;
  esac
done
kill -0 "$pid" || { echo "server pid $pid not running" >&2; exit 3; }
[ "$extra" = " --threads 2" ] || { echo "passthrough args: '$extra'" >&2; exit 4; }
[ "$wl" != broken ] || { echo "workload broken fails" >&2; exit 5; }
case $target in
  */export) ops=1000; srv=ganesha;;
  */) ops=1200; srv=txnfs;;
  *) echo "bad target $target" >&2; exit 6;;
esac
[ "$label" = "$srv" ] || { echo "label '$label' for $target" >&2; exit 7; }
a=$((ops - 10)); b=$((ops + 10))
echo "fake run $wl on $target delay $delay repeat $repeat"
cat > "$out/$wl.json" <<JSON
{"workload": "$wl", "server": "$label", "target": "$target", "delay_ms": $delay,
 "params": {"fake": true},
 "repeats": [
   {"duration_s": 1, "ops": $a, "ops_per_s": $a, "mb_per_s": 1.0,
    "per_second": [{"t": 1, "ops": $a, "bytes": 0}],
    "server": {"cpu_us_per_op": 10, "ctx_switches_per_op": 2}, "checks": []},
   {"duration_s": 1, "ops": $b, "ops_per_s": $b, "mb_per_s": 1.0,
    "per_second": [{"t": 1, "ops": $b, "bytes": 0}],
    "server": {"cpu_us_per_op": 12, "ctx_switches_per_op": 2}, "checks": []}
 ]}
JSON
"#;

#[test]
fn matrix_against_real_servers_with_fake_runner() {
    let servers = available();
    if servers.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("txnfs-bench");
    std::fs::write(&bench, FAKE_BENCH).unwrap();
    std::fs::set_permissions(&bench, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("out");
    let opts = MatrixOpts {
        workloads: vec!["alpha".into(), "beta".into(), "broken".into()],
        servers: servers.iter().map(|k| (*k).into()).collect(),
        delays_ms: vec![0.0, 10.0],
        repeat: Some(2),
        extra_args: vec!["--threads".into(), "2".into()],
        out: out.clone(),
        bench_bin: Some(bench),
        bench_prefix: Vec::new(),
        server_opts: ServerOpts::default(),
    };
    let cmp = run_matrix(&opts).unwrap();
    assert_eq!(cmp.runs.len(), servers.len() * 2 * 2);
    assert_eq!(cmp.errors.len(), servers.len() * 2);
    assert!(cmp.errors[0].error.contains("workload broken fails"));
    for run in &cmp.runs {
        assert_eq!(run.result.repeats.len(), 2);
        assert!(run.file.as_deref().unwrap().starts_with("runs/"));
        assert!(out.join(run.file.as_deref().unwrap()).is_file());
    }
    if servers.len() == 2 {
        let r = cmp
            .ratio("txnfs", 10.0, "beta", Metric::OpsPerS)
            .and_then(|r| r.ratio.clone())
            .unwrap();
        assert!((r.value - 1.2).abs() < 1e-9, "{r:?}");
        // Both sides: values +-10 over 2 repeats, ci = 12.706 * 10.
        assert!(r.ci95.unwrap() > 0.1);
        let cpu = cmp
            .ratio("txnfs", 0.0, "alpha", Metric::CpuUsPerOp)
            .unwrap();
        assert!((cpu.ratio.as_ref().unwrap().value - 1.0).abs() < 1e-9);
    }
    let written = txnfs_benchreport::report::write_all(&cmp, &out).unwrap();
    assert_eq!(written.bar_charts.len(), 2);
    let md = std::fs::read_to_string(&written.report).unwrap();
    assert!(md.contains("## Failed runs"), "{md}");
    assert!(md.contains("## Delay 0 ms") && md.contains("## Delay 10 ms"));
}
