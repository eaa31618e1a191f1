#!/usr/bin/env bash
# One stream of 1 MiB requests against loopback TCP (ADR 0063): one release server;
# per round iperf3 (one stream, 4 s), then per depth each benchmark client in turn,
# 6 s each (`txnfs bench run WORKLOAD --threads 1 --set depth=N`). Prints MB/s, the
# share of that round's iperf3, and client and server CPU µs and context switches per
# request.
#   cargo build --release -p txnfs-cli && \
#     scripts/measure-seq-clients.sh OUT ROUNDS seqwrite|seqread "1 2 4" LABEL=BENCH_BIN ...
# A client given as LABEL=BIN:nolowat runs with TXNFS_NO_RCVLOWAT=1 (no client-side
# low-water mark). Example (the client of main before a change, saved, against now):
#   cp target/release/txnfs-bench /tmp/bench-old   # before the change
#   scripts/measure-seq-clients.sh /tmp/seq 3 seqread "1 2 4" old=/tmp/bench-old new=target/release/txnfs-bench
set -u
cd "$(dirname "$0")/.."
B=${BIN:-$PWD/target/release/txnfs}
[ -x "$B" ] || { echo "no $B: cargo build --release -p txnfs-cli" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 is needed: apt-get install -y iperf3" >&2; exit 1; }
O=$1; R=$2; WL=$3; DEPTHS=$4; shift 4
rm -rf $O; mkdir -p $O
W=$(mktemp -d /tmp/seq.XXXXXX)
SP=
trap '[ -n "$SP" ] && kill $SP 2>/dev/null; rm -rf "$W"' EXIT
PORT=$((20000 + RANDOM % 20000)); IPORT=$((PORT + 1))
mkdir -p $W/e $W/s
$B serve $W/e --listen 127.0.0.1:$PORT --state-dir $W/s --no-grace --no-rpcbind >$O/server.log 2>&1 &
SP=$!
for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
for r in $(seq $R); do
  iperf3 -s -1 -p $IPORT -B 127.0.0.1 >/dev/null 2>&1 &
  IP=$!
  sleep 0.3
  ip=$(iperf3 -c 127.0.0.1 -p $IPORT -t 4 -J | python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/8e6))")
  wait $IP
  echo "round $r: iperf3 $ip MB/s"
  for d in $DEPTHS; do
    for spec in "$@"; do
      label=${spec%%=*}; bin=${spec#*=}; env=
      case $bin in *:nolowat) bin=${bin%:nolowat}; env=TXNFS_NO_RCVLOWAT=1;; esac
      o=$O/$label-d$d-$r
      env $env TXNFS_BENCH_BIN=$bin $B bench run --target nfs://127.0.0.1:$PORT/ --server-pid $SP --out $o $WL --threads 1 --duration 6 --set depth=$d -q >$o.log 2>&1 || echo "FAILED $label d$d"
      python3 - "$o" "$ip" "$label" "$d" <<'PY'
import glob, json, sys
o, ip, label, d = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
x = json.load(open(glob.glob(o + '/*.json')[0]))['repeats'][0]
print('  depth %s %-8s %6.0f MB/s (%3.0f %%)  client %4.0f us %.2f ctx  server %4.0f us %.2f ctx per op' % (
    d, label, x['mb_per_s'], 100 * x['mb_per_s'] / ip, x['client']['cpu_us_per_op'],
    x['client']['ctx_switches_per_op'], x['server']['cpu_us_per_op'], x['server']['ctx_switches_per_op']))
PY
    done
  done
done
