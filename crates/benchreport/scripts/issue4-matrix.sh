#!/usr/bin/env bash
# The comparison matrix of issue 4's closing note: small-file reads, 4 KB random reads and
# Writefiles, and file creation with 1, 16 and 128 threads, at 0 and 10 ms each way,
# txnfs vs NFS-Ganesha, 3 repeats each. Writes one report per matrix under $OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/txnfs-issue4}"
DUR="${DUR:-4}"
REPEAT="${REPEAT:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release -q --bin txnfs --bin txnfs-bench --manifest-path "$ROOT/Cargo.toml"
fi
TXNFS="$CARGO_TARGET_DIR/release/txnfs"
export TXNFS_BIN="$TXNFS" TXNFS_BENCH_BIN="$CARGO_TARGET_DIR/release/txnfs-bench"
mkdir -p "$OUT"
"$TXNFS" bench compare smallfiles randread writefiles --delay-ms 0,10 --repeat "$REPEAT" \
  --out "$OUT/io" -- --duration "$DUR" --files 1000
for t in 1 16 128; do
  "$TXNFS" bench compare create --delay-ms 0,10 --repeat "$REPEAT" \
    --out "$OUT/create-t$t" -- --duration "$DUR" --threads "$t"
done
echo "reports: $OUT/*/report.md"
