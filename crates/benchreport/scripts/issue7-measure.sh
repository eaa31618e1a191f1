#!/usr/bin/env bash
# The measurements of issue 7's closing note (the core redesign), all in one invocation:
#   1. no regression: the GETATTR and 4 KB READ loops (nfs-rs, one call at a time) and
#      `bench compare randread create`, for the txnfs before the redesign (BEFORE_REV,
#      built in a worktree), the txnfs of this checkout and NFS-Ganesha, side by side;
#   2. contention: create with 256 threads and 256 slots at 10 ms, three repeats each,
#      txnfs vs Ganesha, and create with 16 threads at 0 ms (CLOSE latency).
# The servers' exports live on an XFS loop image (root and a free loop device needed), so
# that the figures are about the servers: this machine's root file system is ext4 without
# a journal, where each create after a mass delete scans every recently deleted inode
# (ADR 0013). WORK_FS=tmp keeps them in $TMPDIR instead.
# Output: one report per part under $OUT (default /tmp/txnfs-issue7).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/txnfs-issue7}"
DUR="${DUR:-5}"
REPEAT="${REPEAT:-3}"
BEFORE_REV="${BEFORE_REV:-bc80ea1}"
WORK_FS="${WORK_FS:-xfs}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$OUT"

cargo build --release -q --bin txnfs --bin txnfs-bench --manifest-path "$ROOT/Cargo.toml"
TXNFS="$CARGO_TARGET_DIR/release/txnfs"

# The server as it was before the redesign, built once in its own worktree.
BEFORE_DIR="${BEFORE_DIR:-$OUT/before-src}"
BEFORE_TARGET="${BEFORE_TARGET:-$OUT/before-target}"
if [ ! -d "$BEFORE_DIR" ]; then
  git -C "$ROOT" worktree add --detach "$BEFORE_DIR" "$BEFORE_REV"
fi
CARGO_TARGET_DIR="$BEFORE_TARGET" cargo build --release -q -p txnfs-cli \
  --manifest-path "$BEFORE_DIR/Cargo.toml"
BEFORE="$BEFORE_TARGET/release/txnfs"

MNT=
cleanup() {
  if [ -n "$MNT" ]; then
    umount "$MNT" 2> /dev/null || true
  fi
}
trap cleanup EXIT
if [ "$WORK_FS" = xfs ]; then
  command -v mkfs.xfs > /dev/null || apt-get install -y -qq xfsprogs > /dev/null
  IMG="$OUT/exports.xfs"
  MNT="$OUT/exports"
  mkdir -p "$MNT"
  truncate -s 8G "$IMG"
  mkfs.xfs -q -f "$IMG"
  mount -o loop "$IMG" "$MNT"
  export TMPDIR="$MNT"
fi

compare() { # compare OUTDIR SERVERS TXNFS_BIN ARGS...
  local dir="$1" servers="$2" bin="$3"
  shift 3
  "$TXNFS" bench compare --servers "$servers" --txnfs-bin "$bin" --out "$dir" "$@"
}

# 1. Before and after, same invocation; the report puts all three side by side.
for part in loops:"getattr randread":"--driver nfs-rs" ours:"randread create":""; do
  name="${part%%:*}" rest="${part#*:}"
  workloads="${rest%%:*}" extra="${rest#*:}"
  # shellcheck disable=SC2086  # word splitting of the lists is intended
  compare "$OUT/$name-after" txnfs,ganesha "$TXNFS" $workloads --repeat "$REPEAT" \
    -- --duration "$DUR" $extra
  # shellcheck disable=SC2086
  compare "$OUT/$name-before" txnfs "$BEFORE" $workloads --repeat "$REPEAT" \
    -- --duration "$DUR" $extra
  # One report of the three: the before runs relabelled "txnfs-before".
  mkdir -p "$OUT/$name/results"
  find "$OUT/$name-after/runs" -name '*.json' -exec cp {} "$OUT/$name/results/" \;
  find "$OUT/$name-before/runs" -name '*.json' | while read -r f; do
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["server"]="txnfs-before"; json.dump(d,open(sys.argv[2],"w"))' \
      "$f" "$OUT/$name/results/before-$(basename "$f")"
  done
  "$TXNFS" bench compare --baseline ganesha --out "$OUT/$name" \
    --from-results "$OUT/$name"/results/*.json
done

# 2. Contention.
compare "$OUT/create-256" txnfs,ganesha "$TXNFS" create --delay-ms 10 --repeat "$REPEAT" \
  -- --threads 256 --slots 256 --duration 6
compare "$OUT/create-16" txnfs,ganesha "$TXNFS" create --repeat "$REPEAT" \
  -- --threads 16 --duration "$DUR"
echo "reports: $OUT/*/report.md"
