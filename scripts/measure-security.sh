#!/usr/bin/env bash
# Issue 20's release measurements in one run: what each security flavour costs against
# AUTH_SYS, and what the unprivileged handle table costs against kernel handles.
#   1. flavours: one server with TLS (a test CA's certificate) and Kerberos (a private
#      KDC, `txnfs-testbed security`), an export admitting sys, krb5, krb5i and krb5p;
#      per round, in turn: sys, tls, krb5, krb5i, krb5p, each randread 4 KiB with 16
#      threads and seqread 1 MiB with one thread, 5 s;
#   2. handles: a server with --handles kernel, then one with --handles table,
#      alternating, each round: randread 4 KiB (16 threads), seqread 1 MiB, create and
#      getattr, 5 s.
# Prints the medians per case (ops/s, MB/s, server and client CPU µs and context
# switches per request, p50/p99 µs) and each flavour's and the table's ratio to its
# baseline.
#   cargo build --release -p txnfs-cli && \
#   cargo build --release -p txnfs-testbed --features certs --bin txnfs-testbed && \
#   scripts/measure-security.sh [OUT] [ROUNDS]
# Needs the KDC packages (krb5-kdc krb5-admin-server krb5-user) and libgssapi-krb5-2.
# BIN overrides the txnfs binary (default target/release/txnfs, txnfs-testbed beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/txnfs}
TESTBED=$(dirname "$BIN")/txnfs-testbed
OUT=${1:-/tmp/measure-security}
ROUNDS=${2:-3}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p txnfs-cli" >&2; exit 1; }
[ -x "$TESTBED" ] || { echo "no $TESTBED: cargo build --release -p txnfs-testbed --features certs --bin txnfs-testbed" >&2; exit 1; }
rm -rf "$OUT"; mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/measure-security.XXXXXX)
SPID= KDC_PID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null; [ -n "$KDC_PID" ] && kill $KDC_PID 2>/dev/null; rm -rf "$WORK"' EXIT
"$TESTBED" security "$WORK/sec" >"$WORK/sec.env"
. "$WORK/sec.env"
PORT=$((20000 + RANDOM % 20000))
start() { # serve ARGS...: a server on a fresh export
  PORT=$((PORT + 1))
  rm -rf "$WORK/export" "$WORK/state"; mkdir -p "$WORK/export" "$WORK/state"
  "$BIN" serve "$WORK/export" --listen 127.0.0.1:$PORT --state-dir "$WORK/state" \
    --no-grace --no-rpcbind "$@" >>"$OUT/server.log" 2>&1 &
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
flavour_args() { # FLAVOUR: the bench's client flags
  case $1 in
    sys) ;;
    tls) echo --tls --tls-ca "$TLS_CA" ;;
    *) echo --sec "$1" ;;
  esac
}
echo "security flavours"
for _ in $(seq "$ROUNDS"); do
  start --client '127.0.0.1(rw,no_root_squash,sec=sys:krb5:krb5i:krb5p)' \
    --tls-cert "$TLS_CERT" --tls-key "$TLS_KEY" --keytab "$KEYTAB" --gss-map "$GSS_MAP"
  for f in sys tls krb5 krb5i krb5p; do
    # shellcheck disable=SC2046 # the flags split on purpose
    bench "sec-randread-$f" randread --threads 16 --duration 5 $(flavour_args $f)
    # shellcheck disable=SC2046
    bench "sec-seqread-$f" seqread --io-size 1M --duration 5 $(flavour_args $f)
  done
  stop
done
echo "handles: kernel against table"
for _ in $(seq "$ROUNDS"); do
  for h in kernel table; do
    start --handles $h
    bench "handles-randread-$h" randread --threads 16 --duration 5
    bench "handles-seqread-$h" seqread --io-size 1M --duration 5
    bench "handles-create-$h" create --duration 5
    bench "handles-getattr-$h" getattr --duration 5
    stop
  done
done
python3 - "$OUT" <<'PY'
import json, glob, os, statistics, sys
out = sys.argv[1]
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")
cases = {}
print(f"{'case':24} {'n':>2} {'ops/s':>9} {'MB/s':>8} {'srv µs':>7} {'srv ctx':>7} {'cli µs':>7} {'p50':>8} {'p99':>8} {'vs base':>7}")
for d in sorted(os.listdir(out)):
    files = sorted(glob.glob(os.path.join(out, d, "*.json")))
    if not files:
        continue
    rows = []
    for f in files:
        r = json.load(open(f))["repeats"][0]
        lat = r["latency_us"]
        kind = next((k for k in ("READ", "WRITE", "GETATTR") if k in lat), next(iter(lat)))
        srv, cli = r.get("server") or {}, r.get("client") or {}
        rows.append((r["ops_per_s"], r["mb_per_s"], srv.get("cpu_us_per_op"), srv.get("ctx_switches_per_op"),
                     cli.get("cpu_us_per_op"), lat[kind]["p50"], lat[kind]["p99"]))
    cases[d] = (len(rows), [med([x[i] for x in rows]) for i in range(7)])
for d, (n, c) in cases.items():
    base = d.rsplit("-", 1)[0] + ("-kernel" if d.startswith("handles-") else "-sys")
    ratio = c[0] / cases[base][1][0] if base in cases and cases[base][1][0] else float("nan")
    print(f"{d:24} {n:2} {c[0]:9.0f} {c[1]:8.1f} {c[2]:7.1f} {c[3]:7.2f} {c[4]:7.1f} {c[5]:8.1f} {c[6]:8.1f} {ratio:7.2f}")
PY
