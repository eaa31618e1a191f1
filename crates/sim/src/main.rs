//! `txnfs-sim`: run the deterministic simulation over a range of seeds and print one
//! summary line for CI: `seeds=N steps=M failures=F`. Sizes come from TXNFS_SIM_SEEDS
//! and TXNFS_SIM_STEPS (or `--seeds N --steps M --first S`). Exits 1 on a failure, after
//! printing its seed, step and replay command.

use std::process::ExitCode;

fn main() -> ExitCode {
    let (mut seeds, mut steps) = txnfs_sim::env_sizes(96, 1000);
    let mut first = std::env::var("TXNFS_SIM_FIRST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1u64);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let val = args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match (args[i].as_str(), val) {
            ("--seeds", Some(v)) => seeds = v,
            ("--steps", Some(v)) => steps = v,
            ("--first", Some(v)) => first = v,
            _ => {
                eprintln!("usage: txnfs-sim [--seeds N] [--steps M] [--first SEED]");
                return ExitCode::from(2);
            }
        }
        i += 2;
    }
    let mut failures = 0u64;
    let mut total = counters(&txnfs_sim::Stats::default());
    for seed in first..first + seeds {
        match txnfs_sim::run(txnfs_sim::SimConfig::for_seed(seed, steps)) {
            Ok(s) => {
                for ((_, sum), (_, n)) in total.iter_mut().zip(counters(&s)) {
                    *sum += n;
                }
            }
            Err(f) => {
                failures += 1;
                println!("{f}");
            }
        }
    }
    let (did, checked) = total.split_at(DID);
    println!("{}", line(did));
    println!("checked: {}", line(checked));
    println!("seeds={seeds} steps={steps} failures={failures}");
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// How many of [`counters`] tell what the runs did; the rest tell what they checked.
const DID: usize = 25;

/// The counters the summary sums over all seeds, (name, value) in the order printed.
fn counters(s: &txnfs_sim::Stats) -> [(&'static str, u64); 40] {
    [
        ("compounds", s.compounds),
        ("retransmissions", s.retransmissions),
        ("overtakes", s.overtakes),
        ("restarts", s.restarts),
        ("expiries", s.expiries),
        ("courtesy_expiries", s.courtesy_expiries),
        ("faults", s.faults),
        ("cut_connections", s.cut_connections),
        ("cb_paths_down", s.cb_paths_down),
        ("cb_rebinds", s.cb_rebinds),
        ("delegations", s.delegations_granted),
        ("write_delegations", s.write_delegations),
        ("recalls", s.deleg_recalled),
        ("recalls_delivered", s.recalls_delivered),
        ("deleg_returns", s.deleg_returns),
        ("deleg_revoked", s.deleg_revoked),
        ("deleg_revoked_unreachable", s.deleg_revoked_unreachable),
        ("deleg_freed", s.deleg_freed),
        ("txn_committed", s.txn_committed),
        ("txn_aborted", s.txn_aborted),
        ("txn_faulted", s.txn_faulted),
        ("txn_crashed", s.txn_crashed),
        ("txn_crashed_changes", s.txn_crashed_changes),
        ("txn_recovered", s.txn_recovered),
        ("recovery_crashes", s.recovery_crashes),
        ("txn_conflicts", s.txn_conflicts),
        ("bytes_verified", s.bytes_verified),
        ("cinfo", s.cinfo_checked),
        ("locks_granted", s.locks_granted),
        ("locks_denied", s.locks_denied),
        ("share_denied", s.share_denied),
        ("stale_refused", s.stale_refused),
        ("deleg_delayed", s.deleg_delayed),
        ("deleg_io", s.deleg_io),
        ("grants_predicted", s.grants_predicted),
        ("expired_deleg_probes", s.expired_deleg_probes),
        ("deleg_revoked_seen", s.deleg_revoked_seen),
        ("deleg_files_checked", s.deleg_files_checked),
        ("deleg_shared_checked", s.deleg_shared_checked),
        ("txn_entries_checked", s.txn_entries_checked),
    ]
}

/// `name=value` pairs separated by spaces.
fn line(counters: &[(&str, u64)]) -> String {
    let fields: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
    fields.join(" ")
}
