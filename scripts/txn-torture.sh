#!/usr/bin/env bash
# Crash torture of transactional COMPOUNDs (ADR 0021) against the real `txnfs serve`:
#   scripts/txn-torture.sh [ROUNDS (100)] [SEED (random)] [--clients N] [--keep]
# Each round runs concurrent transactional clients (tree copies, directory renames,
# overwrites, removes, transactions that fail at their last op) on a local export and
# ends with kill -9 at a random moment or a TXNFS_TXN_FAULT point inside the txn layer
# (after-journal, between-ops, before-commit, after-commit, during-undo, and
# during-recovery on the restart after a mid-transaction crash); after each restart the
# export must hold every acknowledged transaction, each in-flight one all or nothing, no
# torn file, and an empty .txnfs/backup. Prints one line per round and a summary; exits
# 1 on a violation (the work directory is kept and printed). Replay with the printed seed.
# CI: crates/torture/tests/txn_torture.rs runs 12 rounds with a fixed seed under
# `cargo test`; scripts/test.sh also runs this script for a few rounds on a new seed.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-100}
seed=${2:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
shift $(($# < 2 ? $# : 2))
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build -q -p txnfs-cli -p txnfs-torture
exec "$target/debug/txn-torture" "$rounds" "$seed" --bin "${TXNFS_BIN:-$target/debug/txnfs}" "$@"
