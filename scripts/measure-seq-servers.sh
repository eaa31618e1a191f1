#!/usr/bin/env bash
# One stream of 1 MiB requests, the server with and without piped READs (ADR 0065):
# per round iperf3 (one stream, 3 s), then per server (piped, and copy =
# TXNFS_NO_PIPED_READS=1) a fresh server and, per depth, `txnfs bench run WORKLOAD
# --threads 1 --set depth=N` for 5 s. Prints MB/s, the share of that round's iperf3,
# and client and server CPU µs and context switches per request.
#   cargo build --release -p txnfs-cli -p txnfs-benchreport && \
#     scripts/measure-seq-servers.sh 3 seqread "1 2 4"
set -u
cd "$(dirname "$0")/.."
B=${BIN:-$PWD/target/release/txnfs}
[ -x "$B" ] || { echo "no $B: cargo build --release -p txnfs-cli -p txnfs-benchreport" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 is needed: apt-get install -y iperf3" >&2; exit 1; }
R=$1; WL=$2; DEPTHS=$3
IPORT=$((20000 + RANDOM % 20000))

for r in $(seq $R); do
  iperf3 -s -1 -p $IPORT -B 127.0.0.1 >/dev/null 2>&1 &
  sleep 0.3
  ip=$(iperf3 -c 127.0.0.1 -p $IPORT -t 3 -J | python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8e6))")
  wait
  echo "round $r iperf3 $ip"
  for mode in piped copy; do
    W=$(mktemp -d /tmp/sq.XXXX); mkdir -p $W/e $W/s
    PORT=$((20000 + RANDOM % 20000)); env=
    [ $mode = copy ] && env=TXNFS_NO_PIPED_READS=1
    env $env $B serve $W/e --listen 127.0.0.1:$PORT --state-dir $W/s --no-grace --no-rpcbind >$W/server.log 2>&1 &
    SP=$!
    for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
    for d in $DEPTHS; do
      $B bench run --target nfs://127.0.0.1:$PORT/ --server-pid $SP --out $W/o$d $WL --threads 1 --duration 5 --set depth=$d -q >$W/b$d.log 2>&1 || { echo FAILED; tail -3 $W/b$d.log; }
      python3 - "$W/o$d" "$ip" "$mode" "$d" <<'PY'
import glob, json, sys
o, ip, label, d = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
x = json.load(open(glob.glob(o + '/*.json')[0]))['repeats'][0]
print('  depth %s %-6s %6.0f MB/s (%3.0f %%)  client %4.0f us %.2f ctx  server %4.0f us %.2f ctx per op' % (
    d, label, x['mb_per_s'], 100 * x['mb_per_s'] / ip, x['client']['cpu_us_per_op'],
    x['client']['ctx_switches_per_op'], x['server']['cpu_us_per_op'], x['server']['ctx_switches_per_op']))
PY
    done
    kill $SP; wait $SP 2>/dev/null; rm -rf $W
  done
done
