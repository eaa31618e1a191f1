#!/usr/bin/env bash
# nfs4fs (PyPI: an fsspec file system over a vectorized NFSv4 client built on libntirpc)
# against txnfs and against NFS-Ganesha: tests/nfs4fs/test_nfs4fs.py (issue 8, item 12).
#
# usage: tests/nfs4fs/run.sh --bin PATH_TO_txnfs [--server txnfs|ganesha|both]
#
# Creates a virtual environment under $CARGO_TARGET_DIR (default target/) with the pinned
# nfs4fs and pytest, starts rpcbind in the foreground unless the host runs one (nfs4fs
# looks the NFS port up there when the host has no port; the txnfs run connects that way,
# so it also checks txnfs's registration), and stops every process it started by PID.
# Ganesha runs only where ganesha.nfsd is installed; otherwise the script says so.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NFS4FS_VERSION=0.3.11
BIN=
WHICH=both
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --server) WHICH=$2; shift 2 ;;
    *) echo "usage: $0 --bin PATH_TO_txnfs [--server txnfs|ganesha|both]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "nfs4fs: --bin $BIN is not an executable" >&2; exit 2; }
case "$WHICH" in txnfs|ganesha|both) ;; *) echo "nfs4fs: bad --server $WHICH" >&2; exit 2 ;; esac

log() { printf '[nfs4fs %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "FAILED: $*"; exit 1; }

W=$(mktemp -d /tmp/txnfs-nfs4fs.XXXXXX)
RPCBIND_PID=
SERVER_PID=
cleanup() {
  local rc=$?
  for pid in $SERVER_PID $RPCBIND_PID; do
    kill -TERM "$pid" 2> /dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
  if [ "$rc" = 0 ]; then rm -rf "$W"; else log "work directory kept: $W"; fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ venv
VENV=${CARGO_TARGET_DIR:-$ROOT/target}/nfs4fs-venv
if ! "$VENV"/bin/python -c "import nfs4fs, pytest; assert nfs4fs.__version__ == '$NFS4FS_VERSION'" 2> /dev/null; then
  log "creating $VENV (nfs4fs $NFS4FS_VERSION, pytest)"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv)"
  "$VENV"/bin/pip install -q --disable-pip-version-check "nfs4fs==$NFS4FS_VERSION" pytest ||
    die "pip install nfs4fs failed"
fi

# ------------------------------------------------------------------ rpcbind
if rpcinfo -p 127.0.0.1 > /dev/null 2>&1; then
  log "using the host's running rpcbind"
else
  RPCBIND=$(command -v rpcbind || echo /usr/sbin/rpcbind)
  [ -x "$RPCBIND" ] || die "rpcbind not installed (apt-get install rpcbind)"
  # -f: foreground, so it is our child; no -w, so no warm-start entries come back
  "$RPCBIND" -f > "$W"/rpcbind.log 2>&1 &
  RPCBIND_PID=$!
  for _ in $(seq 100); do rpcinfo -p 127.0.0.1 > /dev/null 2>&1 && break; sleep 0.1; done
  rpcinfo -p 127.0.0.1 > /dev/null 2>&1 || { cat "$W"/rpcbind.log; die "rpcbind did not start"; }
  log "rpcbind started (pid $RPCBIND_PID)"
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() { # port pid log
  for _ in $(seq 300); do
    kill -0 "$2" 2> /dev/null || { tail -20 "$3"; die "server exited before listening"; }
    # bash's /dev/tcp: no iproute2 needed (CI machines start with nothing)
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
    sleep 0.1
  done
  tail -20 "$3"
  die "server not listening on 127.0.0.1:$1 after 30 s"
}

stop_server() {
  kill -TERM "$SERVER_PID" 2> /dev/null || true
  for _ in $(seq 100); do kill -0 "$SERVER_PID" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2> /dev/null || true
  wait "$SERVER_PID" 2> /dev/null || true
  SERVER_PID=
}

run_pytest() { # kind host root export
  log "pytest against $1 (host $2, root '${3}', export $4)"
  NFS4FS_SERVER=$1 NFS4FS_HOST=$2 NFS4FS_ROOT=$3 NFS4FS_EXPORT=$4 \
    timeout 300 "$VENV"/bin/python -m pytest -q -p no:cacheprovider -rxXs \
    "$HERE"/test_nfs4fs.py
}

failed=0

# ------------------------------------------------------------------ txnfs
if [ "$WHICH" != ganesha ]; then
  PORT=$(free_port)
  mkdir -p "$W"/txnfs/export "$W"/txnfs/state
  TXNFS_LOG=${TXNFS_LOG:-info} NO_COLOR=1 "$BIN" serve --listen "127.0.0.1:$PORT" --no-grace \
    --state-dir "$W"/txnfs/state "$W"/txnfs/export > "$W"/txnfs.log 2>&1 < /dev/null &
  SERVER_PID=$!
  wait_listening "$PORT" "$SERVER_PID" "$W"/txnfs.log
  # nfs4fs gets no port below: it must find this one through the portmapper (txnfs
  # registers right after it binds the port, so give it a moment)
  registered() {
    rpcinfo -p 127.0.0.1 | awk -v p="$PORT" '$1 == 100003 && $2 == 4 && $3 == "tcp" && $4 == p { ok = 1 } END { exit !ok }'
  }
  for _ in $(seq 50); do registered && break; sleep 0.1; done
  registered || { rpcinfo -p 127.0.0.1; die "txnfs did not register 100003 v4 tcp $PORT with rpcbind"; }
  log "txnfs listening on 127.0.0.1:$PORT (pid $SERVER_PID), registered with rpcbind"
  run_pytest txnfs 127.0.0.1 "" "$W"/txnfs/export || { failed=1; log "txnfs log tail:"; tail -30 "$W"/txnfs.log; }
  stop_server
  if rpcinfo -p 127.0.0.1 | awk -v p="$PORT" '$1 == 100003 && $4 == p { f = 1 } END { exit !f }'; then
    log "FAILED: txnfs left its rpcbind entry behind after SIGTERM"; failed=1
  fi
fi

# ------------------------------------------------------------------ Ganesha
if [ "$WHICH" != txnfs ]; then
  if ! command -v ganesha.nfsd > /dev/null; then
    if [ "$WHICH" = ganesha ]; then die "ganesha.nfsd not installed"; fi
    case "${CI:-}" in
      1 | [Tt][Rr][Uu][Ee]) die "ganesha.nfsd not installed and CI=$CI: the Ganesha run cannot be skipped (apt-get install nfs-ganesha nfs-ganesha-vfs)" ;;
    esac
    log "SKIPPED: the Ganesha run (ganesha.nfsd not installed: apt-get install nfs-ganesha nfs-ganesha-vfs)"
  else
    # Ganesha uses fixed paths (/var/run/ganesha): one instance at a time across all
    # txnfs tools (crates/testbed/src/ganesha.rs, LOCK_PATH)
    exec 9> /tmp/txnfs-ganesha.lock
    flock -w 300 9 || die "another Ganesha run held /tmp/txnfs-ganesha.lock for 5 minutes"
    PORT=$(free_port)
    mkdir -p "$W"/ganesha/export "$W"/ganesha/recov
    "$BIN" bench ganesha-conf --port "$PORT" --export "$W"/ganesha/export \
      --recovery-root "$W"/ganesha/recov > "$W"/ganesha.conf
    ganesha.nfsd -F -L "$W"/ganesha.log -f "$W"/ganesha.conf -p "$W"/ganesha.pid \
      > /dev/null 2>&1 < /dev/null &
    SERVER_PID=$!
    wait_listening "$PORT" "$SERVER_PID" "$W"/ganesha.log
    log "Ganesha listening on 127.0.0.1:$PORT (pid $SERVER_PID)"
    # Ganesha's portmapper entry is not what this run tests: give nfs4fs the port
    run_pytest ganesha "127.0.0.1:$PORT" export "$W"/ganesha/export ||
      { failed=1; log "Ganesha log tail:"; tail -30 "$W"/ganesha.log; }
    stop_server
    exec 9>&-
  fi
fi

[ "$failed" = 0 ] || die "see above"
log "all nfs4fs runs passed"
