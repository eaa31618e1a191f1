#!/usr/bin/env bash
# Writer latency against short-lived readers (issue 22): `txnfs serve` of a scratch
# directory (default recall wait, 15 s), one 6 KB file, N shell loops of `txnfs cat`
# of it, and one loop of `txnfs cp` overwriting it. Prints, per N, the number of
# writes and the writer's p50 / p99 / max latency (whole `txnfs cp` process), the
# readers' max latency (a reader can be the one held, for the writer's delegation), and
# the server's lines about revoked delegations (and its counters, where it logs them).
#
#   scripts/deleg-tail.sh [TXNFS_BINARY] [READERS...]
#   e.g. scripts/deleg-tail.sh target/release/txnfs 0 3 16
#
# Environment: SECONDS_PER_RUN (default 40), MAX_WRITES (default 200), KEEP=1 keeps the
# scratch directories (server log, latencies). SERVER=ganesha runs the same loops (the
# same txnfs client) against NFS-Ganesha with delegations on (`txnfs bench ganesha-conf
# --delegations`; its recall wait is its own), for the comparison issue 22 asks for.
set -euo pipefail
BIN=$(realpath "${1:-target/release/txnfs}")
shift || true
if [ $# -gt 0 ]; then READERS=("$@"); else READERS=(0 3 16); fi
RUN=${SECONDS_PER_RUN:-40}
SERVER=${SERVER:-txnfs}
MAX=${MAX_WRITES:-200}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

one_run() {
  local n=$1 dir port url srv pids=() lat
  dir=$(mktemp -d)
  port=$(free_port)
  mkdir -p "$dir/export" "$dir/state"
  if [ "$SERVER" = ganesha ]; then
    "$BIN" bench ganesha-conf --port "$port" --export "$dir/export" \
      --recovery-root "$dir/state" --delegations >"$dir/ganesha.conf"
    # Ganesha uses fixed paths (/var/run/ganesha): one at a time on this machine
    exec 9>/tmp/txnfs-ganesha.lock
    flock 9
    ganesha.nfsd -F -L "$dir/serve.log" -f "$dir/ganesha.conf" -p "$dir/ganesha.pid" \
      >>"$dir/serve.log" 2>&1 &
    srv=$!
    url="nfs://127.0.0.1:$port/export/f"
  else
    TXNFS_LOG=info "$BIN" serve --listen "127.0.0.1:$port" --no-grace --no-rpcbind \
      --state-dir "$dir/state" "$dir/export" 2>"$dir/serve.log" >/dev/null &
    srv=$!
    url="nfs://127.0.0.1:$port/f"
  fi
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
  done
  sleep 1
  head -c 6000 /dev/zero | tr '\0' x >"$dir/src"
  "$BIN" cp "$dir/src" "$url"
  for _ in $(seq "$n"); do
    (while :; do
      r0=$(date +%s%N)
      "$BIN" cat "$url" >/dev/null 2>>"$dir/readers.err" || true
      echo $((($(date +%s%N) - r0) / 1000)) >>"$dir/readers.lat"
    done) &
    pids+=($!)
  done
  sleep 1
  lat="$dir/lat"
  local end=$((SECONDS + RUN)) w=0
  while [ $SECONDS -lt $end ] && [ $w -lt "$MAX" ]; do
    local t0 t1
    t0=$(date +%s%N)
    "$BIN" cp "$dir/src" "$url"
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000)) >>"$lat"
    w=$((w + 1))
  done
  # The loops stop; a `txnfs cat` running in one ends by itself.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ ${#pids[@]} -gt 0 ] && { wait "${pids[@]}" 2>/dev/null || true; }
  sleep 0.5
  kill -TERM "$srv"
  wait "$srv" 2>/dev/null || true
  [ "$SERVER" = ganesha ] && exec 9>&-
  sort -n "$lat" | awk -v n="$n" -v server="$SERVER" '
    { v[NR] = $1 }
    END {
      p50 = v[int((NR - 1) * 0.50) + 1]; p99 = v[int((NR - 1) * 0.99) + 1];
      printf "%s readers %2d: %4d writes  p50 %8.1f ms  p99 %8.1f ms  max %8.1f ms\n",
        server, n, NR, p50 / 1000, p99 / 1000, v[NR] / 1000
    }'
  [ -s "$dir/readers.lat" ] && sort -n "$dir/readers.lat" | awk '
    { v[NR] = $1 }
    END { printf "            reads %d: p50 %.1f ms, max %.1f ms\n", NR, v[int((NR - 1) / 2) + 1] / 1000, v[NR] / 1000 }'
  sed 's/\x1b\[[0-9;]*m//g' "$dir/serve.log" |
    awk '/revoked: not returned in time/ { t++ } /revoked: holder unreachable/ { u++ }
         /delegation counters/ { sub(/.*delegation counters /, ""); c = $0 }
         END { printf "            revoked: timeout %d, unreachable %d%s\n", t, u,
               c ? "\n            counters: " c : "" }'
  if [ "${KEEP:-0}" = 1 ]; then echo "            kept $dir"; else rm -rf "$dir"; fi
}

for n in "${READERS[@]}"; do
  one_run "$n"
done
