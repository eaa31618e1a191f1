#!/bin/bash
# End-to-end test: the real Linux NFSv4.1 client (Debian kernel in a QEMU/TCG guest) against
# an NFS server on this host (127.0.0.1 only).  See README.md in this directory.
#
# usage: tests/linux-client/run.sh --server txnfs|ganesha [--vers 3|4.0|4.1|4.2] [--also-v40] [--bin PATH_TO_txnfs] [--keep]
#   --vers V          mount with vers=V (default: no vers= option, the client negotiates 4.2);
#                     3: MOUNT on the NFS port, locks through NLM (txnfs; the guest runs
#                     rpcbind and rpc.statd; Ganesha: nolock, step e skipped); steps f
#                     (delegations) and g (restart with delegations held) are skipped;
#                     4.0: steps f and g are skipped (the server cannot reach the guest's
#                     callback address through the user-mode network: no delegations)
#   --also-v40        at the end, a second mount with vers=4.0 and a few checks (step j), so a
#                     boot of another version covers NFSv4.0 too
#   --server txnfs    $BIN serve --listen 127.0.0.1:$PORT --no-grace --state-dir $W/state $EXPORT
#                     (default BIN: <repo>/target/debug/txnfs), guest mounts 10.0.2.100:/
#   --server ganesha  ganesha.nfsd with the shared config of `$BIN bench ganesha-conf`
#                     (export Pseudo=/export), mounts /export
#   --keep            keep the run directory (export, capture, logs) even when everything passed
# env: WORK (cache + run dirs, default /tmp/txnfs-vm; run dirs older than 3 h are deleted),
#      TIMEOUT (VM seconds, default 900), TXNFS_LOG (server log filter, default info),
#      TXNFS_SERVE_ARGS (extra `txnfs serve` options, e.g. --no-delegations: the delegation
#      checks then fail), SKIP_STEPS (development: "b c" skips the tar and listing steps,
#      "k" the Kerberos step: sec=krb5p/krb5i/krb5 through the guest's rpc.gssd, default boot),
#      TREE_FILES_PER_DIR (step b's tar tree: 50 directories of this many files, default 100)
# Exit status 0 iff every guest check and every host check passed.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SERVER=; BIN=$REPO/target/debug/txnfs; KEEP=0; VERS=; ALSO_V40=0
usage() { sed -n '5,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --server) SERVER=${2:-}; shift 2 ;;
    --bin) BIN=${2:-}; shift 2 ;;
    --vers) VERS=${2:-}; shift 2 ;;
    --also-v40) ALSO_V40=1; shift ;;
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
W=$(mktemp -d "$WORK/run-$SERVER-v${VERS:-default}.XXXXXX")
EXPORT=$W/export; SHARE=$W/share; STATE=$W/state; SLOG=$W/server.log
mkdir -p "$EXPORT" "$SHARE" "$STATE"
MOUNT_DESC="default options"; [ -n "$VERS" ] && MOUNT_DESC="vers=$VERS"
log "server=$SERVER mount=$MOUNT_DESC run dir=$W"

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
  stop_pid "${LOCKHOLD_PID:-}" TERM; LOCKHOLD_PID=
  stop_pid "${KSERVER_PID:-}" TERM; KSERVER_PID=
  stop_pid "${KDC_PID:-}" TERM; KDC_PID=
  stop_pid "${KTSHARK_PID:-}" TERM; KTSHARK_PID=
  if [ "$rc" -eq 0 ] && [ "$KEEP" = 0 ]; then
    rm -rf "$EXPORT" "$W/hostref" "$W/cap.pcapng" "$SHARE/tree.tar" "$STATE" "$W/txnfs" "$W/kexport" "$W/kcap.pcapng" "$W/kstate"
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
python3 "$HERE"/make-tree.py "$SHARE"/tree.tar "${SEED:-1}" "${TREE_FILES_PER_DIR:-100}" > /dev/null
mkdir -p "$W"/hostref
tar --numeric-owner -xf "$SHARE"/tree.tar -C "$W"/hostref
log "tree.tar ($(wc -c < "$SHARE"/tree.tar) bytes) made and extracted on the host ($(since "$T") s)"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$SERVER" = ganesha ]; then
  EXPORT_PATH=/export
  mkdir -p "$W"/recov
  # the one Ganesha configuration of all txnfs tools (crates/testbed/src/ganesha.rs)
  "$BIN" bench ganesha-conf --port "$PORT" --export "$EXPORT" --recovery-root "$W"/recov \
    > "$W"/ganesha.conf
  SERVER_CMD=(ganesha.nfsd -F -L "$W"/ganesha.log -f "$W"/ganesha.conf -p "$W"/ganesha.pid)
else
  EXPORT_PATH=/
  # a private copy: others may rebuild target/debug/txnfs while this runs (restart uses it too);
  # a hard link is enough (cargo replaces the file, it never rewrites it) and costs no space
  ln -f "$BIN" "$W"/txnfs 2> /dev/null || cp "$BIN" "$W"/txnfs
  # shellcheck disable=SC2206  # TXNFS_SERVE_ARGS: extra options, split on spaces (e.g. --no-delegations)
  SERVER_CMD=("$W"/txnfs serve --listen "127.0.0.1:$PORT" --no-grace --state-dir "$STATE" ${TXNFS_SERVE_ARGS:-} "$EXPORT")
fi
# the txnfs binary the host's own NFS client commands run (step f: txnfs cp/cat as a second client)
CLI=$BIN; [ "$SERVER" = txnfs ] && CLI=$W/txnfs
# NFSv3: no delegations, and step g holds delegations across the restart; locks (step e) go
# through NLM against txnfs (Ganesha: nolock, the guest skips e).
[ "$VERS" = 3 ] && SKIP_STEPS="${SKIP_STEPS:-} f g"
# NFSv4.0: callbacks go to the guest's own address, which the host cannot reach (user-mode
# network): no delegations, so no delegation steps.
[ "$VERS" = 4.0 ] && SKIP_STEPS="${SKIP_STEPS:-} f g"
printf 'EXPORT_PATH=%s\nSERVER_KIND=%s\nMOUNT_VERS=%s\nSKIP_STEPS="%s"\nALSO_V40=%s\n' "$EXPORT_PATH" "$SERVER" "$VERS" "${SKIP_STEPS:-}" "$ALSO_V40" > "$SHARE"/params.sh

# Files for the delegation steps (f, g): first versions in the export, written here before the
# guest has seen them (so its first OPEN of each is the one that may get a delegation), and
# every version the guest compares against in the share.
mkdir -p "$EXPORT"/deleg "$SHARE"/deleg
for f in r w rc rs ws ra; do
  for v in 1 2; do
    # version 2 is longer than version 1: a stale size shows as well as stale bytes
    { echo "$f version $v written by the host"; head -c $((3000 * v + 17)) /dev/urandom | od -An -tx1; } \
      > "$SHARE"/deleg/$f-v$v
  done
  cp "$SHARE"/deleg/$f-v1 "$EXPORT"/deleg/$f.txt
done

# ------------------------------------------------------------------ capture
# -B: a 256 MiB kernel buffer (default 2 MiB): with the default, a busy machine drops packets
# during the 64 MiB write, and a lost segment leaves the rest of that TCP stream undissected
tshark -i lo -B 256 -f "tcp port $PORT" -w "$W"/cap.pcapng -q > "$W"/tshark.log 2>&1 &
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

# ------------------------------------------------------------------ Kerberos (step k)
# sec=krb5p, krb5i and krb5 through the guest's rpc.gssd (issue 20, ADR 0051), in the default
# (no vers=) boot against txnfs: a private MIT KDC (realm TXNFS.TEST, like crates/testbed/src/kdc.rs: its own
# files in $W/krb, KRB5_CONFIG/KRB5_KDC_PROFILE, nothing of the machine's Kerberos read or
# changed), which the guest reaches (TCP) as 10.0.2.101:88; a second txnfs (its own export,
# port and state dir) whose only rule is 127.0.0.1(rw,sec=krb5p:krb5i:krb5), with the key of
# nfs/krbsrv.txnfs.test (the guest's /etc/hosts names 10.0.2.102 so, and gssd asks for
# nfs@<that name>), reached as 10.0.2.102:2049; its gss map gives the guest's machine
# principal nfs/lkguest.txnfs.test (the key in the guest's /etc/krb5.keytab, which gssd uses
# for root) uid/gid 4242. Its own capture (kcap.pcapng) must never hold the krb5p file's bytes.
KRB_ON=0; KRB_ERR=; KDC_PID=; KSERVER_PID=; KTSHARK_PID=; KPORT=; KDCPORT=
K=$W/krb; KEXPORT=$W/kexport; KSLOG=$W/server-krb.log
KREALM=TXNFS.TEST; KSRV=krbsrv.txnfs.test; KGUEST=lkguest.txnfs.test; KUID=4242
KENV=(env KRB5_CONFIG="$K"/krb5.conf KRB5_KDC_PROFILE="$K"/kdc.conf)
want_step() { case " ${SKIP_STEPS:-} " in *" $1 "*) return 1 ;; *) return 0 ;; esac; }
if [ "$SERVER" = txnfs ] && [ -z "$VERS" ] && want_step k; then KRB_ON=1; fi
krb_setup() {
  local t p
  for t in krb5kdc kdb5_util kadmin.local; do
    p=$(command -v "$t" || ls /usr/sbin/"$t" 2> /dev/null || true)
    [ -n "$p" ] || { KRB_ERR="$t not found: install the Debian packages krb5-kdc krb5-admin-server krb5-user"; return 1; }
  done
  mkdir -p "$K" "$KEXPORT" "$W"/kstate "$SHARE"/krb
  chmod 1777 "$KEXPORT"   # the guest's files are created by uid $KUID
  KDCPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  KPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf '[libdefaults]\n default_realm = %s\n dns_lookup_kdc = false\n dns_lookup_realm = false\n rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n\n[realms]\n %s = {\n  kdc = %s\n }\n\n[domain_realm]\n .txnfs.test = %s\n txnfs.test = %s\n' \
    "$KREALM" "$KREALM" "127.0.0.1:$KDCPORT" "$KREALM" "$KREALM" > "$K"/krb5.conf
  # the guest's: the KDC at its guestfwd address, over TCP (udp_preference_limit = 1)
  sed "s/kdc = 127.0.0.1:$KDCPORT/kdc = 10.0.2.101:88/" "$K"/krb5.conf > "$SHARE"/krb/krb5.conf
  # UDP and TCP on the one loopback port (the guest's guestfwd is TCP)
  printf '[kdcdefaults]\n kdc_listen = 127.0.0.1:%s\n kdc_tcp_listen = 127.0.0.1:%s\n\n[realms]\n %s = {\n  database_name = %s/principal\n  key_stash_file = %s/stash\n  acl_file = %s/kadm5.acl\n  kdc_listen = 127.0.0.1:%s\n  kdc_tcp_listen = 127.0.0.1:%s\n }\n\n[logging]\n kdc = FILE:%s/kdc.log\n' \
    "$KDCPORT" "$KDCPORT" "$KREALM" "$K" "$K" "$K" "$KDCPORT" "$KDCPORT" "$K" > "$K"/kdc.conf
  : > "$K"/kadm5.acl
  "${KENV[@]}" kdb5_util -r "$KREALM" create -s -P txnfs-test-master > "$K"/setup.log 2>&1 &&
    "${KENV[@]}" kadmin.local -r "$KREALM" -q "addprinc -randkey nfs/$KSRV@$KREALM" >> "$K"/setup.log 2>&1 &&
    "${KENV[@]}" kadmin.local -r "$KREALM" -q "ktadd -k $K/server.keytab nfs/$KSRV@$KREALM" >> "$K"/setup.log 2>&1 &&
    "${KENV[@]}" kadmin.local -r "$KREALM" -q "addprinc -randkey nfs/$KGUEST@$KREALM" >> "$K"/setup.log 2>&1 &&
    "${KENV[@]}" kadmin.local -r "$KREALM" -q "ktadd -k $SHARE/krb/krb5.keytab nfs/$KGUEST@$KREALM" >> "$K"/setup.log 2>&1 ||
    { KRB_ERR="realm setup failed: $(tail -3 "$K"/setup.log | tr '\n' ' ')"; return 1; }
  "${KENV[@]}" krb5kdc -n -r "$KREALM" > "$K"/krb5kdc.out 2>&1 < /dev/null &
  KDC_PID=$!
  for _ in $(seq 100); do ss -Hltn "sport = :$KDCPORT" 2> /dev/null | grep -q . && break; sleep 0.1; done
  ss -Hltn "sport = :$KDCPORT" 2> /dev/null | grep -q . ||
    { KRB_ERR="krb5kdc did not listen on 127.0.0.1:$KDCPORT (TCP): $(tail -3 "$K"/kdc.log "$K"/krb5kdc.out 2> /dev/null | tr '\n' ' ')"; return 1; }
  printf 'nfs/%s@%s %s %s\n' "$KGUEST" "$KREALM" "$KUID" "$KUID" > "$K"/gss-map
  # the files the guest writes, one per flavour: 4000 lines of a marker of its own; the krb5p
  # one must never appear in the capture, the krb5i and krb5 ones do (not encrypted)
  local f m
  for f in krb5p krb5i krb5; do
    m="TXNFS-${f^^}-CLEARTEXT-MARKER-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    for _ in $(seq 4000); do echo "$m"; done > "$SHARE"/krb/data-$f.bin
    echo "$m" > "$SHARE"/krb/marker-$f
  done
  tshark -i lo -B 32 -f "tcp port $KPORT" -w "$W"/kcap.pcapng -q > "$W"/ktshark.log 2>&1 &
  KTSHARK_PID=$!
  for _ in $(seq 100); do grep -q "Capturing on" "$W"/ktshark.log && break; sleep 0.1; done
  grep -q "Capturing on" "$W"/ktshark.log || { KRB_ERR="tshark (port $KPORT) did not start: $(cat "$W"/ktshark.log)"; return 1; }
  echo "=== $(date -u +%FT%TZ) start (Kerberos server)" >> "$KSLOG"
  TXNFS_LOG=${TXNFS_LOG:-info} NO_COLOR=1 "${KENV[@]}" "$W"/txnfs serve --listen "127.0.0.1:$KPORT" --no-grace --no-rpcbind \
    --state-dir "$W"/kstate --keytab "$K"/server.keytab --gss-map "$K"/gss-map \
    --client "127.0.0.1(rw,sec=krb5p:krb5i:krb5)" "$KEXPORT" >> "$KSLOG" 2>&1 < /dev/null &
  KSERVER_PID=$!
  for _ in $(seq 300); do
    kill -0 "$KSERVER_PID" 2> /dev/null || { KRB_ERR="the Kerberos server exited: $(tail -5 "$KSLOG" | tr '\n' ' ')"; KSERVER_PID=; return 1; }
    ss -Hltn "sport = :$KPORT" 2> /dev/null | grep -q . && return 0
    sleep 0.1
  done
  KRB_ERR="the Kerberos server did not listen on 127.0.0.1:$KPORT (see $KSLOG)"; return 1
}
if [ "$KRB_ON" = 1 ]; then
  T=$(now)
  if krb_setup; then
    log "Kerberos (step k): KDC on 127.0.0.1:$KDCPORT (pid $KDC_PID), sec=krb5p:krb5i:krb5 server on 127.0.0.1:$KPORT (pid $KSERVER_PID), capture pid $KTSHARK_PID ($(since "$T") s)"
  else
    log "Kerberos (step k): setup failed: $KRB_ERR"
    rm -rf "$SHARE"/krb   # the guest runs step k only when its files are there
  fi
fi

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
# Host actions the guest asks for (steps f, g): the guest writes "ID LABEL ACTION ARGS..." to
# host-request and waits for "ID STATUS" in host-done.  Each action is logged with its host
# time window (epoch seconds) in $W/actions.txt as "LABEL START END STATUS", which the capture
# checks use to pick the traffic that belongs to it.  Actions (paths relative to the share and
# to the server's export; commands bounded by `timeout 60`):
#   mark              nothing: a time stamp (the guest brackets its own steps with two marks)
#   nfs-cp SRC DEST   $CLI cp $SHARE/SRC nfs://127.0.0.1:$PORT$EXPORT_PATH/DEST  (a second client)
#   nfs-cat SRC OUT   $CLI cat nfs://127.0.0.1:$PORT$EXPORT_PATH/SRC > $SHARE/OUT
#   v4-lock-hold P    an NFSv4.1 client on the host takes a whole-file write lock of P and
#                     keeps it (status 0 once held) until v4-lock-release (status 0 once
#                     released); v4-lock-try P: once, status 0 if granted (then unlocked),
#                     3 if DENIED.  The tool is crates/rawclient/examples/nfs4_lock.rs
#                     ($LOCKTOOL; scripts/test.sh builds it beside the txnfs binary).
: > "$W"/actions.txt
LOCKTOOL=${LOCKTOOL:-$(dirname "$BIN")/examples/nfs4_lock}
LOCKHOLD_PID=
lock_path() { echo "${EXPORT_PATH#/}/$1" | sed 's#^/##'; }
v4_lock_hold() {
  rm -f "$W"/lockhold.in "$W"/lockhold.out
  mkfifo "$W"/lockhold.in
  "$LOCKTOOL" "127.0.0.1:$PORT" "$(lock_path "$1")" hold < "$W"/lockhold.in > "$W"/lockhold.out 2>&1 &
  LOCKHOLD_PID=$!
  exec 7> "$W"/lockhold.in   # the tool holds the lock until fd 7 closes
  for _ in $(seq 300); do
    grep -q '^locked' "$W"/lockhold.out 2> /dev/null && return 0
    kill -0 "$LOCKHOLD_PID" 2> /dev/null || break
    sleep 0.1
  done
  cat "$W"/lockhold.out >&2
  return 1
}
v4_lock_release() {
  [ -n "$LOCKHOLD_PID" ] || return 1
  exec 7>&-
  timeout 30 tail --pid="$LOCKHOLD_PID" -f /dev/null || return 1
  LOCKHOLD_PID=
  grep -q '^released' "$W"/lockhold.out
}
NFSURL=nfs://127.0.0.1:$PORT${EXPORT_PATH%/}
do_action() {
  local id label action a1 a2 t0 t1 st=0
  read -r id label action a1 a2 < "$SHARE"/host-request || true
  rm -f "$SHARE"/host-request
  t0=$(date +%s.%N)
  case "$action" in
    mark) ;;
    nfs-cp) timeout 60 "$CLI" cp "$SHARE/$a1" "$NFSURL/$a2" > "$W/action-$label.log" 2>&1 || st=$? ;;
    nfs-cat) timeout 60 "$CLI" cat "$NFSURL/$a1" > "$SHARE/$a2" 2> "$W/action-$label.log" || st=$? ;;
    v4-lock-hold) v4_lock_hold "$a1" 2> "$W/action-$label.log" || st=$? ;;
    v4-lock-release) v4_lock_release 2> "$W/action-$label.log" || st=$? ;;
    v4-lock-try) timeout 60 "$LOCKTOOL" "127.0.0.1:$PORT" "$(lock_path "$a1")" try > "$W/action-$label.log" 2>&1 || st=$? ;;
    *) echo "unknown action '$action'" > "$W/action-$label.log"; st=127 ;;
  esac
  t1=$(date +%s.%N)
  echo "$label $t0 $t1 $st" >> "$W"/actions.txt
  [ "$action" = mark ] || log "guest asked: $action $a1 $a2 ($label): status $st, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}') s"
  echo "$id $st" > "$SHARE"/host-done.tmp
  mv "$SHARE"/host-done.tmp "$SHARE"/host-done
}
T_VM=$(now)
: > "$W"/vm.log   # before tail -f below opens it (the VM's redirection may come later)
EXTRA_FWDS=; [ -s "$SHARE"/krb/krb5.keytab ] && EXTRA_FWDS="10.0.2.101:88=$KDCPORT 10.0.2.102:2049=$KPORT"
NFSPORT=$PORT SHARE=$SHARE TIMEOUT=${TIMEOUT:-900} GHOST=txnfs-lc-$$ EXTRA_FWDS=$EXTRA_FWDS \
  "$HERE"/run-vm.sh "$HERE"/guest-tests.sh > "$W"/vm.log 2>&1 &
VM_PID=$!
tail -n +1 -f --pid="$VM_PID" "$W"/vm.log | tr -d '\033' &
TAIL_PID=$!
while kill -0 "$VM_PID" 2> /dev/null; do
  [ -e "$SHARE"/restart-request ] && do_restart
  if [ -e "$SHARE"/host-request ]; then do_action; continue; fi
  sleep 0.1
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
DROPPED=$(grep -aoE '[0-9]+ packets? dropped' "$W"/tshark.log | awk '{n += $1} END {print n + 0}')
DROPNOTE=; [ "$DROPPED" -gt 0 ] && DROPNOTE=" (the capture dropped $DROPPED packets, see tshark.log: a TCP stream with a lost segment is not dissected after it)"
T=$(now)
if [ -s "$W"/cap.pcapng ]; then
  TS=(tshark -n -r "$W"/cap.pcapng -d "tcp.port==$PORT,rpc")
  # Frames TCP analysis marks as retransmitted or out of order repeat bytes already
  # captured, and their "reassembly error: new fragment overlaps old data" is about TCP
  # (stop 21's CI: one 48 KB segment of the guest's WRITE seen twice on lo), not about
  # what we encode: the first copy of those bytes is dissected and checked. Resending is
  # the kernel's (and QEMU's) TCP, never our code, so nothing of ours is left unchecked.
  BAD='(_ws.malformed || _ws.expert.severity == error) && !tcp.analysis.retransmission && !tcp.analysis.out_of_order && !tcp.analysis.spurious_retransmission'
  STATS=$("${TS[@]}" -q -z "io,stat,0,nfs,$BAD" 2>&1) || true
  # the io,stat table's single data row: | 0 <> Dur | frames | bytes | frames | bytes |
  read -r NNFS NBAD < <(echo "$STATS" | awk -F'|' '/<>/ {gsub(/ /,""); print $3, $5}')
  log "capture: $(wc -c < "$W"/cap.pcapng) bytes, ${NNFS:-?} NFS frames, ${NBAD:-?} malformed/error frames, $DROPPED packets dropped ($(since "$T") s to analyse)"
  if [ -z "${NNFS:-}" ] || [ -z "${NBAD:-}" ]; then
    hfail "capture: could not analyse it:"; echo "$STATS" | head -20
  elif [ "$NNFS" -eq 0 ]; then
    hfail "capture: no NFS frames at all (was the traffic captured?)"
  elif [ "$NBAD" -ne 0 ]; then
    hfail "capture: $NBAD frame(s) malformed or with expert severity 'error' (of $NNFS NFS frames); first ones:"
    "${TS[@]}" -Y "$BAD" 2> /dev/null | head -10 | sed 's/^/    /'
    FIRST=$("${TS[@]}" -Y "$BAD" -T fields -e frame.number 2> /dev/null | head -1)
    [ -n "$FIRST" ] && "${TS[@]}" -Y "frame.number == $FIRST" -O rpc,nfs -V 2> /dev/null | grep -aiE 'malformed|expert|error|status' | head -15 | sed 's/^/    /'
  else
    hpass "capture: $NNFS NFS frames, none malformed, no expert errors"
  fi
else
  hfail "capture: $W/cap.pcapng is empty or missing"
fi

# wire: delegations (issue 9).  One pass over the capture keeps the frames that carry an OPEN
# delegation type, a DELEGRETURN or a callback op: time, direction, ops and stateids.  Direction
# tells calls from replies even when a frame holds several RPCs: OPEN replies and CB calls go
# server -> client (tcp.srcport == $PORT), DELEGRETURN calls and CB replies client -> server.
# Counts: open_delegation_type4 READ = 1, WRITE = 2; CB_GETATTR = 3, CB_RECALL = 4; DELEGRETURN = 8.
if [ -s "$W"/cap.pcapng ]; then
  T=$(now)
  # columns: epoch, source port, delegation types, ops, callback ops, stateid others, claim types
  "${TS[@]}" -Y 'nfs.open.delegation_type || nfs.opcode == 8 || nfs.cb.operation || nfs.open.claim_type == 1 || nfs.open.claim_type == 2 || nfs.open.claim_type == 5' \
    -T fields -E separator=/t -E occurrence=a -E aggregator=, -e frame.time_epoch -e tcp.srcport \
    -e nfs.open.delegation_type -e nfs.opcode -e nfs.cb.operation -e nfs.stateid.other -e nfs.open.claim_type \
    2> /dev/null | awk -F'\t' '{for (i = 3; i <= 7; i++) if ($i == "") $i = "-"; print $1, $2, $3, $4, $5, $6, $7}' \
    > "$W"/deleg-frames.txt || true
  # dcount FROM TO: "READ WRITE CB_RECALL CB_GETATTR DELEGRETURN CLAIM_PREVIOUS CLAIM_DELEG_CUR"
  # counted in [FROM, TO] (epoch s); the claims are OPEN calls (CLAIM_DELEGATE_CUR and
  # CLAIM_DELEG_CUR_FH together: the client's opens under a delegation moved to the server)
  dcount() {
    awk -v p="$PORT" -v a="$1" -v b="$2" '
      function n(list, v,   k, x, c) { c = 0; k = split(list, x, ","); for (; k > 0; k--) if (x[k] == v) c++; return c }
      $1 >= a && $1 <= b {
        if ($2 == p) { r += n($3, 1); w += n($3, 2); cbr += n($5, 4); cbg += n($5, 3) }
        else { dr += n($4, 8); cp += n($7, 1); cc += n($7, 2) + n($7, 5) }
      }
      END { printf "%d %d %d %d %d %d %d\n", r, w, cbr, cbg, dr, cp, cc }' "$W"/deleg-frames.txt
  }
  # window LABEL1 LABEL2: from the start of action LABEL1 to the end of action LABEL2
  window() {
    awk -v a="$1" -v b="$2" '$1 == a { s = $2 } $1 == b { e = $3 } END { if (s != "" && e != "") print s, e }' "$W"/actions.txt
  }
  # sids KIND FROM TO: the stateid "other" fields (a) granted by OPEN replies with a delegation,
  # (r) recalled by CB_RECALL, (d) returned by DELEGRETURN, in [FROM, TO]
  sids() {
    awk -v p="$PORT" -v k="$1" -v a="$2" -v b="$3" '
      $1 >= a && $1 <= b && $6 != "-" {
        if ((k == "a" && $2 == p && $3 ~ /(^|,)[12](,|$)/) || (k == "r" && $2 == p && $5 ~ /(^|,)4(,|$)/) ||
            (k == "d" && $2 != p && $4 ~ /(^|,)8(,|$)/)) { m = split($6, x, ","); for (; m > 0; m--) print x[m] }
      }' "$W"/deleg-frames.txt | sort -u
  }
  read -r D_READ D_WRITE D_RECALL D_CBGETATTR D_RETURN D_CPREV D_CCUR < <(dcount 0 9e18)
  log "capture, delegations: $D_READ OPEN replies with OPEN_DELEGATE_READ, $D_WRITE with OPEN_DELEGATE_WRITE, $D_RECALL CB_RECALL, $D_CBGETATTR CB_GETATTR, $D_RETURN DELEGRETURN; OPEN calls: $D_CPREV CLAIM_PREVIOUS, $D_CCUR CLAIM_DELEG_CUR(_FH) ($(since "$T") s to analyse)"
  if [ "$SERVER" = txnfs ] && [ "$VERS" != 3 ] && [ "$VERS" != 4.0 ]; then
    # grant LABEL1 LABEL2 KIND(1 READ | 2 WRITE) DESC: an OPEN reply in the window granted KIND
    grant() {
      local w c
      w=$(window "$1" "$2")
      if [ -z "$w" ]; then hfail "$4: the guest did not reach this step (no $1/$2 in actions.txt)"; return; fi
      read -r r wr _ < <(dcount $w)
      c=$r; [ "$3" = 2 ] && c=$wr
      if [ "$c" -gt 0 ]; then hpass "$4: $c OPEN repl(y/ies) with OPEN_DELEGATE_$([ "$3" = 1 ] && echo READ || echo WRITE)"
      else hfail "$4: no OPEN reply with OPEN_DELEGATE_$([ "$3" = 1 ] && echo READ || echo WRITE) in the window ($r READ, $wr WRITE)$DROPNOTE"; fi
    }
    # recalled GRANT1 GRANT2 CHANGE DESC: a delegation granted in the window GRANT1..GRANT2 was
    # recalled (CB_RECALL) and returned (DELEGRETURN) while the host's action CHANGE ran
    recalled() {
      local wg wc g r d both took
      wg=$(window "$1" "$2"); wc=$(window "$3" "$3")
      if [ -z "$wg" ] || [ -z "$wc" ]; then hfail "$4: the guest did not reach this step"; return; fi
      g=$(sids a $wg); r=$(sids r $wc); d=$(sids d $wc)
      both=$(comm -12 <(echo "$g") <(echo "$r") | comm -12 - <(echo "$d") | grep -c . || true)
      read -r _ _ nr ng nd _ < <(dcount $wc)
      # a recall the guest answers ends the host's command in well under a second; one it
      # cannot answer (wrong minor version, dead back channel) holds it for the recall wait
      took=$(awk -v a="${wc% *}" -v b="${wc#* }" 'BEGIN{printf "%.2f", b-a}')
      if [ "$both" -gt 0 ] && awk -v t="$took" 'BEGIN { exit !(t < 1.0) }'; then
        hpass "$4: the guest's delegation was recalled and returned while the host's change ran ($nr CB_RECALL, $ng CB_GETATTR, $nd DELEGRETURN in $took s)"
      elif [ "$both" -gt 0 ]; then
        hfail "$4: recalled and returned, but the host's command took $took s (limit 1 s)"
      else
        hfail "$4: no delegation granted in $1..$2 was both recalled and returned during $3 ($nr CB_RECALL, $ng CB_GETATTR, $nd DELEGRETURN; granted {$(echo $g)} recalled {$(echo $r)} returned {$(echo $d)})$DROPNOTE"
      fi
    }
    grant f-read0 f-read1 1 "delegation: guest cat of a file"
    grant f-write0 f-write1 2 "delegation: guest open for append"
    recalled f-read0 f-read1 f-cp-r "delegation: host txnfs cp over a read-delegated file (no open)"
    recalled f-rc0 f-rc1 f-cp-rc "delegation: host txnfs cp over a read-delegated file held open"
    recalled f-write0 f-write1 f-cat-w "delegation: host txnfs cat of a write-delegated file with unflushed data"
    grant g-hold0 g-hold1 1 "delegation: held across the restart (read, fd open)"
    grant g-hold0 g-hold1 2 "delegation: held across the restart (write, dirty data)"
    grant g-ra0 g-ra1 1 "delegation: guest cat of a file after the restart"
    recalled g-ra0 g-ra1 g-cp-ra "delegation: host txnfs cp over a read-delegated file after the restart"
  fi
fi
# wire: the NFSv4.2 step (i) of a 4.2 mount sent its operations as 4.2 ops, and the file
# bytes of the copy did not cross the wire (no WRITE of ~1 MiB in the window).
# Opcodes: ALLOCATE 59, COPY 60, DEALLOCATE 62, SEEK 69, CLONE 71, GETXATTR 72, SETXATTR 73.
if [ "$SERVER" = txnfs ] && [ "${VERS:-4.2}" = 4.2 ] && [ -s "$W"/cap.pcapng ]; then
  wi=$(window i0 i1)
  if [ -z "$wi" ]; then
    hfail "NFSv4.2 ops: the guest did not reach step i"
  else
    "${TS[@]}" -Y "frame.time_epoch >= ${wi% *} && frame.time_epoch <= ${wi#* } && tcp.dstport == $PORT" \
      -T fields -E occurrence=a -E aggregator=, -e nfs.opcode 2> /dev/null | tr ',' '\n' > "$W"/v42-ops.txt || true
    opn() { grep -cx "$1" "$W"/v42-ops.txt || true; }
    for op in ALLOCATE:59 DEALLOCATE:62 SEEK:69 SETXATTR:73 GETXATTR:72; do
      n=$(opn "${op#*:}")
      if [ "$n" -gt 0 ]; then hpass "NFSv4.2 on the wire: $n ${op%:*}"
      else hfail "NFSv4.2 on the wire: no ${op%:*} call in step i"; fi
    done
    nc=$(( $(opn 60) + $(opn 71) ))
    nw=$(opn 38)
    if [ "$nc" -gt 0 ] && [ "$nw" -le 20 ]; then hpass "NFSv4.2 on the wire: copy_file_range as $nc COPY/CLONE ($nw WRITEs in the whole step)"
    else hfail "NFSv4.2 on the wire: copy_file_range gave $nc COPY/CLONE and $nw WRITEs"; fi
  fi
  # the large copy (ADR 0026): COPY calls, no READ (25) or WRITE (38) of its bytes, and the
  # CB_OFFLOAD (callback op 15) of an asynchronous copy when the client asked for one
  wc=$(window i-cp0 i-cp1)
  if [ -z "$wc" ]; then
    hfail "NFSv4.2 large copy: the guest did not reach it"
  else
    cflt="frame.time_epoch >= ${wc% *} && frame.time_epoch <= ${wc#* }"
    "${TS[@]}" -Y "$cflt && tcp.dstport == $PORT" -T fields -E occurrence=a -E aggregator=, \
      -e nfs.opcode 2> /dev/null | tr ',' '\n' > "$W"/v42-copy-ops.txt || true
    cpn() { grep -cx "$1" "$W"/v42-copy-ops.txt || true; }
    ncb=$("${TS[@]}" -Y "$cflt && tcp.srcport == $PORT && nfs.cb.operation == 15" 2> /dev/null | wc -l)
    ncp=$(cpn 60); nrd=$(cpn 25); nwr=$(cpn 38)
    if [ "$ncp" -gt 0 ] && [ "$nrd" -le 4 ] && [ "$nwr" -le 4 ]; then
      hpass "NFSv4.2 large copy: $ncp COPY, $nrd READ, $nwr WRITE on the wire, $ncb CB_OFFLOAD"
    else hfail "NFSv4.2 large copy: $ncp COPY, $nrd READ, $nwr WRITE on the wire ($ncb CB_OFFLOAD)"; fi
    if [ "$ncb" -gt 0 ]; then hpass "NFSv4.2 large copy: ran asynchronously (CB_OFFLOAD)"
    else log "NFSv4.2 large copy: no CB_OFFLOAD (the client asked for a synchronous copy, or it ran synchronously)"; fi
  fi
  got=$(python3 -c 'import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], "user.color").decode())' "$EXPORT"/v42/alloc 2>&1)
  if [ "$got" = blue ]; then hpass "NFSv4.2: user.color of v42/alloc on the host disk is the guest's"
  else hfail "NFSv4.2: user.color of v42/alloc on the host disk: $got"; fi
fi
if [ "$VERS" = 3 ] || [ "$VERS" = 4.0 ]; then
  log "NFSv$VERS: no delegations, deleg/ws.txt not checked"
elif [ -s "$SHARE"/deleg/ws-want ] && [ -f "$EXPORT"/deleg/ws.txt ]; then
  if cmp -s "$SHARE"/deleg/ws-want "$EXPORT"/deleg/ws.txt; then
    hpass "deleg/ws.txt on the host disk: the guest's writes from before and after the restart"
  else
    hfail "deleg/ws.txt on the host disk differs from what the guest wrote ($(wc -c < "$EXPORT"/deleg/ws.txt) bytes, want $(wc -c < "$SHARE"/deleg/ws-want))"
  fi
else
  hfail "deleg/ws.txt: missing on the host disk or no expected content from the guest (step g)"
fi

# Kerberos (step k): the guest's files on the host disk (bytes, owner from the gss map), and
# the wire: RPCSEC_GSS data calls of each service on the Kerberos server's port, the krb5p
# file's marker never in clear there; controls: the krb5i and krb5 files' markers are in that
# capture, and the krb5p marker is in the sec=sys server's, where the guest wrote it too.
if [ "$KRB_ON" = 1 ]; then
  if [ -n "$KRB_ERR" ]; then
    hfail "Kerberos (step k): not run: $KRB_ERR"
  else
    stop_pid "$KTSHARK_PID" TERM; KTSHARK_PID=
    for f in krb5p krb5i krb5; do
      if [ -f "$KEXPORT"/k-$f.bin ] && cmp -s "$SHARE"/krb/data-$f.bin "$KEXPORT"/k-$f.bin; then
        hpass "$f: k-$f.bin on the host disk has the guest's bytes ($(wc -c < "$KEXPORT"/k-$f.bin) bytes)"
      else
        hfail "$f: k-$f.bin on the host disk: missing or not the guest's bytes"
      fi
      own=$(stat -c %u:%g "$KEXPORT"/k-$f.bin 2> /dev/null || echo missing)
      if [ "$own" = "$KUID:$KUID" ]; then hpass "$f: k-$f.bin owned by $own (the gss map's ids of nfs/$KGUEST@$KREALM, the guest root's machine credential)"
      else hfail "$f: k-$f.bin owned by $own, want $KUID:$KUID (the gss map's ids of nfs/$KGUEST@$KREALM)"; fi
    done
    if [ -s "$W"/kcap.pcapng ]; then
      KTS=(tshark -n -r "$W"/kcap.pcapng -d "tcp.port==$KPORT,rpc")
      # RPCSEC_GSS data calls by service: 1 none (krb5), 2 integrity (krb5i), 3 privacy (krb5p)
      "${KTS[@]}" -Y 'rpc.msgtyp == 0 && rpc.auth.flavor == 6 && rpc.authgss.procedure == 0' -T fields \
        -E occurrence=f -e rpc.authgss.service 2> /dev/null | sort | uniq -c > "$W"/kcap-services.txt || true
      nsvc() { awk -v s="$1" '$2 == s { print $1 }' "$W"/kcap-services.txt | grep . || echo 0; }
      mk() { grep -caF "$(cat "$SHARE"/krb/marker-$1)" "$2" 2> /dev/null || true; }
      np=$(mk krb5p "$W"/kcap.pcapng); ni=$(mk krb5i "$W"/kcap.pcapng); nn=$(mk krb5 "$W"/kcap.pcapng)
      nctl=$(mk krb5p "$W"/cap.pcapng)
      log "Kerberos capture: $(wc -c < "$W"/kcap.pcapng) bytes; RPCSEC_GSS data calls: $(nsvc 3) privacy, $(nsvc 2) integrity, $(nsvc 1) none; marker lines in it: krb5p $np, krb5i $ni, krb5 $nn (krb5p marker in the sec=sys capture: $nctl)"
      for sv in 3:krb5p:privacy 2:krb5i:integrity 1:krb5:none; do
        IFS=: read -r n f d <<< "$sv"
        c=$(nsvc "$n")
        if [ "$c" -gt 0 ]; then hpass "$f on the wire: $c RPCSEC_GSS data calls with service $d"
        else hfail "$f on the wire: no RPCSEC_GSS data call with service $d on port $KPORT"; fi
      done
      if [ "$np" -eq 0 ] && [ "$ni" -gt 0 ] && [ "$nn" -gt 0 ] && [ "${nctl:-0}" -gt 0 ]; then
        hpass "krb5p on the wire: its file's marker line is not in the capture (the krb5i and krb5 files' markers are, $ni and $nn times; the krb5p marker is $nctl times in the sec=sys capture)"
      elif [ "$np" -ne 0 ]; then
        hfail "krb5p on the wire: its file's marker line is in the capture $np times (in clear)"
      else
        hfail "krb5p on the wire: marker absent, but a control failed (krb5i marker $ni, krb5 marker $nn times in the capture, krb5p marker $nctl times in the sec=sys capture): the check proves nothing"
      fi
    else
      hfail "Kerberos: $W/kcap.pcapng is empty or missing"
    fi
    echo "--- Kerberos server log: warnings/errors (first 10) in $KSLOG"
    grep -aiE 'warn|error|panic' "$KSLOG" | head -10 || true
  fi
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
