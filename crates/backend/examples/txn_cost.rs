//! What the `txn` layer costs in the backend alone, on a directory of this machine:
//! overwriting 4 KiB in each of F existing files, per COMPOUND, as
//! (a) plain calls through the layer, (b) a transaction (undo entries appended, one
//! fdatasync of the journal at commit plus the files' fsyncs), (c) a transaction with
//! `sync_undo` (journal and backup synced before every overwrite: power-loss safe).
//! Also (d) the same writes with no layer at all, with one fsync per file (what a plain
//! NFS client's COMMIT costs). Prints the median per-COMPOUND time of each.
//!
//!     cargo run --release -p txnfs-backend --example txn_cost -- [DIR] [FILES] [ROUNDS]

use std::sync::Arc;
use std::time::{Duration, Instant};

use txnfs_backend::local::LocalBackend;
use txnfs_backend::txn::{TxnLayer, TxnSettings};
use txnfs_backend::{Backend, CreateMode, Creds, FileKey, OpCtx, SetAttrs, TxnSpan};

fn cx(compound: u64, txn: bool) -> OpCtx {
    OpCtx {
        creds: Creds::default(),
        client: Some(1),
        compound,
        txn,
        span: TxnSpan::Whole,
        waited: Default::default(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let files: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(16);
    let rounds: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(200);
    let dir = tempfile::tempdir_in(&base).expect("temp dir");
    let lower: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir.path()).expect("open"));
    let root = lower.root().expect("root");
    let keys: Vec<FileKey> = (0..files)
        .map(|i| {
            let c = lower
                .create_file(
                    &cx(0, false),
                    &root,
                    format!("f{i}").as_bytes(),
                    CreateMode::Guarded,
                    &SetAttrs::default(),
                )
                .expect("create");
            lower
                .write(&cx(0, false), &c.key, 0, &[1u8; 65536], true)
                .expect("write");
            c.key
        })
        .collect();
    let data = [7u8; 4096];
    let mut compound = 10;
    let mut run = |b: &dyn Backend, txn: bool, sync_each: bool| -> Duration {
        let mut times = Vec::new();
        for r in 0..rounds {
            compound += 1;
            let c = cx(compound, txn);
            let t = Instant::now();
            b.begin_compound(&c).expect("begin");
            for k in &keys {
                b.write(&c, k, (r % 16) * 4096, &data, false)
                    .expect("write");
                if sync_each {
                    b.commit(&c, k).expect("commit");
                }
            }
            b.end_compound(&c, true).expect("commit");
            times.push(t.elapsed());
        }
        median(times)
    };
    let none = run(&*lower, false, true);
    let journal = dir.path().join("../txn_cost.journal");
    let layer = TxnLayer::open(lower.clone(), Some(&journal), TxnSettings::default()).expect("txn");
    let plain = run(&layer, false, true);
    let txn = run(&layer, true, false);
    drop(layer);
    let strict = TxnSettings {
        sync_undo: true,
        ..TxnSettings::default()
    };
    let layer = TxnLayer::open(lower.clone(), Some(&journal), strict).expect("txn");
    let txn_strict = run(&layer, true, false);
    drop(layer);
    let _ = std::fs::remove_file(&journal);
    println!(
        "{files} files x 4 KiB overwritten per COMPOUND, {rounds} rounds, median per COMPOUND, on {}",
        base.display()
    );
    println!("  no layer, fsync per file:     {none:>10.2?}");
    println!(
        "  layer, plain, fsync per file: {plain:>10.2?}  ({:.2}x)",
        plain.as_secs_f64() / none.as_secs_f64()
    );
    println!(
        "  transaction:                  {txn:>10.2?}  ({:.2}x)",
        txn.as_secs_f64() / none.as_secs_f64()
    );
    println!(
        "  transaction, sync_undo:       {txn_strict:>10.2?}  ({:.2}x)",
        txn_strict.as_secs_f64() / none.as_secs_f64()
    );
}
