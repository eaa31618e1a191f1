//! The crash torture, bounded for CI: 12 rounds with a fixed seed against the real
//! `txnfs serve` (built first: `cargo build -p txnfs-cli`, or `TXNFS_BIN`). The first
//! seven rounds are a random `kill -9` and each fault point of the txn layer once
//! (after-journal, between-ops, before-commit, after-commit, during-undo, and a crash
//! mid-transaction followed by a restart that dies during recovery); the rest are
//! random. Long runs: `scripts/txn-torture.sh [ROUNDS] [SEED]`.

use txnfs_torture::server::txnfs_bin;
use txnfs_torture::torture::{run, Config, FAULT_POINTS};

#[test]
fn crash_torture_every_transaction_all_or_nothing() {
    let bin = txnfs_bin();
    assert!(
        bin.is_file(),
        "txnfs binary {} is missing: build it first with cargo build -p txnfs-cli (or set TXNFS_BIN)",
        bin.display()
    );
    let seed = std::env::var("TXNFS_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0021_5EED);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let sum = rt.block_on(run(Config::new(12, seed, bin)));
    assert!(
        sum.violations.is_empty(),
        "violations: {:#?}",
        sum.violations
    );
    assert_eq!(sum.rounds, 12);
    for p in FAULT_POINTS {
        assert!(
            sum.fired.get(p).copied().unwrap_or(0) > 0,
            "fault point {p} never fired: {sum}"
        );
    }
    assert!(sum.kills > 0, "{sum}");
    assert!(sum.acked > 0, "{sum}");
    assert!(sum.failed_as_planned > 0, "{sum}");
    assert!(
        sum.inflight_committed + sum.inflight_rolled_back > 0,
        "no transaction was caught in flight: {sum}"
    );
}

/// The checks can fail: the same workload sent as plain COMPOUNDs (not atomic) leaves
/// half-done "transactions" behind (a COMPOUND that fails at its last op keeps the
/// changes of the ops before it), and the torture must report them.
#[test]
fn the_checks_catch_non_atomic_compounds() {
    let bin = txnfs_bin();
    assert!(bin.is_file(), "txnfs binary {} is missing", bin.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let mut cfg = Config::new(3, 0x0021_5EED, bin);
    cfg.plain = true;
    cfg.keep_on_violation = false;
    let sum = rt.block_on(run(cfg));
    assert!(
        !sum.violations.is_empty(),
        "plain COMPOUNDs passed as transactions: {sum}"
    );
}
