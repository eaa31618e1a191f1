#!/usr/bin/env bash
# Issue 19's release measurements in one run (ADR 0040 addendum, ADR 0044 addendum):
#   1. loopback TCP, one stream (iperf3, 5 s): the yardstick of the 1 MiB figures;
#   2. batching: randread 4 KiB with 64 threads (none, static:8, dynamic; 20 s) and with
#      one thread (none, dynamic; 10 s), ROUNDS rounds on one server each; then randwrite
#      4 KiB with 64 and 16 threads (none, static:2, static:8, dynamic; 8 s), ROUNDS
#      rounds (ADR 0044 stop-43 addendum: on ext4 of kernels 6.16+ small overwrites
#      of large folios cost the server half its CPU; EXPORT_BASE=/mnt/xfs compares);
#   3. large I/O inline within the bound against all on the pool: a server per setting
#      (TXNFS_INLINE_LARGE_IO=0, then the default), alternating, ROUNDS rounds of 5 s of
#      seqread and seqwrite 1 MiB with 1 and 4 threads and randread 4 KiB with 16;
#   4. the batching sweep: randread over 16, 64, 128 threads × none, static:8, static:64,
#      dynamic, 3 repeats of 10 s (`txnfs bench sweep`, its plots and table in OUT/sweep);
#   5. Tyche's Fig. 8 shape: 128 threads of 4 KiB random reads, and a thread of 128 KiB
#      reads joining every 10 s (4 in all), 50 s, none / static:8 / dynamic: MB/s per
#      10-s phase.
# Prints the medians per case: ops/s, MB/s, server and client CPU µs and context
# switches per request, p50/p99 µs, requests per message, batch level.
#   cargo build --release -p txnfs-cli && scripts/measure-tyche.sh [OUT] [ROUNDS]
# BIN overrides the txnfs binary (default target/release/txnfs, with txnfs-bench beside it);
# EXPORT_BASE the directory under which the export and state live (default /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/txnfs}
OUT=${1:-/tmp/measure-tyche}
ROUNDS=${2:-3}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p txnfs-cli" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 1; }
rm -rf "$OUT"; mkdir -p "$OUT"
WORK=$(mktemp -d "${EXPORT_BASE:-/tmp}/measure-tyche.XXXXXX")
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; rm -rf "$WORK"' EXIT
PORT=$((20000 + RANDOM % 20000))
start() { # ENV=VALUE... : a server on a fresh export
  PORT=$((PORT + 1))
  rm -rf "$WORK/export" "$WORK/state"; mkdir -p "$WORK/export" "$WORK/state"
  env "$@" "$BIN" serve "$WORK/export" --listen 127.0.0.1:$PORT --state-dir "$WORK/state" \
    --no-grace --no-rpcbind >>"$OUT/server.log" 2>&1 &
  SPID=$!
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return; sleep 0.1; done
  echo "server did not start (see $OUT/server.log)" >&2; exit 1
}
stop() { kill $SPID; wait $SPID 2>/dev/null || true; SPID=; }
bench() { # LABEL ARGS...
  local label=$1; shift
  mkdir -p "$OUT/$label"
  "$BIN" bench run "$@" --target nfs://127.0.0.1:$PORT/ --server-pid $SPID --out "$OUT/$label" -q \
    >>"$OUT/$label/stdout" 2>&1 || echo "FAILED: $label (see $OUT/$label/stdout)" >&2
}
echo "loopback TCP (iperf3)"
iperf3 -s -1 -p $((PORT + 5000)) >/dev/null 2>&1 & sleep 1
iperf3 -c 127.0.0.1 -p $((PORT + 5000)) -t 5 -J >"$OUT/iperf.json" 2>/dev/null || true
wait
echo "batching"
for _ in $(seq "$ROUNDS"); do
  start
  for mode in none static:8 dynamic; do bench "batch64-${mode/:/}" randread --threads 64 --batch $mode --duration 20; done
  for mode in none dynamic; do bench "batch1-${mode/:/}" randread --threads 1 --batch $mode --duration 10; done
  stop
done
echo "batching, 4 KiB random writes"
for _ in $(seq "$ROUNDS"); do
  start
  for threads in 64 16; do
    for mode in none static:2 static:8 dynamic; do
      bench "wbatch$threads-${mode/:/}" randwrite --threads $threads --batch $mode --duration 8
    done
  done
  stop
done
echo "large I/O inline (bound: default) against the pool (bound 0)"
for _ in $(seq "$ROUNDS"); do
  for bound in 0 default; do
    if [ $bound = 0 ]; then start TXNFS_INLINE_LARGE_IO=0; else start; fi
    bench "seqread1-$bound" seqread --io-size 1M --duration 5
    bench "seqread4-$bound" seqread --io-size 1M --threads 4 --duration 5
    bench "seqwrite1-$bound" seqwrite --io-size 1M --duration 5
    bench "seqwrite4-$bound" seqwrite --io-size 1M --threads 4 --duration 5
    bench "randread16-$bound" randread --threads 16 --duration 5
    stop
  done
done
echo "sweep"
"$BIN" bench sweep randread --threads 16,64,128 --delay-ms 0 --batch none,static:8,static:64,dynamic \
  --repeat 3 --duration 10 --out "$OUT/sweep" >"$OUT/sweep.log" 2>&1 || echo "FAILED: sweep" >&2
echo "Fig. 8 shape"
start
for mode in none static:8 dynamic; do
  bench "fig8-${mode/:/}" randread --threads 132 --set join_threads=4 --set join_io=128k \
    --set join_every_ms=10000 --batch $mode --duration 50
done
stop
python3 - "$OUT" <<'PY'
import json, glob, os, statistics, sys
out = sys.argv[1]
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")
print(f"{'case':18} {'n':>2} {'ops/s':>9} {'MB/s':>8} {'srv µs':>7} {'srv ctx':>7} {'cli µs':>7} {'p50':>8} {'p99':>8} {'req/msg':>7} level")
for d in sorted(os.listdir(out)):
    files = sorted(glob.glob(os.path.join(out, d, "*.json")))
    if not files or d == "sweep":
        continue
    rows = []
    for f in files:
        r = json.load(open(f))["repeats"][0]
        lat = r["latency_us"]
        kind = next((k for k in ("READ", "WRITE") if k in lat), next(iter(lat)))
        srv, cli = r.get("server") or {}, r.get("client") or {}
        tr = (r.get("wire") or {}).get("transport", {})
        rows.append((r["ops_per_s"], r["mb_per_s"], srv.get("cpu_us_per_op"), srv.get("ctx_switches_per_op"),
                     cli.get("cpu_us_per_op"), lat[kind]["p50"], lat[kind]["p99"], tr.get("requests_per_message"), r.get("batch_level")))
    col = lambda i: med([x[i] for x in rows])
    print(f"{d:18} {len(rows):2} {col(0):9.0f} {col(1):8.1f} {col(2):7.1f} {col(3):7.2f} {col(4):7.1f} {col(5):8.1f} {col(6):8.1f} {col(7):7.2f} {[x[8] for x in rows]}")
try:
    j = json.load(open(os.path.join(out, "iperf.json")))
    print("loopback TCP, one stream:", round(j["end"]["sum_received"]["bits_per_second"] / 8e6), "MB/s")
except Exception as e:
    print("loopback TCP: no figure:", e)
print("sweep:", os.path.join(out, "sweep", "sweep.md"))
print("Fig. 8 shape: MB/s per 10-s phase (phase k: k joiners of 128 KiB beside 128 threads of 4 KiB)")
for d in sorted(x for x in os.listdir(out) if x.startswith("fig8-")):
    for f in sorted(glob.glob(os.path.join(out, d, "*.json"))):
        r = json.load(open(f))["repeats"][0]
        ps = r["per_second"]
        phases = [sum(x["bytes"] for x in ps if k * 10 <= x["t"] < (k + 1) * 10) / 10 / 1e6 for k in range(5)]
        levels = [max([s.get("batch_level") or 0 for s in r.get("system", []) if k * 10 < s["t"] <= (k + 1) * 10] or [0]) for k in range(5)]
        print(f"  {d:14}", " ".join(f"{p:8.1f}" for p in phases), "| highest level per phase", levels)
PY
