#!/bin/sh
# Install what tests/linux-client/run.sh needs on a Debian 12 machine (run as root).
# Idempotent and quiet: does nothing (no apt-get at all) when everything is already there.
# usage: install-deps.sh [--no-ganesha]   (--no-ganesha: only what `run.sh --server txnfs` needs)
set -eu
GANESHA=1
[ "${1:-}" = --no-ganesha ] && GANESHA=0

# qemu-system-x86     the VM (TCG)             linux-image-amd64  guest kernel + its NFS modules
# busybox-static      guest userland, and the host-side `busybox ls` for the listing compare
# cpio kmod xz-utils  building the initramfs   gcc libc6-dev      guest-tool (static) + hostfwd
# python3             test tree + vmlinux extraction               tshark   capture + its check
# iproute2 (ss)       waiting for the server port                  diffutils tar coreutils
# socat               only for FWD=socat (the reference recipe's forwarder)
PKGS="qemu-system-x86 linux-image-amd64 busybox-static cpio kmod xz-utils gcc libc6-dev
      python3 tshark iproute2 diffutils tar coreutils socat"
[ "$GANESHA" = 1 ] && PKGS="$PKGS nfs-ganesha nfs-ganesha-vfs"

missing=
for p in $PKGS; do
  dpkg-query -W -f='${Status}\n' "$p" 2> /dev/null | grep -q '^install ok installed$' ||
    missing="$missing $p"
done
# build-initramfs.sh `apt-get download`s nfs-common & co.: that needs the package lists
lists=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' 2> /dev/null | head -1)

export DEBIAN_FRONTEND=noninteractive
if [ -n "$missing" ] || [ -z "$lists" ]; then
  apt-get update -qq > /dev/null
fi
if [ -n "$missing" ]; then
  # tshark asks whether non-root users may capture: answer it beforehand
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
  echo "install-deps: installing$missing"
  # shellcheck disable=SC2086  # word splitting of the package list is intended
  apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $missing > /dev/null
fi
ls /boot/vmlinuz-* > /dev/null 2>&1 || { echo "install-deps: no /boot/vmlinuz-* after installing linux-image-amd64" >&2; exit 1; }
echo "install-deps: ok"
