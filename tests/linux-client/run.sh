#!/bin/bash
# End-to-end test: the real Linux NFSv4.1 client (Debian kernel in a QEMU/TCG guest) against
# an NFS server on this host (127.0.0.1 only).  See README.md in this directory.
#
# usage: tests/linux-client/run.sh --server txnfs|ganesha [--bin PATH_TO_txnfs] [--keep]
#   --server txnfs    $BIN serve --listen 127.0.0.1:$PORT --no-grace --state-dir $W/state $EXPORT
#                     (default BIN: <repo>/target/debug/txnfs), guest mounts 10.0.2.100:/
#   --server ganesha  ganesha.nfsd with the shared config of `$BIN bench ganesha-conf`
#                     (export Pseudo=/export), mounts /export
#   --keep            keep the run directory (export, capture, logs) even when everything passed
# env: WORK (cache + run dirs, default /tmp/txnfs-vm; run dirs older than 3 h are deleted),
#      TIMEOUT (VM seconds, default 600), TXNFS_LOG (server log filter, default info)
# Exit status 0 iff every guest check and every host check passed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SERVER=; BIN=$REPO/target/debug/txnfs; KEEP=0
usage() { sed -n '5,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --server) SERVER=${2:-}; shift 2 ;;
    --bin) BIN=${2:-}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
case "$SERVER" in txnfs|ganesha) ;; *) usage ;; esac

T_START=$(date +%s.%N)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
log() { echo "[host $(since "$T_START")s] $*"; }
die() { echo "[host] ERROR: $*" >&2; exit 1; }

# ------------------------------------------------------------------ prerequisites
need=(qemu-system-x86_64 socat tshark busybox python3 ss gcc cpio depmod xz tar md5sum)
[ "$SERVER" = ganesha ] && need+=(ganesha.nfsd)
for c in "${need[@]}"; do
  command -v "$c" > /dev/null || die "missing '$c': run tests/linux-client/install-deps.sh"
done
# txnfs is also needed for --server ganesha: it renders the Ganesha configuration.
[ -x "$BIN" ] || die "txnfs binary not found at $BIN (cargo build -p txnfs-cli, or --bin PATH)"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

WORK=${WORK:-${TMPDIR:-/tmp}/txnfs-vm}; export WORK
mkdir -p "$WORK"
# run directories of earlier runs (a failed one keeps a capture of a few hundred MB)
find "$WORK" -maxdepth 1 -name 'run-*' -mmin +180 -exec rm -rf {} + 2> /dev/null || true
W=$(mktemp -d "$WORK/run-$SERVER.XXXXXX")
EXPORT=$W/export; SHARE=$W/share; STATE=$W/state; SLOG=$W/server.log
mkdir -p "$EXPORT" "$SHARE" "$STATE"
log "server=$SERVER run dir=$W"

SERVER_PID=; TSHARK_PID=; VM_PID=; TAIL_PID=
stop_pid() {  # stop_pid PID SIGNAL: signal, wait up to 10 s, then SIGKILL
  local p=$1 sig=$2 _
  [ -n "$p" ] || return 0
  kill -0 "$p" 2> /dev/null || { wait "$p" 2> /dev/null || true; return 0; }
  kill "-$sig" "$p" 2> /dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$p" 2> /dev/null && kill -9 "$p" 2> /dev/null
  wait "$p" 2> /dev/null || true
}
cleanup() {
  local rc=$?
  set +e
  stop_pid "$VM_PID" TERM; VM_PID=
  stop_pid "$TAIL_PID" TERM; TAIL_PID=
  stop_pid "$SERVER_PID" TERM; SERVER_PID=
  stop_pid "$TSHARK_PID" TERM; TSHARK_PID=
  if [ "$rc" -eq 0 ] && [ "$KEEP" = 0 ]; then
    rm -rf "$EXPORT" "$W/hostref" "$W/cap.pcapng" "$SHARE/tree.tar" "$STATE" "$W/txnfs"
    log "logs kept in $W"
  else
    log "run directory kept: $W"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ guest image, test data
T=$(now)
"$HERE"/build-initramfs.sh > "$W"/build.log 2>&1 || { cat "$W"/build.log; die "build-initramfs.sh failed"; }
log "guest image ready ($(since "$T") s)"
T=$(now)
python3 "$HERE"/make-tree.py "$SHARE"/tree.tar "${SEED:-1}" > /dev/null
mkdir -p "$W"/hostref
tar --numeric-owner -xf "$SHARE"/tree.tar -C "$W"/hostref
log "tree.tar ($(wc -c < "$SHARE"/tree.tar) bytes) made and extracted on the host ($(since "$T") s)"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$SERVER" = ganesha ]; then
  EXPORT_PATH=/export
  mkdir -p "$W"/recov
  # the one Ganesha configuration of all txnfs tools (crates/e2e/src/ganesha.rs)
  "$BIN" bench ganesha-conf --port "$PORT" --export "$EXPORT" --recovery-root "$W"/recov \
    > "$W"/ganesha.conf
  SERVER_CMD=(ganesha.nfsd -F -L "$W"/ganesha.log -f "$W"/ganesha.conf -p "$W"/ganesha.pid)
else
  EXPORT_PATH=/
  # a private copy: others may rebuild target/debug/txnfs while this runs (restart uses it too);
  # a hard link is enough (cargo replaces the file, it never rewrites it) and costs no space
  ln -f "$BIN" "$W"/txnfs 2> /dev/null || cp "$BIN" "$W"/txnfs
  SERVER_CMD=("$W"/txnfs serve --listen "127.0.0.1:$PORT" --no-grace --state-dir "$STATE" "$EXPORT")
fi
printf 'EXPORT_PATH=%s\nSERVER_KIND=%s\n' "$EXPORT_PATH" "$SERVER" > "$SHARE"/params.sh

# ------------------------------------------------------------------ capture
tshark -i lo -f "tcp port $PORT" -w "$W"/cap.pcapng -q > "$W"/tshark.log 2>&1 &
TSHARK_PID=$!
for _ in $(seq 100); do grep -q "Capturing on" "$W"/tshark.log && break; sleep 0.1; done
grep -q "Capturing on" "$W"/tshark.log || { cat "$W"/tshark.log; die "tshark did not start capturing"; }
log "tshark capturing on lo, tcp port $PORT (pid $TSHARK_PID)"

# ------------------------------------------------------------------ server
start_server() {
  echo "=== $(date -u +%FT%TZ) start: ${SERVER_CMD[*]}" >> "$SLOG"
  TXNFS_LOG=${TXNFS_LOG:-info} NO_COLOR=1 "${SERVER_CMD[@]}" >> "$SLOG" 2>&1 < /dev/null &
  SERVER_PID=$!
  local _
  for _ in $(seq 300); do
    if ! kill -0 "$SERVER_PID" 2> /dev/null; then
      wait "$SERVER_PID" 2> /dev/null; local rc=$?
      SERVER_PID=
      echo "[host] server exited (status $rc) before listening; server log tail:"; tail -20 "$SLOG"
      return 1
    fi
    ss -Hltn "sport = :$PORT" 2> /dev/null | grep -q . && return 0
    sleep 0.1
  done
  echo "[host] server not listening on 127.0.0.1:$PORT after 30 s; log tail:"; tail -20 "$SLOG"
  return 1
}
T=$(now)
start_server || die "server did not start"
log "server listening on 127.0.0.1:$PORT (pid $SERVER_PID, $(since "$T") s)"

# ------------------------------------------------------------------ guest
RESTARTS=0; RESTART_FAILED=0
do_restart() {
  rm -f "$SHARE"/restart-request
  local T old=$SERVER_PID
  T=$(now)
  log "restart requested by the guest: kill -9 $old"
  kill -9 "$old" 2> /dev/null || true
  wait "$old" 2> /dev/null || true
  SERVER_PID=
  if start_server; then
    RESTARTS=$((RESTARTS + 1))
    log "server restarted (pid $SERVER_PID, $(since "$T") s)"
    echo "done" > "$SHARE"/restart-done
  else
    RESTART_FAILED=1
    echo failed > "$SHARE"/restart-done
  fi
}
T_VM=$(now)
NFSPORT=$PORT SHARE=$SHARE TIMEOUT=${TIMEOUT:-600} GHOST=txnfs-lc-$$ \
  "$HERE"/run-vm.sh "$HERE"/guest-tests.sh > "$W"/vm.log 2>&1 &
VM_PID=$!
tail -n +1 -f --pid="$VM_PID" "$W"/vm.log | tr -d '\033' &
TAIL_PID=$!
while kill -0 "$VM_PID" 2> /dev/null; do
  [ -e "$SHARE"/restart-request ] && do_restart
  sleep 0.2
done
set +e
wait "$VM_PID"; VMRC=$?
set -e
VM_PID=
wait "$TAIL_PID" 2> /dev/null || true; TAIL_PID=
log "guest finished: status $VMRC ($(since "$T_VM") s in the VM)"

# ------------------------------------------------------------------ host-side checks
HPASS=0; HFAIL=0; FAILED=()
hpass() { HPASS=$((HPASS + 1)); echo "HOST PASS: $*"; }
hfail() { HFAIL=$((HFAIL + 1)); FAILED+=("$1"); echo "HOST FAIL: $*"; }
echo
echo "=== host-side checks"
GPASS=0; GFAIL=0
if [ -f "$SHARE"/summary.txt ]; then read -r GPASS GFAIL < "$SHARE"/summary.txt; fi
case "$VMRC" in
  0) hpass "guest tests: $GPASS passed, 0 failed" ;;
  99) hfail "guest tests: the guest never reported a status (crash/timeout; see $W/vm.log)" ;;
  *) hfail "guest tests: exit status $VMRC, $GFAIL guest check(s) failed:"
     grep -a '^FAIL: ' "$W"/vm.log | sed 's/^/    /' ;;
esac
[ "$RESTART_FAILED" = 0 ] || hfail "server restart: the server did not come back (see $SLOG)"
[ "$RESTARTS" -ge 1 ] && hpass "server restarted $RESTARTS time(s) on the guest's request"

# big file content on the server's disk
if [ -s "$SHARE"/big.md5 ] && [ -f "$EXPORT"/big.bin ]; then
  want=$(cat "$SHARE"/big.md5); got=$(md5sum < "$EXPORT"/big.bin | cut -d' ' -f1)
  if [ "$got" = "$want" ]; then hpass "big.bin on the host disk has the guest's md5 ($got)"
  else hfail "big.bin on the host disk: md5 $got, guest wrote $want"; fi
else
  hfail "big.bin: missing on the host disk or no md5 from the guest"
fi

# the extracted tree on the server's disk vs the host's own extraction
if [ -d "$EXPORT"/tree ]; then
  if diff -r --no-dereference "$W"/hostref/tree "$EXPORT"/tree > "$W"/host-diff.txt 2>&1; then
    hpass "diff -r host extraction vs export dir: identical"
  else
    hfail "diff -r host extraction vs export dir: $(wc -l < "$W"/host-diff.txt) lines (head below, all in $W/host-diff.txt)"
    head -20 "$W"/host-diff.txt | sed 's/^/    /'
  fi
else
  hfail "tree/ not present in the export dir"
fi

# ls -lnR --full-time as seen by the guest vs the export dir on the host (same busybox ls, UTC).
# Normalisation: 'total N' lines are dropped (block counts depend on the client's and the
# server's notion of allocation, not on file attributes).  Nothing else is normalised.
norm_ls() { grep -av '^total [0-9]*$'; }
if [ -s "$SHARE"/ls-guest.txt ] && [ -d "$EXPORT"/tree ]; then
  (cd "$EXPORT"/tree && TZ=UTC LC_ALL=C busybox ls -lnR --full-time .) | norm_ls > "$W"/ls-host.norm
  norm_ls < "$SHARE"/ls-guest.txt > "$W"/ls-guest.norm
  if diff -u "$W"/ls-host.norm "$W"/ls-guest.norm > "$W"/ls-diff.txt; then
    hpass "ls -lnR --full-time: guest view == host view ($(wc -l < "$W"/ls-host.norm) lines)"
  else
    hfail "ls -lnR --full-time: guest view differs from the host's ($(grep -c '^[-+][^-+]' "$W"/ls-diff.txt) lines; --- host +++ guest, all in $W/ls-diff.txt)"
    grep '^[-+][^-+]' "$W"/ls-diff.txt | head -20 | sed 's/^/    /'
  fi
else
  hfail "ls listing: no guest listing or no tree/ on the host"
fi

# wire: every frame must dissect cleanly as RPC/NFS
stop_pid "$TSHARK_PID" TERM; TSHARK_PID=
T=$(now)
if [ -s "$W"/cap.pcapng ]; then
  TS=(tshark -n -r "$W"/cap.pcapng -d "tcp.port==$PORT,rpc")
  STATS=$("${TS[@]}" -q -z "io,stat,0,nfs,_ws.malformed || _ws.expert.severity == error" 2>&1) || true
  # the io,stat table's single data row: | 0 <> Dur | frames | bytes | frames | bytes |
  read -r NNFS NBAD < <(echo "$STATS" | awk -F'|' '/<>/ {gsub(/ /,""); print $3, $5}')
  log "capture: $(wc -c < "$W"/cap.pcapng) bytes, ${NNFS:-?} NFS frames, ${NBAD:-?} malformed/error frames ($(since "$T") s to analyse)"
  if [ -z "${NNFS:-}" ] || [ -z "${NBAD:-}" ]; then
    hfail "capture: could not analyse it:"; echo "$STATS" | head -20
  elif [ "$NNFS" -eq 0 ]; then
    hfail "capture: no NFS frames at all (was the traffic captured?)"
  elif [ "$NBAD" -ne 0 ]; then
    hfail "capture: $NBAD frame(s) malformed or with expert severity 'error' (of $NNFS NFS frames); first ones:"
    "${TS[@]}" -Y '_ws.malformed || _ws.expert.severity == error' 2> /dev/null | head -10 | sed 's/^/    /'
    FIRST=$("${TS[@]}" -Y '_ws.malformed || _ws.expert.severity == error' -T fields -e frame.number 2> /dev/null | head -1)
    [ -n "$FIRST" ] && "${TS[@]}" -Y "frame.number == $FIRST" -O rpc,nfs -V 2> /dev/null | grep -aiE 'malformed|expert|error|status' | head -15 | sed 's/^/    /'
  else
    hpass "capture: $NNFS NFS frames, none malformed, no expert errors"
  fi
else
  hfail "capture: $W/cap.pcapng is empty or missing"
fi

echo
log "total $(since "$T_START") s"
if [ "$SERVER" = txnfs ]; then
  echo "--- server log: warnings/errors (first 20) in $SLOG"
  grep -aiE 'warn|error|panic' "$SLOG" | head -20 || true
fi
TP=$((GPASS + HPASS)); TF=$((GFAIL + HFAIL))
if [ "$HFAIL" -ne 0 ]; then
  echo "FAILED host checks:"; printf '    %s\n' "${FAILED[@]}"
fi
echo "linux-client: $TP passed, $TF failed"
[ "$HFAIL" -eq 0 ]
