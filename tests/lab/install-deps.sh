#!/usr/bin/env bash
# Installs what the lab and the product's tests need on Debian 12: Debian packages, the system
# accounts libvirt expects, and a Go toolchain recent enough to build the lab's control plane.
# Shared by `make` (run, test, lab-up) and the Vagrantfile's provisioner, so CI exercises the same
# path a Vagrant user does. Idempotent, and quick when everything is already present.
set -euo pipefail

PACKAGES=(
  # libvirt and qemu: the daemon the provider drives, started by the lab by hand (no systemd)
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  qemu-system-x86 qemu-utils ovmf dnsmasq-base iproute2 iptables
  # building libvirt-python from its sdist, and a virtualenv
  libvirt-dev pkg-config gcc python3-venv
  # the test guest: busybox initramfs on a syslinux-booted FAT disk
  busybox-static cpio syslinux syslinux-common mtools dosfstools kmod
  # the Debian test guest: a debootstrapped root on ext4 behind a syslinux MBR; ssh into it
  mmdebstrap e2fsprogs fdisk openssh-client
  # libvirt's RelaxNG schemas and xmllint, for validating rendered domain XML
  libxml2-utils
  # the product's container image, built with no registry: a debootstrap'd base and rootful podman
  # (runc: crun cannot run on these hosts' hybrid cgroups)
  debootstrap podman runc
  # the lab's optional Kubernetes node: the kubelet's container runtime and CNI's loopback plugin
  containerd containernetworking-plugins
  # the lab's remote libvirt host: an sshd the lab starts inside that host's namespaces (the
  # package's own service is kept off, see quiet_packaged_sshd); openssl for its TLS certificates
  openssh-server openssl
  # promtool, for the alert rules' unit tests (deploy/monitoring/); the package's own server is
  # kept off, see quiet_packaged_prometheus
  prometheus
)
# Checking the Vagrantfile (`vagrant validate` in the e2e tests). Not needed inside the Vagrant
# VM itself, whose provisioner sets VMAPI_NO_VAGRANT=1.
[ "${VMAPI_NO_VAGRANT:-}" = 1 ] || PACKAGES+=(vagrant vagrant-libvirt)
GO_MIN=1.25
# The module proxy serves every Go release as this module; Go 1.19 can download it.
GO_TOOLCHAIN=v0.0.1-go1.25.4.linux-amd64

log=${LAB_LOG_DIR:-/tmp}/install-deps.log
mkdir -p "$(dirname "$log")"
fail() { echo "install-deps: $1; see $log" >&2; exit 1; }

install_packages() {
  local missing=() pkg status
  for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  echo "install-deps: installing ${missing[*]} (log: $log)"
  # Package scripts must not start services: the lab starts its own libvirtd in a namespace.
  # libvirt-daemon-system is left out on purpose: it defines and autostarts a NAT network.
  local policy=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  local rc=0 new_sshd=0 new_prometheus=0
  [[ " ${missing[*]} " == *" openssh-server "* ]] && new_sshd=1
  [[ " ${missing[*]} " == *" prometheus "* ]] && new_prometheus=1
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } >"$log" 2>&1 || rc=$?
  [ $created -eq 0 ] || rm -f "$policy"
  [ $rc -eq 0 ] || fail "apt-get install failed"
  [ $new_sshd -eq 0 ] || quiet_packaged_sshd
  [ $new_prometheus -eq 0 ] || quiet_packaged_prometheus
}

# openssh-server is installed for the lab only, which runs its own sshd inside a lab namespace with
# its own configuration. The package must leave no sshd running or enabled on the host: the lab
# machine's own network is not to gain a listener. Only when this script installed the package:
# on a machine that had it before (the Vagrant box, reached by `vagrant ssh`) sshd stays as it was.
quiet_packaged_sshd() {
  # Debian's init script and ssh.service both refuse to start while this file exists.
  touch /etc/ssh/sshd_not_to_be_run
  # Both boot systems' links go, whichever one runs (deb-systemd-helper works without systemd).
  [ ! -d /run/systemd/system ] || systemctl stop ssh.service ssh.socket >>"$log" 2>&1 || true
  DPKG_MAINTSCRIPT_PACKAGE=openssh-server deb-systemd-helper disable ssh.service ssh.socket \
    >>"$log" 2>&1 || true
  update-rc.d ssh disable >>"$log" 2>&1 || true
  # A service started despite policy-rc.d writes Debian's pid file; the lab's sshd never does.
  local pid
  pid=$(cat /run/sshd.pid 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "install-deps: stopping the sshd the openssh-server package started (pid $pid)"
    kill "$pid" || true
  fi
  rm -f /run/sshd.pid
}

# prometheus is installed for promtool only. Its postinst enables the server at boot (both boot
# systems) and starts it unless policy-rc.d says no; a server on :9090 of every address is not
# what the lab machine is to gain. --no-install-recommends keeps prometheus-node-exporter out.
# Only when this script installed the package, as for sshd.
quiet_packaged_prometheus() {
  [ ! -d /run/systemd/system ] || systemctl stop prometheus.service >>"$log" 2>&1 || true
  DPKG_MAINTSCRIPT_PACKAGE=prometheus deb-systemd-helper disable prometheus.service \
    >>"$log" 2>&1 || true
  update-rc.d prometheus disable >>"$log" 2>&1 || true
  # Debian's init script writes this pid file; a server started despite policy-rc.d is stopped.
  local pid
  pid=$(cat /run/prometheus/prometheus.pid 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "install-deps: stopping the prometheus the package started (pid $pid)"
    kill "$pid" || true
  fi
  rm -f /run/prometheus/prometheus.pid
}

# libvirt's qemu and network drivers resolve these accounts at start-up even when qemu.conf names
# others; Debian creates them in libvirt-daemon-system, which the lab does not install.
ensure_accounts() {
  [ "$(id -u)" -eq 0 ] || return 0
  getent group kvm >/dev/null || groupadd --system kvm
  getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
  getent passwd libvirt-qemu >/dev/null || useradd --system --gid kvm --groups libvirt-qemu \
    --home-dir /var/lib/libvirt --no-create-home --shell /usr/sbin/nologin libvirt-qemu
  getent passwd libvirt-dnsmasq >/dev/null || useradd --system --user-group \
    --home-dir /var/lib/libvirt/dnsmasq --no-create-home --shell /usr/sbin/nologin libvirt-dnsmasq
}

go_ok() {
  local v
  v=$(go env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V | head -n 1)" = "$GO_MIN" ]
}

# Machines of this project's kind carry a recent Go. A plain Debian 12 (the Vagrant box) has only
# Go 1.19: too old for the pinned Kubernetes release and too old to switch toolchains by itself.
ensure_go() {
  go_ok && return 0
  if [ ! -x /usr/lib/go-1.19/bin/go ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends golang-1.19-go \
      >>"$log" 2>&1 || fail "installing golang-1.19-go failed"
  fi
  local dir
  dir=$(cd /tmp && GOFLAGS=-modcacherw /usr/lib/go-1.19/bin/go mod download -json \
    "golang.org/toolchain@$GO_TOOLCHAIN" 2>>"$log" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -f "$dir/bin/go" ] || fail "could not fetch Go $GO_TOOLCHAIN from the module proxy"
  # Module zips carry no file modes; the go command restores them the same way for toolchains.
  chmod -R u+w "$dir"
  find "$dir/bin" "$dir/pkg/tool" -type f -exec chmod +x {} +
  ln -sf "$dir/bin/go" /usr/local/bin/go
  ln -sf "$dir/bin/gofmt" /usr/local/bin/gofmt
  go_ok || fail "the Go on PATH is still older than $GO_MIN"
}

install_packages
ensure_accounts
ensure_go
