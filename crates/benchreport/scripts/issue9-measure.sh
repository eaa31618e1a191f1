#!/usr/bin/env bash
# The measurements of issue 9's closing note (delegations), all in one invocation. Each
# part runs in one `bench compare` with three servers side by side: txnfs (delegations
# on, the default), txnfs with `--no-delegations` (reported as "txnfs-nodeleg") and
# NFS-Ganesha with its delegations turned on (`--ganesha-delegations`):
#   1. locked: seed 001 Table 2 (OPEN, LOCK, READ, LOCKU, CLOSE, ten times per file):
#      NFS operations per client and ops/s;
#   2. cachedread: seed 001 Fig. 7 shape, the same files read again and again through
#      the caching client: ops/s and READs on the wire;
#   3. deleg: the conflicting-open latency (group A holds read opens and delegations,
#      group B opens the same files read-write), p50/p99, at 0 and 10 ms;
#   4. tree-ls: `ls -lR` of a 5,000-entry tree repeated by one client: RPCs per listing
#      with and without directory delegations.
# Output: one report per part under $OUT (default /tmp/txnfs-issue9).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/txnfs-issue9}"
DUR="${DUR:-5}"
REPEAT="${REPEAT:-3}"
DELAYS="${DELAYS:-0,10}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$OUT"

cargo build --release -q --bin txnfs --bin txnfs-bench --manifest-path "$ROOT/Cargo.toml"
TXNFS="$CARGO_TARGET_DIR/release/txnfs"

part() { # part NAME WORKLOAD BENCH-ARGS...
  local name="$1" workload="$2"
  shift 2
  "$TXNFS" bench compare --servers txnfs,ganesha --ganesha-delegations \
    --out "$OUT/$name-deleg" "$workload" --delay-ms "$DELAYS" --repeat "$REPEAT" -- "$@"
  "$TXNFS" bench compare --servers txnfs --txnfs-arg=--no-delegations \
    --out "$OUT/$name-nodeleg" "$workload" --delay-ms "$DELAYS" --repeat "$REPEAT" -- "$@"
  mkdir -p "$OUT/$name/results"
  find "$OUT/$name-deleg/runs" -name '*.json' -exec cp {} "$OUT/$name/results/" \;
  find "$OUT/$name-nodeleg/runs" -name '*.json' | while read -r f; do
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["server"]="txnfs-nodeleg"; json.dump(d,open(sys.argv[2],"w"))' \
      "$f" "$OUT/$name/results/nodeleg-$(basename "$f")"
  done
  "$TXNFS" bench compare --baseline ganesha --out "$OUT/$name" \
    --from-results "$OUT/$name"/results/*.json
}

part locked locked --clients 2 --threads 1 --duration "$DUR" --files 200
part cachedread cachedread --clients 2 --threads 1 --duration "$DUR"
part deleg deleg --clients 2 --threads 1 --duration "$DUR" --files 500
part tree-ls tree-ls --clients 1 --threads 1 --duration "$DUR" --files 5000
echo "reports: $OUT/*/report.md"
