//! `bench run --sec krb5p` (ADR 0051): a tiny randread against `txnfs serve` of a
//! krb5p-only export with the test KDC's keytab, our client using the user's ticket
//! (`KRB5CCNAME`). It completes with the ops counted; the same run with `--sec sys`
//! is refused by the export (NFS4ERR_WRONGSEC), so the Kerberos run really used
//! Kerberos. The server binary is $TXNFS_BIN or target/debug/txnfs: build it first
//! (`cargo build -p txnfs-cli`). The KDC binaries come from Debian's krb5-kdc,
//! krb5-admin-server and krb5-user; when they are missing the test fails saying so.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use txnfs_bench::results::Results;
use txnfs_testbed::kdc::Kdc;

/// A server of this test, killed by PID when the test ends.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    run: txnfs_bench::cli::RunArgs,
}

/// `bench run ARGS` in this process (with the KDC's environment, set before).
fn bench(rt: &tokio::runtime::Runtime, args: &[&str]) -> anyhow::Result<Results> {
    use clap::Parser;
    let cli = Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))?;
    rt.block_on(txnfs_bench::cli::run(&cli.run))
}

#[test]
fn bench_run_with_sec_krb5p() {
    let dir = tempfile::tempdir().unwrap();
    let kdc_dir = dir.path().join("kdc");
    std::fs::create_dir(&kdc_dir).unwrap();
    // This process's Kerberos calls use the test realm: before any thread exists.
    let kdc = Kdc::start_for_this_process(&kdc_dir);
    let map = kdc.write_gss_map(&dir.path().join("gss-map"), 0, 0);
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();

    let port = free_port();
    let mut cmd = Command::new(txnfs_e2e::txnfs_bin());
    cmd.arg("serve")
        .args(["--no-rpcbind", "--no-grace", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--keytab")
        .arg(&kdc.service_keytab)
        .arg("--gss-map")
        .arg(&map)
        .args(["--client", "127.0.0.1(rw,no_root_squash,sec=krb5p)"])
        .arg("--export")
        .arg(format!("/krb={}", export.display()))
        .env("TXNFS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in kdc.env() {
        cmd.env(k, v);
    }
    let _server = Serving(cmd.spawn().expect("start txnfs serve"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "txnfs serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }

    let target = format!("nfs://127.0.0.1:{port}/krb");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let res = bench(
        &rt,
        &[
            "randread",
            "--target",
            &target,
            "--ops",
            "50",
            "--files",
            "4",
            "--file-size",
            "64k",
            "--sec",
            "krb5p",
            "--quiet",
        ],
    )
    .unwrap_or_else(|e| panic!("bench run --sec krb5p: {e:#}"));
    assert_eq!(res.repeats.len(), 1);
    let r = &res.repeats[0];
    assert!(r.ops >= 50, "ops counted: {}", r.ops);
    assert!(r.bytes > 0, "bytes read: {}", r.bytes);
    assert!(r.op_counts.values().sum::<u64>() > 0, "{:?}", r.op_counts);

    // AUTH_SYS is refused by this export: the run above did use Kerberos.
    let err = bench(
        &rt,
        &[
            "randread", "--target", &target, "--ops", "5", "--quiet", "--sec", "sys",
        ],
    )
    .expect_err("bench run --sec sys on a krb5p export must fail");
    let err = format!("{err:#}");
    assert!(err.contains("WRONGSEC"), "{err}");
}
