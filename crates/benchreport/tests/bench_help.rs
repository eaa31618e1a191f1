//! `txnfs bench run --help` and `txnfs bench compare --help` show examples
//! that work: the real command (`txnfs bench ...`) and workloads that
//! `txnfs bench list` knows. `txnfs bench ARGS` runs the `txnfs-bench` binary
//! with ARGS and `argv[0]` "txnfs bench" (crates/cli/src/bench.rs): so do these tests.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// `txnfs bench ARGS[1..]` as `txnfs` runs it (`args[0]` is "bench").
fn txnfs(args: &[&str]) -> String {
    assert_eq!(args.first(), Some(&"bench"));
    let out = Command::new(env!("CARGO_BIN_EXE_txnfs-bench"))
        .arg0("txnfs bench")
        .args(&args[1..])
        .output()
        .expect("run txnfs-bench");
    assert!(out.status.success(), "txnfs {args:?} failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The workload names `txnfs bench list` prints (first word of each line).
fn listed() -> Vec<String> {
    txnfs(&["bench", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The example lines of a help text (the indented lines after "EXAMPLES:"
/// up to the first blank line).
fn examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("EXAMPLES:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
}

/// The positional words after `txnfs bench <sub>` up to the first option
/// or `--`.
fn workloads_named(line: &str, sub: &str) -> Vec<String> {
    let prefix = format!("txnfs bench {sub} ");
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("example {line:?} does not start with {prefix:?}"));
    rest.split_whitespace()
        .take_while(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect()
}

#[test]
fn list_names_getattr_and_the_tree_workloads_with_their_drivers() {
    let all = txnfs(&["bench", "list"]);
    let names = listed();
    for n in ["randread", "getattr", "tree-ls", "tree-cp", "tree-rm"] {
        assert!(names.iter().any(|x| x == n), "{n} missing from:\n{all}");
    }
    let getattr = all.lines().find(|l| l.starts_with("getattr ")).unwrap();
    assert!(getattr.contains("txnfs,nfs-rs"), "{getattr}");
    // Seed 001's write and metadata workloads run through nfs-rs too; the
    // delegation workloads need our client.
    for n in ["randwrite ", "create ", "smallfiles "] {
        let line = all.lines().find(|l| l.starts_with(n)).unwrap();
        assert!(line.ends_with("drivers: txnfs,nfs-rs"), "{line}");
    }
    let deleg = all.lines().find(|l| l.starts_with("deleg ")).unwrap();
    assert!(deleg.ends_with("drivers: txnfs"), "{deleg}");
}

#[test]
fn help_examples_name_real_workloads_and_the_real_command() {
    let names = listed();
    for sub in ["run", "compare", "sweep"] {
        let help = txnfs(&["bench", sub, "--help"]);
        let ex = examples(&help);
        assert!(
            ex.len() >= 3,
            "bench {sub} --help has few examples:\n{help}"
        );
        let mut named = 0;
        for line in &ex {
            for w in workloads_named(line, sub) {
                assert!(
                    names.contains(&w),
                    "bench {sub} --help example {line:?} names {w:?}, not in `txnfs bench list` {names:?}"
                );
                named += 1;
            }
        }
        assert!(
            named >= 3,
            "bench {sub} --help examples name {named} workloads"
        );
        assert!(
            help.contains(&format!("Usage: txnfs bench {sub} ")),
            "{help}"
        );
    }
}

#[test]
fn ganesha_conf_renders_the_shared_configuration() {
    let conf = txnfs(&[
        "bench",
        "ganesha-conf",
        "--port",
        "20999",
        "--export",
        "/srv/x",
        "--recovery-root",
        "/srv/r",
    ]);
    for needle in [
        "NFS_Port = 20999;",
        "Path = /srv/x;",
        "Pseudo = /export;",
        "RecoveryRoot = /srv/r;",
        "PNFS_MDS = false;",
        "FSAL { Name = VFS; }",
    ] {
        assert!(conf.contains(needle), "{needle} missing:\n{conf}");
    }
}

/// Every `txnfs bench run --help` example runs as written against a txnfs server
/// (only the address changes: 127.0.0.1:2049 becomes the test server's), through
/// `sh -c` with `txnfs` on the PATH, as a user would paste it. The `compare` examples
/// start txnfs and NFS-Ganesha and run whole matrices: their workloads are checked
/// above, not run here.
#[test]
fn every_run_example_runs_as_written() {
    let help = txnfs(&["bench", "run", "--help"]);
    let ex = examples(&help);
    assert!(ex.len() >= 5, "{help}");
    let server = txnfs_e2e::ServerGuard::start(txnfs_e2e::ServerKind::Txnfs);
    assert_eq!(
        server.export_path(),
        "/",
        "the examples' targets name the root"
    );
    let bin_dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(txnfs_e2e::txnfs_bin(), bin_dir.path().join("txnfs"))
        .expect("symlink txnfs");
    let path = format!(
        "{}:{}",
        bin_dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let addr = format!("127.0.0.1:{}", server.port());
    let mut failed = Vec::new();
    for e in &ex {
        let run = e.replace("127.0.0.1:2049", &addr);
        let t = std::time::Instant::now();
        let out = Command::new("sh")
            .args(["-c", &run])
            .env("PATH", &path)
            .env("TXNFS_BENCH_BIN", env!("CARGO_BIN_EXE_txnfs-bench"))
            .output()
            .expect("sh");
        eprintln!("{:.1} s: {run}", t.elapsed().as_secs_f64());
        if !out.status.success() {
            failed.push(format!(
                "{e:?} (run as {run:?}): {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
