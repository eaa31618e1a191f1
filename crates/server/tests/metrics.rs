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
    // client id, uid, sessions, conns, delegations, idle s, state, slots, compounds,
    // ops, read B, written B, owner
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

/// The value of the sample `name` (with its labels, as written) in Prometheus text.
fn sample(prom: &str, name: &str) -> f64 {
    prom.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name}:\n{prom}"))
        .parse()
        .unwrap_or_else(|e| panic!("sample {name}: {e}"))
}

/// The row of the client table whose owner is `owner`, split into its columns: client
/// id, uid, sessions, conns, delegations, idle s, state, slots, compounds, ops, read B,
/// written B, owner.
async fn client_row(srv: &TestServer, owner: &str) -> Vec<String> {
    let table = ask(srv, "clients").await;
    let line = table
        .lines()
        .find(|l| l.ends_with(owner))
        .unwrap_or_else(|| panic!("client {owner} not listed:\n{table}"));
    line.split_whitespace().map(String::from).collect()
}

/// Slots in use are the requests executing now: a request held for a delegation's
/// recall holds its slot (1 in use, in the gauge and in its client's row); once it is
/// answered, none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_is_a_slot_in_use_until_it_is_answered() {
    const BOTH: u32 = OPEN4_SHARE_ACCESS_BOTH;
    let srv = common::deleg::deleg_server(10_000).await;
    let mut o = Session::new(srv.addr, b"slots-other").await;
    let (sid, fh) = o.open_new_file("f").await;
    o.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        nfs_argop4::OP_CLOSE(CLOSE4args {
            seqid: 0,
            open_stateid: sid,
        }),
    ])
    .await;
    let mut a = Holder::new(&srv, b"slots-holder").await;
    let (_, d, _) = a.open("f", OPEN4_SHARE_ACCESS_READ).await;
    assert!(
        matches!(d, open_delegation4::OPEN_DELEGATE_READ(_)),
        "{d:?}"
    );
    let idle = ask(&srv, "metrics").await;
    assert_eq!(sample(&idle, "txnfs_session_slots_in_use"), 0.0, "{idle}");
    // Other: 64 slots asked; holder: as `new_session` asks. Granted is what both got.
    assert!(sample(&idle, "txnfs_session_slots") >= 2.0, "{idle}");

    // The holder answers no recall: the conflicting OPEN is held.
    a.p.answer = false;
    let held = tokio::spawn(async move {
        let r = o
            .run(vec![
                nfs_argop4::OP_PUTROOTFH,
                common::deleg::open_plain("f", BOTH, b"o2"),
            ])
            .await;
        (o, r)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "the OPEN is held for the recall");
    let busy = ask(&srv, "metrics").await;
    assert_eq!(sample(&busy, "txnfs_session_slots_in_use"), 1.0, "{busy}");
    assert_eq!(client_row(&srv, "slots-other").await[7], "1");
    assert_eq!(client_row(&srv, "slots-holder").await[7], "0");
    let stats = ask(&srv, "stats").await;
    assert!(stats.contains("2 sessions (1 of "), "{stats}");

    // The holder goes away: the OPEN proceeds and its slot is free again.
    drop(a);
    let (_o, r) = held.await.unwrap();
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let after = ask(&srv, "metrics").await;
    assert_eq!(sample(&after, "txnfs_session_slots_in_use"), 0.0, "{after}");
    assert_eq!(client_row(&srv, "slots-other").await[7], "0");
}

/// `clients` counts each client's COMPOUNDs, ops (SEQUENCE included) and READ/WRITE
/// bytes: after a known workload, exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_table_counts_each_clients_compounds_ops_and_bytes() {
    let srv = start_memory_server().await;
    let mut a = Session::new(srv.addr, b"ops-client-a").await;
    let mut b = Session::new(srv.addr, b"ops-client-b").await;
    let cols = |r: &[String]| -> (u64, u64, u64, u64) {
        let n = |i: usize| r[i].parse::<u64>().unwrap_or_else(|e| panic!("{r:?}: {e}"));
        (n(8), n(9), n(10), n(11))
    };
    let a0 = cols(&client_row(&srv, "ops-client-a").await);
    let b0 = cols(&client_row(&srv, "ops-client-b").await);
    // a: OPEN (SEQUENCE PUTROOTFH OPEN GETFH), WRITE of 5 bytes (SEQUENCE PUTFH
    // WRITE), READ (SEQUENCE PUTFH READ), 3 GETATTRs (SEQUENCE PUTROOTFH GETATTR).
    let (sid, fh) = a.open_new_file("f").await;
    a.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        txnfs_rawclient::write(&sid, 0, b"hello"),
    ])
    .await;
    a.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        txnfs_rawclient::read(&sid, 0, 100),
    ])
    .await;
    for _ in 0..3 {
        a.run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            txnfs_rawclient::getattr_change_size(),
        ])
        .await;
    }
    // b: one failing COMPOUND (SEQUENCE PUTROOTFH LOOKUP: the LOOKUP ran and failed).
    let r = b
        .run(vec![
            nfs_argop4::OP_PUTROOTFH,
            txnfs_rawclient::lookup("no-such-file"),
        ])
        .await;
    assert_eq!(r.status, nfsstat4::NFS4ERR_NOENT);
    let a1 = cols(&client_row(&srv, "ops-client-a").await);
    let b1 = cols(&client_row(&srv, "ops-client-b").await);
    assert_eq!(
        (a1.0 - a0.0, a1.1 - a0.1, a1.2 - a0.2, a1.3 - a0.3),
        (6, 4 + 3 + 3 + 3 * 3, 5, 5),
        "client a: (compounds, ops, read B, written B)"
    );
    assert_eq!(
        (b1.0 - b0.0, b1.1 - b0.1, b1.2 - b0.2, b1.3 - b0.3),
        (1, 3, 0, 0),
        "client b"
    );
    // A retransmission is answered from the reply cache: nothing executed, nothing
    // counted.
    let again = b.next(vec![nfs_argop4::OP_PUTROOTFH]);
    let _ = call_raw(&b.cl, again.clone()).await;
    let b2 = cols(&client_row(&srv, "ops-client-b").await);
    let _ = call_raw(&b.cl, again).await;
    assert_eq!(cols(&client_row(&srv, "ops-client-b").await), b2);
}

/// The transaction journal's bytes: a transactional COMPOUND appends to it; a
/// read-only workload and plain COMPOUNDs do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_bytes_grow_with_transactions_only() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"journal-client").await;
    let journal = |p: &str| sample(p, "txnfs_journal_appended_bytes_total{export=\"/\"}");
    let before = journal(&ask(&srv, "metrics").await);
    // Plain COMPOUNDs: a file made and written, then read.
    let (sid, fh) = s.open_new_file("plain").await;
    s.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        txnfs_rawclient::write(&sid, 0, b"data"),
    ])
    .await;
    s.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        txnfs_rawclient::read(&sid, 0, 100),
    ])
    .await;
    assert_eq!(
        journal(&ask(&srv, "metrics").await),
        before,
        "no transaction"
    );

    let r = s
        .run_txn(vec![
            nfs_argop4::OP_PUTROOTFH,
            txnfs_rawclient::mkdir("in-a-txn"),
        ])
        .await
        .expect("transactions are on");
    assert_eq!(r.status, nfsstat4::NFS4_OK, "{:?}", r.resarray);
    let prom = ask(&srv, "metrics").await;
    let after_txn = journal(&prom);
    assert!(after_txn > before, "{prom}");
    assert!(
        sample(&prom, "txnfs_journal_records_total{export=\"/\"}") >= 2.0,
        "Begin and Commit at least: {prom}"
    );
    let stats = ask(&srv, "stats").await;
    assert!(
        stats.contains(&format!("journal: {} bytes in ", after_txn as u64)),
        "{stats}"
    );

    // Read-only: LOOKUPs, GETATTRs and a READ.
    for _ in 0..3 {
        s.run_ok(vec![
            nfs_argop4::OP_PUTROOTFH,
            txnfs_rawclient::lookup("in-a-txn"),
            txnfs_rawclient::getattr_change_size(),
        ])
        .await;
    }
    s.run_ok(vec![
        txnfs_rawclient::putfh(&fh),
        txnfs_rawclient::read(&sid, 0, 100),
    ])
    .await;
    assert_eq!(journal(&ask(&srv, "metrics").await), after_txn);
}

/// The transport's gathered writes (issue 19): one reply per call on one connection,
/// sent in at most that many writes, all of it counted in bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_write_counts_are_reported() {
    let srv = start_memory_server().await;
    let mut s = Session::new(srv.addr, b"transport-client").await;
    let counts = |p: &str| {
        (
            sample(p, "txnfs_transport_writes_total") as u64,
            sample(p, "txnfs_transport_records_total") as u64,
            sample(p, "txnfs_transport_bytes_total") as u64,
        )
    };
    let (w0, r0, b0) = counts(&ask(&srv, "metrics").await);
    assert!(
        r0 >= 3,
        "EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE: {r0}"
    );
    for _ in 0..5 {
        s.run_ok(vec![nfs_argop4::OP_PUTROOTFH]).await;
    }
    let prom = ask(&srv, "metrics").await;
    let (w1, r1, b1) = counts(&prom);
    assert_eq!(r1 - r0, 5, "one record per reply: {prom}");
    assert!(
        (1..=5).contains(&(w1 - w0)),
        "five replies, one after the other: {w0} -> {w1}"
    );
    // Each reply: record mark, RPC reply header, COMPOUND4res of two ops.
    assert!(b1 - b0 >= 5 * 60, "{b0} -> {b1}");
    let stats = ask(&srv, "stats").await;
    assert!(
        stats.contains(&format!("Transport: {w1} writes, {r1} records (")),
        "{stats}"
    );
}
