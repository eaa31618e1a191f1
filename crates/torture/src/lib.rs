//! Crash torture and isolation checks of transactional COMPOUNDs (ADR 0021) against the
//! real `txnfs serve` binary, started as a child process on 127.0.0.1.
//!
//! - [`torture::run`]: rounds of concurrent transactional clients (tree copies,
//!   directory renames, overwrites, removes, transactions that fail at their last op),
//!   each round ended by `kill -9` at a random moment or a `TXNFS_TXN_FAULT` point of
//!   the txn layer; after each restart the export directory on the host must equal the
//!   model of acknowledged transactions, with every transaction whose reply was lost
//!   either fully applied or not at all, no torn file, and `.txnfs/backup` empty.
//!   `scripts/txn-torture.sh [ROUNDS] [SEED]` runs it long; `tests/txn_torture.rs` runs
//!   12 rounds in CI.
//! - [`isolation::run_isolation`]: writers put their id into K files per transaction;
//!   transactional and plain readers of all K files in one COMPOUND must never see a mix.

pub mod isolation;
pub mod model;
pub mod nfs;
pub mod server;
pub mod torture;
