#!/bin/bash
# Boot the Debian kernel + the test initramfs under QEMU (TCG) and run one script in the guest.
# usage: run-vm.sh GUEST_SCRIPT
# The script is copied to $SHARE/run.sh; the guest's /init runs it and writes its output to
# $SHARE/out.log and its exit status to $SHARE/rc.  Exit status of run-vm.sh = the guest
# script's status; 99 if the guest never reported one (crash, timeout, boot failure).
# env:   NFSPORT   host TCP port on 127.0.0.1 that the guest reaches as 10.0.2.100:2049 (required)
#        SHARE     host dir exported to the guest over 9p (tag "share", mounted on /share; required)
#        WORK      cache dir of build-initramfs.sh (default /tmp/txnfs-vm)
#        MEM=1536 SMP=1 TIMEOUT=600 (seconds, whole VM) GHOST=vm$$ (guest hostname)
#        EXTRA_FWDS  more guestfwds through hostfwd, "GUESTIP:GUESTPORT=HOSTPORT ..." (each to
#                    127.0.0.1:HOSTPORT; step k: the KDC and the Kerberos-only server)
# Network: slirp user-mode networking with restrict=on (the guest reaches nothing) and two
# guestfwds: guest 10.0.2.100:2049 -> hostfwd (one per connection; see hostfwd.c for why
# not socat) -> 127.0.0.1:$NFSPORT; guest 10.0.2.100:111 -> portmap-stub.py (the server's
# portmapper as the guest sees it: NFS, MOUNT, NLM and NSM at 2049).
# /dev/kvm on these machines does not boot a stock kernel (PVM), so TCG it is.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ] || [ ! -f "$1" ]; then echo "usage: $0 GUEST_SCRIPT" >&2; exit 2; fi
: "${NFSPORT:?NFSPORT must be set}" "${SHARE:?SHARE must be set}"
MEM=${MEM:-1536}; SMP=${SMP:-1}; TIMEOUT=${TIMEOUT:-600}; GHOST=${GHOST:-vm$$}

eval "$("$HERE"/build-initramfs.sh | grep -E '^(INITRAMFS|VMLINUX|HOSTFWD)=')"
mkdir -p "$SHARE"
rm -f "$SHARE"/out.log "$SHARE"/rc "$SHARE"/run.sh
cp "$1" "$SHARE"/run.sh

APPEND="console=ttyS0 quiet panic=-1 mitigations=off ghost=$GHOST ${EXTRA_APPEND:-}"
NETDEV="user,id=n0,restrict=on,net=10.0.2.0/24,host=10.0.2.2"
if [ "${FWD:-hostfwd}" = socat ]; then   # FWD=socat: the reference recipe (~40 ms per multi-segment request)
  NETDEV="$NETDEV,guestfwd=tcp:10.0.2.100:2049-cmd:socat -b 262144 STDIO TCP4:127.0.0.1:$NFSPORT"
else
  NETDEV="$NETDEV,guestfwd=tcp:10.0.2.100:2049-cmd:$HOSTFWD 127.0.0.1 $NFSPORT"
fi
NETDEV="$NETDEV,guestfwd=tcp:10.0.2.100:111-cmd:python3 $HERE/portmap-stub.py"
for f in ${EXTRA_FWDS:-}; do
  case "$f" in
    *.*.*.*:[0-9]*=[0-9]*) NETDEV="$NETDEV,guestfwd=tcp:${f%%=*}-cmd:$HOSTFWD 127.0.0.1 ${f#*=}" ;;
    *) echo "run-vm.sh: bad EXTRA_FWDS entry '$f' (want GUESTIP:GUESTPORT=HOSTPORT)" >&2; exit 2 ;;
  esac
done

T0=$(date +%s.%N)
QPID=
# forward a TERM/INT to qemu (run.sh stops us by PID)
trap '[ -n "$QPID" ] && kill "$QPID" 2>/dev/null; exit 99' TERM INT
timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi,tb-size=256 -cpu max \
  -machine pc -m "$MEM" -smp "$SMP" \
  -nographic -nodefaults -no-reboot -serial stdio -monitor none \
  -kernel "$VMLINUX" -initrd "$INITRAMFS" -append "$APPEND" \
  -netdev "$NETDEV" \
  -device virtio-net-pci,netdev=n0,romfile= \
  -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=fs0" < /dev/null &
QPID=$!
set +e
wait "$QPID"
QRC=$?
set -e
QPID=
T1=$(date +%s.%N)
GRC=$(cat "$SHARE"/rc 2>/dev/null || echo '?')
echo "[host] qemu exit $QRC$([ "$QRC" = 124 ] && echo " (TIMEOUT after ${TIMEOUT}s)"), wall $(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s, guest rc $GRC"
case "$GRC" in
  ''|*[!0-9]*) exit 99 ;;
  *) exit "$GRC" ;;
esac
