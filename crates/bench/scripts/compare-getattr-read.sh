#!/usr/bin/env bash
# Compare txnfs with NFS-Ganesha (FSAL VFS) on single-threaded GETATTR and
# 4 KiB READ loops driven by nfs-rs (crates/bench, binary opsloop).
#
# Builds release binaries, starts both servers on free loopback ports with
# fresh exports in one temporary directory (so both are on the same disk),
# runs opsloop against both in one invocation (servers alternating per
# repeat), prints medians and txnfs/ganesha ratios, and stops both servers
# by PID on exit.
#
# Environment:
#   ITERS=20000 WARMUP=1000 REPEAT=5 OPS=getattr,read,read0
#   OUT=<target>/bench/compare-getattr-read.json   JSON results
#   BENCH_TMP=/tmp   where the temporary exports live
#   KEEP=1           keep the temporary directory (logs, exports)
#   TXNFS_LOG        passed to txnfs (unset: the binary's default)
#   SKIP_BUILD=1     do not run cargo build (use the binaries already built)
#   TXNFS_BIN        txnfs binary (default <target>/release/txnfs)
#   GANESHA_PNFS=1   keep Ganesha's default pNFS MDS flag (nfs-rs then sends
#                    a failing LAYOUTGET before every READ to Ganesha)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
ITERS="${ITERS:-20000}"
WARMUP="${WARMUP:-1000}"
REPEAT="${REPEAT:-5}"
OPS="${OPS:-getattr,read,read0}"
OUT="${OUT:-$CARGO_TARGET_DIR/bench/compare-getattr-read.json}"

command -v ganesha.nfsd >/dev/null || {
    echo "ganesha.nfsd not found (Debian: apt-get install nfs-ganesha nfs-ganesha-vfs)" >&2
    exit 1
}

if [ -n "${SKIP_BUILD:-}" ]; then
    echo "== SKIP_BUILD set: using the existing binaries" >&2
else
    echo "== building release binaries (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)" >&2
    (cd "$ROOT" && cargo build --release -p txnfs-cli -p txnfs-bench)
fi
TXNFS="${TXNFS_BIN:-$CARGO_TARGET_DIR/release/txnfs}"
OPSLOOP="$CARGO_TARGET_DIR/release/opsloop"
for bin in "$TXNFS" "$OPSLOOP"; do
    [ -x "$bin" ] || { echo "missing binary $bin" >&2; exit 1; }
done

WORK="$(mktemp -d -p "${BENCH_TMP:-/tmp}" txnfs-bench.XXXXXX)"
mkdir -p "$WORK/txnfs/export" "$WORK/txnfs/state" \
    "$WORK/ganesha/export" "$WORK/ganesha/state" "$(dirname "$OUT")"

TXNFS_PID=""
GANESHA_PID=""
STATUS=1

log_tails() {
    echo "---- txnfs log tail ($WORK/txnfs/server.log) ----" >&2
    tail -n 30 "$WORK/txnfs/server.log" >&2 2>/dev/null || true
    echo "---- ganesha log tail ($WORK/ganesha/server.log) ----" >&2
    tail -n 30 "$WORK/ganesha/server.log" >&2 2>/dev/null || true
}

stop() {
    local name="$1" pid="$2"
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "$name (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    else
        echo "$name (pid $pid) was no longer running at the end" >&2
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    stop txnfs "$TXNFS_PID"
    stop ganesha "$GANESHA_PID"
    if [ "$STATUS" -ne 0 ] || [ "$rc" -ne 0 ]; then
        log_tails
    fi
    if [ -n "${KEEP:-}" ]; then
        echo "kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# A port nobody listens on (the server binding it is checked below).
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    echo "no free port found" >&2
    return 1
}

# wait_ready NAME PID PORT: until the server accepts TCP connections.
wait_ready() {
    local name="$1" pid="$2" port="$3"
    for _ in $(seq 200); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name (pid $pid) exited during start-up" >&2
            return 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not accept on 127.0.0.1:$port within 20 s" >&2
    return 1
}

TXNFS_PORT="$(free_port)"
GANESHA_PORT="$(free_port)"
while [ "$GANESHA_PORT" = "$TXNFS_PORT" ]; do GANESHA_PORT="$(free_port)"; done

echo "== starting txnfs on 127.0.0.1:$TXNFS_PORT (export $WORK/txnfs/export)" >&2
NO_COLOR=1 "$TXNFS" serve --listen "127.0.0.1:$TXNFS_PORT" --no-grace \
    --state-dir "$WORK/txnfs/state" "$WORK/txnfs/export" \
    </dev/null >"$WORK/txnfs/server.log" 2>&1 &
TXNFS_PID=$!

# Ganesha advertises a pNFS MDS by default (EXCHANGE_ID flag USE_PNFS_MDS)
# even though FSAL VFS hands out no layouts; nfs-rs then sends a LAYOUTGET
# before every READ (it does not remember the failure), doubling the round
# trips. Turn that off unless GANESHA_PNFS=1 asks for Ganesha's default.
if [ "${GANESHA_PNFS:-0}" = 1 ]; then
    GANESHA_PNFS_CONF=""
else
    GANESHA_PNFS_CONF="    PNFS_MDS = false;
    PNFS_DS = false;
"
fi
cat >"$WORK/ganesha/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    Bind_addr = 127.0.0.1;
    NFS_Port = $GANESHA_PORT;
    Protocols = 4;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}
NFSv4 {
    Graceless = true;
    Minor_Versions = 1, 2;
    RecoveryRoot = $WORK/ganesha/state;
    Only_Numeric_Owners = true;
$GANESHA_PNFS_CONF}
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = $WORK/ganesha/export;
    Pseudo = /export;
    Access_Type = RW;
    Squash = No_Root_Squash;
    Protocols = 4;
    Transports = TCP;
    SecType = sys;
    FSAL { Name = VFS; }
}
EOF
echo "== starting ganesha on 127.0.0.1:$GANESHA_PORT (export $WORK/ganesha/export)" >&2
ganesha.nfsd -F -L "$WORK/ganesha/server.log" -f "$WORK/ganesha/ganesha.conf" \
    -p "$WORK/ganesha/ganesha.pid" </dev/null >>"$WORK/ganesha/server.log" 2>&1 &
GANESHA_PID=$!

wait_ready txnfs "$TXNFS_PID" "$TXNFS_PORT"
wait_ready ganesha "$GANESHA_PID" "$GANESHA_PORT"
# Let both finish start-up work before the idle RSS reading.
sleep 2

echo "== exports on: $(df -P "$WORK" | awk 'NR==2 {print $1 " (" $6 ")"}'); $(nproc) CPUs" >&2
echo "== txnfs $($TXNFS --version 2>/dev/null || echo '?') pid $TXNFS_PID; $(ganesha.nfsd -v 2>&1 | head -n1) pid $GANESHA_PID" >&2

set +e
"$OPSLOOP" \
    --name txnfs --url "nfs://127.0.0.1:$TXNFS_PORT/" --server-pid "$TXNFS_PID" \
    --name ganesha --url "nfs://127.0.0.1:$GANESHA_PORT/export" --server-pid "$GANESHA_PID" \
    --baseline ganesha --iters "$ITERS" --warmup "$WARMUP" --repeat "$REPEAT" --ops "$OPS" \
    --out "$OUT"
STATUS=$?
set -e
if [ "$STATUS" -ne 0 ]; then
    echo "opsloop exited with status $STATUS" >&2
fi
exit "$STATUS"
