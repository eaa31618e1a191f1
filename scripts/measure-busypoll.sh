#!/usr/bin/env bash
# Busy polling A/B (ADR 0057 addendum, stop 24): a server with --busy-poll-us 0 and
# one with 50, alternating, ROUNDS rounds of 5 s: randread 4 KiB with 1, 4, 16 and 64
# threads, getattr with one, seqwrite and seqread 1 MiB with one. Prints the medians
# per case (ops/s, server CPU µs and context switches per request, client CPU µs,
# p50/p99 µs) and the ratio to spinning off.
#   cargo build --release -p txnfs-cli && scripts/measure-busypoll.sh [OUT] [ROUNDS]
# BIN overrides the txnfs binary (default target/release/txnfs).
set -u
cd "$(dirname "$0")/.."
B=${BIN:-$PWD/target/release/txnfs}
[ -x "$B" ] || { echo "no $B: cargo build --release -p txnfs-cli" >&2; exit 1; }
O=${1:-/tmp/measure-busypoll}; R=${2:-3}
rm -rf $O; mkdir -p $O
W=$(mktemp -d /tmp/bp.XXXXXX)
SP=
trap '[ -n "$SP" ] && kill $SP 2>/dev/null; rm -rf "$W"' EXIT
PORT=$((20000 + RANDOM % 20000))
run() { # LABEL POLL ARGS...
  local label=$1 poll=$2; shift 2
  rm -rf $W/e $W/s; mkdir -p $W/e $W/s
  $B serve $W/e --listen 127.0.0.1:$PORT --state-dir $W/s --no-grace --no-rpcbind --busy-poll-us $poll >>$O/server.log 2>&1 &
  SP=$!
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
  mkdir -p $O/$label-p$poll
  $B bench run "$@" --target nfs://127.0.0.1:$PORT/ --server-pid $SP --out $O/$label-p$poll -q >>$O/$label-p$poll/stdout 2>&1 || echo "FAILED $label"
  kill $SP; wait $SP 2>/dev/null; SP=
}
for _ in $(seq $R); do
  for poll in 0 50; do
    for t in 1 4 16 64; do run randread$t $poll randread --threads $t --duration 5; done
    run getattr1 $poll getattr --duration 5
    run seqwrite1 $poll seqwrite --io-size 1M --duration 5
    run seqread1 $poll seqread --io-size 1M --duration 5
  done
done
python3 - $O <<'PY'
import json, glob, os, statistics, sys
out=sys.argv[1]
def med(xs):
    xs=[x for x in xs if x is not None]; return statistics.median(xs) if xs else float('nan')
rows={}
for d in sorted(os.listdir(out)):
    fs=glob.glob(os.path.join(out,d,'*.json'))
    if not fs: continue
    v=[]
    for f in fs:
        r=json.load(open(f))['repeats'][0]; lat=r['latency_us']
        k=next((k for k in ('READ','WRITE','GETATTR') if k in lat), next(iter(lat)))
        s=r.get('server') or {}; c=r.get('client') or {}
        v.append((r['ops_per_s'], s.get('cpu_us_per_op'), s.get('ctx_switches_per_op'), c.get('cpu_us_per_op'), lat[k]['p50'], lat[k]['p99']))
    rows[d]=(len(v),[med([x[i] for x in v]) for i in range(6)])
print(f"{'case':18} {'n':>2} {'ops/s':>9} {'srv µs':>7} {'srv ctx':>7} {'cli µs':>7} {'p50':>7} {'p99':>7} {'vs p0':>6}")
for d,(n,c) in rows.items():
    base=rows.get(d.rsplit('-p',1)[0]+'-p0')
    ratio=c[0]/base[1][0] if base else float('nan')
    print(f"{d:18} {n:2} {c[0]:9.0f} {c[1]:7.1f} {c[2]:7.2f} {c[3]:7.1f} {c[4]:7.1f} {c[5]:7.1f} {ratio:6.2f}")
PY
