//! `--atomic` of the real `txnfs` binary's cp, rm, mv and mkdir against `txnfs serve`
//! (with transactions, the default, and with `--no-txn`). Outcomes are checked on the
//! host, in the server's export directory: whole trees, exact bytes, nothing left over
//! after a failure.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use txnfs_e2e::{ServerGuard, ServerKind};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_txnfs")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("TXNFS_PROGRESS", "0")
        .output()
        .expect("run txnfs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstderr:\n{}",
        o.status.code(),
        stderr(&o)
    );
}

/// `txnfs serve` (with transactions) of a fresh export directory.
fn txnfs() -> ServerGuard {
    // The harness runs $TXNFS_BIN: the binary under test.
    std::env::set_var("TXNFS_BIN", bin());
    ServerGuard::start(ServerKind::Txnfs)
}

fn url(s: &ServerGuard, rel: &str) -> String {
    format!("nfs://127.0.0.1:{}/{rel}", s.port())
}

/// A small local tree: nested directories, files (one empty), a symlink.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(root.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(root.join("empty"), b"").unwrap();
    std::fs::write(root.join("sub/b.bin"), vec![0xabu8; 40_000]).unwrap();
    std::fs::write(root.join("sub/deeper/c"), b"see").unwrap();
    std::os::unix::fs::symlink("sub/b.bin", root.join("link")).unwrap();
}

#[test]
fn cp_r_atomic_copies_a_tree_and_rm_r_atomic_removes_it() {
    let s = txnfs();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tree");
    make_tree(&src);
    ok(run(&[
        "cp",
        "-R",
        "--atomic",
        src.to_str().unwrap(),
        &url(&s, "copy"),
    ]));
    let dst = s.export_dir().join("copy");
    for f in ["a.txt", "empty", "sub/b.bin", "sub/deeper/c"] {
        assert_eq!(
            std::fs::read(dst.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read_link(dst.join("link")).unwrap(),
        Path::new("sub/b.bin")
    );
    // Into an existing directory (the copy lands under its name, as cp does).
    std::fs::create_dir(s.export_dir().join("into")).unwrap();
    ok(run(&[
        "cp",
        "-R",
        "--atomic",
        src.to_str().unwrap(),
        &url(&s, "into/"),
    ]));
    assert_eq!(
        std::fs::read(s.export_dir().join("into/tree/sub/deeper/c")).unwrap(),
        b"see"
    );
    // Remote -> remote, same server.
    ok(run(&[
        "cp",
        "-R",
        "--atomic",
        &url(&s, "copy"),
        &url(&s, "copy2"),
    ]));
    assert_eq!(
        std::fs::read(s.export_dir().join("copy2/sub/b.bin")).unwrap(),
        vec![0xabu8; 40_000]
    );
    assert_eq!(
        std::fs::read_link(s.export_dir().join("copy2/link")).unwrap(),
        Path::new("sub/b.bin")
    );
    ok(run(&["rm", "-r", "--atomic", &url(&s, "copy")]));
    assert!(!dst.exists(), "the whole tree is gone");
    ok(run(&[
        "mkdir",
        "-p",
        "--atomic",
        &url(&s, "m/n/o"),
        &url(&s, "m/p"),
    ]));
    assert!(s.export_dir().join("m/n/o").is_dir() && s.export_dir().join("m/p").is_dir());
}

#[test]
fn mv_atomic_onto_a_missing_parent_fails_and_changes_nothing() {
    let s = txnfs();
    std::fs::write(s.export_dir().join("a"), b"A").unwrap();
    std::fs::write(s.export_dir().join("b"), b"B").unwrap();
    std::fs::create_dir(s.export_dir().join("d")).unwrap();
    // Two sources into a directory: fine, both move.
    ok(run(&[
        "mv",
        "--atomic",
        &url(&s, "a"),
        &url(&s, "b"),
        &url(&s, "d/"),
    ]));
    assert_eq!(std::fs::read(s.export_dir().join("d/a")).unwrap(), b"A");
    assert_eq!(std::fs::read(s.export_dir().join("d/b")).unwrap(), b"B");
    // Onto a missing parent: the command fails with a clear message, nothing moves.
    let o = run(&["mv", "--atomic", &url(&s, "d"), &url(&s, "nope/d")]);
    assert_eq!(o.status.code(), Some(1), "stderr:\n{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("mv --atomic")
            && e.contains("rename \"d\" to \"nope/d\"")
            && e.contains("NFS4ERR_NOENT")
            && e.contains("nothing was changed"),
        "{e}"
    );
    assert!(s.export_dir().join("d/a").is_file() && !s.export_dir().join("nope").exists());
}

#[test]
fn atomic_commands_fail_clearly_on_a_server_without_transactions() {
    let tmp = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let mut child = common::spawn_serve(tmp.path(), port, &["--no-txn", "--no-rpcbind"], false);
    common::wait_listening(port);
    let base = format!("nfs://127.0.0.1:{port}");
    let src = tmp.path().join("tree");
    make_tree(&src);
    let runs = [
        run(&["mkdir", "-p", "--atomic", &format!("{base}/x/y")]),
        run(&[
            "cp",
            "-R",
            "--atomic",
            src.to_str().unwrap(),
            &format!("{base}/copy"),
        ]),
    ];
    for o in &runs {
        assert_eq!(o.status.code(), Some(1), "stderr:\n{}", stderr(o));
        assert!(
            stderr(o).contains("does not run transactional COMPOUNDs")
                && stderr(o).contains("nothing was changed"),
            "{}",
            stderr(o)
        );
    }
    let export = tmp.path().join("export");
    assert!(!export.join("x").exists() && !export.join("copy").exists());
    common::terminate(&mut child);
}

#[test]
fn cp_r_atomic_that_fails_half_way_leaves_nothing() {
    let s = txnfs();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("tree");
    make_tree(&src);
    // The destination exists and has a directory where the tree has the file
    // sub/deeper/c: directories and earlier files would go through, that file cannot.
    // "copy" exists: the tree is copied into it, as copy/tree.
    let dst = s.export_dir().join("copy");
    std::fs::create_dir_all(dst.join("tree/sub/deeper/c")).unwrap();
    let o = run(&[
        "cp",
        "-R",
        "--atomic",
        src.to_str().unwrap(),
        &url(&s, "copy"),
    ]);
    assert_eq!(o.status.code(), Some(1), "stderr:\n{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cp --atomic")
            && e.contains("sub/deeper/c")
            && e.contains("nothing was changed"),
        "{e}"
    );
    let mut left: Vec<String> = Vec::new();
    for e in walk(&dst) {
        left.push(e);
    }
    assert_eq!(
        left,
        vec!["tree", "tree/sub", "tree/sub/deeper", "tree/sub/deeper/c"],
        "only what was there before"
    );
    // A file larger than one COMPOUND: written in pieces, over several COMPOUNDs of
    // the one transaction.
    let big = tmp.path().join("big");
    std::fs::create_dir(&big).unwrap();
    let data: Vec<u8> = (0..(3u32 << 20) + 777).map(|i| (i % 253) as u8).collect();
    std::fs::write(big.join("f"), &data).unwrap();
    std::fs::write(big.join("g"), b"small").unwrap();
    let o = run(&[
        "--stats",
        "cp",
        "-R",
        "--atomic",
        big.to_str().unwrap(),
        &url(&s, "big"),
    ]);
    let e = stderr(&o);
    ok(o);
    assert!(ops_sent(&e, "OPEN") >= 5, "the big file in pieces: {e}");
    assert_eq!(std::fs::read(s.export_dir().join("big/f")).unwrap(), data);
    assert_eq!(
        std::fs::read(s.export_dir().join("big/g")).unwrap(),
        b"small"
    );
}

/// A local tree of 30 directories of 100 files of 1,500 bytes (4.5 MB, several times
/// one COMPOUND's request size), each file's bytes derived from its name.
fn make_big_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for d in 0..30 {
        std::fs::create_dir_all(root.join(format!("d{d:02}"))).unwrap();
        for f in 0..100 {
            let rel = format!("d{d:02}/f{f:03}");
            let data: Vec<u8> = (0..1500u32)
                .map(|i| ((d * 131 + f * 17) as u32 + i * 7) as u8)
                .collect();
            std::fs::write(root.join(&rel), &data).unwrap();
            files.push((rel, data));
        }
    }
    files
}

/// How many `op`s `--stats` counted.
fn ops_sent(stderr: &str, op: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(op)).then(|| w.next().unwrap().parse().unwrap())
        })
        .unwrap_or(0)
}

/// "N COMPOUNDs" from `--stats`.
fn compounds_sent(stderr: &str) -> u64 {
    let at = stderr.find(" COMPOUNDs").expect("--stats output");
    let n = stderr[..at].rsplit(' ').next().unwrap();
    n.parse().unwrap_or_else(|_| panic!("{stderr}"))
}

#[test]
fn cp_r_atomic_of_a_tree_larger_than_one_compound_commits_all_of_it() {
    let s = txnfs();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big");
    let files = make_big_tree(&src);
    let o = run(&[
        "--stats",
        "cp",
        "-R",
        "--atomic",
        src.to_str().unwrap(),
        &url(&s, "big"),
    ]);
    let e = stderr(&o);
    ok(o);
    // 4.5 MB cannot be fewer than five COMPOUNDs of about 1 MiB each.
    assert!(compounds_sent(&e) >= 5, "{e}");
    let dst = s.export_dir().join("big");
    for (rel, data) in &files {
        assert_eq!(&std::fs::read(dst.join(rel)).unwrap(), data, "{rel}");
    }
    assert_eq!(walk(&dst).len(), 30 + files.len(), "nothing else");
    // And removed again in one transaction.
    ok(run(&["rm", "-r", "--atomic", &url(&s, "big")]));
    assert!(!dst.exists());
}

#[test]
fn cp_r_atomic_larger_than_one_compound_failing_late_leaves_nothing() {
    let s = txnfs();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("big");
    make_big_tree(&src);
    // The destination has a directory where the tree's last file goes: every earlier
    // COMPOUND of the transaction runs, then that OPEN fails.
    let dst = s.export_dir().join("copy");
    std::fs::create_dir_all(dst.join("big/d29/f099")).unwrap();
    let o = run(&[
        "--stats",
        "cp",
        "-R",
        "--atomic",
        src.to_str().unwrap(),
        &url(&s, "copy"),
    ]);
    assert_eq!(o.status.code(), Some(1), "stderr:\n{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cp --atomic") && e.contains("d29/f099") && e.contains("nothing was changed"),
        "{e}"
    );
    assert!(compounds_sent(&e) >= 5, "{e}");
    assert_eq!(
        ops_sent(&e, "OPEN"),
        3000,
        "every file's OPEN was sent: {e}"
    );
    assert_eq!(
        walk(&dst),
        vec!["big", "big/d29", "big/d29/f099"],
        "only what was there before"
    );
}

/// Paths under `root`, relative and sorted.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn atomic_commands_fail_clearly_on_ganesha() {
    if txnfs_e2e::peer::ganesha().is_none() {
        return;
    }
    let s = ServerGuard::start(ServerKind::Ganesha);
    let base = format!(
        "nfs://127.0.0.1:{}{}",
        s.port(),
        s.export_path().trim_end_matches('/')
    );
    let o = run(&["mkdir", "-p", "--atomic", &format!("{base}/g/h")]);
    assert_eq!(o.status.code(), Some(1), "stderr:\n{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not run transactional COMPOUNDs"),
        "{}",
        stderr(&o)
    );
    assert!(!s.export_dir().join("g").exists());
    // The same command without --atomic works there.
    ok(run(&["mkdir", "-p", &format!("{base}/g/h")]));
    assert!(s.export_dir().join("g/h").is_dir());
}
