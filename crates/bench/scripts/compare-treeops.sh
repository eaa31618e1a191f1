#!/usr/bin/env bash
# cp -R / ls -lR / rm -r of a generated tree of small files on txnfs, through
# a user-space delay proxy (crates/bench, binary treeops), with the txnfs
# vectorized client and with nfs-rs one call at a time, at 0 ms and at
# DELAY_MS each way.
#
# Builds release binaries, starts txnfs (local backend on a temporary
# directory, --no-grace, 127.0.0.1, free port), runs treeops, prints the
# table, and stops txnfs by PID on exit.
#
# nfs-rs one call at a time needs >= 2 x DELAY_MS per RPC and ~5 RPCs per
# file, so at DELAY_MS it runs on NFSRS_DELAY_FILES files (default 1000) and
# treeops reports its figures also scaled to FILES (labelled extrapolated).
# Set NFSRS_DELAY_FILES=$FILES to run it in full.
#
# Environment:
#   FILES=5000 DELAY_MS=10 NFSRS_DELAY_FILES=1000 FILES_PER_DIR=100 SEED=1
#   OUT=<target>/bench/compare-treeops.json   JSON results
#   BENCH_TMP=/tmp   where the temporary export and the local tree live
#   KEEP=1           keep the temporary directory (log, export)
#   SKIP_BUILD=1     do not run cargo build (use the binaries already built)
#   TXNFS_BIN        txnfs binary (default <target>/release/txnfs)
#   TXNFS_LOG        passed to txnfs (unset: the binary's default)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FILES="${FILES:-5000}"
DELAY_MS="${DELAY_MS:-10}"
NFSRS_DELAY_FILES="${NFSRS_DELAY_FILES:-1000}"
FILES_PER_DIR="${FILES_PER_DIR:-100}"
SEED="${SEED:-1}"
OUT="${OUT:-$CARGO_TARGET_DIR/bench/compare-treeops.json}"

if [ -n "${SKIP_BUILD:-}" ]; then
    echo "== SKIP_BUILD set: using the existing binaries" >&2
else
    echo "== building release binaries (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)" >&2
    (cd "$ROOT" && cargo build --release -p txnfs-cli && cargo build --release -p txnfs-bench --bin treeops)
fi
TXNFS="${TXNFS_BIN:-$CARGO_TARGET_DIR/release/txnfs}"
TREEOPS="$CARGO_TARGET_DIR/release/treeops"
for bin in "$TXNFS" "$TREEOPS"; do
    [ -x "$bin" ] || { echo "missing binary $bin" >&2; exit 1; }
done

WORK="$(mktemp -d -p "${BENCH_TMP:-/tmp}" txnfs-treeops.XXXXXX)"
mkdir -p "$WORK/export" "$WORK/state" "$WORK/src" "$(dirname "$OUT")"

TXNFS_PID=""
STATUS=1

cleanup() {
    local rc=$?
    if [ -n "$TXNFS_PID" ]; then
        if kill -0 "$TXNFS_PID" 2>/dev/null; then
            kill -TERM "$TXNFS_PID" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$TXNFS_PID" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$TXNFS_PID" 2>/dev/null; then
                echo "txnfs (pid $TXNFS_PID) ignored SIGTERM; sending SIGKILL" >&2
                kill -KILL "$TXNFS_PID" 2>/dev/null || true
            fi
        else
            echo "txnfs (pid $TXNFS_PID) was no longer running at the end" >&2
        fi
        wait "$TXNFS_PID" 2>/dev/null || true
    fi
    if [ "$STATUS" -ne 0 ] || [ "$rc" -ne 0 ]; then
        echo "---- txnfs log tail ($WORK/server.log) ----" >&2
        tail -n 30 "$WORK/server.log" >&2 2>/dev/null || true
    fi
    if [ -n "${KEEP:-}" ]; then
        echo "kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

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

PORT="$(free_port)"
echo "== starting txnfs on 127.0.0.1:$PORT (export $WORK/export)" >&2
NO_COLOR=1 "$TXNFS" serve --listen "127.0.0.1:$PORT" --no-grace \
    --state-dir "$WORK/state" "$WORK/export" \
    </dev/null >"$WORK/server.log" 2>&1 &
TXNFS_PID=$!

for _ in $(seq 200); do
    kill -0 "$TXNFS_PID" 2>/dev/null || { echo "txnfs exited during start-up" >&2; exit 1; }
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        break
    fi
    sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || {
    echo "txnfs did not accept on 127.0.0.1:$PORT within 20 s" >&2
    exit 1
}

echo "== export on $(df -P "$WORK" | awk 'NR==2 {print $1 " (" $6 ")"}'); $(nproc) CPUs; txnfs pid $TXNFS_PID" >&2

set +e
"$TREEOPS" --server "127.0.0.1:$PORT" --export-dir "$WORK/export" --local-dir "$WORK/src" \
    --files "$FILES" --files-per-dir "$FILES_PER_DIR" --seed "$SEED" \
    --run "txnfs:0" --run "nfsrs:0" \
    --run "txnfs:$DELAY_MS" --run "nfsrs:$DELAY_MS:$NFSRS_DELAY_FILES" \
    --out "$OUT"
STATUS=$?
set -e
if [ "$STATUS" -ne 0 ]; then
    echo "treeops exited with status $STATUS" >&2
fi
exit "$STATUS"
