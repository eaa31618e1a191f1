//! `txnfs bench ARGS` runs the separate `txnfs-bench` binary with ARGS (ADR 0031):
//! found through `$TXNFS_BENCH_BIN`, beside `txnfs`, or on `PATH`; with `argv[0]`
//! "txnfs bench", the global `--vers` passed on and `$TXNFS_BIN` set to this `txnfs`;
//! and a clear error when there is none. The commands themselves are tested in
//! crates/benchreport/tests/bench_help.rs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_txnfs")
}

/// A stand-in for `txnfs-bench` that prints its arguments and `$TXNFS_BIN`, one per
/// line (a script cannot see its `argv[0]`: the real binary's usage line shows it).
fn fake_bench(dir: &Path) -> PathBuf {
    let p = dir.join("txnfs-bench");
    std::fs::write(
        &p,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"arg=$a\"; done\n\
         echo \"TXNFS_BIN=$TXNFS_BIN\"\nexit 3\n",
    )
    .expect("write fake txnfs-bench");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// Runs `cmd`, again while the kernel answers ETXTBSY: an executable this test process
/// just wrote (the copied `txnfs`, the fake `txnfs-bench`) stays "busy" while a child
/// that another test thread forked in the meantime still holds the write descriptor
/// before its `exec` closes it (rust-lang/rust#114554). Seen once in CI.
fn run(cmd: &mut Command) -> Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.expect("run txnfs"),
        }
    }
    panic!("run txnfs: executable still busy after 2 s");
}

#[test]
fn bench_runs_txnfs_bench_with_the_arguments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = fake_bench(dir.path());
    let o = run(Command::new(bin())
        .args(["--vers", "4.1", "bench", "run", "--help", "--txn"])
        .env("TXNFS_BENCH_BIN", &fake)
        .env_remove("TXNFS_BIN"));
    let out = String::from_utf8_lossy(&o.stdout);
    // `exec`: the fake's exit status is txnfs's.
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "arg=--vers",
            "arg=4.1",
            "arg=run",
            "arg=--help",
            "arg=--txn",
            &format!("TXNFS_BIN={}", bin()),
        ],
        "{o:?}"
    );
    // `txnfs bench --help` is txnfs-bench's help, and a TXNFS_BIN already set stays.
    let o = run(Command::new(bin())
        .args(["bench", "--help"])
        .env("TXNFS_BENCH_BIN", &fake)
        .env("TXNFS_BIN", "/elsewhere/txnfs"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("arg=--help\nTXNFS_BIN=/elsewhere/txnfs\n"),
        "{o:?}"
    );
}

#[test]
fn bench_finds_txnfs_bench_beside_txnfs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let me = dir.path().join("txnfs");
    std::fs::copy(bin(), &me).expect("copy txnfs");
    fake_bench(dir.path());
    let o = run(Command::new(&me)
        .args(["bench", "list"])
        .env_remove("TXNFS_BENCH_BIN")
        .env("PATH", "/nonexistent"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("arg=list\n"), "{o:?}");
}

#[test]
fn bench_without_txnfs_bench_says_how_to_build_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let me = dir.path().join("txnfs");
    std::fs::copy(bin(), &me).expect("copy txnfs");
    let o = run(Command::new(&me)
        .args(["bench", "list"])
        .env_remove("TXNFS_BENCH_BIN")
        .env("PATH", "/nonexistent"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        err.contains("separate txnfs-bench binary")
            && err.contains("cargo build --release --bin txnfs --bin txnfs-bench"),
        "{err}"
    );
}

/// The real `txnfs-bench` beside `txnfs` (`cargo build --workspace` puts it there):
/// README's `txnfs bench list` works as written, and help reads `txnfs bench ...`.
#[test]
fn bench_list_runs_the_real_txnfs_bench() {
    let beside = Path::new(bin()).with_file_name("txnfs-bench");
    let found = beside.is_file().then_some(beside);
    let Some(_) = txnfs_e2e::peer::require(
        "the txnfs-bench binary beside txnfs",
        found,
        "cargo build --bin txnfs-bench",
    ) else {
        return;
    };
    let o = run(Command::new(bin())
        .args(["bench", "list"])
        .env_remove("TXNFS_BENCH_BIN"));
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l.starts_with("randread ")), "{out}");
    let o = run(Command::new(bin())
        .args(["bench", "run", "--help"])
        .env_remove("TXNFS_BENCH_BIN"));
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Usage: txnfs bench run "), "{out}");
}
