#!/usr/bin/env bash
# Builds the lab's test guest: a small BIOS-bootable disk (qcow2) holding a Debian cloud kernel and
# a busybox initramfs, booted by syslinux. Everything comes from Debian packages; nothing else is
# downloaded. The result is cached by content (this script, the guest's files, the kernel and busybox
# versions), so a warm call only prints the cached path.
#
# usage: build-image.sh CACHE_DIR   -> prints the path of guest.qcow2
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: build-image.sh CACHE_DIR}
mkdir -p "$cache/debs"

# Modules the guest loads (dependencies are added automatically, in order).
WANTED_MODULES=(virtio_pci virtio_net virtio_blk virtio_scsi virtio_console sr_mod iso9660 evdev button ata_piix)

kernel_pkg() {
  apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -n 1
}
pkg=$(kernel_pkg)
if [ -z "$pkg" ]; then
  apt-get update -q >/dev/null
  pkg=$(kernel_pkg)
fi
[ -n "$pkg" ] || { echo "build-image: cannot find a Debian cloud kernel package" >&2; exit 1; }
pkg_version=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
busybox_version=$(dpkg-query -W -f='${Version}' busybox-static)

key=$( { cat "$0" "$here/init" "$here/udhcpc.script"; echo "$pkg $pkg_version $busybox_version ${WANTED_MODULES[*]}"; } | sha256sum | cut -c1-16)
out="$cache/guest-$key"
if [ -f "$out/guest.qcow2" ]; then
  echo "$out/guest.qcow2"
  exit 0
fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

deb=$(ls "$cache/debs/${pkg}_"*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
  (cd "$cache/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null)
  deb=$(ls "$cache/debs/${pkg}_"*.deb | head -n 1)
fi
dpkg-deb -x "$deb" "$work/kernel"
kver=${pkg#linux-image-}
vmlinuz="$work/kernel/boot/vmlinuz-$kver"
moddir="$work/kernel/lib/modules/$kver"
[ -f "$vmlinuz" ] || { echo "build-image: $vmlinuz missing from $deb" >&2; exit 1; }

# Resolve module dependencies depth-first so each module follows what it needs.
declare -A seen=()
order=()
resolve() {
  local name=$1 file dep
  [ -n "${seen[$name]:-}" ] && return 0
  seen[$name]=1
  file=$(modinfo -b "$work/kernel" -k "$kver" -n "$name" 2>/dev/null || true)
  case "$file" in
    ""|builtin*|*"(builtin)"*) return 0 ;;
  esac
  for dep in $(modinfo -b "$work/kernel" -k "$kver" -F depends "$name" | tr ',' ' '); do
    resolve "$dep"
  done
  order+=("${file#"$moddir/"}")
}
depmod -b "$work/kernel" "$kver"
for m in "${WANTED_MODULES[@]}"; do resolve "$m"; done

root="$work/initramfs"
mkdir -p "$root"/{bin,dev,proc,sys,etc,lib/modules,tmp,run}
cp /bin/busybox "$root/bin/busybox"
install -m 0755 "$here/init" "$root/init"
install -m 0755 "$here/udhcpc.script" "$root/etc/udhcpc.script"
: >"$root/etc/modules-order"
for rel in "${order[@]}"; do
  flat=$(basename "$rel")
  case "$flat" in
    *.ko.xz) xz -dc "$moddir/$rel" >"$root/lib/modules/${flat%.xz}"; flat=${flat%.xz} ;;
    *.ko.zst) zstd -qdc "$moddir/$rel" >"$root/lib/modules/${flat%.zst}"; flat=${flat%.zst} ;;
    *) cp "$moddir/$rel" "$root/lib/modules/$flat" ;;
  esac
  echo "$flat" >>"$root/etc/modules-order"
done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -9) >"$work/initrd.gz"

# A FAT file system over the whole disk, with syslinux in its boot sector: SeaBIOS runs sector 0
# like any MBR, so no partition table is needed and no loop mount or root-only tool is involved.
img="$work/guest.raw"
truncate -s 64M "$img"
mkfs.vfat -n VMAPIGUEST "$img" >/dev/null
syslinux --install "$img"
cat >"$work/syslinux.cfg" <<CFG
DEFAULT guest
PROMPT 0
TIMEOUT 0
LABEL guest
  KERNEL vmlinuz
  INITRD initrd.gz
  APPEND console=ttyS0,115200 panic=-1 quiet
CFG
mcopy -i "$img" "$vmlinuz" ::vmlinuz
mcopy -i "$img" "$work/initrd.gz" ::initrd.gz
mcopy -i "$img" "$work/syslinux.cfg" ::syslinux.cfg

mkdir -p "$out.tmp"
qemu-img convert -q -f raw -O qcow2 "$img" "$out.tmp/guest.qcow2"
echo "$pkg $pkg_version" >"$out.tmp/kernel-package"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out/guest.qcow2"
