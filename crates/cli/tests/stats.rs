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

    let m = http_get(mport, "/metrics");
    assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
    assert!(
        m.contains("txnfs_export_bytes_total{export=\"/\",direction=\"write\"} 100000\n"),
        "{m}"
    );
    assert!(
        m.contains("txnfs_export_bytes_total{export=\"/\",direction=\"read\"} 100000\n"),
        "{m}"
    );
    assert!(m.contains("txnfs_connections_accepted_total "), "{m}");
    assert!(http_get(mport, "/").starts_with("HTTP/1.1 404"));
    terminate(&mut child);
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
