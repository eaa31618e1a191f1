#!/usr/bin/env bash
# The measurements of issue 10 (seed 003, TC-NFS Figs. 4-14): transactional COMPOUNDs
# against the same work done plainly, in one `bench compare` per part with three
# configurations side by side:
#   txnfs-txn  txnfs, every iteration ONE transaction (`bench run --txn`);
#   txnfs      the same server, the same files through the plain vectorized client,
#              as many files per COMPOUND;
#   ganesha    NFS-Ganesha (FSAL VFS), plain.
# Both txnfs configurations run `--no-delegations` (Ganesha grants none by default), so
# no configuration caches or recalls. Each part runs at delays $DELAYS (the runner's
# delay proxy), $REPEAT repeats of $DUR s (medians in the summary).
#   wf-*: writefiles, file size 4k/64k/1M, files per transaction 1/16/64, 1 or 8
#         clients (own sessions, one thread each), sharing 0 or 100 %;
#   rf-*: readfiles (reads in one transaction vs vectorized reads);
#   tree: cp -R and rm -r of a small source tree (one transaction per tree);
#   layer: plain workloads (ls -lR, tree copy, random writes, creates) against txnfs
#         with the txn layer (default), txnfs --no-txn and Ganesha.
# Output: $OUT/<part>/ (compare.json, report.md, runs/ with every run's JSON and
# command line) and $OUT/summary.md (issue10-summary.py). PARTS="wf-4k-k16-c1 ..."
# runs a subset.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/txnfs-issue10}"
DUR="${DUR:-2}"
REPEAT="${REPEAT:-3}"
DELAYS="${DELAYS:-0,10}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$OUT"

if [ -z "${TXNFS:-}" ]; then
  cargo build --release -q --bin txnfs --bin txnfs-bench --manifest-path "$ROOT/Cargo.toml"
  TXNFS="$CARGO_TARGET_DIR/release/txnfs"
fi

want() { [ -z "${PARTS:-}" ] || [[ " $PARTS " == *" $1 "* ]]; }

# The configurations compared: transactional vs plain on one server, and Ganesha.
SERVERS=(--servers txnfs-txn=txnfs,txnfs,ganesha --run-arg txnfs-txn=--txn --baseline txnfs)

part() { # part NAME WORKLOAD... -- BENCH-ARGS...
  local name="$1"
  shift
  want "$name" || return 0
  local workloads=()
  while [ "$1" != "--" ]; do workloads+=("$1"); shift; done
  shift
  echo "== $name: ${workloads[*]} $*" >&2
  "$TXNFS" bench compare "${SERVERS[@]}" --txnfs-arg=--no-delegations \
    --out "$OUT/$name" "${workloads[@]}" --delay-ms "$DELAYS" --repeat "$REPEAT" \
    -- "$@" || echo "!! $name had failed runs (see $OUT/$name/report.md)" >&2
}

wf() { # wf SIZE FILES-PER-TXN CLIENTS SHARING FILES
  part "wf-$1-k$2-c$3-s$4" writefiles -- --file-size "$1" --files-per-txn "$2" \
    --clients "$3" --threads 1 --sharing "$4" --files "$5" --duration "$DUR"
}

# One client: file size × files per transaction (what fits one COMPOUND: ≤ 1 MiB).
wf 4k 1 1 0 128
wf 4k 16 1 0 128
wf 4k 64 1 0 128
wf 64k 1 1 0 64
wf 64k 16 1 0 64
wf 1M 1 1 0 16
# Eight clients, own files and all files shared.
wf 4k 1 8 0 128
wf 4k 16 8 0 128
wf 4k 16 8 100 128
wf 4k 64 8 0 128
wf 64k 16 8 0 64
wf 1M 1 8 0 16
# Readfiles.
part rf-4k-k16-c1 readfiles -- --file-size 4k --files-per-txn 16 --files 256 --duration "$DUR"
part rf-64k-k16-c8 readfiles -- --file-size 64k --files-per-txn 16 --files 256 \
  --clients 8 --duration "$DUR"
# cp -R / rm -r of a 200-file source tree (fits one transaction).
part tree tree-cp tree-rm -- --files 200 --file-size 2k --set dirs=20 --set trees=3 --ops 3

# What the txn layer costs standard clients that never send a transaction: the same
# plain workloads against txnfs (layer on, the default), txnfs --no-txn and Ganesha.
# tree-ls is `ls -lR`; tree-cp creates a tree of directories and small files as untar
# does.
SERVERS=(--servers txnfs,txnfs-notxn=txnfs,ganesha --server-arg txnfs-notxn=--no-txn
  --no-delegations --baseline txnfs-notxn)
part layer-tree tree-ls tree-cp -- --files 200 --file-size 2k --set dirs=20 --set trees=3 --ops 3
part layer-io randwrite create -- --duration "$DUR"

python3 "$ROOT/crates/benchreport/scripts/issue10-summary.py" "$OUT" > "$OUT/summary.md"
echo "summary: $OUT/summary.md" >&2
