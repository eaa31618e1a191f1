#!/bin/sh
# Build the guest for the Linux-client tests (cached):
#   $WORK/initramfs-<key>.cpio.gz  busybox-static + virtio/9p/nfsv4 and nfsv3 modules of the installed
#                                  Debian kernel + mount.nfs (from the nfs-common .deb, extracted,
#                                  never installed) + rpc.statd (same .deb) and the host's rpcbind,
#                                  for NLM locks over NFSv3 + rpc.gssd (same .deb) and the
#                                  auth_rpcgss/rpcsec_gss_krb5/cts modules (in /lib/krb-modules,
#                                  loaded by step k only), for sec=krb5*
#                                  + guest-tool (static C helper: flock/fcntl
#                                  locks, rename(2)) + guest-init as /init
#   $WORK/vmlinux-$KVER            uncompressed ELF kernel (QEMU boots it through its PVH entry)
#   $WORK/hostfwd-<key>            host-side guestfwd forwarder (hostfwd.c: why not socat)
# <key> = checksum of this script, guest-init, guest-tool.c, hostfwd.c and the kernel version, so a rerun
# with unchanged inputs does nothing.  Prints the two paths (KEY=VALUE) on stdout, last lines.
# Needs (install-deps.sh): busybox-static cpio kmod linux-image-amd64 xz-utils gcc libc6-dev
# python3 (host), and apt lists (apt-get update) for `apt-get download`.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
W=${WORK:-${TMPDIR:-/tmp}/txnfs-vm}; mkdir -p "$W"
# newest Debian kernel that has both /boot/vmlinuz-V and /lib/modules/V (not the host's kernel)
KVER=${KVER:-$(for f in /boot/vmlinuz-*; do v=${f#/boot/vmlinuz-}; [ -d "/lib/modules/$v/kernel" ] && echo "$v"; done | sort -V | tail -1)}
[ -n "$KVER" ] || { echo "no /boot/vmlinuz-V with /lib/modules/V: apt-get install linux-image-amd64" >&2; exit 1; }
KEY=$( { cat "$HERE/build-initramfs.sh" "$HERE/guest-init" "$HERE/guest-tool.c" "$HERE/hostfwd.c"; echo "$KVER"; } |
       sha256sum | cut -c1-16)
OUT=$W/initramfs-$KEY.cpio.gz
VMLINUX=$W/vmlinux-$KVER
HOSTFWD=$W/hostfwd-$KEY

if [ ! -s "$VMLINUX" ]; then
  [ -r "/boot/vmlinuz-$KVER" ] || { echo "no /boot/vmlinuz-$KVER (apt-get install linux-image-amd64)" >&2; exit 1; }
  # the bzImage holds an xz stream: cut it out and decompress it (no decompressor stub needed)
  python3 - "/boot/vmlinuz-$KVER" "$VMLINUX.xz.$$" <<'EOF'
import sys
d = open(sys.argv[1], 'rb').read()
i = d.find(b'\xfd7zXZ\x00')
if i < 0:
    sys.exit("no xz stream in " + sys.argv[1])
open(sys.argv[2], 'wb').write(d[i:])
EOF
  xz -dc --single-stream "$VMLINUX.xz.$$" > "$VMLINUX.$$" 2>/dev/null || true
  rm -f "$VMLINUX.xz.$$"
  [ -s "$VMLINUX.$$" ] || { echo "could not extract vmlinux" >&2; exit 1; }
  mv -f "$VMLINUX.$$" "$VMLINUX"
fi

if [ ! -x "$HOSTFWD" ]; then
  gcc -O2 -Wall -o "$HOSTFWD.$$" "$HERE"/hostfwd.c
  mv -f "$HOSTFWD.$$" "$HOSTFWD"
fi

if [ -s "$OUT" ]; then
  echo "INITRAMFS=$OUT"; echo "VMLINUX=$VMLINUX"; echo "HOSTFWD=$HOSTFWD"; exit 0
fi

MODS="virtio_pci virtio_net 9pnet_virtio 9p nfsv4 nfsv3"
# Kerberos (step k): rpcsec_gss_krb5 (+ auth_rpcgss), and cts (the kernel's
# aes*-cts-hmac-sha1 enctypes need cts(cbc(aes)), a module in Debian's kernel). They live
# outside /lib/modules (in /lib/krb-modules, listed in /etc/modules.krb) and step k insmods
# them: loaded at boot, or found by the kernel's on-demand modprobe, they would make every
# NFSv4 mount try krb5i for its lease first (and fall back to AUTH_SYS), so the other steps
# and boots would not run as they did before.
KRBMODS="rpcsec_gss_krb5 cts"   # insmod-ed by /init, in dependency order
R=$(mktemp -d "$W/rootfs.XXXXXX")
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/bin "$R"/sbin "$R"/usr/bin "$R"/usr/sbin "$R"/etc "$R"/proc "$R"/sys \
         "$R"/dev "$R"/tmp "$R"/run "$R"/mnt "$R"/share "$R"/root "$R"/lib64 \
         "$R"/var/lib/nfs "$R"/lib/x86_64-linux-gnu "$R"/lib/modules/"$KVER"
cp /bin/busybox "$R"/bin/busybox
for a in $(/bin/busybox --list); do
  [ "$a" = busybox ] || ln -s /bin/busybox "$R"/bin/"$a"
done
for a in modprobe insmod rmmod lsmod depmod ip ifconfig route poweroff reboot halt; do
  ln -sf /bin/busybox "$R"/sbin/$a
done

# kernel modules, in dependency order (modprobe --show-depends resolves the chain)
: > "$R"/etc/modules.load
for m in $MODS; do modprobe -S "$KVER" --show-depends "$m"; done |
  awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r f; do
    rel=${f#/lib/modules/"$KVER"/}
    mkdir -p "$R/lib/modules/$KVER/$(dirname "$rel")"
    cp "$f" "$R/lib/modules/$KVER/$rel"
    echo "$rel" >> "$R"/etc/modules.load
  done
: > "$R"/etc/modules.krb
mkdir -p "$R"/lib/krb-modules
for m in $KRBMODS; do modprobe -S "$KVER" --show-depends "$m"; done |
  awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r f; do
    rel=${f#/lib/modules/"$KVER"/}
    grep -qx "$rel" "$R"/etc/modules.load && continue   # sunrpc: loaded at boot
    cp "$f" "$R"/lib/krb-modules/
    basename "$f" >> "$R"/etc/modules.krb
  done
cp /lib/modules/"$KVER"/modules.order /lib/modules/"$KVER"/modules.builtin* "$R"/lib/modules/"$KVER"/
depmod -b "$R" "$KVER"

# mount.nfs from the Debian packages (extracted into $W/debroot, never installed on the host);
# libraries it needs that are not in those .debs come from the host (libc, libmount, ...).
D=$W/debroot-nfs-common
# (libevent-core: rpc.gssd's, not a dependency of anything else here)
if [ ! -x "$D"/sbin/mount.nfs ] || ! ls "$D"/usr/lib/x86_64-linux-gnu/libevent_core-*.so* > /dev/null 2>&1; then
  T=$(mktemp -d "$W/debs.XXXXXX")
  chmod 755 "$T"   # apt-get download runs as _apt where it can
  (cd "$T" && apt-get download -q nfs-common libtirpc3 libtirpc-common libgssapi-krb5-2 \
       libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libevent-core-2.1-7 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) || true
  ls "$T"/nfs-common_*.deb > /dev/null || { echo "apt-get download nfs-common failed (apt-get update?)" >&2; exit 1; }
  DT=$(mktemp -d "$W/debroot.XXXXXX")
  for d in "$T"/*.deb; do dpkg-deb -x "$d" "$DT"; done
  rm -rf "$T" "$D"; mv "$DT" "$D"
fi
LP=$D/lib/x86_64-linux-gnu:$D/usr/lib/x86_64-linux-gnu
cp "$D"/sbin/mount.nfs "$R"/sbin/mount.nfs
ln -sf mount.nfs "$R"/sbin/mount.nfs4
# NFSv3 locks (NLM) need the guest's statd (the kernel's lockd asks it to monitor the server)
# and an rpcbind for statd and lockd to register with: rpc.statd from the same .deb, rpcbind
# from the host (scripts/test.sh installs it for the rpcbind tests).
cp "$D"/sbin/rpc.statd "$R"/sbin/rpc.statd
# sec=krb5* (step k): rpc.gssd gets the kernel's context upcalls through rpc_pipefs and the
# machine credential from /etc/krb5.keytab (both provided at run time, from the share)
cp "$D"/usr/sbin/rpc.gssd "$R"/sbin/rpc.gssd
RPCBIND=$(command -v rpcbind || ls /usr/sbin/rpcbind /sbin/rpcbind 2> /dev/null | head -1 || true)
[ -n "$RPCBIND" ] && cp -L "$RPCBIND" "$R"/sbin/rpcbind
for b in "$R"/sbin/mount.nfs "$R"/sbin/rpc.statd "$R"/sbin/rpc.gssd ${RPCBIND:+"$R"/sbin/rpcbind}; do
  LD_LIBRARY_PATH=$LP ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    cp -L "$lib" "$R/lib/x86_64-linux-gnu/"
  done
cp -L /lib64/ld-linux-x86-64.so.2 "$R"/lib64/
for b in "$R"/sbin/mount.nfs "$R"/sbin/rpc.statd "$R"/sbin/rpc.gssd ${RPCBIND:+"$R"/sbin/rpcbind}; do
  if LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu ldd "$b" | grep -q 'not found'; then
    echo "$b: unresolved libraries" >&2; exit 1
  fi
done
mkdir -p "$R"/var/lib/nfs/sm "$R"/var/lib/nfs/sm.bak "$R"/var/lib/nfs/rpc_pipefs "$R"/run/rpcbind
ln -sfn /run "$R"/var/run   # the kernel finds rpcbind at /var/run/rpcbind.sock
cp "$D"/etc/netconfig "$R"/etc/ 2>/dev/null || true
printf 'root:x:0:0:root:/root:/bin/sh\n_rpc:x:0:0:rpcbind:/run/rpcbind:/bin/false\nstatd:x:0:0:statd:/var/lib/nfs:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$R"/etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R"/etc/group
printf 'passwd: files\ngroup: files\nhosts: files\n' > "$R"/etc/nsswitch.conf
printf '127.0.0.1 localhost\n10.0.2.15 guest\n' > "$R"/etc/hosts
# rpcbind looks its port up as "sunrpc" and fails without the aliases
printf 'nfs 2049/tcp\nsunrpc 111/tcp portmapper rpcbind\nsunrpc 111/udp portmapper rpcbind\n' > "$R"/etc/services
# mount.nfs fails without it ("Failed to find 'tcp' protocol")
printf 'ip 0 IP\nicmp 1 ICMP\ntcp 6 TCP\nudp 17 UDP\nipv6 41 IPv6\n' > "$R"/etc/protocols
printf 'nfs 100003 nfs\nportmapper 100000 sunrpc rpcbind\nmountd 100005 mount\nnlockmgr 100021\nstatus 100024\n' > "$R"/etc/rpc
: > "$R"/etc/fstab
ln -sf /proc/self/mounts "$R"/etc/mtab

# static helper (locks, rename(2)): the guest has no compiler
gcc -static -O2 -Wall -o "$R"/usr/bin/guest-tool "$HERE"/guest-tool.c

cp "$HERE"/guest-init "$R"/init
chmod 755 "$R"/init
(cd "$R" && find . | cpio -o -H newc --quiet) | gzip -1 > "$OUT.$$"
mv -f "$OUT.$$" "$OUT"
# outputs of earlier versions of these inputs
find "$W" -maxdepth 1 \( -name 'initramfs-*.cpio.gz' -o -name 'hostfwd-*' \) -mmin +180 \
  ! -name "initramfs-$KEY.cpio.gz" ! -name "hostfwd-$KEY" -delete 2> /dev/null || true
echo "modules: $(wc -l < "$R"/etc/modules.load), initramfs: $(wc -c < "$OUT") bytes" >&2
echo "INITRAMFS=$OUT"; echo "VMLINUX=$VMLINUX"; echo "HOSTFWD=$HOSTFWD"
