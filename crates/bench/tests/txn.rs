//! The transactional mode of the workloads (`--txn`, ADR 0021): writefiles
//! against txnfs commits one transaction per iteration and the files read
//! back with the bytes written; against a server without transactions
//! (`txnfs serve --no-txn`, NFS-Ganesha) the run fails with the clear error
//! and is never run plainly.
//!
//! Build txnfs first (`cargo build -p txnfs-cli`, or set TXNFS_BIN).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use txnfs_bench::results::Results;
use txnfs_bench::runner::{self, RunConfig, Target};
use txnfs_bench::workload::StopAt;
use txnfs_bench::workloads::{self, Params};
use txnfs_e2e::{ServerGuard, ServerKind};

fn params(txn: bool, per_txn: u64, sharing: f64) -> Params {
    Params {
        files: Some(10),
        file_size: Some(5000),
        txn,
        files_per_txn: Some(per_txn),
        sharing,
        ..Params::default()
    }
}

async fn run(
    target: &Target,
    name: &str,
    p: &Params,
    clients: usize,
    ops: u64,
) -> anyhow::Result<Results> {
    let w = workloads::by_name(name, p)?;
    let mut cfg = RunConfig::new(target.clone());
    cfg.clients = clients;
    cfg.threads = 1;
    cfg.stop = Some(StopAt::Ops(ops));
    runner::run(w, &cfg).await
}

fn counter(r: &Results, k: &str) -> u64 {
    r.repeats[0].counters.get(k).copied().unwrap_or(0)
}

fn target(port: u16, path: &str) -> Target {
    format!("nfs://127.0.0.1:{port}{path}").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_writefiles_commits_and_reads_back() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let t = target(server.port(), server.export_path());
    // Own files only, then half of each transaction's files in common between two
    // clients (conflicting transactions retry), then the plain vectorized mode.
    for (txn, clients, sharing) in [(true, 1, 0.0), (true, 2, 0.5), (false, 2, 0.5)] {
        let what = format!("txn={txn} clients={clients} sharing={sharing}");
        let r = run(&t, "writefiles", &params(txn, 4, sharing), clients, 8)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", server.log_tail(20)));
        assert!(r.all_checks_ok(), "{what}: {:?}", r.failed_checks());
        let it = r.repeats[0].ops;
        assert!(it > 0, "{what}: did work");
        assert_eq!(counter(&r, "files_written"), it * 4, "{what}");
        // Every worker read its last transaction's files back, bytes compared
        // (plain: its own files only; shared ones may be mid-write by another).
        let checked = if txn { 4 } else { 4 - (4.0 * sharing) as u64 };
        assert!(
            counter(&r, "files_verified") >= checked * clients as u64,
            "{what}: {} files verified",
            counter(&r, "files_verified")
        );
        if txn {
            assert_eq!(
                counter(&r, "txn_commits"),
                it,
                "{what}: one commit per iteration"
            );
            assert!(counter(&r, "txn_compounds") >= it, "{what}");
            let lat = &r.repeats[0].latency_us;
            assert!(lat.contains_key("TXN_WRITEFILES"), "{what}: {lat:?}");
        } else {
            assert_eq!(counter(&r, "txn_commits"), 0, "{what}");
            // 4 FILE_SYNC files of 5000 bytes go one per COMPOUND, side by side
            // (ADR 0061), plus at most one of delegation returns per iteration.
            assert!(
                r.repeats[0].compounds <= 5 * it,
                "{what}: one COMPOUND per file"
            );
        }
    }
    // Readfiles and the tree copy/removal as transactions.
    let r = run(&t, "readfiles", &params(true, 3, 0.0), 1, 4)
        .await
        .expect("readfiles --txn");
    assert!(r.all_checks_ok(), "{:?}", r.failed_checks());
    assert_eq!(counter(&r, "txn_commits"), 4);
    for name in ["tree-cp", "tree-rm"] {
        let mut p = Params {
            files: Some(30),
            file_size: Some(1024),
            txn: true,
            ..Params::default()
        };
        p.set.insert("dirs".into(), "4".into());
        p.set.insert("trees".into(), "2".into());
        let r = run(&t, name, &p, 1, if name == "tree-rm" { 2 } else { 1 })
            .await
            .unwrap_or_else(|e| panic!("{name} --txn: {e:#}"));
        assert!(r.all_checks_ok(), "{name}: {:?}", r.failed_checks());
        assert!(counter(&r, "txn_commits") >= 1, "{name}");
    }
    // Workloads without a transactional mode refuse --txn.
    let p = Params {
        txn: true,
        ..Params::default()
    };
    let e = workloads::by_name("randread", &p).err().expect("refused");
    assert!(format!("{e}").contains("no transactional mode"), "{e}");
}

/// `txnfs serve --no-txn` on a free port (the e2e guard has no such option).
struct NoTxnServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NoTxnServer {
    fn start() -> NoTxnServer {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("export")).unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bin = txnfs_e2e::txnfs_bin();
        assert!(bin.is_file(), "build txnfs first: {}", bin.display());
        let child = Command::new(bin)
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--no-grace", "--no-rpcbind", "--no-txn"])
            .arg(dir.path().join("export"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn txnfs");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "txnfs --no-txn did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        NoTxnServer {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for NoTxnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn refused(t: &Target, what: &str) {
    for name in ["writefiles", "tree-rm"] {
        let mut p = params(true, 4, 0.0);
        if name == "tree-rm" {
            p.files = Some(10);
            p.set.insert("dirs".into(), "2".into());
        }
        let e = run(t, name, &p, 1, 1).await.err().unwrap_or_else(|| {
            panic!("{what} {name}: --txn ran against a server without transactions")
        });
        let msg = format!("{e:#}");
        assert!(
            msg.contains("does not run transactional COMPOUNDs")
                && msg.contains("--txn needs a txnfs server with transactions"),
            "{what} {name}: unclear error: {msg}"
        );
    }
    // The plain mode runs there.
    let r = run(t, "writefiles", &params(false, 4, 0.0), 1, 3)
        .await
        .unwrap_or_else(|e| panic!("{what}: plain writefiles: {e:#}"));
    assert!(r.all_checks_ok(), "{what}: {:?}", r.failed_checks());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_mode_fails_clearly_without_transactions() {
    let s = NoTxnServer::start();
    refused(&target(s.port, "/"), "txnfs --no-txn").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_mode_fails_clearly_against_ganesha() {
    if txnfs_e2e::peer::ganesha().is_none() {
        return;
    }
    let server = ServerGuard::start(ServerKind::Ganesha);
    refused(&target(server.port(), server.export_path()), "NFS-Ganesha").await;
}

/// `--target nfs://HOST/dir` where `dir` does not exist yet (a fresh export): the run
/// creates it, with its parents, and works in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_directory_that_does_not_exist_yet_is_created() {
    let server = ServerGuard::start(ServerKind::Txnfs);
    let base = server.export_path().trim_end_matches('/');
    let t = target(server.port(), &format!("{base}/bench/new"));
    assert!(!server.export_dir().join("bench").exists());
    let r = run(&t, "writefiles", &params(false, 4, 0.0), 1, 4)
        .await
        .expect("a run into a directory that did not exist");
    assert!(r.repeats[0].ops > 0);
    assert!(server.export_dir().join("bench/new").is_dir());
}
