//! The administrator's view (ADR 0045) through the control socket in the state
//! directory: a connected client is listed by its owner, a failed op is counted by its
//! status, and an unknown command gets a clear answer.

mod common;

use bytes::Bytes;
use common::deleg::Holder;
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use txnfs_server::nfs::*;
use txnfs_server::report::control::socket_path;

async fn ask(srv: &TestServer, command: &str) -> String {
    let path = socket_path(&srv.state_dir);
    let mut s = tokio::net::UnixStream::connect(&path)
        .await
        .unwrap_or_else(|e| panic!("control socket {}: {e}", path.display()));
    s.write_all(format!("{command}\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_reports_clients_ops_and_errors() {
    let srv = start_memory_server().await;
    let mut h = Holder::new(&srv, b"metrics-test-client").await;
    let r = h
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            nfs_argop4::OP_LOOKUP(LOOKUP4args {
                objname: Bytes::from_static(b"no-such-file"),
            }),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);

    let clients = ask(&srv, "clients").await;
    let line = clients
        .lines()
        .find(|l| l.contains("metrics-test-client"))
        .unwrap_or_else(|| panic!("client not listed:\n{clients}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    // client id, uid, sessions, conns, delegations, idle s, state, owner
    assert_eq!(cols[2], "1", "one session: {line}");
    assert_eq!(cols[3], "1", "one connection: {line}");
    assert_eq!(cols[6], "active", "{line}");

    let stats = ask(&srv, "stats").await;
    assert!(stats.contains("1 clients, 1 sessions"), "{stats}");
    let lookup = stats
        .lines()
        .find(|l| l.starts_with("LOOKUP "))
        .unwrap_or_else(|| panic!("no LOOKUP row:\n{stats}"));
    let cols: Vec<&str> = lookup.split_whitespace().collect();
    assert_eq!((cols[1], cols[3]), ("1", "1"), "1 call, 1 error: {lookup}");

    let prom = ask(&srv, "metrics").await;
    assert!(
        prom.contains(
            "txnfs_op_errors_total{version=\"4\",op=\"LOOKUP\",status=\"NFS4ERR_NOENT\"} 1"
        ),
        "{prom}"
    );
    assert!(prom.contains("txnfs_sessions 1\n"), "{prom}");
    assert!(
        prom.contains("txnfs_op_duration_seconds_count{version=\"4\",op=\"PUTROOTFH\"} 1\n"),
        "{prom}"
    );

    let unknown = ask(&srv, "reboot").await;
    assert!(
        unknown.starts_with("unknown command \"reboot\""),
        "{unknown}"
    );
}
