//! Isolation of transactional COMPOUNDs (ADR 0021): N=4 writer sessions each write their
//! own id into the same K=8 files in one transaction, for ~2 s; transactional readers
//! (one txn COMPOUND reading all K files) and plain readers (one plain COMPOUND reading
//! all K files) must always see one id in all K files. Against `txnfs serve --memory`
//! and a local export, as child processes (`cargo build -p txnfs-cli`, or `TXNFS_BIN`).
//!
//! The plain-reader half needs plain COMPOUNDs to keep their read locks to the end of the
//! COMPOUND; until that is in, it fails with "plain readers saw a mix".

use std::sync::atomic::Ordering;

use txnfs_torture::isolation::{run_isolation, IsoConfig};
use txnfs_torture::server::{txnfs_bin, ServeSpec, Started};

fn check(memory: bool) {
    let bin = txnfs_bin();
    assert!(
        bin.is_file(),
        "txnfs binary {} is missing: build it first with cargo build -p txnfs-cli (or set TXNFS_BIN)",
        bin.display()
    );
    let work = tempfile::Builder::new()
        .prefix("txnfs-iso-")
        .tempdir()
        .expect("temp dir");
    let export = work.path().join("export");
    std::fs::create_dir_all(&export).expect("mkdir");
    let spec = ServeSpec {
        bin,
        export: (!memory).then_some(export),
        state_dir: work.path().join("state"),
        log: work.path().join("server.log"),
    };
    let Started::Listening(srv) = spec.start(None).expect("server starts") else {
        panic!("server exited at start; see {}", spec.log.display())
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let st = rt.block_on(run_isolation(srv.addr, IsoConfig::default()));
    drop(srv);
    let kind = if memory { "memory" } else { "local" };
    println!("isolation on a {kind} export: {st}");
    for e in st.errors() {
        println!("  {e}");
    }
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    assert!(g(&st.writer_commits) > 0, "no writer committed: {st}");
    assert!(g(&st.txn_reads) > 0, "no transactional read checked: {st}");
    assert!(g(&st.plain_reads) > 0, "no plain read checked: {st}");
    assert_eq!(g(&st.txn_mixes), 0, "transactional readers saw a mix: {st}");
    let unexpected: Vec<String> = st
        .errors()
        .into_iter()
        .filter(|e| !e.contains("saw a mix"))
        .collect();
    assert!(unexpected.is_empty(), "unexpected errors: {unexpected:#?}");
    assert_eq!(g(&st.plain_mixes), 0, "plain readers saw a mix: {st}");
}

#[test]
fn readers_never_see_a_mix_of_writers_on_memory() {
    check(true);
}

#[test]
fn readers_never_see_a_mix_of_writers_on_a_local_export() {
    check(false);
}
