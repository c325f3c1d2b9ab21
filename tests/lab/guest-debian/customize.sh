#!/usr/bin/env bash
# mmdebstrap customize hook for the Debian test guest: runs on the build host with the unpacked
# root as $1, after every package is installed. It turns a generic Debian tree into a cloud guest
# that boots from the disk build-image.sh makes and trusts nothing but cloud-init's NoCloud data.
#
# usage: customize.sh ROOT FILES_DIR ROOT_LABEL
set -euo pipefail
root=${1:?} files=${2:?} label=${3:?}

printf 'LABEL=%s / ext4 defaults,noatime 0 1\n' "$label" >"$root/etc/fstab"
echo vmapi-debian >"$root/etc/hostname"
install -m 0644 "$files/interfaces" "$root/etc/network/interfaces"
install -m 0644 "$files/90-vmapi.cfg" "$root/etc/cloud/cloud.cfg.d/90-vmapi.cfg"
install -m 0644 "$files/sshd-vmapi.conf" "$root/etc/ssh/sshd_config.d/vmapi.conf"
install -m 0644 "$files/initramfs-modules" "$root/etc/initramfs-tools/modules"
install -m 0644 "$files/80-vmapi-hotplug.rules" "$root/etc/udev/rules.d/80-vmapi-hotplug.rules"
install -D -m 0644 "$files/journald-console.conf" "$root/etc/systemd/journald.conf.d/vmapi-console.conf"
# Only the listed drivers in the initrd: MODULES=most would carry every storage driver.
echo 'MODULES=list' >"$root/etc/initramfs-tools/conf.d/vmapi"
chroot "$root" update-initramfs -u -k all >/dev/null

# Units that only make sense with the internet or a long-lived machine, and slow a software-
# emulated boot: apt's daily timers and periodic file-system checks.
for unit in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
  fstrim.timer; do
  chroot "$root" systemctl disable "$unit" >/dev/null 2>&1 || true
done

# Nothing may be shared between machines made from this image: host keys are made by cloud-init
# on first boot, the machine id by systemd.
rm -f "$root"/etc/ssh/ssh_host_*
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"

# No account has a usable password (debootstrap leaves root locked; prove it stays so).
if awk -F: '$2 !~ /^(\*|!.*)$/ { bad = 1; print "account with a password: " $1 } END { exit bad }' \
  "$root/etc/shadow" >&2; then :; else
  echo "customize: an account has a password" >&2
  exit 1
fi

rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -rf "$root"/var/log/*.log "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
