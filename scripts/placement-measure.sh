#!/usr/bin/env bash
# Before/after of where COMPOUNDs run (ADR 0033), in one run: two txnfs server
# binaries (OLD, NEW) alternate over ROUNDS rounds on the same cases; the runner is one
# txnfs-bench. Prints per case and binary the median of ops/s, server CPU µs/op,
# context switches/op and the p99 latency (µs) of the busiest request kind.
#   scripts/placement-measure.sh OLD_TXNFS NEW_TXNFS TXNFS_BENCH [ROUNDS] [SECONDS]
# MEASURE_CASES (lines of "name|bench run arguments") replaces the default cases.
set -euo pipefail
OLD=$1 NEW=$2 BENCH=$3 ROUNDS=${4:-3} SECS=${5:-5}
WORK=$(mktemp -d /tmp/placement-measure.XXXXXX)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
PID=
CASES=(
  "txn16|writefiles --txn --files-per-txn 16 --file-size 4k --clients 8"
  "txn16-shared|writefiles --txn --files-per-txn 16 --file-size 4k --clients 8 --sharing 100"
  "locked|locked --clients 4 --threads 4"
  "randread16|randread --threads 16"
  "create256-10ms|create --threads 256 --delay-ms 10"
)
if [ -n "${MEASURE_CASES:-}" ]; then
  mapfile -t CASES <<<"$MEASURE_CASES"
fi
port=$((20000 + RANDOM % 20000))
for round in $(seq 1 "$ROUNDS"); do
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    export_dir=$WORK/export-$which-$round; mkdir -p "$export_dir"
    port=$((port + 1))
    "$bin" serve "$export_dir" --listen 127.0.0.1:$port --state-dir "$WORK/state-$which-$round" \
      --no-rpcbind --no-grace >"$WORK/server-$which-$round.log" 2>&1 &
    PID=$!
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    for c in "${CASES[@]}"; do
      name=${c%%|*} args=${c#*|}
      out=$WORK/out/$name/$which; mkdir -p "$out"
      # shellcheck disable=SC2086
      "$BENCH" run $args --target nfs://127.0.0.1:$port/ --duration "$SECS" \
        --server-pid $PID --server "$which" --out "$out" -q >/dev/null 2>"$WORK/err" \
        || { echo "$name $which failed: $(tail -3 "$WORK/err")" >&2; }
    done
    kill $PID; wait $PID 2>/dev/null || true; PID=
  done
done
python3 - "$WORK/out" <<'PY'
import json, os, statistics, sys
root = sys.argv[1]
print(f"{'case':16} {'server':4} {'ops/s':>9} {'cpu µs/op':>10} {'ctx/op':>7} {'p99 µs':>9}  (medians of rounds)")
for case in sorted(os.listdir(root)):
    rows = {}
    for which in ("old", "new"):
        d = os.path.join(root, case, which)
        ops, cpu, ctx, p99 = [], [], [], []
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            r = json.load(open(os.path.join(d, f)))
            for rep in r["repeats"]:
                ops.append(rep["ops_per_s"])
                if rep.get("server"):
                    cpu.append(rep["server"]["cpu_us_per_op"]); ctx.append(rep["server"]["ctx_switches_per_op"])
                lat = rep["latency_us"]
                if lat:
                    busiest = max(lat.values(), key=lambda l: l["count"])
                    p99.append(busiest["p99"])
        med = lambda v: statistics.median(v) if v else float("nan")
        rows[which] = (med(ops), med(cpu), med(ctx), med(p99))
        print(f"{case:16} {which:4} {rows[which][0]:9.0f} {rows[which][1]:10.1f} {rows[which][2]:7.2f} {rows[which][3]:9.0f}")
    o, n = rows["old"], rows["new"]
    if o[0] and o[1]:
        print(f"{'':16} new/old: ops/s {n[0]/o[0]:.2f}x  cpu/op {n[1]/o[1]:.2f}x  ctx/op {n[2]/o[2] if o[2] else float('nan'):.2f}x  p99 {n[3]/o[3] if o[3] else float('nan'):.2f}x")
PY
