//! `txnfs stats` and `serve --metrics` as an administrator uses them: after a known
//! workload (one file written and read back through `txnfs cp` / `txnfs cat`) both show
//! its bytes and ops; without a server, `txnfs stats` says so.

mod common;

use common::*;
use std::io::{Read, Write};
use std::process::Command;

fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn stats_and_metrics_count_a_known_workload() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mport) = (free_port(), free_port());
    let mut child = spawn_serve(
        dir.path(),
        port,
        &["--metrics", &format!("127.0.0.1:{mport}")],
        false,
    );
    wait_listening(port);
    wait_listening(mport);
    let src = dir.path().join("src");
    std::fs::write(&src, vec![7u8; 100_000]).unwrap();
    let url = format!("nfs://127.0.0.1:{port}/f");
    let cp = Command::new(bin())
        .arg("cp")
        .arg(&src)
        .arg(&url)
        .output()
        .unwrap();
    assert!(cp.status.success(), "{cp:?}");
    let cat = Command::new(bin()).args(["cat", &url]).output().unwrap();
    assert_eq!(cat.stdout.len(), 100_000);

    let st = Command::new(bin())
        .arg("stats")
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success(), "{st:?}");
    assert!(text.contains("READs (100000 bytes)"), "{text}");
    assert!(text.contains("WRITEs (100000 bytes)"), "{text}");
    assert!(text.contains("\nOPEN "), "an OPEN row: {text}");
    // Plain copies journal nothing; the transport sent every reply.
    assert!(
        text.contains("; journal: 0 bytes in 0 records appended"),
        "{text}"
    );
    let (writes, records) = transport(&text);
    assert!(
        writes > 0 && records >= writes,
        "{writes} writes, {records} records: {text}"
    );
    assert!(
        text.contains(" sessions (0 of "),
        "no slot in use now: {text}"
    );
    // One transaction (`cp --atomic`): the journal grows.
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("g"), b"atomic").unwrap();
    let atomic = Command::new(bin())
        .args(["cp", "-R", "--atomic"])
        .arg(&tree)
        .arg(format!("nfs://127.0.0.1:{port}/t"))
        .output()
        .unwrap();
    assert!(atomic.status.success(), "{atomic:?}");
    let after = stats_text(&dir.path().join("state"), &[]);
    assert!(after.contains("Transactions: 1 committed"), "{after}");
    let appended: u64 = after
        .split("; journal: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no journal bytes: {after}"));
    assert!(appended > 0, "{after}");

    let m = http_get(mport, "/metrics");
    assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
    assert!(
        // (the atomic copy's 6 bytes too)
        m.contains("txnfs_export_bytes_total{export=\"/\",direction=\"write\"} 100006\n"),
        "{m}"
    );
    assert!(
        m.contains("txnfs_export_bytes_total{export=\"/\",direction=\"read\"} 100000\n"),
        "{m}"
    );
    assert!(m.contains("txnfs_connections_accepted_total "), "{m}");
    assert!(m.contains("\ntxnfs_session_slots_in_use 0\n"), "{m}");
    assert!(
        m.contains(&format!(
            "\ntxnfs_journal_appended_bytes_total{{export=\"/\"}} {appended}\n"
        )),
        "{m}"
    );
    let records = m
        .lines()
        .find_map(|l| l.strip_prefix("txnfs_transport_records_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no transport records: {m}"));
    assert!(records >= transport(&after).1, "{m}");
    assert!(http_get(mport, "/").starts_with("HTTP/1.1 404"));
    terminate(&mut child);
}

/// `txnfs stats` (with `args`) of the server of `state_dir`: its output, which must succeed.
fn stats_text(state_dir: &std::path::Path, args: &[&str]) -> String {
    let st = Command::new(bin())
        .arg("stats")
        .args(args)
        .arg("--state-dir")
        .arg(state_dir)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    String::from_utf8_lossy(&st.stdout).into_owned()
}

/// (writes, records) of the "Transport:" line of `txnfs stats`.
fn transport(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Transport: "))
        .unwrap_or_else(|| panic!("no Transport line: {text}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    match (w[0].parse(), w[2].parse()) {
        (Ok(writes), Ok(records)) => (writes, records),
        _ => panic!("Transport line: {line}"),
    }
}

/// Client commands leave no INFO line in the server's log (issue 20 item 4): an
/// administrator sees the server start and stop, not each `ls` (every command is a
/// client of its own: connection, EXCHANGE_ID, session, DESTROY_CLIENTID).
#[test]
fn client_commands_add_no_info_lines_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = spawn_serve(dir.path(), port, &[], true);
    wait_listening(port);
    let url = |p: &str| format!("nfs://127.0.0.1:{port}/{p}");
    let src = dir.path().join("src");
    std::fs::write(&src, b"some bytes").unwrap();
    let commands: Vec<Vec<String>> = vec![
        vec!["cp".into(), src.display().to_string(), url("f")],
        vec!["ls".into(), "-l".into(), url("")],
        vec!["cat".into(), url("f")],
        vec!["stat".into(), url("f")],
        vec!["mkdir".into(), url("d")],
        vec!["mv".into(), url("f"), url("d/g")],
        vec!["cat".into(), url("no-such-file")],
        vec!["rm".into(), "-r".into(), url("d")],
    ];
    for c in &commands {
        let out = Command::new(bin()).args(c).output().unwrap();
        // (the cat of a missing file fails; the others succeed)
        assert_eq!(
            out.status.success(),
            !c.iter().any(|a| a.ends_with("no-such-file")),
            "{c:?}: {out:?}"
        );
    }
    let (_, log) = terminate(&mut child);
    let info: Vec<&str> = log
        .lines()
        .skip_while(|l| !l.contains(" serving NFSv3"))
        .skip(1)
        .take_while(|l| !l.contains("shutting down"))
        .filter(|l| l.contains(" INFO ") || l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        log.contains(" serving NFSv3") && log.contains("shutting down"),
        "{log}"
    );
    assert!(
        info.is_empty(),
        "{} commands, these lines while serving:\n{}",
        commands.len(),
        info.join("\n")
    );
}

#[test]
fn stats_without_a_server_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new(bin())
        .arg("stats")
        .arg("--state-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("no txnfs server runs on state directory"),
        "{err}"
    );
}
