//! `txn-torture [ROUNDS] [SEED] [--bin PATH] [--clients N] [--keep]`: the crash torture
//! of transactional COMPOUNDs against `txnfs serve` (see the crate docs). Exits 1 on a
//! violation (the work directory with the export, state and server log is kept).

use std::path::PathBuf;
use std::process::ExitCode;

use txnfs_torture::server::txnfs_bin;
use txnfs_torture::torture::{run, Config};

fn main() -> ExitCode {
    let mut pos = Vec::new();
    let mut bin = None;
    let mut clients = None;
    let mut keep = false;
    let mut plain = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bin" => bin = args.next().map(PathBuf::from),
            "--clients" => clients = args.next().and_then(|c| c.parse().ok()),
            "--keep" => keep = true,
            "--plain-compounds" => plain = true,
            "-h" | "--help" => {
                println!("usage: txn-torture [ROUNDS (100)] [SEED (random)] [--bin TXNFS] [--clients N (3)] [--keep] [--plain-compounds (checker self-test: must fail)]");
                return ExitCode::SUCCESS;
            }
            _ => pos.push(a),
        }
    }
    let rounds = pos.first().and_then(|r| r.parse().ok()).unwrap_or(100);
    let seed = pos
        .get(1)
        .and_then(|s| {
            s.strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| s.parse().ok())
        })
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    let mut cfg = Config::new(rounds, seed, bin.unwrap_or_else(txnfs_bin));
    if let Some(c) = clients {
        cfg.clients = c;
    }
    cfg.keep = keep;
    cfg.plain = plain;
    if !cfg.bin.is_file() {
        eprintln!(
            "txnfs binary {} is missing: cargo build -p txnfs-cli (or --bin / TXNFS_BIN)",
            cfg.bin.display()
        );
        return ExitCode::from(2);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let sum = rt.block_on(run(cfg));
    if sum.violations.is_empty() {
        println!("replay: txn-torture {rounds} {seed}");
        ExitCode::SUCCESS
    } else {
        println!("FAILED; replay: txn-torture {rounds} {seed}");
        ExitCode::from(1)
    }
}
