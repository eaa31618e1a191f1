#!/usr/bin/env bash
# User-space instructions the server spends per op (ADR 0064 addendum), counted by
# callgrind, so that a change of a few per cent shows where wall-clock CPU time on this
# shared machine moves by more than that between runs. The server runs under
# `valgrind --tool=callgrind`; the client (`txnfs bench run WORKLOAD --batch none`) runs
# N ops, then N again, then 2N, with a dump after each: (third - second) / N is the
# cost of N ops, the set-up of a run cancelling out. Valgrind hides SHA-NI, so SHA-256
# is counted as software; the figure without it is printed too.
#   cargo build --release -p txnfs-cli && apt-get install -y valgrind && \
#     scripts/count-instructions.sh randread 5000 --threads 16
set -u
cd "$(dirname "$0")/.."
B=${BIN:-$PWD/target/release/txnfs}
C=${CLIENT:-$B}
[ -x "$B" ] || { echo "no $B: cargo build --release -p txnfs-cli" >&2; exit 1; }
command -v callgrind_control >/dev/null || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
WL=$1; N=$2; shift 2
W=$(mktemp -d /tmp/count.XXXX); mkdir -p "$W/e" "$W/s"
PORT=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$W/cg.%p" "$B" serve "$W/e" \
  --listen 127.0.0.1:$PORT --state-dir "$W/s" --no-grace --no-rpcbind >"$W/server.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null; wait $SP 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 300); do (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.2; done
run() {
  local n=$1; shift
  "$C" bench run --target nfs://127.0.0.1:$PORT/ --out "$W/o" "$WL" -q --batch none --ops "$n" "$@" \
    >>"$W/bench.log" 2>&1 || { echo "bench failed:" >&2; tail -3 "$W/bench.log" >&2; exit 1; }
}
# Instructions since the last dump: all, and SHA-256's.
dump() {
  callgrind_control -d $SP >/dev/null 2>&1; sleep 1
  local f; f=$(ls -t "$W"/cg.* | head -1)
  callgrind_annotate --threshold=100 --auto=no "$f" 2>/dev/null | awk '
    /PROGRAM TOTALS/ { gsub(/,/, "", $1); total = $1 }
    /sha2::sha256::/ && !/[<>]/ { gsub(/,/, "", $1); sha += $1 }
    END { print total + 0, sha + 0 }'
}
extra=("$@")
run "$N" "${extra[@]}"; dump >/dev/null
run "$N" "${extra[@]}"; read -r a asha < <(dump)
run $((2 * N)) "${extra[@]}"; read -r b bsha < <(dump)
echo "$WL: $(( (b - a) / N )) instructions per op, $(( (b - bsha - a + asha) / N )) without SHA-256"
