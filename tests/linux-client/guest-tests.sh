#!/bin/sh
# Runs INSIDE the guest (busybox ash, as root) as /share/run.sh: the real Linux NFSv4 client (4.2 by default, MOUNT_VERS)
# against the server on the host (10.0.2.100:2049 -> 127.0.0.1:$PORT).  Every check prints a
# "PASS: ..." or "FAIL: ..." line; the script exits non-zero if any check failed.  A check that
# makes later steps meaningless (mount) ends the script at once.  "TIME <step>: N s" per step.
# Hangs: each step has a time limit (begin NAME SECONDS).  A watchdog process then reports the
# step as hung (FAIL), prints the blocked tasks (sysrq w) and the RPC tasks in flight, and
# SIGKILLs whatever the script is running (NFS waits on a hard mount are killable) until the
# next step begins, so one hang costs one step and the other steps still run.
# Inputs from the host, in /share: params.sh (EXPORT_PATH), tree.tar (step b), deleg/*-v1, -v2
# (steps f, g: the versions of the files the host wrote to the export's deleg/ and writes later).
# Outputs to /share: big.md5 (a), ls-guest.txt (c), host-request (f, g: actions the host runs,
# answered in host-done; see hostreq), restart-request (g; the host answers with restart-done
# after kill -9 + restart of the server), deleg/ws-want (g), summary.txt.
set -u
. /share/params.sh
EXPORT_PATH=${EXPORT_PATH:-/}
SRV=10.0.2.100
M=/mnt/nfs
MB=${MB:-64}
NPASS=0; NFAIL=0

up() { cut -d' ' -f1 /proc/uptime; }
pass() { NPASS=$((NPASS + 1)); echo "PASS: $*"; }
fail() { NFAIL=$((NFAIL + 1)); echo "FAIL: $*"; }
# check DESC CMD... : PASS iff CMD exits 0
check() { d=$1; shift; if "$@"; then pass "$d"; else fail "$d (exit $?: $*)"; fi; }
# eq DESC GOT WANT
eq() { if [ "$2" = "$3" ]; then pass "$1 [$2]"; else fail "$1: got '$2', want '$3'"; fi; }
dropcaches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
md5() { md5sum "$@" | cut -d' ' -f1; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
rate() { awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN{printf "%d MiB in %.2f s = %.1f MiB/s", m, b-a, m/(b-a)}'; }
STEP=; ST0=
# begin NAME LIMIT_SECONDS
begin() {
  STEP=$1; ST0=$(up); echo; echo "=== [$STEP] t=${ST0}s (limit ${2}s)"
  echo "$STEP $ST0 $2" > /tmp/step.new; mv /tmp/step.new /tmp/step
}
end() { echo "TIME $STEP: $(secs "$ST0" "$(up)") s"; }

# ---- watchdog (a separate sh: busybox ash has no $BASHPID to exclude a subshell from the kill)
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
cat > /tmp/watchdog.sh <<'WD'
# usage: watchdog.sh MAIN_PID
main=$1; me=$$; fired=
ppid_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2; }
# descendants of $1, not including the watchdog itself or its children
descendants() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = "$me" ] && continue
    q=$p
    while [ -n "$q" ] && [ "$q" -gt 1 ]; do
      q=$(ppid_of "$q")
      [ "$q" = "$me" ] && break
      if [ "$q" = "$1" ]; then echo "$p"; break; fi
    done
  done
}
while sleep 2; do
  kill -0 "$main" 2>/dev/null || exit 0
  read -r s t0 lim < /tmp/step || continue
  [ "$s" = done ] && exit 0
  over=$(awk -v a="$t0" -v l="$lim" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{print (b-a > l) ? 1 : 0}')
  [ "$over" = 1 ] || continue
  pids=$(descendants "$main")
  if [ "$fired" != "$s" ]; then
    fired=$s
    echo "FAIL: [$s] still running after ${lim}s: hung (watchdog); processes (busybox applets show as sh): $(for p in $pids; do tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null; echo -n '| '; done)"
    echo "$s" >> /tmp/wd-fails
    echo "--- blocked tasks (sysrq w)"; echo w > /proc/sysrq-trigger; sleep 1; dmesg | tail -60
    echo "--- RPC tasks in flight"; cat /sys/kernel/debug/sunrpc/rpc_clnt/*/tasks 2>/dev/null | head -20
    echo "--- killing the step's processes until the next step begins"
  fi
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
done
WD
: > /tmp/wd-fails
echo "init 0 100000" > /tmp/step
sh /tmp/watchdog.sh $$ &

finish() {
  echo "done 0 0" > /tmp/step
  NFAIL=$((NFAIL + $(wc -l < /tmp/wd-fails)))
  echo
  if dmesg | grep -i stale > /tmp/stale.txt; then
    fail "kernel log mentions 'stale': $(head -3 /tmp/stale.txt | tr '\n' '|')"
  else
    pass "no 'stale' in the kernel log"
  fi
  if [ "$NFAIL" -ne 0 ]; then
    echo "--- dmesg (last 40 lines)"; dmesg | tail -40
  fi
  echo "guest: $NPASS passed, $NFAIL failed"
  echo "$NPASS $NFAIL" > /share/summary.txt
  [ "$NFAIL" -eq 0 ]
  exit $?
}
# waitfile FILE PATTERN SECONDS: wait until FILE contains PATTERN
waitfile() {
  i=0
  while [ "$i" -lt $(($3 * 20)) ]; do
    grep -q "$2" "$1" 2>/dev/null && return 0
    usleep 50000; i=$((i + 1))
  done
  return 1
}

# hostreq LABEL ACTION ARGS...: ask the host to do ACTION (see run.sh: mark, nfs-cp, nfs-cat) and
# wait for it; returns the host's status.  The host logs the action's time window under LABEL
# for its capture checks.
REQN=0
hostreq() {
  REQN=$((REQN + 1))
  rm -f /share/host-done
  echo "$REQN $*" > /share/host-request.tmp
  mv /share/host-request.tmp /share/host-request
  if ! waitfile /share/host-done "^$REQN " 90; then
    echo "host did not answer request $REQN ($*) within 90 s"
    return 124
  fi
  read -r _ st < /share/host-done
  return "$st"
}
# SKIP_STEPS (a development knob from the host's environment, e.g. "b c"): steps b and c are
# skipped when named there (the checks that depend on them then fail)
want() { case " ${SKIP_STEPS:-} " in *" $1 "*) return 1 ;; *) return 0 ;; esac; }
D=$M/deleg; DS=/share/deleg

echo "guest $(hostname), kernel $(uname -r), server $SRV:$EXPORT_PATH"

# ---------------------------------------------------------------- mount
begin mount 60
mkdir -p $M
# MOUNT_VERS (params.sh): empty = the client's defaults (Linux negotiates the highest minor
# version it knows, 4.2), else an explicit vers= option. NFSv3 finds MOUNT on the NFS port;
# against txnfs it locks with NLM: the guest runs rpcbind and rpc.statd (the kernel's lockd
# registers with the one and asks the other to monitor the server), and the server's lockd is
# found through the host's portmap-stub.py at 10.0.2.100:111 (run-vm.sh).  Other servers, or a
# guest without rpcbind, mount with nolock and skip step e.  Steps f and g (delegations) are
# skipped for NFSv3 (run.sh puts them in SKIP_STEPS).
if [ -n "${MOUNT_VERS:-}" ]; then set -- -o "vers=$MOUNT_VERS"; WANT_VERS=$MOUNT_VERS; else set --; WANT_VERS=4.2; fi
FSTYPE=nfs4
if [ "$WANT_VERS" = 3 ]; then
  LOCKOPT=nolock
  if [ "${SERVER_KIND:-}" = txnfs ] && [ -x /sbin/rpcbind ]; then
    mkdir -p /run/rpcbind
    rpcbind -w && rpc.statd --no-notify && LOCKOPT=lock
    if [ "$LOCKOPT" = lock ]; then pass "rpcbind and rpc.statd started (NLM locks)"
    else fail "rpcbind or rpc.statd did not start: mounting with nolock"; fi
  fi
  [ "$LOCKOPT" = nolock ] && SKIP_STEPS="${SKIP_STEPS:-} e"
  set -- -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,$LOCKOPT; FSTYPE=nfs
fi
if mount.nfs "$SRV:$EXPORT_PATH" $M "$@"; then
  pass "mount $SRV:$EXPORT_PATH ${*:-(default options)}"
else
  fail "mount $SRV:$EXPORT_PATH ${*:-(default options)} failed"
  echo "--- dmesg tail"; dmesg | tail -20
  finish
fi
grep " $M " /proc/mounts
check "mount is NFSv$WANT_VERS" grep -q " $M $FSTYPE .*vers=$WANT_VERS" /proc/mounts
end

# ---------------------------------------------------------------- a: 64 MiB file
begin a-bigfile 120
dd if=/dev/urandom of=/tmp/big bs=1M count="$MB" 2>/dev/null
SRC=$(md5 /tmp/big)
echo "$SRC" > /share/big.md5
t0=$(up)
if dd if=/tmp/big of=$M/big.bin bs=1M conv=fsync 2>/tmp/dd.err; then
  pass "dd ${MB} MiB to NFS (conv=fsync)"
else
  fail "dd ${MB} MiB to NFS (conv=fsync): $(tail -2 /tmp/dd.err)"
fi
t1=$(up); echo "WRITE: $(rate "$t0" "$t1" "$MB")"
dropcaches
eq "size of big.bin after drop_caches" "$(stat -c %s $M/big.bin)" $((MB * 1048576))
t0=$(up)
eq "md5 of big.bin read back (caches dropped)" "$(md5 $M/big.bin)" "$SRC"
t1=$(up); echo "READ: $(rate "$t0" "$t1" "$MB")"
end

# ---------------------------------------------------------------- b: tar extraction
NLS=-1
if want b; then
begin b-tar 480
mkdir -p /tmp/ref
tar -xf /share/tree.tar -C /tmp/ref
NREF=$(find /tmp/ref/tree | wc -l)
echo "reference tree in tmpfs: $NREF entries"
t0=$(up)
check "tar -xf tree.tar onto NFS" tar -xf /share/tree.tar -C $M
echo "extract: $(secs "$t0" "$(up)") s"
dropcaches
t0=$(up)
if diff -r /tmp/ref/tree $M/tree > /tmp/diff.out 2>&1; then
  pass "diff -r tmpfs copy vs NFS copy: identical"
else
  fail "diff -r tmpfs copy vs NFS copy: $(wc -l < /tmp/diff.out) lines of differences"
  head -20 /tmp/diff.out
fi
echo "diff: $(secs "$t0" "$(up)") s"
eq "entries under tree/ (find)" "$(find $M/tree | wc -l)" "$NREF"
eq "symlinks under tree/" "$(find $M/tree -type l | wc -l)" "$(find /tmp/ref/tree -type l | wc -l)"
end
fi

# ---------------------------------------------------------------- c: ls -lnR listing
if want c; then
begin c-listing 120
dropcaches
# numeric ids, full timestamps (UTC: the guest has no time zone)
if (cd $M/tree && ls -lnR --full-time .) > /share/ls-guest.txt 2>/tmp/ls.err; then
  pass "ls -lnR --full-time of tree/ ($(wc -l < /share/ls-guest.txt) lines, compared on the host)"
else
  fail "ls -lnR of tree/: $(head -3 /tmp/ls.err)"
fi
NLS=$(wc -l < /share/ls-guest.txt)
end
fi

# ---------------------------------------------------------------- d: namespace/attribute ops
begin d-ops 90
O=$M/ops
mkdir -p $O
# rename a file over an existing file
echo AAA > $O/f1; echo BBB > $O/f2
check "rename file over existing file" guest-tool rename $O/f1 $O/f2
dropcaches
check "  old name gone" test ! -e $O/f1
eq "  target has the source's content" "$(cat $O/f2)" AAA
# rename a directory over an existing empty directory (rename(2): busybox mv would move into it)
mkdir -p $O/d1 $O/d2 $O/d3; echo inner > $O/d1/inner; echo x > $O/d3/x
check "rename dir over existing empty dir" guest-tool rename $O/d1 $O/d2
dropcaches
check "  old dir gone" test ! -e $O/d1
eq "  content moved with it" "$(cat $O/d2/inner 2>&1)" inner
OUT=$(guest-tool rename $O/d2 $O/d3)
eq "rename dir over non-empty dir fails (ENOTEMPTY/EEXIST)" \
  "$(echo "$OUT" | grep -cE 'Directory not empty|File exists')" 1
mkdir -p $O/sub
check "rename file across directories" guest-tool rename $O/f2 $O/sub/moved
eq "  content after cross-dir rename" "$(cat $O/sub/moved)" AAA
# hard link
echo linked > $O/h1
check "hard link" ln $O/h1 $O/h2
dropcaches
eq "  link count 2 (stat %h)" "$(stat -c %h $O/h1)" 2
eq "  same inode number" "$(stat -c %i $O/h2)" "$(stat -c %i $O/h1)"
eq "  content via the link" "$(cat $O/h2)" linked
rm $O/h1
dropcaches
eq "  link count 1 after unlink" "$(stat -c %h $O/h2)" 1
# symlink
check "symlink" ln -s ../ops/sub/moved $O/sl
dropcaches
eq "  readlink" "$(readlink $O/sl)" ../ops/sub/moved
eq "  content through the symlink" "$(cat $O/sl)" AAA
eq "  lstat: is a symlink" "$(stat -c %F $O/sl)" "symbolic link"
# chmod
echo m > $O/mode
check "chmod 640" chmod 640 $O/mode
check "chmod 4711 (setuid) on a file" chmod 4711 $O/h2
mkdir -p $O/dm; check "chmod 1777 (sticky) on a dir" chmod 1777 $O/dm
dropcaches
eq "  mode 640 after drop_caches" "$(stat -c %a $O/mode)" 640
eq "  mode 4711 after drop_caches" "$(stat -c %a $O/h2)" 4711
eq "  mode 1777 after drop_caches" "$(stat -c %a $O/dm)" 1777
# truncate: shrink then grow; content checked against a local model
head -c 10000 /tmp/big > $O/tr
head -c 4000 /tmp/big > /tmp/tr.want
check "truncate -s 4000 (shrink)" truncate -s 4000 $O/tr
dropcaches
eq "  size after shrink" "$(stat -c %s $O/tr)" 4000
eq "  content after shrink" "$(md5 $O/tr)" "$(md5 /tmp/tr.want)"
check "truncate -s 100000 (grow)" truncate -s 100000 $O/tr
truncate -s 100000 /tmp/tr.want
dropcaches
eq "  size after grow" "$(stat -c %s $O/tr)" 100000
eq "  content after grow (zero tail)" "$(md5 $O/tr)" "$(md5 /tmp/tr.want)"
check "truncate -s 0" truncate -s 0 $O/tr
dropcaches
eq "  size after truncate to 0" "$(stat -c %s $O/tr)" 0
# utimes (the guest runs in UTC)
echo t > $O/times
check "touch -d '2001-02-03 04:05:06'" touch -d '2001-02-03 04:05:06' $O/times
dropcaches
eq "  mtime (stat %Y)" "$(stat -c %Y $O/times)" 981173106
eq "  atime (stat %X)" "$(stat -c %X $O/times)" 981173106
check "touch -t 199912312359.58" touch -t 199912312359.58 $O/times
dropcaches
eq "  mtime after touch -t" "$(stat -c %Y $O/times)" 946684798
check "touch -m -d '2030-01-01 00:00:00' (mtime only, future)" touch -m -d '2030-01-01 00:00:00' $O/times
dropcaches
eq "  mtime after touch -m" "$(stat -c %Y $O/times)" 1893456000
eq "  atime unchanged by touch -m" "$(stat -c %X $O/times)" 946684798
end

# ---------------------------------------------------------------- e: locks
if want e; then
begin e-locks 120
L=$M/locks
mkdir -p $L
# the files are created by guest-tool (O_DIRECT: no delegation, see guest-tool.c), so the
# locks below are the server's to grant, not the client's to keep to itself
rm -f $L/fl $L/fc
NLOCK0=$(awk '$1 == "LOCK:" {print $2; exit}' /proc/self/mountstats)
# flock(2) (the Linux NFS client sends it to the server as a whole-file lock)
rm -f /tmp/rel.*
guest-tool flock $L/fl x /tmp/rel.a > /tmp/a.out 2>&1 &
A=$!
if waitfile /tmp/a.out locked 30; then pass "flock -x by A"; else fail "flock -x by A: $(cat /tmp/a.out)"; fi
eq "flock -n -x by B while A holds it" "$(guest-tool flock $L/fl x 0)" conflict
eq "flock -n -s by B while A holds -x" "$(guest-tool flock $L/fl s 0)" conflict
touch /tmp/rel.a; wait $A
eq "A released its flock" "$(tail -1 /tmp/a.out)" released
eq "flock -n -x by B after A released" "$(guest-tool flock $L/fl x 0 | head -1)" locked
# shared flocks coexist
guest-tool flock $L/fl s /tmp/rel.b > /tmp/b.out 2>&1 &
A=$!
waitfile /tmp/b.out locked 30 || true
eq "flock -n -s by B while A holds -s" "$(guest-tool flock $L/fl s 0 | head -1)" locked
eq "flock -n -x by B while A holds -s" "$(guest-tool flock $L/fl x 0)" conflict
touch /tmp/rel.b; wait $A
# fcntl(2) byte-range locks
guest-tool fcntl $L/fc w 0 100 /tmp/rel.c > /tmp/c.out 2>&1 &
A=$!
if waitfile /tmp/c.out locked 30; then pass "fcntl write lock [0,100) by A"; else fail "fcntl lock by A: $(cat /tmp/c.out)"; fi
eq "fcntl write [50,150) by B: overlaps" "$(guest-tool fcntl $L/fc w 50 100 0)" conflict
eq "fcntl write [99,100) by B: overlaps by one byte" "$(guest-tool fcntl $L/fc w 99 1 0)" conflict
eq "fcntl read [0,10) by B: overlaps A's write lock" "$(guest-tool fcntl $L/fc r 0 10 0)" conflict
eq "fcntl write [100,200) by B: adjacent, no overlap" "$(guest-tool fcntl $L/fc w 100 100 0 | head -1)" locked
eq "fcntl write [1000,EOF) by B: disjoint" "$(guest-tool fcntl $L/fc w 1000 0 0 | head -1)" locked
eq "fcntl write [0,EOF) by B: overlaps" "$(guest-tool fcntl $L/fc w 0 0 0)" conflict
touch /tmp/rel.c; wait $A
eq "A released its fcntl lock" "$(tail -1 /tmp/c.out)" released
eq "fcntl write [50,150) by B after A released" "$(guest-tool fcntl $L/fc w 50 100 0 | head -1)" locked
# read locks share, write vs read conflicts
guest-tool fcntl $L/fc r 500 100 /tmp/rel.d > /tmp/d.out 2>&1 &
A=$!
waitfile /tmp/d.out locked 30 || true
eq "fcntl read [500,600) by B while A holds a read lock there" "$(guest-tool fcntl $L/fc r 550 100 0 | head -1)" locked
eq "fcntl write [550,560) by B while A holds a read lock" "$(guest-tool fcntl $L/fc w 550 10 0)" conflict
touch /tmp/rel.d; wait $A
# A lock held by another client on the host (an NFSv4.1 client, run.sh's v4-lock-* actions)
# conflicts with the guest's (NLM on vers=3, LOCK on v4), both ways.  guest-tool creates the
# file (O_DIRECT: no delegation that would keep the guest's locks local).
rm -f $L/v4; guest-tool fcntl $L/v4 w 0 1 0 > /dev/null 2>&1
hostreq e-v4-hold v4-lock-hold locks/v4
eq "the host's NFSv4 client holds a write lock of locks/v4" "$?" 0
eq "fcntl write [0,100) by the guest while the host's v4 client holds [0,EOF)" "$(guest-tool fcntl $L/v4 w 0 100 0)" conflict
eq "flock -n -s by the guest while the host's v4 client holds [0,EOF)" "$(guest-tool flock $L/v4 s 0)" conflict
hostreq e-v4-release v4-lock-release
eq "the host's v4 client released its lock" "$?" 0
guest-tool fcntl $L/v4 w 10 10 /tmp/rel.e > /tmp/e.out 2>&1 &
A=$!
if waitfile /tmp/e.out locked 30; then pass "fcntl write [10,20) by the guest after the host released"; else fail "fcntl lock after the host released: $(cat /tmp/e.out)"; fi
hostreq e-v4-try v4-lock-try locks/v4
eq "the host's v4 LOCK of [0,EOF) while the guest holds [10,20): DENIED (status 3)" "$?" 3
touch /tmp/rel.e; wait $A
hostreq e-v4-try2 v4-lock-try locks/v4
eq "the host's v4 LOCK of [0,EOF) after the guest released: granted" "$?" 0
if [ "$WANT_VERS" = 3 ]; then
  # NLM calls are not in mountstats; the kernel's lockd asked statd to monitor the server
  # before its first NLM LOCK
  check "the locks went to the server's NLM (statd monitors it: /var/lib/nfs/sm/$(ls /var/lib/nfs/sm | head -1))" \
    sh -c '[ -n "$(ls /var/lib/nfs/sm)" ]'
else
NLOCK=$(($(awk '$1 == "LOCK:" {print $2; exit}' /proc/self/mountstats) - ${NLOCK0:-0}))
if [ "$NLOCK" -gt 0 ]; then pass "the server granted the locks: $NLOCK LOCK ops (mountstats)"
else fail "only $NLOCK LOCK ops reached the server (mountstats): locks kept by the client (delegation?)"; fi
fi
end
fi

# ---------------------------------------------------------------- f: delegations
# The files under deleg/ were written by the host before the guest started (run.sh); the
# guest has never opened them, so each first OPEN below is one txnfs may delegate.  The host's
# capture checks find the traffic of each part by the time windows of the marks and actions
# (LABEL of hostreq).  What the guest checks here is the outcome: the bytes it reads.
# same DESC FILE WANT_FILE: FILE has WANT_FILE's bytes
same() {
  if cmp -s "$2" "$3"; then pass "$1 ($(wc -c < "$3") bytes)"
  else fail "$1: $(wc -c < "$2" 2>/dev/null || echo no) bytes, want $(wc -c < "$3") bytes; head: $(head -c 60 "$2" 2>/dev/null | head -1)"; fi
}
if want f; then
begin f-deleg 150
# (a) a read delegation for cat, a write delegation for an open for append
hostreq f-read0 mark
cat $D/r.txt > /tmp/r.out
hostreq f-read1 mark
same "cat deleg/r.txt (first open: read delegation)" /tmp/r.out $DS/r-v1
hostreq f-write0 mark
exec 3>> $D/w.txt
echo "guest line, buffered under a write delegation" >&3
exec 6< $D/w.txt    # a second open, for read: the client serves it from the delegation alone
hostreq f-write1 mark
{ cat $DS/w-v1; echo "guest line, buffered under a write delegation"; } > /tmp/w.want
hostreq f-rc0 mark
exec 4< $D/rc.txt
cat <&4 > /tmp/rc.out
hostreq f-rc1 mark
same "read deleg/rc.txt through a held fd" /tmp/rc.out $DS/rc-v1
# (b) the host changes files the guest has delegated, through txnfs as a second NFS client:
# each change must recall the delegation (the server holds the host's request until the guest
# returns it), and the guest must then read the host's bytes, not its cache
check "host: txnfs cp r-v2 over deleg/r.txt (the guest holds a read delegation, no open)" \
  hostreq f-cp-r nfs-cp deleg/r-v2 deleg/r.txt
cat $D/r.txt > /tmp/r.out
same "  guest cat deleg/r.txt: the host's new content" /tmp/r.out $DS/r-v2
check "host: txnfs cp rc-v2 over deleg/rc.txt (the guest holds a read delegation and an open fd)" \
  hostreq f-cp-rc nfs-cp deleg/rc-v2 deleg/rc.txt
exec 4<&-
cat $D/rc.txt > /tmp/rc.out
same "  guest cat deleg/rc.txt: the host's new content" /tmp/rc.out $DS/rc-v2
check "host: txnfs cat deleg/w.txt (the guest holds a write delegation and unflushed data)" \
  hostreq f-cat-w nfs-cat deleg/w.txt deleg/w-host.out
if [ "${SERVER_KIND:-}" = txnfs ]; then
  same "  the host read the guest's unflushed write" $DS/w-host.out /tmp/w.want
else
  # without a write delegation to recall, nothing makes the client flush for another reader
  echo "SKIP: the host read the guest's unflushed write (only a delegation recall flushes it; $SERVER_KIND grants none)"
fi
cat <&6 > /tmp/w6.out
same "  read through the fd opened under the write delegation" /tmp/w6.out /tmp/w.want
exec 3>&- 6<&-
dropcaches
cat $D/w.txt > /tmp/w.out
same "  guest cat deleg/w.txt after close and drop_caches" /tmp/w.out /tmp/w.want
end
fi

# ---------------------------------------------------------------- i: NFSv4.2 operations
# Only on a 4.2 mount (4.1 has none of them). Each call goes to the server as its 4.2 op;
# the host counts them in the capture between the marks i0 and i1, and checks the
# extended attribute on its disk (v42/alloc, user.color = blue).
if [ "$WANT_VERS" = 4.2 ]; then
begin i-v42 120
V=$M/v42
mkdir -p $V
hostreq i0 mark
check "fallocate 1 MiB (ALLOCATE)" guest-tool falloc $V/alloc 0 1048576
eq "  size after fallocate" "$(stat -c %s $V/alloc)" 1048576
dd if=/dev/urandom of=/tmp/punch bs=65536 count=3 2>/dev/null
cp /tmp/punch $V/punch
check "fallocate --punch-hole of the middle 64 KiB (DEALLOCATE)" guest-tool falloc $V/punch 65536 65536 punch
{ head -c 65536 /tmp/punch; head -c 65536 /dev/zero; tail -c 65536 /tmp/punch; } > /tmp/punch.want
dropcaches
same "  the punched file reads back with zeros in the hole" $V/punch /tmp/punch.want
# a sparse file: 4 KiB of data, a 1 MiB hole, 4 KiB of data
dd if=/dev/urandom of=/tmp/sparse bs=4096 count=1 2>/dev/null
dd if=/dev/urandom of=/tmp/sparse bs=4096 count=1 seek=257 conv=notrunc 2>/dev/null
cp /tmp/sparse $V/sparse-src
guest-tool falloc $V/sparse-src 4096 1048576 punch
sync
eq "lseek SEEK_HOLE from 0 (SEEK)" "$(guest-tool seek $V/sparse-src 0 hole)" 4096
eq "lseek SEEK_DATA from 4096 (SEEK)" "$(guest-tool seek $V/sparse-src 4096 data)" 1052672
eq "lseek SEEK_DATA at end of file" "$(guest-tool seek $V/sparse-src 1056768 data)" nxio
eq "copy_file_range of the whole file (COPY)" "$(guest-tool cfr $V/sparse-src $V/sparse-copy)" 1056768
dropcaches
eq "  the copy has the source's bytes" "$(md5 $V/sparse-copy)" "$(md5 /tmp/sparse)"
# a large copy (big.bin, $MB MiB): one COPY the server may run asynchronously (CB_OFFLOAD,
# ADR 0026); the host checks that no READ or WRITE of the bytes crossed the wire between
# the marks i-cp0 and i-cp1
sync
hostreq i-cp0 mark
eq "copy_file_range of big.bin (COPY, asynchronous)" "$(guest-tool cfr $M/big.bin $V/big-copy)" $((MB * 1048576))
hostreq i-cp1 mark
dropcaches
eq "  the copy of big.bin has its bytes" "$(md5 $V/big-copy)" "$SRC"
rm -f $V/big-copy
check "setxattr user.color (SETXATTR)" guest-tool setxattr $V/alloc user.color blue
dropcaches
eq "getxattr user.color (GETXATTR)" "$(guest-tool getxattr $V/alloc user.color)" blue
hostreq i1 mark
end
fi

# ---------------------------------------------------------------- g: server restart
if want g; then
begin g-restart 240
dropcaches
ls $M/tree/a0/b0 > /dev/null
cd $O || exit 1             # the shell's cwd keeps a file handle from before the restart
exec 3< $M/big.bin          # an open file (open stateid) held across the restart
# delegations held across the restart: a read delegation with an open fd (nothing read yet),
# a write delegation with data written but not flushed
hostreq g-hold0 mark
exec 4< $D/rs.txt
exec 5>> $D/ws.txt
echo "guest line written before the restart" >&5
hostreq g-hold1 mark
{ cat $DS/ws-v1; echo "guest line written before the restart"; echo "guest line written after the restart"; } \
  > $DS/ws-want
rm -f /share/restart-done
hostname > /share/restart-request
echo "requested a server restart (kill -9 + start) at t=$(up)s"
if waitfile /share/restart-done . 120; then
  eq "host restarted the server" "$(cat /share/restart-done)" "done"
else
  fail "host did not answer the restart request within 120 s"
fi
t0=$(up)
eq "read through the fd held across the restart (md5)" "$(md5sum <&3 | cut -d' ' -f1)" "$SRC"
echo "first read after restart finished after $(secs "$t0" "$(up)") s"
exec 3<&-
cat <&4 > /tmp/rs.out
same "read deleg/rs.txt through the fd (read delegation) held across the restart" /tmp/rs.out $DS/rs-v1
echo "guest line written after the restart" >&5
exec 5>&-
dropcaches
cat $D/ws.txt > /tmp/ws.out
same "deleg/ws.txt (write delegation, dirty data across the restart) after close and drop_caches" /tmp/ws.out $DS/ws-want
check "host: txnfs cp rs-v2 over deleg/rs.txt after the restart (the guest holds an open fd)" \
  hostreq g-cp-rs nfs-cp deleg/rs-v2 deleg/rs.txt
exec 4<&-
cat $D/rs.txt > /tmp/rs.out
same "  guest cat deleg/rs.txt: the host's new content" /tmp/rs.out $DS/rs-v2
# a delegation granted after the restart (the back channel works again) and recalled
hostreq g-ra0 mark
cat $D/ra.txt > /tmp/ra.out
hostreq g-ra1 mark
same "cat deleg/ra.txt after the restart" /tmp/ra.out $DS/ra-v1
check "host: txnfs cp ra-v2 over deleg/ra.txt (read-delegated after the restart)" \
  hostreq g-cp-ra nfs-cp deleg/ra-v2 deleg/ra.txt
cat $D/ra.txt > /tmp/ra.out
same "  guest cat deleg/ra.txt: the host's new content" /tmp/ra.out $DS/ra-v2
eq "cwd (old file handle) still usable: cat ./sub/moved" "$(cat ./sub/moved 2>&1)" AAA
cd /
dropcaches
eq "md5 of big.bin after restart" "$(md5 $M/big.bin)" "$SRC"
if ls -la $M > /tmp/ls-root.out 2>&1; then pass "ls -la of the mount root after restart"; else fail "ls -la after restart: $(head -3 /tmp/ls-root.out)"; fi
if want c; then
  eq "ls -lnR of tree/ after restart: same number of lines" \
    "$( (cd $M/tree && ls -lnR --full-time .) 2>&1 | wc -l)" "$NLS"
fi
echo "written after the restart" > $M/after-restart 2>/tmp/ar.err || cat /tmp/ar.err
dropcaches
eq "new file created after restart reads back" "$(cat $M/after-restart 2>&1)" "written after the restart"
rm -f $M/after-restart
end
fi

# ---------------------------------------------------------------- j: a second mount, NFSv4.0
# ALSO_V40 (run.sh --also-v40): another version's boot checks NFSv4.0 too, on a mount of its
# own. The server cannot reach the guest's callback address (user-mode network), so the 4.0
# client gets no delegations: its opens, reads, writes and locks all go to the server.
if [ "${ALSO_V40:-0}" = 1 ]; then
begin j-v40 120
M4=/mnt/nfs40
mkdir -p $M4
if mount.nfs "$SRV:$EXPORT_PATH" $M4 -o vers=4.0; then
  pass "mount $SRV:$EXPORT_PATH -o vers=4.0 (second mount)"
  check "second mount is NFSv4.0" grep -q " $M4 nfs4 .*vers=4.0" /proc/mounts
  V4=$M4/v40
  mkdir -p $V4
  dd if=/dev/urandom of=/tmp/v40 bs=1k count=3000 2>/dev/null
  W4=$(md5 /tmp/v40)
  check "v4.0: cp of a 3000 KiB file" cp /tmp/v40 $V4/f
  dropcaches
  eq "v4.0: md5 read back (caches dropped)" "$(md5 $V4/f)" "$W4"
  eq "v4.0: the same file through the vers=$WANT_VERS mount (md5)" "$(md5 $M/v40/f)" "$W4"
  check "v4.0: rename" mv $V4/f $V4/g
  eq "v4.0: renamed file (md5)" "$(md5 $V4/g)" "$W4"
  echo tail >> $V4/g
  dropcaches
  eq "v4.0: size after append" "$(stat -c %s $V4/g)" $((3000 * 1024 + 5))
  guest-tool fcntl $V4/g w 0 100 /tmp/rel.v40 > /tmp/v40.out 2>&1 &
  A=$!
  if waitfile /tmp/v40.out locked 30; then pass "v4.0: fcntl write lock [0,100) by A"; else fail "v4.0: fcntl lock by A: $(cat /tmp/v40.out)"; fi
  eq "v4.0: fcntl write [50,150) by B while A holds [0,100)" "$(guest-tool fcntl $V4/g w 50 100 0)" conflict
  touch /tmp/rel.v40; wait $A
  eq "v4.0: A released its lock" "$(tail -1 /tmp/v40.out)" released
  eq "v4.0: fcntl write [50,150) by B after A released" "$(guest-tool fcntl $V4/g w 50 100 0 | head -1)" locked
  check "v4.0: rm" rm $V4/g
  check "v4.0: the file is gone" sh -c "! ls $V4/g 2>/dev/null"
  check "v4.0: rmdir" rmdir $V4
  check "v4.0: umount" umount $M4
else
  fail "mount $SRV:$EXPORT_PATH -o vers=4.0 (second mount) failed"
  dmesg | tail -20
fi
end
fi

# ---------------------------------------------------------------- k: sec=krb5p/krb5i/krb5 through rpc.gssd
# Only when the host set Kerberos up (run.sh: the default boot against txnfs; its files in
# /share/krb): a second txnfs server, 10.0.2.102:2049, whose export admits only
# sec=krb5p:krb5i:krb5; the KDC is 10.0.2.101:88 (TCP).  rpc.gssd gets the kernel's context
# upcalls through rpc_pipefs and uses the machine key in /etc/krb5.keytab
# (nfs/lkguest.txnfs.test) for root; it names the server nfs@krbsrv.txnfs.test from
# /etc/hosts.  One mount per flavour writes its own marker file (data-FLAVOUR.bin) and reads
# it back; the host checks the files on its disk (bytes, owner 4242 from the server's gss map)
# and its capture of that server's port: the krb5p marker never in it, the krb5i and krb5 ones
# in clear (integrity and header-only protection do not encrypt).  A vers=4.2,sec=sys mount is
# refused.
KS=/share/krb
if want k && [ -s $KS/krb5.keytab ]; then
begin k-krb5 150
KF0=$NFAIL
KSRV=10.0.2.102
# the GSS modules (build-initramfs.sh keeps them out of the boot's and modprobe's way)
KMODS=
while read -r m; do insmod /lib/krb-modules/$m 2>/dev/null; KMODS="$KMODS ${m%.ko}"; done < /etc/modules.krb
check "k: GSS modules loaded:$KMODS" sh -c "for m in rpcsec_gss_krb5 $KMODS; do grep -q \"^\$m \" /proc/modules || exit 1; done"
cp $KS/krb5.conf /etc/krb5.conf
cp $KS/krb5.keytab /etc/krb5.keytab; chmod 600 /etc/krb5.keytab
echo "$KSRV krbsrv.txnfs.test krbsrv" >> /etc/hosts
echo "10.0.2.15 lkguest.txnfs.test $(hostname)" >> /etc/hosts
mkdir -p /var/lib/nfs/rpc_pipefs /mnt/krbsys
grep -q ' /var/lib/nfs/rpc_pipefs ' /proc/mounts || mount -t rpc_pipefs rpc_pipefs /var/lib/nfs/rpc_pipefs
KRB5_TRACE=/tmp/krb5-trace.log rpc.gssd -f -vvv -rrr -p /var/lib/nfs/rpc_pipefs > /tmp/gssd.log 2>&1 &
GSSD=$!
usleep 500000
if kill -0 $GSSD 2>/dev/null; then pass "k: rpc.gssd running"; else fail "k: rpc.gssd exited: $(tail -5 /tmp/gssd.log | tr '\n' '|')"; fi
KMOUNTED=
for f in krb5p krb5i krb5; do
  MK=/mnt/$f; mkdir -p $MK
  t0=$(up)
  if timeout 90 mount.nfs $KSRV:/ $MK -o sec=$f; then
    pass "k: mount $KSRV:/ -o sec=$f ($(secs "$t0" "$(up)") s)"
    KMOUNTED="$KMOUNTED $MK"
    check "k: the mount is sec=$f" grep -q " $MK nfs4 .*sec=$f," /proc/mounts
    check "k: $f: cp of its marker file (4000 lines)" cp $KS/data-$f.bin $MK/k-$f.bin
  else
    fail "k: mount $KSRV:/ -o sec=$f failed"
    echo "--- dmesg tail"; dmesg | tail -20
    echo "--- libkrb5 trace of rpc.gssd (errors; all in /share/krb/krb5-trace.log)"
    grep -ai 'error\|fail\|unable' /tmp/krb5-trace.log | grep -v 'plugin' | tail -15
  fi
done
dropcaches
for MK in $KMOUNTED; do
  f=${MK#/mnt/}
  eq "k: $f: md5 read back (caches dropped)" "$(md5 $MK/k-$f.bin)" "$(md5 $KS/data-$f.bin)"
  # the NFSv4 owner the server sends (numeric: no idmapd in the guest); the host checks its disk
  eq "k: $f: owner as the guest sees it (the server's gss map: 4242)" "$(stat -c '%u:%g' $MK/k-$f.bin)" 4242:4242
done
# the krb5p bytes through the sec=sys mount of the other server: a second control (that
# capture must hold the krb5p marker)
check "k: cp of the krb5p marker file onto the sec=sys mount (capture control)" cp $KS/data-krb5p.bin $M/k-clear.bin
sync
# sec=sys against an export that admits only Kerberos: refused (NFS4ERR_WRONGSEC, which the
# client reports as EPERM). vers=4.2: without it mount.nfs would fall back to NFSv3 and fail
# there for want of rpc.statd, not because of the server.
if timeout 60 mount.nfs $KSRV:/ /mnt/krbsys -o vers=4.2,sec=sys,retry=0 > /tmp/ksys.out 2>&1; then
  fail "k: mount -o vers=4.2,sec=sys of the Kerberos-only export succeeded"
  umount /mnt/krbsys
elif grep -q 'not permitted' /tmp/ksys.out; then
  pass "k: mount -o vers=4.2,sec=sys of the Kerberos-only export refused ($(tail -1 /tmp/ksys.out))"
else
  fail "k: mount -o vers=4.2,sec=sys failed, but not with EPERM: $(tr '\n' '|' < /tmp/ksys.out)"
fi
check "k: no sec=sys mount left" sh -c "! grep -q ' /mnt/krbsys ' /proc/mounts"
for MK in $KMOUNTED; do check "k: umount $MK" umount $MK; done
kill $GSSD 2>/dev/null
[ "$NFAIL" -gt "$KF0" ] && { echo "--- rpc.gssd log (last 40 lines; all in /share/krb/gssd.log)"; tail -40 /tmp/gssd.log; }
cp /tmp/gssd.log /tmp/krb5-trace.log $KS/ 2>/dev/null
end
fi

# ---------------------------------------------------------------- h: umount
begin h-umount 60
echo "--- per-op counts (mountstats)"
sed -n '/per-op statistics/,$p' /proc/self/mountstats | awk 'NF>1 && $2+0>0 {print "   ", $1, $2}' | head -60
cd /
check "umount" umount $M
check "no NFS mount left" sh -c "! grep -q ' $M ' /proc/mounts"
end

finish
