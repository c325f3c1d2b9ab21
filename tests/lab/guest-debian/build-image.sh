#!/usr/bin/env bash
# Builds the lab's second test guest: a minimal Debian 12 (bookworm) on a BIOS-bootable qcow2 disk,
# with Debian's cloud kernel, systemd, cloud-init (NoCloud only), qemu-guest-agent and
# openssh-server. Unlike the busybox guest, nothing in it was written by this project: it proves
# the product against the cloud-init, agent and ACPI handling users really boot.
#
# Everything comes from Debian's package mirrors through mmdebstrap; nothing else is downloaded.
# No loop device or mount is needed: the root file system is made by `mke2fs -d` from the
# unpacked tree, the boot partition by mtools, and the two are placed into one disk image behind a
# syslinux MBR. No account has a password and the image carries no SSH host keys (cloud-init
# makes them on first boot), so every login needs a key delivered through cloud-init.
#
# The result is cached by content (this script, its config files, and the candidate versions of
# the packages that matter), so a warm call only prints the cached path.
#
# usage: build-image.sh CACHE_DIR   -> prints the path of debian.qcow2
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build-image.sh CACHE_DIR}
mkdir -p "$cache"

SUITE=bookworm
MIRROR=${VMAPI_LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(
  linux-image-cloud-amd64 systemd-sysv udev
  # systemd-logind (which acts on the ACPI power button) needs the system bus
  dbus
  # the default user's sudo rule from cloud-init (tests stop the agent with it)
  sudo
  cloud-init qemu-guest-agent openssh-server
  # what cloud-init's growpart and resizefs use to fill a disk larger than the image
  cloud-guest-utils e2fsprogs
  # cloud-init's Debian renderer writes ifupdown files; dhclient serves DHCP configs
  ifupdown isc-dhcp-client
)
ROOT_LABEL=vmapi-root
BOOT_MIB=40

versions() {
  local p
  for p in "${PACKAGES[@]}"; do
    printf '%s=%s\n' "$p" "$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')"
  done
}
pkgs=$(versions)
if grep -q '=$\|=(none)$' <<<"$pkgs"; then
  apt-get update -q >/dev/null
  pkgs=$(versions)
fi
key=$( { cat "$0" "$here/customize.sh" "$here"/files/*; echo "$SUITE $MIRROR"; echo "$pkgs"; } | sha256sum | cut -c1-16)
out="$cache/debian-$key"
if [ -f "$out/debian.qcow2" ]; then
  echo "$out/debian.qcow2"
  exit 0
fi

for tool in mmdebstrap mke2fs sfdisk syslinux mcopy qemu-img; do
  command -v "$tool" >/dev/null || { echo "build-debian: $tool is missing" >&2; exit 1; }
done

started=$(date +%s)
work=$(mktemp -d "$cache/build-debian.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

# Documentation, manual pages and translations are dropped at unpack time: the guest is read by
# tests, not people. Recommends are not installed (mmdebstrap's default).
include=$(IFS=,; echo "${PACKAGES[*]}")
mmdebstrap --variant=apt --include="$include" \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook="'$here/customize.sh' \"\$1\" '$here/files' '$ROOT_LABEL'" \
  "$SUITE" "$rootfs" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 \
  || { tail -n 20 "$work/mmdebstrap.log" >&2; echo "build-debian: mmdebstrap failed" >&2; exit 1; }

vmlinuz=$(ls "$rootfs"/boot/vmlinuz-* | head -n 1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | head -n 1)
[ -f "$vmlinuz" ] && [ -f "$initrd" ] || { echo "build-debian: no kernel or initrd in /boot" >&2; exit 1; }

# Boot partition: FAT with syslinux, the kernel and its initrd (syslinux reads FAT, not ext4).
boot="$work/boot.raw"
truncate -s "${BOOT_MIB}M" "$boot"
mkfs.vfat -n VMAPIBOOT "$boot" >/dev/null
syslinux --install "$boot"
cat >"$work/syslinux.cfg" <<CFG
DEFAULT debian
PROMPT 0
TIMEOUT 0
LABEL debian
  KERNEL vmlinuz
  INITRD initrd.img
  APPEND root=LABEL=$ROOT_LABEL ro console=ttyS0,115200n8 quiet
CFG
mcopy -i "$boot" "$vmlinuz" ::vmlinuz
mcopy -i "$boot" "$initrd" ::initrd.img
mcopy -i "$boot" "$work/syslinux.cfg" ::syslinux.cfg
# The kernel and initrd live on the boot partition only; the root keeps the package's record.
rm -f "$rootfs"/boot/vmlinuz-* "$rootfs"/boot/initrd.img-*

# Root partition: ext4 filled from the tree, sized to what it holds plus room for first boot.
used_mib=$(du -sm --apparent-size "$rootfs" | cut -f1)
root_mib=$(( used_mib * 12 / 10 + 64 ))
rootimg="$work/root.raw"
truncate -s "${root_mib}M" "$rootimg"
mke2fs -q -t ext4 -L "$ROOT_LABEL" -m 0 -E root_owner=0:0 -d "$rootfs" "$rootimg"

# The disk: MBR with syslinux's boot code, partition 1 (FAT, active) and partition 2 (ext4) last,
# so that cloud-init's growpart could grow it when a machine's disk is larger than the image.
disk="$work/disk.raw"
truncate -s $(( (1 + BOOT_MIB + root_mib) ))M "$disk"
sfdisk -q "$disk" <<PART
label: dos
start=1MiB, size=${BOOT_MIB}MiB, type=c, bootable
start=$(( 1 + BOOT_MIB ))MiB, type=83
PART
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$boot" of="$disk" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$rootimg" of="$disk" bs=1M seek=$(( 1 + BOOT_MIB )) conv=notrunc,sparse status=none

mkdir -p "$out.tmp"
qemu-img convert -q -c -f raw -O qcow2 "$disk" "$out.tmp/debian.qcow2"
echo "$pkgs" >"$out.tmp/packages"
echo "built in $(( $(date +%s) - started )) s; rootfs ${used_mib} MiB" >"$out.tmp/build-info"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out/debian.qcow2"
