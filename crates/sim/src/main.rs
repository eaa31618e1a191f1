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
    let mut total = txnfs_sim::Stats::default();
    for seed in first..first + seeds {
        match txnfs_sim::run(txnfs_sim::SimConfig::for_seed(seed, steps)) {
            Ok(s) => {
                total.compounds += s.compounds;
                total.retransmissions += s.retransmissions;
                total.overtakes += s.overtakes;
                total.restarts += s.restarts;
                total.expiries += s.expiries;
                total.courtesy_expiries += s.courtesy_expiries;
                total.faults += s.faults;
                total.cut_connections += s.cut_connections;
                total.bytes_verified += s.bytes_verified;
                total.cinfo_checked += s.cinfo_checked;
                total.locks_granted += s.locks_granted;
                total.locks_denied += s.locks_denied;
                total.share_denied += s.share_denied;
                total.stale_refused += s.stale_refused;
            }
            Err(f) => {
                failures += 1;
                println!("{f}");
            }
        }
    }
    println!(
        "compounds={} retransmissions={} overtakes={} restarts={} expiries={} (in courtesy time {}) faults={} cut_connections={}",
        total.compounds,
        total.retransmissions,
        total.overtakes,
        total.restarts,
        total.expiries,
        total.courtesy_expiries,
        total.faults,
        total.cut_connections
    );
    println!(
        "checked: bytes_verified={} cinfo={} locks_granted={} locks_denied={} share_denied={} stale_refused={}",
        total.bytes_verified,
        total.cinfo_checked,
        total.locks_granted,
        total.locks_denied,
        total.share_denied,
        total.stale_refused
    );
    println!("seeds={seeds} steps={steps} failures={failures}");
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
