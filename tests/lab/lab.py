"""The local lab: a real kube-apiserver and a real libvirtd, started and stopped by one script.

Test infrastructure, not product: `make lab-up`, `make lab-down`, `make lab-env` and the e2e tests'
fixtures all go through here. Standard library only, so it runs before anything else is installed.

What `up` builds, in order, stopping at the first failure with one line that names the failing part
and its log (and then taking down whatever it had started):

- the control-plane binary (cached outside the clone, see kube/build.sh) and the two test guest
  images: the busybox one (guest/build-image.sh) and the Debian one (guest-debian/build-image.sh),
  both cached by content;
- certificates, then kube-apiserver with embedded etcd on 127.0.0.1 (RBAC on), ready when /readyz
  answers ok, then kube-controller-manager for garbage collection and namespace cleanup;
- a network namespace owned by the lab, and inside it, in a private mount namespace, a libvirtd
  whose config, state, run and socket directories all live under the lab directory, so it neither
  touches nor depends on a host libvirtd; two isolated libvirt networks (no <forward>; one with
  DHCP, one without) and a directory storage pool holding both test guests' disks;
- VMAPI_LAB_HOST_COUNT extra libvirt hosts (default 3) for placement tests, each a libvirtd in
  a namespace of its own (`<netns>-h<i>`) with the main lab's network and pool names, h1 with an
  extra network and h2 with an extra pool (see start_hosts);
- unless VMAPI_LAB_REMOTE=0, a remote libvirt host `<netns>-r0` shaped like the extra hosts but
  reached only over the network: an sshd (key-only root login) and libvirtd's TLS listener on a
  veth link from the client namespace `<netns>-rc`, where the lab's API server is forwarded to
  127.0.0.1 (see RemoteHost, prepare_remote, forward.py);
- with extra hosts, migration links between them: a switch namespace `<netns>-mx` with a bridge
  and a veth pair to each host (10.213.40.(10+i)/24), each host's libvirtd with a host UUID of
  its own and a TLS listener there, its qemu taking TLS-only migration streams there, all with
  certificates of a lab migration CA (see the "migration links" section);
- the domain type guests should use: `kvm` only if a probe guest really boots under KVM here,
  otherwise `qemu` (software emulation). /dev/kvm existing is not enough on nested hosts.

On request only (`up --node`, `node`): a Kubernetes node, containerd and a kubelet in a private
mount namespace plus kube-scheduler, that runs deploy/'s DaemonSet (see start_node). `image` builds
the product's container image with podman, `container-api` serves podman's Docker-compatible API.

`remote-sshd-stop`, `remote-sshd-start`, `remote-rotate-host-key`, `remote-link-down`,
`remote-link-up` and `remote-restart-libvirtd` act on the remote host for tests.
`host-libvirtd-stop --host <name>` and `host-libvirtd-start --host <name>` stop an extra host's
libvirtd and start it again, for tests of a host whose libvirtd is down; `host-libvirtd-kill
--host <name>` kills it (SIGKILL: no shutdown of its own, as when it crashes).
`migration-link-down --host <name>` and `migration-link-up --host <name>` take an extra host's
migration link down (its end in the switch namespace) and up again, for tests of a migration
whose network goes away.

`down` stops the node if it runs (and fails if any of its processes, cgroups or mounts is left),
kills every process in the lab's namespaces and the control plane, deletes the namespaces (and
with them the bridges and veth pairs, the migration switch's included) and removes the lab
directory. Mounts exist only in the private mount
namespaces, so they vanish with their last process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# The one deadline wait of the tests, benchmarks and lab (standard library only, like this script).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from tests.support.waiting import TimedOutError, eventually  # noqa: E402


class LabError(Exception):
    """A lab step failed; the message is the one line a person needs, log path included."""


# More hosts than this would run their networks' subnets (10.213.10-29) into the -only network's.
MAX_HOST_COUNT = 20
# A host's name becomes a Kubernetes object name and the daemon's --host: a DNS-1123 subdomain.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class Libvirtd:
    """One libvirtd of the lab: its namespace, its directories and its logs.

    The main libvirtd and every extra host are started, configured and probed by the same code;
    only these names differ. `suffix` tells their log files apart ("" keeps the main libvirtd's
    logs where they always were).
    """

    netns: str
    root: Path
    logs: Path
    suffix: str = ""
    # Only the extra hosts get a UTS namespace of their own, named after the host, so that each
    # reports its own hostname and a client can tell which daemon a socket leads to.
    hostname: str | None = None
    # The remote host's libvirtd keeps its socket at libvirt's default path inside its mount
    # namespace (/run/libvirt/libvirt-sock, bound to `root/run`), where virt-ssh-helper, run by
    # its sshd, looks for it.
    default_socket: bool = False
    # The extra hosts run with --listen: their TLS listener on the migration link (see
    # write_migration_config) is how one host's libvirtd reaches another's to migrate.
    listen: bool = False

    @property
    def socket(self) -> Path:
        if self.default_socket:
            return self.root / "run" / "libvirt-sock"
        return self.root / "sock" / "libvirt-sock"

    @property
    def uri(self) -> str:
        return f"qemu:///system?socket={self.socket}"

    @property
    def log(self) -> Path:
        return self.logs / f"libvirtd{self.suffix}.log"

    @property
    def out(self) -> Path:
        return self.logs / f"libvirtd{self.suffix}.out"

    @property
    def virsh_log(self) -> Path:
        return self.logs / f"lab-virsh{self.suffix}.log"

    @property
    def what(self) -> str:
        """How error messages name it."""
        return f"libvirtd of host {self.netns}" if self.suffix else "libvirtd"


@dataclass(frozen=True)
class RemoteHost:
    """The lab's remote libvirt host `<netns>-r0`, reached only over the network.

    Its libvirtd has the extra hosts' shape (the main lab's network and pool names, the busybox
    guest) but also listens for TLS, and an sshd runs beside it; both sit in the host's network,
    mount and UTS namespaces, which the lab holds open with a process of their own so that either
    daemon can be stopped and started again in them. The only way in is a veth pair from the client
    namespace `<netns>-rc`, where a remote-mode daemon runs (with the lab's API server forwarded to
    its 127.0.0.1, see forward.py). Every address lives in these two namespaces: the host's own
    network is untouched.
    """

    netns: str
    client_netns: str
    dir: Path
    logs: Path

    # The link between the client namespace and the host: a /30 used nowhere else.
    client_address = "10.213.33.1"
    address = "10.213.33.2"
    link_prefix = 30
    veth = "vmapir0"
    client_veth = "vmapirc0"
    subnet_prefix = "10.213.32"
    bridge = "vmapir0br0"
    tls_port = 16514

    @property
    def name(self) -> str:
        """Its LibvirtHost name (and hostname): the namespace's name."""
        return self.netns

    @property
    def libvirtd(self) -> Libvirtd:
        return Libvirtd(
            netns=self.netns,
            root=self.dir / "libvirt",
            logs=self.logs,
            suffix="-r0",
            hostname=self.netns,
            default_socket=True,
        )

    @property
    def pool_dir(self) -> Path:
        return self.dir / "pool"

    @property
    def ns_ready(self) -> Path:
        """Created by the namespace holder once its mounts are in place."""
        return self.dir / "ns-ready"

    @property
    def ssh(self) -> Path:
        return self.dir / "ssh"

    @property
    def host_key(self) -> Path:
        return self.ssh / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.ssh / "sshd_config"

    @property
    def sshd_pid_file(self) -> Path:
        return self.ssh / "sshd.pid"

    @property
    def authorized_keys(self) -> Path:
        return self.ssh / "authorized_keys"

    @property
    def ssh_key(self) -> Path:
        """The client key root's authorized_keys holds."""
        return self.ssh / "id_ed25519"

    @property
    def wrong_ssh_key(self) -> Path:
        """A valid key that is not authorized."""
        return self.ssh / "wrong_ed25519"

    @property
    def known_hosts(self) -> Path:
        """The host's current key, as an OpenSSH known_hosts line for its address."""
        return self.ssh / "known_hosts"

    @property
    def ssh_command(self) -> Path:
        """An `ssh` for libvirt's `?command=`: host keys only from `known_hosts`, strictly."""
        return self.ssh / "ssh"

    @property
    def tls(self) -> Path:
        return self.dir / "tls"

    @property
    def tls_pkipath(self) -> Path:
        """A client `?pkipath=`: the CA, and a client certificate that CA signed."""
        return self.tls / "client"

    @property
    def wrong_tls_pkipath(self) -> Path:
        """The CA, and a client certificate signed by another CA (refused by the host)."""
        return self.tls / "wrong-client"

    @property
    def forward_socket(self) -> Path:
        return self.dir / "apiserver.sock"

    @property
    def ssh_uri(self) -> str:
        return f"qemu+ssh://root@{self.address}/system"

    @property
    def libssh_uri(self) -> str:
        return f"qemu+libssh://root@{self.address}/system"

    @property
    def tls_uri(self) -> str:
        return f"qemu+tls://{self.address}/system"


@dataclass(frozen=True)
class ExtraHost:
    """An extra libvirt host for placement tests: `h<index>`, in namespace `<netns>-h<index>`.

    Every host has the main lab's DHCP network and pool under the same names (so catalog objects
    written for the lab resolve everywhere) but its own subnet and bridge, so leases and links in
    logs say which host they belong to. h1 alone has the `-only` network, h2 alone the extra pool:
    hosts of different shape, for tests where only one host fits.
    """

    index: int
    netns: str
    dir: Path
    logs: Path

    @property
    def libvirtd(self) -> Libvirtd:
        return Libvirtd(
            netns=self.netns,
            root=self.dir / "libvirt",
            logs=self.logs,
            suffix=f"-h{self.index}",
            hostname=self.netns,
            listen=True,
        )

    @property
    def pool_dir(self) -> Path:
        return self.dir / "pool"

    @property
    def extra_pool_dir(self) -> Path:
        return self.dir / "pool-extra"

    @property
    def subnet_prefix(self) -> str:
        return f"10.213.{10 + self.index}"

    @property
    def bridge(self) -> str:
        return f"vmapih{self.index}br0"

    @property
    def has_only_network(self) -> bool:
        return self.index == 1

    @property
    def has_extra_pool(self) -> bool:
        return self.index == 2

    only_subnet_prefix = "10.213.30"

    @property
    def only_bridge(self) -> str:
        return f"vmapih{self.index}br1"

    # The migration link (see the "migration links" section): one address per host on a bridge
    # in the switch namespace `<netns>-mx`; 10.213.40.0/24 is used nowhere else in the lab.
    migration_subnet_prefix = "10.213.40"
    migration_link_prefix = 24
    migration_veth = "vmapimig0"
    tls_port = 16514

    @property
    def migration_address(self) -> str:
        return f"{self.migration_subnet_prefix}.{10 + self.index}"

    @property
    def migration_switch_veth(self) -> str:
        """The link's end in the switch namespace, enslaved to its bridge."""
        return f"vmapimx{self.index}"

    @property
    def migration_tls(self) -> Path:
        """This host's migration certificates: libvirtd's listener and qemu's stream."""
        return self.dir / "migration-tls"

    @property
    def migration_qemu_tls(self) -> Path:
        """qemu's x509 directory (ca-cert.pem, server-*.pem, client-*.pem)."""
        return self.migration_tls / "qemu"

    @property
    def migration_pkipath(self) -> Path:
        """A `?pkipath=` for this host's libvirtd as the client of another host's (peer-to-peer
        migration): the CA and this host's client certificate."""
        return self.migration_tls / "client"

    @property
    def migration_uri(self) -> str:
        """How another host's libvirtd reaches this one to migrate a domain here; the source's
        libvirtd appends `?pkipath=` with its own client credentials."""
        return f"qemu+tls://{self.migration_address}/system"

    @property
    def host_uuid(self) -> str:
        """A host UUID of its own: every libvirtd on one machine would otherwise report the
        machine's SMBIOS UUID, and libvirt refuses to migrate to "the same host"."""
        return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{self.netns}.hosts.vmapi-lab"))


@dataclass(frozen=True)
class Lab:
    """Every name and path the lab uses, so that `up`, `down` and `env` agree on them."""

    dir: Path
    cache: Path
    netns: str
    api_port: int
    etcd_port: int
    host_count: int = 3
    remote_enabled: bool = True

    @classmethod
    def from_env(cls) -> Lab:
        cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cls(
            dir=Path(os.environ.get("VMAPI_LAB_DIR") or REPO / ".lab"),
            cache=Path(os.environ.get("VMAPI_LAB_CACHE") or cache_home / "vm-api-lab"),
            netns=os.environ.get("VMAPI_LAB_NETNS", "vmapilab"),
            api_port=int(os.environ.get("VMAPI_LAB_API_PORT", "16443")),
            etcd_port=int(os.environ.get("VMAPI_LAB_ETCD_PORT", "12379")),
            host_count=int(os.environ.get("VMAPI_LAB_HOST_COUNT", "3")),
            remote_enabled=os.environ.get("VMAPI_LAB_REMOTE", "1") != "0",
        )

    @property
    def logs(self) -> Path:
        return Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs")

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.pki / "admin.kubeconfig"

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def libvirt(self) -> Path:
        return self.dir / "libvirt"

    @property
    def libvirtd(self) -> Libvirtd:
        """The main libvirtd, in the lab's own namespace."""
        return Libvirtd(netns=self.netns, root=self.libvirt, logs=self.logs)

    @property
    def libvirt_socket(self) -> Path:
        return self.libvirtd.socket

    @property
    def libvirt_uri(self) -> str:
        return self.libvirtd.uri

    @property
    def hosts(self) -> list[ExtraHost]:
        """The extra libvirt hosts; their namespaces derive from the lab's, so two labs on one
        machine never share one."""
        return [
            ExtraHost(
                index=i,
                netns=f"{self.netns}-h{i}",
                dir=self.dir / "hosts" / f"h{i}",
                logs=self.logs,
            )
            for i in range(self.host_count)
        ]

    def existing_host_netns(self) -> list[str]:
        """Namespaces named like this lab's extra hosts, however many a previous `up` made."""
        pattern = re.compile(rf"^{re.escape(self.netns)}-h[0-9]+$")
        run_netns = Path("/run/netns")
        names = [p.name for p in run_netns.iterdir()] if run_netns.is_dir() else []
        return sorted(n for n in names if pattern.match(n))

    @property
    def remote(self) -> RemoteHost:
        """The remote libvirt host (made by `up` unless VMAPI_LAB_REMOTE=0)."""
        return RemoteHost(
            netns=f"{self.netns}-r0",
            client_netns=f"{self.netns}-rc",
            dir=self.dir / "remote",
            logs=self.logs,
        )

    @property
    def migration_netns(self) -> str:
        """The switch namespace between the extra hosts' migration links (see the "migration
        links" section)."""
        return f"{self.netns}-mx"

    @property
    def migration_bridge(self) -> str:
        return "vmapimxbr0"

    def existing_migration_netns(self) -> list[str]:
        """The switch namespace, if a previous `up` made it."""
        return [self.migration_netns] if netns_exists(self.migration_netns) else []

    def existing_remote_netns(self) -> list[str]:
        """The remote host's and its client's namespaces, if a previous `up` made them."""
        return [n for n in (self.remote.netns, self.remote.client_netns) if netns_exists(n)]

    @property
    def only_network(self) -> str:
        """An isolated network that only host h1 has."""
        return f"{self.netns}-only"

    @property
    def extra_pool(self) -> str:
        """A second directory pool that only host h2 has."""
        return f"{self.pool}-extra"

    @property
    def pool_dir(self) -> Path:
        return self.dir / "pool"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def env_file(self) -> Path:
        return self.dir / "env"

    @property
    def podman_conf(self) -> Path:
        """podman's configuration and image storage: in the cache, shared by every lab here."""
        return self.cache / "podman"

    @property
    def container_api_socket(self) -> Path:
        return self.dir / "podman.sock"

    @property
    def node_name(self) -> str:
        """The optional node's name: the lab's namespace, which names its libvirt host too."""
        return self.netns

    @property
    def node_dir(self) -> Path:
        return self.dir / "node"

    @property
    def kubelet_port(self) -> int:
        # Next to the API server's port, so that two labs on one machine never share it.
        return self.api_port + 2

    @property
    def cgroup_root(self) -> str:
        return f"/{self.netns}"

    network = "vmapi-lab"
    bridge = "vmapibr0"
    pool = "vmapi-lab"
    guest_volume = "vmapi-test-guest.qcow2"
    debian_volume = "vmapi-debian-guest.qcow2"
    subnet_prefix = "10.213.0"
    # A second isolated network without DHCP: guests there have only the addresses their
    # cloud-init network-data gives them, which only their guest agent can report.
    static_network = "vmapi-lab-static"
    static_bridge = "vmapibr1"
    static_subnet_prefix = "10.213.1"


# ---------------------------------------------------------------------------------------------
# small process helpers


def run(cmd: list[str], *, what: str, log: Path | None = None, **kwargs: object) -> str:
    """Run a command; on failure raise LabError naming `what` and where its output went."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        last = detail[-1] if detail else f"exit {proc.returncode}"
        where = f"; log: {log}" if log else ""
        raise LabError(f"{what} failed: {last}{where}")
    return str(proc.stdout)


def run_ok(cmd: list[str]) -> bool:
    """Whether a command succeeds (its output is discarded)."""
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate: Callable[[], object], *, timeout: float, interval: float = 0.2) -> bool:
    """Whether `predicate` came true within `timeout` (with one last look after it)."""
    try:
        eventually(predicate, timeout=timeout, interval=interval, not_yet=())
    except TimedOutError:
        return bool(predicate())
    return True


def stop_pids(pids: list[int], *, grace: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if not wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=grace):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=5)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def port_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:`port` now. SO_REUSEADDR as Go's listeners set it,
    so connections in TIME_WAIT do not count: only a process still listening does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_ports_free(ports: list[int], *, what: str, timeout: float = 30.0) -> None:
    """Wait until nothing listens on `ports` any more. A killed process can look gone before its
    sockets are: a multi-threaded one's main thread shows as a zombie while its other threads still
    tear down (freeing a large heap first, closing files last), and one spawned on its ports then
    fails to bind (the lab's API server did, once, in a long run)."""
    if not wait_for(lambda: all(port_free(p) for p in ports), timeout=timeout, interval=0.1):
        busy = [p for p in ports if not port_free(p)]
        held = subprocess.run(
            ["ss", "-ltnpH", *[f"sport = :{p}" for p in busy[:1]]],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        holder = " ".join(held.splitlines()[0].split()) if held else "a process outside the lab"
        raise LabError(f"{what}: ports {busy} still in use after {timeout:.0f} s ({holder})")


def spawn(cmd: list[str], *, log: Path) -> int:
    """Start a long-running process detached from our session, output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def netns_pids(name: str) -> list[int]:
    if not netns_exists(name):
        return []
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


# ---------------------------------------------------------------------------------------------
# builds


def build_kube(lab: Lab) -> Path:
    log = lab.logs / "kube-build.log"
    out = run(
        [str(HERE / "kube" / "build.sh"), str(lab.cache), str(log)],
        what="building the control plane (kube/build.sh)",
    )
    return Path(out.strip().splitlines()[-1])


def build_guest(lab: Lab) -> Path:
    log = lab.logs / "guest-build.log"
    out = run(
        [str(HERE / "guest" / "build-image.sh"), str(lab.cache)],
        what="building the test guest image (guest/build-image.sh)",
        log=log,
    )
    return Path(out.strip().splitlines()[-1])


def build_debian_guest(lab: Lab) -> Path:
    log = lab.logs / "guest-debian-build.log"
    out = run(
        [str(HERE / "guest-debian" / "build-image.sh"), str(lab.cache)],
        what="building the Debian test guest image (guest-debian/build-image.sh)",
        log=log,
    )
    return Path(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# podman: the product's image and a Docker-compatible API for the container tests

# Every container a lab starts carries this label with the lab's directory, so `down` removes its
# own containers and leaves other labs' alone.
CONTAINER_LABEL = "io.vm-api.lab"


def podman_env(lab: Lab) -> dict[str, str]:
    """The environment under which podman uses the lab's configuration, written on first use.

    Rootful podman on these hosts needs runc (crun rejects hybrid cgroups), the cgroupfs manager
    (no systemd) and a nofile ulimit within the hard limit. Containers share the host's network
    namespace by default, so podman never creates a bridge or a firewall rule; no registry is
    searched, so a missing image is an error and never a pull.
    """
    conf = lab.podman_conf
    conf.mkdir(parents=True, exist_ok=True)
    # Run-time state (locks, mounts) belongs with the storage it describes, apart from the host's.
    run_dir = Path("/run") / f"vmapi-lab-podman-{hashlib.sha256(bytes(conf)).hexdigest()[:8]}"
    # These hosts refuse raising a limit above its hard value (no CAP_SYS_RESOURCE), and podman's
    # defaults are higher; runc applies them under conmon, seen here with 32768 processes at most.
    ulimits = []
    for name, which, cap in (
        ("nofile", resource.RLIMIT_NOFILE, 1048576),
        ("nproc", resource.RLIMIT_NPROC, 32768),
    ):
        hard = resource.getrlimit(which)[1]
        value = min(hard if hard != resource.RLIM_INFINITY else cap, cap)
        ulimits.append(f'"{name}={value}:{value}"')
    files = {
        "containers.conf": (
            "[containers]\n"
            'netns = "host"\n'
            f"default_ulimits = [{', '.join(ulimits)}]\n"
            'log_driver = "k8s-file"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{run_dir / "libpod"}"\n'
            "[network]\n"
            f'network_config_dir = "{conf / "networks"}"\n'
        ),
        "storage.conf": (
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{conf / "storage"}"\n'
            f'runroot = "{run_dir / "storage"}"\n'
        ),
        "registries.conf": 'unqualified-search-registries = []\nshort-name-mode = "enforcing"\n',
    }
    for name, text in files.items():
        path = conf / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return {
        **os.environ,
        "CONTAINERS_CONF": str(conf / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(conf / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(conf / "registries.conf"),
    }


def build_image(lab: Lab) -> str:
    """The product's image from deploy/Containerfile (cached by content); returns its name."""
    log = lab.logs / "image-build.log"
    out = run(
        [str(HERE / "image" / "build.sh"), str(lab.cache), str(log)],
        what="building the product's image (image/build.sh)",
        env=podman_env(lab),
    )
    return out.strip().splitlines()[-1]


def container_api_answers(lab: Lab) -> bool:
    if not lab.container_api_socket.exists():
        return False
    proc = subprocess.run(
        ["podman", "--url", f"unix://{lab.container_api_socket}", "version"],
        capture_output=True,
        check=False,
        timeout=20,
        env=podman_env(lab),
    )
    return proc.returncode == 0


def start_container_api(lab: Lab) -> Path:
    """podman's Docker-compatible API on a socket in the lab directory (idempotent)."""
    state = load_state(lab)
    if not state.get("ready"):
        raise LabError("the lab is not up; run `make lab-up` first")
    pid = state.get("podman_service_pid")
    if isinstance(pid, int) and pid_alive(pid) and container_api_answers(lab):
        return lab.container_api_socket
    lab.container_api_socket.unlink(missing_ok=True)
    log = lab.logs / "podman-service.log"
    env = podman_env(lab)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{lab.container_api_socket}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    state["podman_service_pid"] = proc.pid
    save_state(lab, state)
    if not wait_for(lambda: container_api_answers(lab) or not pid_alive(proc.pid), timeout=60):
        raise LabError(f"podman's API service did not answer within 60 s; log: {log}")
    if not pid_alive(proc.pid):
        raise LabError(f"podman's API service exited during start-up; log: {log}")
    return lab.container_api_socket


def lab_containers(lab: Lab) -> list[str]:
    """IDs of the containers this lab started (running or not)."""
    if not (lab.podman_conf / "storage.conf").exists() or shutil.which("podman") is None:
        return []
    out = subprocess.run(
        ["podman", "ps", "-a", "-q", "--filter", f"label={CONTAINER_LABEL}={lab.dir}"],
        capture_output=True,
        text=True,
        check=False,
        env=podman_env(lab),
    )
    return out.stdout.split()


def stop_container_api(lab: Lab, state: dict[str, object]) -> None:
    ids = lab_containers(lab)
    if ids:
        subprocess.run(
            ["podman", "rm", "-f", "-t", "10", *ids],
            capture_output=True,
            check=False,
            env=podman_env(lab),
        )
    pid = state.get("podman_service_pid")
    if isinstance(pid, int) and pid_alive(pid):
        stop_pids([pid])


# ---------------------------------------------------------------------------------------------
# the optional node: containerd and a kubelet, for running deploy/ as a real DaemonSet

# What the kubelet insists on finding in these kernel settings. Where the host's differ, it would
# write them (panic on oops, overcommit) unless told to refuse to start; the node's private mount
# namespace shows it files with these values instead, so the host's settings stay as they are.
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
# Upstream's tag for the sandbox image is never pulled here: the lab imports its own under it.
PAUSE_IMAGE = "localhost/vmapi-lab/pause:1"
# The name deploy/daemonset.yaml gives the image, as the CRI normalises it.
PROVIDER_IMAGE = "docker.io/vm-api/libvirt-provider:0.1.0"
CGROUP_V1 = Path("/sys/fs/cgroup")


def node_binds(lab: Lab) -> dict[str, Path]:
    """Host paths, as the node's mount namespace sees them: libvirt's the way the lab's libvirtd
    sees them (so the DaemonSet's hostPath volumes find its socket and pools), the kubelet's
    fixed folders in the lab directory (so nothing is left on the host)."""
    n = lab.node_dir
    return {
        "/run/libvirt": lab.libvirt / "sock",
        "/var/log/libvirt": lab.libvirt / "log",
        "/var/lib/libvirt": lab.libvirt / "lib",
        "/var/lib/kubelet": n / "kubelet",
        "/var/log/pods": n / "log" / "pods",
        "/var/log/containers": n / "log" / "containers",
        "/usr/libexec/kubernetes": n / "libexec",
        "/run/containerd": n / "run",
        "/etc/cni/net.d": n / "cni",
    }


def build_pause(lab: Lab) -> Path:
    """An OCI archive of the sandbox image: one static Go binary (kube/pause), cached by content."""
    src = HERE / "kube" / "pause" / "main.go"
    go_version = run(["go", "version"], what="reading the Go version")
    key = hashlib.sha256(src.read_bytes() + go_version.encode()).hexdigest()[:12]
    out = lab.cache / f"pause-{key}" / "pause.oci.tar"
    if out.exists():
        return out
    work = out.parent.with_name(out.parent.name + f".tmp.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run(
        ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(work / "pause"), "./pause"],
        what="building the pause binary",
        log=lab.logs / "pause-build.log",
        cwd=HERE / "kube",
        env={**os.environ, "CGO_ENABLED": "0"},
    )
    _write_oci_archive(work / "pause", work / "pause.oci.tar", name=PAUSE_IMAGE)
    shutil.rmtree(out.parent, ignore_errors=True)
    work.rename(out.parent)
    return out


def _write_oci_archive(binary: Path, archive: Path, *, name: str) -> None:
    """An OCI image layout, as a tar, with `binary` as /pause and its entrypoint."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w") as layer:
        info = layer.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with binary.open("rb") as fh:
            layer.addfile(info, fh)
    layer_bytes = layer_buf.getvalue()
    layer_digest = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    ).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": len(layer_bytes),
                }
            ],
        }
    ).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    entries = {
        "oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
        "index.json": index,
        f"blobs/sha256/{layer_digest[7:]}": layer_bytes,
        f"blobs/sha256/{config_digest[7:]}": config,
        f"blobs/sha256/{manifest_digest[7:]}": manifest,
    }
    with tarfile.open(archive, "w") as out:
        for path, data in entries.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


def write_node_config(lab: Lab) -> None:
    n = lab.node_dir
    for sub in ("containerd", "run", "cni", "kubelet", "log/pods", "log/containers", "libexec"):
        (n / sub).mkdir(parents=True, exist_ok=True)
    (lab.libvirt / "log" / "qemu").mkdir(parents=True, exist_ok=True)
    (lab.libvirt / "lib" / "images").mkdir(parents=True, exist_ok=True)
    sysctls = n / "sysctl"
    for key, value in KUBELET_SYSCTLS.items():
        (sysctls / key).parent.mkdir(parents=True, exist_ok=True)
        (sysctls / key).write_text(value + "\n")
    # hostNetwork pods need no network; a configuration that only brings up loopback lets the
    # runtime report its network ready without creating any bridge, address or rule.
    (n / "cni" / "10-loopback.conflist").write_text(
        json.dumps(
            {"cniVersion": "0.4.0", "name": "vmapi-lab-loopback", "plugins": [{"type": "loopback"}]}
        )
        + "\n"
    )
    c = n / "containerd"
    (n / "containerd.toml").write_text(
        "version = 2\n"
        f'root = "{c / "root"}"\n'
        f'state = "{c / "state"}"\n'
        f'[grpc]\n  address = "{n / "containerd.sock"}"\n'
        f'[ttrpc]\n  address = "{n / "containerd.sock.ttrpc"}"\n'
        '[debug]\n  address = ""\n'
        '[metrics]\n  address = ""\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{c / "opt"}"\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n'
        f'  sandbox_image = "{PAUSE_IMAGE}"\n'
        # These hosts do not let a process lower its OOM score, which containerd does for
        # sandboxes unless told to stay within its own.
        "  restrict_oom_score_adj = true\n"
        '  [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        '    snapshotter = "overlayfs"\n'
        '    default_runtime_name = "runc"\n'
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '      runtime_type = "io.containerd.runc.v2"\n'
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "        SystemdCgroup = false\n"
        '  [plugins."io.containerd.grpc.v1.cri".cni]\n'
        '    bin_dir = "/usr/lib/cni"\n'
        '    conf_dir = "/etc/cni/net.d"\n'
    )
    pki = lab.pki
    (n / "kubelet.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": "127.0.0.1",
                "port": lab.kubelet_port,
                "readOnlyPort": 0,
                "healthzPort": 0,
                "tlsCertFile": str(pki / "kubelet-serving.crt"),
                "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
                "authentication": {
                    "x509": {"clientCAFile": str(pki / "ca.crt")},
                    "webhook": {"enabled": False},
                    "anonymous": {"enabled": False},
                },
                # Only the lab's CA signs client certificates, and only the API server and the
                # admin hold one: no per-request check is needed.
                "authorization": {"mode": "AlwaysAllow"},
                "containerRuntimeEndpoint": f"unix://{n / 'containerd.sock'}",
                "cgroupDriver": "cgroupfs",
                "cgroupRoot": lab.cgroup_root,
                "failCgroupV1": False,
                "failSwapOn": False,
                # Left to itself the kubelet adds iptables chains to the host's INPUT and OUTPUT.
                "makeIPTablesUtilChains": False,
                "protectKernelDefaults": False,
                "registerNode": True,
                "clusterDNS": [],
                "resolvConf": "",
                "staticPodPath": "",
                "evictionHard": {
                    "memory.available": "50Mi",
                    "nodefs.available": "1%",
                    "imagefs.available": "1%",
                },
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
            },
            indent=2,
        )
        + "\n"
    )


def _node_script(lab: Lab, command: list[str]) -> str:
    binds = [
        f"mkdir -p {shlex.quote(str(src))} && mount --bind {shlex.quote(str(src))} {target}"
        for target, src in node_binds(lab).items()
    ]
    binds += [
        f"mount --bind {shlex.quote(str(lab.node_dir / 'sysctl' / key))} /proc/sys/{key}"
        for key in KUBELET_SYSCTLS
    ]
    return " && ".join([*binds, f"exec {shlex.join(command)}"])


def _ctr(lab: Lab, *args: str, what: str) -> str:
    return run(
        ["ctr", "--address", str(lab.node_dir / "containerd.sock"), "-n", "k8s.io", *args],
        what=what,
        log=lab.logs / "node-ctr.log",
    )


def import_provider_image(lab: Lab, *, tag: str = PROVIDER_IMAGE) -> str:
    """The product's image (built if needed) imported into the node's runtime as `tag`."""
    image = build_image(lab)
    archive = lab.node_dir / "provider.oci.tar"
    run(
        ["podman", "save", "--format", "oci-archive", "-o", str(archive), image],
        what="exporting the product's image from podman",
        log=lab.logs / "node-ctr.log",
        env=podman_env(lab),
    )
    try:
        out = _ctr(lab, "images", "import", str(archive), what="importing the product's image")
    finally:
        archive.unlink(missing_ok=True)
    imported = next(
        (line.split()[1] for line in out.splitlines() if line.startswith("unpacking ")), ""
    )
    if not imported:
        raise LabError(f"ctr printed no image name importing {image}; log: {lab.logs}")
    _ctr(lab, "images", "tag", "--force", imported, tag, what=f"tagging the image as {tag}")
    return tag


def _make_cgroup_root(lab: Lab) -> None:
    for hierarchy in CGROUP_V1.iterdir():
        if hierarchy.is_dir() and (hierarchy / "cgroup.procs").exists():
            (hierarchy / lab.cgroup_root.lstrip("/")).mkdir(exist_ok=True)


def kubectl(lab: Lab, *args: str, what: str) -> str:
    return run(
        [str(lab.bin / "kubectl"), "--kubeconfig", str(lab.kubeconfig), *args],
        what=what,
        log=lab.logs / "node-kubectl.log",
    )


def node_ready(lab: Lab) -> bool:
    proc = subprocess.run(
        [
            str(lab.bin / "kubectl"),
            "--kubeconfig",
            str(lab.kubeconfig),
            "get",
            "node",
            lab.node_name,
            "-o",
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() == "True"


def start_node(lab: Lab, state: dict[str, object]) -> None:
    """containerd and a kubelet in a private mount namespace, and kube-scheduler; the node is
    Ready, with the sandbox and product images imported, when this returns."""
    kube_lab = Path(str(state["kube_lab"]))
    pause = build_pause(lab)
    write_node_config(lab)
    # Mount points that the host lacks are made, and each one's first missing ancestor remembered
    # so that stop_node removes exactly what was made.
    created: list[list[str]] = []
    for target in map(Path, node_binds(lab)):
        if target.exists():
            continue
        top = target
        while not top.parent.exists():
            top = top.parent
        target.mkdir(parents=True)
        created.append([str(target), str(top)])
    state["node_created_dirs"] = created
    _make_cgroup_root(lab)
    state["node"] = True
    save_state(lab, state)

    containerd = spawn(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            _node_script(lab, ["containerd", "--config", str(lab.node_dir / "containerd.toml")]),
        ],
        log=lab.logs / "containerd.log",
    )
    state["containerd_pid"] = containerd
    save_state(lab, state)
    sock = lab.node_dir / "containerd.sock"
    if not wait_for(lambda: sock.exists() or not pid_alive(containerd), timeout=60):
        raise LabError(f"containerd did not start within 60 s; log: {lab.logs / 'containerd.log'}")
    if not pid_alive(containerd):
        raise LabError(f"containerd exited during start-up; log: {lab.logs / 'containerd.log'}")
    _ctr(lab, "images", "import", str(pause), what="importing the pause image")
    import_provider_image(lab)

    pki = lab.pki
    state["kubelet_pid"] = spawn(
        [
            "nsenter",
            f"--mount=/proc/{containerd}/ns/mnt",
            "--",
            str(kube_lab),
            "kubelet",
            f"--config={lab.node_dir / 'kubelet.yaml'}",
            f"--kubeconfig={pki / 'kubelet.kubeconfig'}",
            f"--hostname-override={lab.node_name}",
            "--node-ip=127.0.0.1",
            "--v=1",
        ],
        log=lab.logs / "kubelet.log",
    )
    state["scheduler_pid"] = spawn(
        [
            str(kube_lab),
            "scheduler",
            f"--kubeconfig={pki / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--secure-port=0",
            "--v=0",
        ],
        log=lab.logs / "kube-scheduler.log",
    )
    save_state(lab, state)
    # The kubelet refuses a loopback node IP and then reports no address at all, so the API server
    # would not know where to reach it for logs and exec; the lab records 127.0.0.1 itself (the
    # kubelet leaves addresses alone while its own fail to validate).
    addresses = json.dumps(
        {
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": lab.node_name},
                ]
            }
        }
    )
    get_node = [str(lab.bin / "kubectl"), "--kubeconfig", str(lab.kubeconfig), "get", "node"]
    registered = wait_for(
        lambda: run_ok([*get_node, lab.node_name]),
        timeout=60,
        interval=0.5,
    )
    if not registered:
        log = lab.logs / "kubelet.log"
        raise LabError(f"node {lab.node_name} did not register within 60 s; log: {log}")
    kubectl(
        lab,
        "patch",
        "node",
        lab.node_name,
        "--subresource=status",
        "--type=merge",
        "-p",
        addresses,
        what="recording the node's address",
    )
    write_overlay_env(lab, state)
    if not wait_for(lambda: node_ready(lab), timeout=120, interval=1):
        log = lab.logs / "kubelet.log"
        raise LabError(f"node {lab.node_name} not Ready within 120 s; log: {log}")


OVERLAY_ENV = HERE / "overlay" / "lab.env"


def write_overlay_env(lab: Lab, state: dict[str, object]) -> None:
    """What the lab's overlay of deploy/ (overlay/) needs from this lab: where its API server
    listens, which guest domain type works here."""
    OVERLAY_ENV.write_text(
        "KUBERNETES_SERVICE_HOST=127.0.0.1\n"
        f"KUBERNETES_SERVICE_PORT={lab.api_port}\n"
        f"LAB_DOMAIN_TYPES={state.get('domain_type', 'qemu')}\n"
    )


def _cgroup_dirs(lab: Lab) -> list[Path]:
    """The node's cgroups in every hierarchy, deepest first."""
    found: list[Path] = []
    for hierarchy in CGROUP_V1.iterdir():
        root = hierarchy / lab.cgroup_root.lstrip("/")
        if root.is_dir():
            found += [Path(d) for d, _, _ in os.walk(root)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _node_processes(lab: Lab) -> list[int]:
    """Every process the node started: in its cgroups, or a shim of its containerd."""
    pids: set[int] = set()
    for d in _cgroup_dirs(lab):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    marker = str(lab.node_dir / "containerd.sock").encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes():
                    pids.add(int(proc.name))
    pids.discard(os.getpid())
    return sorted(pids)


def node_leftovers(lab: Lab) -> list[str]:
    """What of the node still exists on the host: processes, cgroups, mounts, folders."""
    left = [f"process {pid}" for pid in _node_processes(lab)]
    left += [f"cgroup {d}" for d in _cgroup_dirs(lab)]
    mounts = Path("/proc/self/mountinfo").read_text()
    left += [
        f"mount {line.split()[4]}" for line in mounts.splitlines() if str(lab.node_dir) in line
    ]
    return left


def stop_node(lab: Lab, state: dict[str, object]) -> None:
    for key in ("scheduler_pid", "kubelet_pid"):
        pid = state.get(key)
        if isinstance(pid, int) and pid_alive(pid):
            stop_pids([pid])
    # Pods' processes and their shims, then containerd: with its last process the private mount
    # namespace, and every mount in it, is gone.
    for _ in range(3):
        pids = _node_processes(lab)
        if not pids:
            break
        stop_pids(pids, grace=5)
    pid = state.get("containerd_pid")
    if isinstance(pid, int) and pid_alive(pid):
        stop_pids([pid])
    for d in _cgroup_dirs(lab):
        with contextlib.suppress(OSError):
            d.rmdir()
    if state.get("node"):
        OVERLAY_ENV.unlink(missing_ok=True)
    created = state.get("node_created_dirs")
    for target, top in created if isinstance(created, list) else []:
        path = Path(target)
        with contextlib.suppress(OSError):
            while True:
                path.rmdir()
                if path == Path(top):
                    break
                path = path.parent


# ---------------------------------------------------------------------------------------------
# Kubernetes control plane


def _ssl_context(lab: Lab) -> ssl.SSLContext:
    pki = lab.pki
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with tempfile.TemporaryDirectory() as tmp:
        # The admin kubeconfig embeds its credentials; urllib wants them as files.
        cert, key = _admin_cert_files(lab, Path(tmp))
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _admin_cert_files(lab: Lab, tmp: Path) -> tuple[Path, Path]:
    cert_data = key_data = ""
    for raw in lab.kubeconfig.read_text().splitlines():
        line = raw.strip()
        if line.startswith("client-certificate-data:"):
            cert_data = line.split(":", 1)[1].strip()
        elif line.startswith("client-key-data:"):
            key_data = line.split(":", 1)[1].strip()
    cert, key = tmp / "admin.crt", tmp / "admin.key"
    cert.write_bytes(base64.b64decode(cert_data))
    key.write_bytes(base64.b64decode(key_data))
    return cert, key


# The front proxy's client certificate name (--requestheader-allowed-names), and the Service the
# console's APIService names: its serving certificate is made for `<name>.<namespace>.svc`.
FRONT_PROXY_CLIENT = "front-proxy-client"
CONSOLE_SERVICE = "libvirt-provider-console.vm-api-system.svc"

PKI_EXTENSIONS = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:{service},DNS:localhost,IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def make_front_proxy_credentials(lab: Lab) -> None:
    """The aggregation layer's certificates (P-256, openssl's CLI), in the lab's pki directory:

    - `front-proxy-ca` and `front-proxy-client` (CN front-proxy-client): what the API server
      presents to aggregated servers (--proxy-client-*) and tells them to trust (--requestheader-*);
    - `other-front-proxy-ca` and `other-front-proxy-client`: the same name from a CA nobody trusts,
      for tests that forge the front proxy;
    - `console-ca` and `console-serving`: the daemons' console endpoint's serving certificate, for
      the console Service's name, localhost and 127.0.0.1; the APIService's caBundle is
      `console-ca.crt`.
    """
    pki = lab.pki
    cnf = pki / "front-proxy-openssl.cnf"
    cnf.write_text(PKI_EXTENSIONS.format(service=CONSOLE_SERVICE))
    log = lab.logs / "front-proxy-pki.log"

    def cert(name: str, subject: str, section: str, ca: str | None = None) -> None:
        cmd = [
            "openssl", "req", "-x509", "-new", "-config", str(cnf), "-extensions", section,
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(pki / f"{name}.key"), "-out", str(pki / f"{name}.crt"),
            "-subj", subject, "-days", "365", "-sha256",
        ]  # fmt: skip
        if ca is not None:
            cmd += ["-CA", str(pki / f"{ca}.crt"), "-CAkey", str(pki / f"{ca}.key")]
        run(cmd, what=f"making the lab's certificate {name}", log=log)

    cert("front-proxy-ca", "/CN=vmapi lab front-proxy CA", "ca")
    cert("front-proxy-client", f"/CN={FRONT_PROXY_CLIENT}", "client", ca="front-proxy-ca")
    cert("other-front-proxy-ca", "/CN=vmapi lab untrusted front-proxy CA", "ca")
    other = "other-front-proxy-ca"
    cert("other-front-proxy-client", f"/CN={FRONT_PROXY_CLIENT}", "client", ca=other)
    cert("console-ca", "/CN=vmapi lab console CA", "ca")
    cert("console-serving", f"/CN={CONSOLE_SERVICE}", "server", ca="console-ca")


def apiserver_ready(lab: Lab) -> bool:
    if not lab.kubeconfig.exists():
        return False
    try:
        ctx = _ssl_context(lab)
        url = f"https://127.0.0.1:{lab.api_port}/readyz"
        with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
            return bool(resp.status == 200 and resp.read().strip() == b"ok")
    except (OSError, ssl.SSLError):
        return False


def apiserver_ports(lab: Lab) -> list[int]:
    """The API server's own port and its embedded etcd's client and peer ports."""
    return [lab.api_port, lab.etcd_port, lab.etcd_port + 1]


def start_control_plane(lab: Lab, kube_lab: Path, state: dict[str, object]) -> None:
    server = f"https://127.0.0.1:{lab.api_port}"
    run(
        [str(kube_lab), "pki", "--dir", str(lab.pki), "--server", server, "--node", lab.node_name],
        what="generating lab certificates",
        log=lab.logs / "pki.log",
    )
    pki = lab.pki
    make_front_proxy_credentials(lab)
    log = lab.logs / "kube-apiserver.log"
    # Briefly: right after `down` the last API server may still be letting go of them; anything
    # longer is another program on the lab's ports, said at once with the log to look at.
    wait_ports_free(
        apiserver_ports(lab), what=f"cannot start kube-apiserver (log: {log})", timeout=10
    )
    pid = spawn(
        [
            str(kube_lab),
            "apiserver",
            "--etcd-dir",
            str(lab.dir / "etcd"),
            "--etcd-port",
            str(lab.etcd_port),
            "--",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={lab.api_port}",
            f"--cert-dir={lab.dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # For `kubectl logs` and `exec` through the lab's node (see start_node).
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            # The aggregation layer (the daemons' console endpoint, docs/console.md): the API
            # server proxies to aggregated servers as front-proxy-client, and tells them, in
            # kube-system/extension-apiserver-authentication, which CA and names to trust.
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--v=0",
        ],
        log=log,
    )
    state["apiserver_pid"] = pid
    save_state(lab, state)
    if not wait_for(lambda: apiserver_ready(lab) or not pid_alive(pid), timeout=180, interval=0.5):
        raise LabError(f"kube-apiserver did not become ready within 180 s; log: {log}")
    if not pid_alive(pid):
        raise LabError(f"kube-apiserver exited during start-up; log: {log}")

    kcm_log = lab.logs / "kube-controller-manager.log"
    state["controller_manager_pid"] = spawn(
        [
            str(kube_lab),
            "controller-manager",
            f"--kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            # The three before the last serve the optional node (DaemonSet pods, the CA their
            # ServiceAccount volumes mount, the not-ready taint a new node carries); without a
            # node they only write a kube-root-ca.crt ConfigMap into each namespace. The last
            # fills `admin`, `edit` and `view` with the ClusterRoles labelled for them (deploy/).
            "--controllers=garbage-collector-controller,namespace-controller,"
            "serviceaccount-controller,serviceaccount-token-controller,daemonset-controller,"
            "root-ca-certificate-publisher-controller,node-lifecycle-controller,"
            "clusterrole-aggregation-controller",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            # Each controller acts as its own ServiceAccount with its upstream role, as in a real
            # cluster; the controller-manager user alone may not touch custom resources, which
            # left namespaces holding them Terminating forever.
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--v=0",
        ],
        log=kcm_log,
    )
    save_state(lab, state)


# ---------------------------------------------------------------------------------------------
# libvirt inside the lab's network namespace


LIBVIRT_DIRS = (
    "/etc/libvirt",
    "/run/libvirt",
    "/var/lib/libvirt",
    "/var/cache/libvirt",
    "/var/log/libvirt",
)


def write_libvirt_config(libvirtd: Libvirtd) -> None:
    root = libvirtd.root
    for sub in ("sock", "etc", "run", "lib", "cache", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    libvirtd.logs.mkdir(parents=True, exist_ok=True)
    sock_dir = "" if libvirtd.default_socket else f'unix_sock_dir = "{root / "sock"}"\n'
    (root / "etc" / "libvirtd.conf").write_text(
        sock_dir + 'unix_sock_group = "root"\n'
        'unix_sock_rw_perms = "0700"\n'
        'auth_unix_ro = "none"\n'
        'auth_unix_rw = "none"\n'
        f'log_outputs = "3:file:{libvirtd.log}"\n'
        # A client that vanishes must not leave its connection hanging forever.
        "keepalive_interval = 5\n"
        "keepalive_count = 5\n"
    )
    # qemu runs as root here: the lab's qemu must open /dev/kvm (mode 0600 on these machines) and
    # the lab's own directories, and no dedicated libvirt users exist without the system package.
    (root / "etc" / "qemu.conf").write_text(
        'user = "root"\n'
        'group = "root"\n'
        'security_driver = "none"\n'
        'stdio_handler = "file"\n'
        "namespaces = []\n"
        "cgroup_controllers = []\n"
        "remember_owner = 0\n"
    )
    (root / "etc" / "network.conf").write_text('firewall_backend = "iptables"\n')


def libvirt_answers(libvirtd: Libvirtd) -> bool:
    if not libvirtd.socket.exists():
        return False
    proc = subprocess.run(
        ["virsh", "-c", libvirtd.uri, "version"], capture_output=True, check=False, timeout=20
    )
    return proc.returncode == 0


def virsh(libvirtd: Libvirtd, *args: str, what: str) -> str:
    return run(["virsh", "-q", "-c", libvirtd.uri, *args], what=what, log=libvirtd.virsh_log)


def create_netns(name: str) -> None:
    run(["ip", "netns", "add", name], what=f"creating network namespace {name}")
    run(
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
        what=f"bringing up loopback in namespace {name}",
    )


def define_isolated_network(
    libvirtd: Libvirtd, xml_file: Path, *, name: str, bridge: str, prefix: str, dhcp: bool
) -> None:
    """Define and start a network without <forward>: guests reach only each other and the
    bridge, which exists only in the libvirtd's namespace."""
    dhcp_xml = f"<dhcp><range start='{prefix}.100' end='{prefix}.250'/></dhcp>" if dhcp else ""
    xml_file.write_text(
        f"<network><name>{name}</name>"
        f"<bridge name='{bridge}' stp='off' delay='0'/>"
        f"<ip address='{prefix}.1' netmask='255.255.255.0'>{dhcp_xml}</ip></network>"
    )
    virsh(libvirtd, "net-define", str(xml_file), what=f"defining network {name} ({libvirtd.what})")
    virsh(libvirtd, "net-start", name, what=f"starting network {name} ({libvirtd.what})")


def define_dir_pool(libvirtd: Libvirtd, *, name: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    virsh(
        libvirtd,
        "pool-define-as",
        name,
        "dir",
        "--target",
        str(target),
        what=f"defining storage pool {name} ({libvirtd.what})",
    )
    virsh(libvirtd, "pool-start", name, what=f"starting storage pool {name} ({libvirtd.what})")


def start_libvirt(
    lab: Lab, guest_image: Path, debian_image: Path, state: dict[str, object]
) -> None:
    libvirtd = lab.libvirtd
    create_netns(lab.netns)
    state["netns"] = lab.netns
    save_state(lab, state)
    write_libvirt_config(libvirtd)
    state["libvirtd_pid"] = spawn_libvirtd(libvirtd)
    save_state(lab, state)
    wait_libvirtd(libvirtd, int(str(state["libvirtd_pid"])))

    define_isolated_network(
        libvirtd,
        lab.dir / "network.xml",
        name=lab.network,
        bridge=lab.bridge,
        prefix=lab.subnet_prefix,
        dhcp=True,
    )
    # Guests on this one have only the addresses their cloud-init network-data gives them.
    define_isolated_network(
        libvirtd,
        lab.dir / "network-static.xml",
        name=lab.static_network,
        bridge=lab.static_bridge,
        prefix=lab.static_subnet_prefix,
        dhcp=False,
    )
    define_dir_pool(libvirtd, name=lab.pool, target=lab.pool_dir)
    shutil.copyfile(guest_image, lab.pool_dir / lab.guest_volume)
    shutil.copyfile(debian_image, lab.pool_dir / lab.debian_volume)
    virsh(libvirtd, "pool-refresh", lab.pool, what="refreshing the lab storage pool")


def start_hosts(lab: Lab, guest_image: Path, state: dict[str, object]) -> None:
    """The extra libvirt hosts and the remote host, each in its own namespaces, then each
    configured in a thread of its own (the work is waiting on virsh).

    A fresh libvirtd probes every qemu binary before it answers: about 8 s, and three hosts
    probing at once took 25 s. Same qemu, same kernel, so the main libvirtd's results are valid
    for every host, except that libvirtd also compares the CPUID it read at start-up, and one
    leaf holds the APIC id of the CPU it happened to run on. So the hosts start pinned to that
    CPU: the first with the main libvirtd's cache (should the CPU not be found, it probes), the
    others with the first's, which always fits. Each libvirtd is unpinned once it answers, before
    it starts any dnsmasq or qemu (which would inherit the pin).
    """
    hosts = lab.hosts
    if not 0 <= lab.host_count <= MAX_HOST_COUNT:
        raise LabError(f"VMAPI_LAB_HOST_COUNT must be between 0 and {MAX_HOST_COUNT}")
    for host in hosts:
        if len(host.netns) > 63 or not DNS_SUBDOMAIN.match(host.netns):
            raise LabError(
                f"host name {host.netns!r} (from VMAPI_LAB_NETNS) is not a DNS-1123 subdomain"
            )
    cpus = os.sched_getaffinity(0)
    probed_on = cpu_of_cached_probe(lab.libvirtd)
    cpu = probed_on if probed_on in cpus else min(cpus)
    recorded: list[dict[str, object]] = []
    state["hosts"] = recorded

    def start_extra(host: ExtraHost, seed: Libvirtd) -> int:
        entry: dict[str, object] = {"netns": host.netns}
        recorded.append(entry)
        save_state(lab, state)
        create_netns(host.netns)
        add_migration_link(lab, host)
        write_libvirt_config(host.libvirtd)
        write_migration_config(host)
        copy_qemu_capabilities(seed, host.libvirtd)
        pid = spawn_libvirtd(host.libvirtd, cpu=cpu)
        entry["libvirtd_pid"] = pid
        save_state(lab, state)
        return pid

    starters: list[tuple[Libvirtd, Callable[[Libvirtd], int]]] = [
        (host.libvirtd, functools.partial(start_extra, host)) for host in hosts
    ]
    configure: list[Callable[[], None]] = [
        functools.partial(configure_host, lab, host, guest_image) for host in hosts
    ]
    if lab.remote_enabled:
        remote = lab.remote
        entry = prepare_remote(lab, state)

        def start_remote(seed: Libvirtd) -> int:
            copy_qemu_capabilities(seed, remote.libvirtd)
            pid = spawn_remote_libvirtd(remote, int(str(entry["holder_pid"])), cpu=cpu)
            entry["libvirtd_pid"] = pid
            save_state(lab, state)
            return pid

        def configure_remote_and_sshd() -> None:
            configure_remote(lab, guest_image)
            entry["sshd_pid"] = start_sshd(lab)

        starters.append((remote.libvirtd, start_remote))
        configure.append(configure_remote_and_sshd)
    if not starters:
        return
    (first, start_first), rest = starters[0], starters[1:]
    first_pid = start_first(lab.libvirtd)
    wait_libvirtd(first, first_pid)
    release_cpu_pin(first_pid, cpus)
    pids = [start(first) for _, start in rest]
    for (libvirtd, _), pid in zip(rest, pids, strict=True):
        wait_libvirtd(libvirtd, pid)
        release_cpu_pin(pid, cpus)
    with ThreadPoolExecutor(max_workers=len(configure)) as pool:
        # list() re-raises the first failure here.
        list(pool.map(lambda step: step(), configure))
    save_state(lab, state)


QEMU_CAPS_CACHE = Path("cache") / "qemu" / "capabilities"


def copy_qemu_capabilities(source: Libvirtd, target: Libvirtd) -> None:
    """Give `target` the qemu probe results `source` cached (libvirtd re-probes if they do not
    fit, so a mismatch costs time, never correctness)."""
    if (source.root / QEMU_CAPS_CACHE).is_dir():
        shutil.copytree(
            source.root / QEMU_CAPS_CACHE, target.root / QEMU_CAPS_CACHE, dirs_exist_ok=True
        )


def cpu_of_cached_probe(libvirtd: Libvirtd) -> int | None:
    """The CPU on which `libvirtd` read the CPUID its qemu cache records, if that can be told:
    the x2APIC id in leaf 0x1f (or 0xb) of the cached host CPUID (libvirt leaves out all-zero
    leaves, so a leaf that is missing means id 0), mapped to a CPU number by /proc/cpuinfo."""
    files = sorted((libvirtd.root / QEMU_CAPS_CACHE).glob("*.xml"))
    if not files:
        return None
    text = files[0].read_text()
    if "<cpuid " not in text:
        return None
    apic_id = 0
    for leaf in ("0x0000001f", "0x0000000b"):
        found = re.search(
            rf"<cpuid eax_in='{leaf}' ecx_in='0x00000000'[^>]*edx='(0x[0-9a-f]+)'", text
        )
        if found:
            apic_id = int(found.group(1), 16)
            break
    cpu: int | None = None
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            cpu = int(value)
        elif key == "apicid" and int(value) == apic_id:
            return cpu
    return None


def release_cpu_pin(pid: int, cpus: set[int]) -> None:
    """Give every thread of `pid` the CPUs the lab itself may use again."""
    # Twice over, in case a thread being unpinned was creating another.
    for _ in range(2):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task.name), cpus)


def configure_host(lab: Lab, host: ExtraHost, guest_image: Path) -> None:
    libvirtd = host.libvirtd
    define_isolated_network(
        libvirtd,
        host.dir / "network.xml",
        name=lab.network,
        bridge=host.bridge,
        prefix=host.subnet_prefix,
        dhcp=True,
    )
    if host.has_only_network:
        define_isolated_network(
            libvirtd,
            host.dir / "network-only.xml",
            name=lab.only_network,
            bridge=host.only_bridge,
            prefix=host.only_subnet_prefix,
            dhcp=True,
        )
    # The volume is in place before the pool starts, which finds it without a refresh. The Debian
    # image is left out: 133 MiB per host for tests that only need a guest that boots.
    host.pool_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(guest_image, host.pool_dir / lab.guest_volume)
    define_dir_pool(libvirtd, name=lab.pool, target=host.pool_dir)
    if host.has_extra_pool:
        define_dir_pool(libvirtd, name=lab.extra_pool, target=host.extra_pool_dir)


def _libvirt_binds(root: Path) -> str:
    """Shell commands that bind a libvirtd's own directories over libvirt's fixed paths."""
    return " && ".join(
        f"mkdir -p {d} && mount --bind {shlex.quote(str(root / src))} {d}"
        for d, src in zip(LIBVIRT_DIRS, ("etc", "run", "lib", "cache", "log"), strict=True)
    )


def spawn_libvirtd(libvirtd: Libvirtd, *, cpu: int | None = None) -> int:
    """Start a libvirtd in its namespace (a private mount namespace over its own dirs), pinned to
    `cpu` if given; returns its pid at once, so the caller can record it before waiting for it
    to answer."""
    root = libvirtd.root
    binds = _libvirt_binds(root)
    script = (
        f"{binds} && exec libvirtd --config {shlex.quote(str(root / 'etc' / 'libvirtd.conf'))} "
        f"--pid-file {shlex.quote(str(root / 'libvirtd.pid'))}"
        + (" --listen" if libvirtd.listen else "")
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if libvirtd.hostname is not None:
        unshare.insert(2, "--uts")
        script = f"hostname {shlex.quote(libvirtd.hostname)} && {script}"
    pin = ["taskset", "--cpu-list", str(cpu)] if cpu is not None else []
    return spawn(
        [*pin, "ip", "netns", "exec", libvirtd.netns, *unshare, "sh", "-c", script],
        log=libvirtd.out,
    )


def wait_libvirtd(libvirtd: Libvirtd, pid: int) -> None:
    if not wait_for(
        lambda: libvirt_answers(libvirtd) or not pid_alive(pid), timeout=60, interval=0.3
    ):
        raise LabError(f"{libvirtd.what} did not answer within 60 s; log: {libvirtd.log}")
    if not pid_alive(pid):
        raise LabError(
            f"{libvirtd.what} exited during start-up; logs: {libvirtd.out}, {libvirtd.log}"
        )


def restart_libvirtd(lab: Lab) -> None:
    """Stop libvirtd and start it again; guests keep running (libvirtd reattaches to them)."""
    state = load_state(lab)
    pid = state.get("libvirtd_pid")
    if not isinstance(pid, int) or not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    stop_pids([pid])
    new_pid = spawn_libvirtd(lab.libvirtd)
    state["libvirtd_pid"] = new_pid
    save_state(lab, state)
    wait_libvirtd(lab.libvirtd, new_pid)
    print(f"lab: libvirtd restarted (pid {new_pid})")


def _host_entry(lab: Lab, name: str) -> tuple[ExtraHost, dict[str, object], dict[str, object]]:
    """The extra host `name` (its namespace), its entry in the state and the state itself."""
    state = load_state(lab)
    recorded = state.get("hosts")
    entries = [h for h in recorded if isinstance(h, dict)] if isinstance(recorded, list) else []
    entry = next((h for h in entries if h.get("netns") == name), None)
    host = next((h for h in lab.hosts if h.netns == name), None)
    if host is None or entry is None:
        raise LabError(f"no lab host {name!r}; the lab's hosts: {[h.netns for h in lab.hosts]}")
    return host, entry, state


def stop_host_libvirtd(lab: Lab, name: str, *, kill: bool = False) -> None:
    """Stop an extra host's libvirtd and leave it stopped (its networks' dnsmasq and any guest
    keep running), as when libvirtd dies on a real host: its daemon then reports the host not
    Ready. `host-libvirtd-start` brings it back; until then the lab is not healthy. `kill`:
    SIGKILL at once, so libvirtd ends whatever it was doing (a migration's job) unfinished."""
    _, entry, _ = _host_entry(lab, name)
    pid = entry.get("libvirtd_pid")
    if isinstance(pid, int) and pid_alive(pid):
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not pid_alive(pid), timeout=10)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        else:
            stop_pids([pid])


def set_migration_link(lab: Lab, name: str, *, up: bool) -> None:
    """Take an extra host's migration link down (its end in the switch namespace: the host's
    own end keeps its address, packets are lost, as when a cable is pulled) or up again."""
    host, _, _ = _host_entry(lab, name)
    state = "up" if up else "down"
    run(
        ["ip", "-n", lab.migration_netns, "link", "set", host.migration_switch_veth, state],
        what=f"setting the migration link of {name} {state}",
    )


def start_host_libvirtd(lab: Lab, name: str) -> int:
    """Start an extra host's libvirtd again (nothing to do when it runs); returns its pid."""
    host, entry, state = _host_entry(lab, name)
    pid = entry.get("libvirtd_pid")
    if isinstance(pid, int) and pid_alive(pid):
        return pid
    cpus = os.sched_getaffinity(0)
    probed_on = cpu_of_cached_probe(host.libvirtd)
    new_pid = spawn_libvirtd(host.libvirtd, cpu=probed_on if probed_on in cpus else None)
    entry["libvirtd_pid"] = new_pid
    save_state(lab, state)
    wait_libvirtd(host.libvirtd, new_pid)
    release_cpu_pin(new_pid, cpus)
    return new_pid


def host_libvirtd_command(lab: Lab, command: str, name: str | None) -> None:
    if not name:
        raise LabError(f"{command} needs --host <name>")
    if command in ("host-libvirtd-stop", "host-libvirtd-kill"):
        stop_host_libvirtd(lab, name, kill=command == "host-libvirtd-kill")
    elif command in ("migration-link-down", "migration-link-up"):
        set_migration_link(lab, name, up=command == "migration-link-up")
    else:
        print(f"lab: libvirtd of {name} runs (pid {start_host_libvirtd(lab, name)})")


def restart_apiserver(lab: Lab, *, down_for: float = 0.0) -> float:
    """Stop the kube-apiserver (etcd is embedded in it) and start it again with the same command
    line, its data kept, after `down_for` more seconds; returns the seconds it was unavailable.
    Every watch and connection of every client ends, as in an API server upgrade: tests and
    benchmarks use this to show that clients resume unattended, after a short outage and after
    one longer than a client's retries last."""
    state = load_state(lab)
    pid = state.get("apiserver_pid")
    if not isinstance(pid, int) or not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    # The running process's own argv: exactly what start_control_plane gave it.
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    started = time.monotonic()
    # It stops listening at once on SIGTERM but may take 30 s more to exit (open watches); what
    # clients see is the same either way, so it is killed after a short grace.
    stop_pids([pid], grace=5)
    wait_ports_free(apiserver_ports(lab), what="restarting kube-apiserver")
    time.sleep(down_for)  # the outage itself
    log = lab.logs / "kube-apiserver.log"
    new_pid = spawn(cmd, log=log)
    state["apiserver_pid"] = new_pid
    save_state(lab, state)
    if not wait_for(
        lambda: apiserver_ready(lab) or not pid_alive(new_pid), timeout=180, interval=0.2
    ):
        raise LabError(f"kube-apiserver did not become ready within 180 s; log: {log}")
    if not pid_alive(new_pid):
        # The exit status and the log's last lines, in the error itself: a restart that fails
        # once in a long run leaves nothing else to read.
        status = ""
        with contextlib.suppress(ChildProcessError, OSError):
            _, code = os.waitpid(new_pid, os.WNOHANG)
            status = f" (wait status {code})"
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            tail = "\n".join(f.read().decode(errors="replace").splitlines()[-5:])
        raise LabError(
            f"kube-apiserver exited during its restart{status}; log: {log}; it ends:\n{tail}"
        )
    return time.monotonic() - started


def detect_domain_type(lab: Lab, guest_image: Path) -> str:
    """`kvm` only when a guest really reaches its init under KVM here; cached per host and image."""
    forced = os.environ.get("VMAPI_LAB_DOMAIN_TYPE")
    if forced:
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "qemu"
    qemu_version = subprocess.run(
        ["qemu-system-x86_64", "--version"], capture_output=True, text=True, check=False
    ).stdout
    key = hashlib.sha256(f"{os.uname().release}|{qemu_version}|{guest_image}".encode()).hexdigest()[
        :16
    ]
    cached = lab.cache / f"kvm-probe-{key}"
    if cached.exists():
        return cached.read_text().strip()
    result = "kvm" if _guest_boots_under_kvm(lab, guest_image) else "qemu"
    cached.write_text(result + "\n")
    return result


def _guest_boots_under_kvm(lab: Lab, guest_image: Path, deadline: float = 30.0) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        serial = Path(tmp) / "serial.log"
        proc = subprocess.Popen(
            [
                "qemu-system-x86_64",
                "-machine",
                "accel=kvm",
                "-m",
                "256",
                "-display",
                "none",
                "-nic",
                "none",
                "-drive",
                f"file={guest_image},if=virtio,snapshot=on",
                "-serial",
                f"file:{serial}",
                "-no-reboot",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            return wait_for(
                lambda: (
                    proc.poll() is None
                    and serial.exists()
                    and b"VMAPI-GUEST-BOOTED" in serial.read_bytes()
                ),
                timeout=deadline,
                interval=0.5,
            )
        finally:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# the remote libvirt host: a libvirtd behind an sshd and a TLS listener, reached from a client
# namespace over a link between the two


def _nsenter(holder: int) -> list[str]:
    """Enter the remote host's namespaces (network, mount, UTS) through their holder process."""
    return ["nsenter", f"--target={holder}", "--net", "--mount", "--uts", "--"]


def prepare_remote(lab: Lab, state: dict[str, object]) -> dict[str, object]:
    """Everything the remote host's libvirtd needs before it starts (its TLS listener binds the
    link's address with the certificates made here): namespaces, the link, credentials, its
    configuration and the process that holds its mount and UTS namespaces. Also the API server's
    forwarders into the client namespace. Returns the state entry it records its pids in."""
    remote = lab.remote
    for name in (remote.netns, remote.client_netns):
        if len(name) > 63 or not DNS_SUBDOMAIN.match(name):
            raise LabError(f"name {name!r} (from VMAPI_LAB_NETNS) is not a DNS-1123 subdomain")
    entry: dict[str, object] = {"netns": remote.netns, "client_netns": remote.client_netns}
    state["remote"] = entry
    save_state(lab, state)
    create_netns(remote.netns)
    create_netns(remote.client_netns)
    # Made inside the client namespace with the peer moved straight into the host's: the pair
    # never appears in the machine's own namespace.
    run(
        [
            "ip", "-n", remote.client_netns, "link", "add", remote.client_veth, "type", "veth",
            "peer", "name", remote.veth, "netns", remote.netns,
        ],
        what="creating the remote host's link",
    )  # fmt: skip
    for netns, dev, addr in (
        (remote.client_netns, remote.client_veth, remote.client_address),
        (remote.netns, remote.veth, remote.address),
    ):
        run(
            ["ip", "-n", netns, "addr", "add", f"{addr}/{remote.link_prefix}", "dev", dev],
            what=f"addressing {dev} in {netns}",
        )
        run(["ip", "-n", netns, "link", "set", dev, "up"], what=f"bringing up {dev} in {netns}")
    remote.dir.mkdir(parents=True, exist_ok=True)
    start_forwarders(lab, entry, state)
    make_ssh_credentials(remote)
    make_tls_credentials(remote)
    write_libvirt_config(remote.libvirtd)
    write_remote_libvirt_config(remote)
    entry["holder_pid"] = spawn_remote_holder(remote)
    save_state(lab, state)
    return entry


def start_forwarders(lab: Lab, entry: dict[str, object], state: dict[str, object]) -> None:
    """The API server at 127.0.0.1:<api port> inside the client namespace, through a unix socket
    in the lab directory (see forward.py); both forwarders' pids are recorded in `entry` (and
    saved) as they start, and both listen when this returns."""
    remote = lab.remote
    script = str(HERE / "forward.py")
    ready = [remote.dir / "forward-ready", remote.dir / "client-forward-ready"]
    for f in ready:
        f.unlink(missing_ok=True)
    sock = str(remote.forward_socket)
    port = str(lab.api_port)
    log = lab.logs / "forward-apiserver.log"
    host_side = spawn(
        [sys.executable, script, "unix", sock, "tcp", "127.0.0.1", port, f"--ready={ready[0]}"],
        log=log,
    )
    entry["forward_pid"] = host_side
    save_state(lab, state)
    client_side = spawn(
        [
            "ip", "netns", "exec", remote.client_netns,
            sys.executable, script, "tcp", "127.0.0.1", port, "unix", sock, f"--ready={ready[1]}",
        ],
        log=log,
    )  # fmt: skip
    entry["client_forward_pid"] = client_side
    save_state(lab, state)
    pids = (host_side, client_side)
    if not wait_for(
        lambda: all(f.exists() for f in ready) or not all(map(pid_alive, pids)),
        timeout=20,
        interval=0.05,
    ) or not all(map(pid_alive, pids)):
        raise LabError(f"the API server's forwarders did not start; log: {log}")


def _ssh_keygen(path: Path, comment: str) -> None:
    for f in (path, path.with_name(path.name + ".pub")):
        f.unlink(missing_ok=True)
    run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        what=f"generating the ssh key {path.name}",
    )


def write_known_hosts(remote: RemoteHost) -> None:
    key_type, key = remote.host_key.with_suffix(".pub").read_text().split()[:2]
    remote.known_hosts.write_text(f"{remote.address} {key_type} {key}\n")


def make_ssh_credentials(remote: RemoteHost) -> None:
    """The sshd's host key and configuration, root's authorized key, an unauthorized key, the
    known_hosts line for the host's address and an `ssh` wrapper that checks it strictly."""
    ssh = remote.ssh
    ssh.mkdir(parents=True, exist_ok=True)
    _ssh_keygen(remote.host_key, f"{remote.name} host key")
    _ssh_keygen(remote.ssh_key, "vmapi lab remote client")
    _ssh_keygen(remote.wrong_ssh_key, "vmapi lab unauthorized client")
    remote.authorized_keys.write_text(remote.ssh_key.with_suffix(".pub").read_text())
    write_known_hosts(remote)
    remote.sshd_config.write_text(
        f"ListenAddress {remote.address}:22\n"
        f"HostKey {remote.host_key}\n"
        f"PidFile {remote.sshd_pid_file}\n"
        f"AuthorizedKeysFile {remote.authorized_keys}\n"
        # Keys only: no password, no keyboard-interactive, nothing PAM could allow.
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitEmptyPasswords no\n"
        "UsePAM no\n"
        # The lab directory may sit under /tmp, whose mode StrictModes rejects.
        "StrictModes no\n"
        "UseDNS no\n"
        "PrintMotd no\n"
        "PrintLastLog no\n"
        "PermitTTY no\n"
        "X11Forwarding no\n"
        "AllowTcpForwarding no\n"
        "AllowAgentForwarding no\n"
        "LogLevel VERBOSE\n"
    )
    write_ssh_command(remote.ssh_command, remote.known_hosts)


def write_ssh_command(path: Path, known_hosts: Path) -> None:
    """An executable for libvirt's `qemu+ssh://…?command=`, which runs it in place of `ssh`:
    the lab's options (no user configuration, this known_hosts file only, an unknown or changed
    host key refused, never a prompt) followed by libvirt's own arguments. The key comes from
    the URI's `keyfile=`."""
    options = {
        "UserKnownHostsFile": str(known_hosts),
        "GlobalKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "yes",
        "CheckHostIP": "no",
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "ConnectTimeout": "10",
    }
    opts = " ".join(f"-o {shlex.quote(f'{k}={v}')}" for k, v in options.items())
    path.write_text(f'#!/bin/sh\nexec ssh -F none {opts} "$@"\n')
    path.chmod(0o755)


TLS_EXTENSIONS = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:{address}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def make_tls_credentials(remote: RemoteHost) -> None:
    """A small CA (P-256 keys, openssl's CLI) for the host's TLS listener: the server certificate
    for the link's address, a client certificate, and one signed by a second CA the host does not
    trust. Each client gets a `pkipath` folder in libvirt's layout (cacert.pem, clientcert.pem,
    clientkey.pem); both trust the right CA, so only the client certificate differs."""
    tls = remote.tls
    tls.mkdir(parents=True, exist_ok=True)
    cnf = tls / "openssl.cnf"
    cnf.write_text(TLS_EXTENSIONS.format(address=remote.address))
    log = remote.logs / "remote-tls.log"

    def cert(name: str, subject: str, section: str, ca: str | None = None) -> None:
        cmd = [
            "openssl", "req", "-x509", "-new", "-config", str(cnf), "-extensions", section,
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(tls / f"{name}.key"), "-out", str(tls / f"{name}.crt"),
            "-subj", subject, "-days", "365", "-sha256",
        ]  # fmt: skip
        if ca is not None:
            cmd += ["-CA", str(tls / f"{ca}.crt"), "-CAkey", str(tls / f"{ca}.key")]
        run(cmd, what=f"making the remote host's TLS certificate {name}", log=log)

    cert("ca", "/O=vmapi lab/CN=vmapi lab remote CA", "ca")
    cert("other-ca", "/O=vmapi lab/CN=vmapi lab untrusted CA", "ca")
    cert("server", f"/O=vmapi lab/CN={remote.address}", "server", ca="ca")
    cert("client", "/O=vmapi lab/CN=vmapi-lab-client", "client", ca="ca")
    cert("wrong-client", "/O=vmapi lab/CN=vmapi-lab-wrong-client", "client", ca="other-ca")
    for pki, name in ((remote.tls_pkipath, "client"), (remote.wrong_tls_pkipath, "wrong-client")):
        pki.mkdir(exist_ok=True)
        shutil.copyfile(tls / "ca.crt", pki / "cacert.pem")
        shutil.copyfile(tls / f"{name}.crt", pki / "clientcert.pem")
        shutil.copyfile(tls / f"{name}.key", pki / "clientkey.pem")
        (pki / "clientkey.pem").chmod(0o600)


def write_remote_libvirt_config(remote: RemoteHost) -> None:
    """The TLS listener (libvirtd runs with --listen) on the link's address only, and, for the
    clients sshd starts in the host's mount namespace (virt-ssh-helper), the monolithic daemon's
    socket."""
    etc = remote.libvirtd.root / "etc"
    tls = remote.tls
    with (etc / "libvirtd.conf").open("a") as conf:
        conf.write(
            "listen_tls = 1\n"
            "listen_tcp = 0\n"
            f'listen_addr = "{remote.address}"\n'
            f'tls_port = "{remote.tls_port}"\n'
            f'ca_file = "{tls / "ca.crt"}"\n'
            f'cert_file = "{tls / "server.crt"}"\n'
            f'key_file = "{tls / "server.key"}"\n'
            # A client must present a certificate the CA signed (the default, said out loud).
            "tls_no_verify_certificate = 0\n"
            'auth_tls = "none"\n'
        )
    (etc / "libvirt.conf").write_text('remote_mode = "legacy"\n')


def spawn_remote_holder(remote: RemoteHost) -> int:
    """A process that owns the remote host's mount and UTS namespaces (in its network namespace)
    for as long as the host exists, so that its libvirtd and sshd can each stop and start again
    in them. /run is a private tmpfs there: sshd's privilege separation directory, /run/sshd,
    exists without touching the machine's /run, and so does /run/lock (/var/lock), where
    libvirtd locks a guest's pty while a console stream has it open (`LCK.._pts_N`)."""
    remote.ns_ready.unlink(missing_ok=True)
    script = (
        "mount -t tmpfs -o mode=0755,size=16m vmapi-lab-run /run && mkdir -m 0755 /run/sshd && "
        "mkdir -m 1777 /run/lock && "
        f"{_libvirt_binds(remote.libvirtd.root)} && hostname {shlex.quote(remote.name)} && "
        f"touch {shlex.quote(str(remote.ns_ready))} && exec sleep infinity"
    )
    log = remote.logs / "remote-namespace.log"
    pid = spawn(
        [
            "ip", "netns", "exec", remote.netns,
            "unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script,
        ],
        log=log,
    )  # fmt: skip
    if not wait_for(
        lambda: remote.ns_ready.exists() or not pid_alive(pid), timeout=20, interval=0.02
    ):
        raise LabError(f"the remote host's namespaces were not ready within 20 s; log: {log}")
    if not pid_alive(pid):
        raise LabError(f"the remote host's namespace holder exited; log: {log}")
    return pid


def spawn_remote_libvirtd(remote: RemoteHost, holder: int, *, cpu: int | None = None) -> int:
    libvirtd = remote.libvirtd
    root = libvirtd.root
    pin = ["taskset", "--cpu-list", str(cpu)] if cpu is not None else []
    return spawn(
        [
            *pin, *_nsenter(holder),
            "libvirtd", "--listen", "--config", str(root / "etc" / "libvirtd.conf"),
            "--pid-file", str(root / "libvirtd.pid"),
        ],
        log=libvirtd.out,
    )  # fmt: skip


def configure_remote(lab: Lab, guest_image: Path) -> None:
    remote = lab.remote
    libvirtd = remote.libvirtd
    define_isolated_network(
        libvirtd,
        remote.dir / "network.xml",
        name=lab.network,
        bridge=remote.bridge,
        prefix=remote.subnet_prefix,
        dhcp=True,
    )
    remote.pool_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(guest_image, remote.pool_dir / lab.guest_volume)
    define_dir_pool(libvirtd, name=lab.pool, target=remote.pool_dir)


def _remote_entry(lab: Lab) -> dict[str, object]:
    state = load_state(lab)
    entry = state.get("remote")
    if not isinstance(entry, dict) or not isinstance(entry.get("holder_pid"), int):
        raise LabError("the lab has no remote host; run `make lab-up` (with VMAPI_LAB_REMOTE=1)")
    return entry


def _sshd_pids(remote: RemoteHost) -> list[int]:
    """Every sshd of the remote host: the listener and one per connection."""
    found = []
    for pid in netns_pids(remote.netns):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                found.append(pid)
    return found


def sshd_running(lab: Lab) -> bool:
    remote = lab.remote
    try:
        pid = int(remote.sshd_pid_file.read_text())
    except (OSError, ValueError):
        return False
    return pid_alive(pid) and pid in netns_pids(remote.netns)


def start_sshd(lab: Lab) -> int:
    """Start the remote host's sshd (with its current host key) unless it runs; returns its pid
    once it listens (sshd writes its pid file after binding)."""
    remote = lab.remote
    holder = int(str(_remote_entry(lab)["holder_pid"]))
    if sshd_running(lab):
        return int(remote.sshd_pid_file.read_text())
    remote.sshd_pid_file.unlink(missing_ok=True)
    log = lab.logs / "sshd-r0.log"
    # -D: stay in the foreground (the lab tracks it); -e: log to the log file.
    pid = spawn(
        [*_nsenter(holder), "/usr/sbin/sshd", "-D", "-e", "-f", str(remote.sshd_config)], log=log
    )
    if not wait_for(
        lambda: remote.sshd_pid_file.exists() or not pid_alive(pid), timeout=20, interval=0.02
    ):
        raise LabError(f"the remote host's sshd did not start within 20 s; log: {log}")
    if not pid_alive(pid):
        raise LabError(f"the remote host's sshd exited during start-up; log: {log}")
    return pid


def stop_sshd(lab: Lab) -> None:
    """Stop the remote host's sshd and end every session it serves, so that a client's open
    connection breaks too (as when the host goes away), not only new ones."""
    remote = lab.remote
    _remote_entry(lab)
    for _ in range(3):
        pids = _sshd_pids(remote)
        if not pids:
            break
        stop_pids(pids, grace=5)
    remote.sshd_pid_file.unlink(missing_ok=True)


def rotate_host_key(lab: Lab) -> str:
    """Give the remote host's sshd a new host key (as a reinstalled host would have): sshd
    restarts with it, open sessions end, and the lab's known_hosts file holds the new line (a
    copy of the old file keeps failing verification). Returns the new known_hosts line."""
    remote = lab.remote
    _remote_entry(lab)
    stop_sshd(lab)
    _ssh_keygen(remote.host_key, f"{remote.name} host key")
    write_known_hosts(remote)
    start_sshd(lab)
    return remote.known_hosts.read_text().strip()


def set_remote_link(lab: Lab, *, up: bool) -> None:
    """Take the host's end of the link down (packets from the client are then lost, as when the
    host is unreachable) or up again."""
    remote = lab.remote
    _remote_entry(lab)
    state = "up" if up else "down"
    run(
        ["ip", "-n", remote.netns, "link", "set", remote.veth, state],
        what=f"setting the remote host's link {state}",
    )


def restart_remote_libvirtd(lab: Lab) -> int:
    """Stop the remote host's libvirtd and start it again in the same namespaces."""
    remote = lab.remote
    state = load_state(lab)
    entry = _remote_entry(lab)
    pid = entry.get("libvirtd_pid")
    if isinstance(pid, int) and pid_alive(pid):
        stop_pids([pid])
    cpus = os.sched_getaffinity(0)
    probed_on = cpu_of_cached_probe(remote.libvirtd)
    new_pid = spawn_remote_libvirtd(
        remote, int(str(entry["holder_pid"])), cpu=probed_on if probed_on in cpus else None
    )
    entry["libvirtd_pid"] = new_pid
    state["remote"] = entry
    save_state(lab, state)
    wait_libvirtd(remote.libvirtd, new_pid)
    release_cpu_pin(new_pid, cpus)
    return new_pid


def remote_healthy(lab: Lab, state: dict[str, object]) -> bool:
    """Whether the remote host is as `up` left it: exactly when VMAPI_LAB_REMOTE asks for one,
    with its namespaces, holder, libvirtd and forwarders alive (sshd may be stopped by a test;
    `up` starts it again)."""
    entry = state.get("remote")
    if not lab.remote_enabled:
        return not entry and not lab.existing_remote_netns()
    if not isinstance(entry, dict):
        return False
    remote = lab.remote
    pids = [
        entry.get(k) for k in ("holder_pid", "libvirtd_pid", "forward_pid", "client_forward_pid")
    ]
    return (
        all(isinstance(p, int) and pid_alive(p) for p in pids)
        and netns_exists(remote.netns)
        and netns_exists(remote.client_netns)
        and libvirt_answers(remote.libvirtd)
    )


# ---------------------------------------------------------------------------------------------
# state and environment


# ---------------------------------------------------------------------------------------------
# migration links: the extra hosts reach each other to live-migrate (see docs/lab.md)
#
# A switch namespace `<netns>-mx` holds a bridge; each extra host gets a veth pair from it, made
# inside the switch namespace with the peer moved straight into the host's (never in the
# machine's own namespace), and one address on 10.213.40.0/24. Each host's libvirtd listens for
# TLS on that address only (peer-to-peer migration: the source's libvirtd opens
# qemu+tls://<target>/system with its own client certificate) and tells its qemu to take incoming
# migration streams there too, encrypted with certificates of the same lab CA.

MIGRATION_TLS_EXTENSIONS = TLS_EXTENSIONS.replace(
    "extendedKeyUsage = clientAuth\n",
    "extendedKeyUsage = clientAuth\nsubjectAltName = IP:{address}\n",
)


def prepare_migration(lab: Lab, state: dict[str, object]) -> None:
    """The switch namespace and its bridge, then the migration CA and every host's certificates
    (its libvirtd's TLS listener starts with them)."""
    netns = lab.migration_netns
    state["migration_netns"] = netns
    save_state(lab, state)
    create_netns(netns)
    bridge = lab.migration_bridge
    run(
        ["ip", "-n", netns, "link", "add", bridge, "type", "bridge"],
        what="creating the migration switch's bridge",
    )
    run(
        ["ip", "-n", netns, "link", "set", bridge, "up"],
        what="bringing up the migration switch's bridge",
    )
    make_migration_credentials(lab)


def add_migration_link(lab: Lab, host: ExtraHost) -> None:
    """The host's veth pair to the migration switch, addressed and up on both ends."""
    switch, dev = lab.migration_netns, host.migration_switch_veth
    run(
        [
            "ip", "-n", switch, "link", "add", dev, "type", "veth",
            "peer", "name", host.migration_veth, "netns", host.netns,
        ],
        what=f"creating {host.netns}'s migration link",
    )  # fmt: skip
    run(
        ["ip", "-n", switch, "link", "set", dev, "master", lab.migration_bridge, "up"],
        what=f"attaching {dev} to the migration switch",
    )
    address = f"{host.migration_address}/{host.migration_link_prefix}"
    run(
        ["ip", "-n", host.netns, "addr", "add", address, "dev", host.migration_veth],
        what=f"addressing {host.migration_veth} in {host.netns}",
    )
    run(
        ["ip", "-n", host.netns, "link", "set", host.migration_veth, "up"],
        what=f"bringing up {host.migration_veth} in {host.netns}",
    )


def _openssl_cert(
    *, directory: Path, cnf: Path, name: str, subject: str, section: str, ca: Path | None, log: Path
) -> None:
    """`directory/name.key` and `name.crt`: a P-256 certificate, self-signed or signed by the CA
    whose `ca.crt` and `ca.key` are given as `ca` (their common stem)."""
    cmd = [
        "openssl", "req", "-x509", "-new", "-config", str(cnf), "-extensions", section,
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(directory / f"{name}.key"), "-out", str(directory / f"{name}.crt"),
        "-subj", subject, "-days", "365", "-sha256",
    ]  # fmt: skip
    if ca is not None:
        cmd += ["-CA", str(ca.with_suffix(".crt")), "-CAkey", str(ca.with_suffix(".key"))]
    run(cmd, what=f"making the migration certificate {name}", log=log)


def make_migration_credentials(lab: Lab) -> None:
    """One lab CA for migration and, per host, a server certificate for its migration address
    (its libvirtd's listener and its qemu's incoming stream) and a client certificate (its
    libvirtd connecting to another host's, its qemu sending a stream), laid out as libvirt's
    `pkipath` (client/) and qemu's x509 directory (qemu/) expect."""
    ca_dir = lab.dir / "migration-ca"
    ca_dir.mkdir(parents=True, exist_ok=True)
    log = lab.logs / "migration-tls.log"
    ca_cnf = ca_dir / "openssl.cnf"
    ca_cnf.write_text(TLS_EXTENSIONS.format(address="127.0.0.1"))
    _openssl_cert(
        directory=ca_dir,
        cnf=ca_cnf,
        name="ca",
        subject="/O=vmapi lab/CN=vmapi lab migration CA",
        section="ca",
        ca=None,
        log=log,
    )
    ca = ca_dir / "ca"
    for host in lab.hosts:
        tls = host.migration_tls
        tls.mkdir(parents=True, exist_ok=True)
        cnf = tls / "openssl.cnf"
        cnf.write_text(MIGRATION_TLS_EXTENSIONS.format(address=host.migration_address))
        subject = f"/O=vmapi lab/CN={host.netns}"
        for kind in ("server", "client"):
            _openssl_cert(
                directory=tls, cnf=cnf, name=kind, subject=subject, section=kind, ca=ca, log=log
            )
        qemu, client = host.migration_qemu_tls, host.migration_pkipath
        qemu.mkdir(exist_ok=True)
        client.mkdir(exist_ok=True)
        for source, target in (
            (ca_dir / "ca.crt", qemu / "ca-cert.pem"),
            (tls / "server.crt", qemu / "server-cert.pem"),
            (tls / "server.key", qemu / "server-key.pem"),
            (tls / "client.crt", qemu / "client-cert.pem"),
            (tls / "client.key", qemu / "client-key.pem"),
            (ca_dir / "ca.crt", client / "cacert.pem"),
            (tls / "client.crt", client / "clientcert.pem"),
            (tls / "client.key", client / "clientkey.pem"),
        ):
            shutil.copyfile(source, target)
            if target.name.endswith("key.pem"):
                target.chmod(0o600)


def write_migration_config(host: ExtraHost) -> None:
    """What the host's libvirtd and qemu need to send and take migrations (appended to the files
    write_libvirt_config wrote): a host UUID of its own, the TLS listener on the migration
    address, and qemu's incoming streams and NBD server on that address with TLS certificates."""
    etc = host.libvirtd.root / "etc"
    tls = host.migration_tls
    ca = host.migration_qemu_tls / "ca-cert.pem"
    with (etc / "libvirtd.conf").open("a") as conf:
        conf.write(
            f'host_uuid = "{host.host_uuid}"\n'
            "listen_tls = 1\n"
            "listen_tcp = 0\n"
            f'listen_addr = "{host.migration_address}"\n'
            f'tls_port = "{host.tls_port}"\n'
            f'ca_file = "{ca}"\n'
            f'cert_file = "{tls / "server.crt"}"\n'
            f'key_file = "{tls / "server.key"}"\n'
            "tls_no_verify_certificate = 0\n"
            'auth_tls = "none"\n'
        )
    with (etc / "qemu.conf").open("a") as conf:
        conf.write(
            f'migration_address = "{host.migration_address}"\n'
            f'migration_host = "{host.migration_address}"\n'
            f'migrate_tls_x509_cert_dir = "{host.migration_qemu_tls}"\n'
            "migrate_tls_x509_verify = 1\n"
            # A migration without VIR_MIGRATE_TLS is refused before anything is sent.
            "migrate_tls_force = 1\n"
        )


def migration_env(lab: Lab) -> dict[str, str]:
    """What tests need to migrate between the extra hosts (see `make lab-env`)."""
    values: dict[str, str] = {}
    for host in lab.hosts:
        prefix = f"VMAPI_LAB_HOST_{host.index}"
        values[f"{prefix}_MIGRATION_ADDRESS"] = host.migration_address
        values[f"{prefix}_MIGRATION_URI"] = host.migration_uri
        values[f"{prefix}_MIGRATION_PKIPATH"] = str(host.migration_pkipath)
    return values


def load_state(lab: Lab) -> dict[str, object]:
    try:
        return dict(json.loads(lab.state_file.read_text()))
    except (OSError, ValueError):
        return {}


def save_state(lab: Lab, state: dict[str, object]) -> None:
    lab.dir.mkdir(parents=True, exist_ok=True)
    lab.state_file.write_text(json.dumps(state, indent=2) + "\n")


def env_lines(lab: Lab, state: dict[str, object]) -> list[str]:
    venv_bin = REPO / ".venv" / "bin"
    path = f"{venv_bin}:{lab.bin}:{os.environ.get('PATH', '')}"
    values = {
        "KUBECONFIG": str(lab.kubeconfig),
        "LIBVIRT_DEFAULT_URI": lab.libvirt_uri,
        "PATH": path,
        "VMAPI_LAB_DIR": str(lab.dir),
        "VMAPI_LAB_NETNS": lab.netns,
        "VMAPI_LAB_NETWORK": lab.network,
        "VMAPI_LAB_POOL": lab.pool,
        "VMAPI_LAB_GUEST_VOLUME": lab.guest_volume,
        "VMAPI_LAB_DEBIAN_VOLUME": lab.debian_volume,
        "VMAPI_LAB_STATIC_NETWORK": lab.static_network,
        "VMAPI_LAB_STATIC_PREFIX": lab.static_subnet_prefix,
        "VMAPI_LAB_DOMAIN_TYPE": str(state.get("domain_type", "qemu")),
        "VMAPI_LAB_HOST_COUNT": str(len(lab.hosts)),
        "VMAPI_LAB_ONLY_NETWORK": lab.only_network,
        "VMAPI_LAB_EXTRA_POOL": lab.extra_pool,
    }
    for host in lab.hosts:
        values[f"VMAPI_LAB_HOST_{host.index}_URI"] = host.libvirtd.uri
        values[f"VMAPI_LAB_HOST_{host.index}_NETNS"] = host.netns
    values |= migration_env(lab)
    values["VMAPI_LAB_REMOTE"] = "1" if lab.remote_enabled else "0"
    if lab.remote_enabled:
        r = lab.remote
        values |= {
            "VMAPI_LAB_REMOTE_NAME": r.name,
            "VMAPI_LAB_REMOTE_NETNS": r.netns,
            "VMAPI_LAB_REMOTE_URI": r.libvirtd.uri,
            "VMAPI_LAB_REMOTE_ADDRESS": r.address,
            "VMAPI_LAB_REMOTE_CLIENT_NETNS": r.client_netns,
            "VMAPI_LAB_REMOTE_CLIENT_ADDRESS": r.client_address,
            "VMAPI_LAB_REMOTE_SSH_URI": r.ssh_uri,
            "VMAPI_LAB_REMOTE_LIBSSH_URI": r.libssh_uri,
            "VMAPI_LAB_REMOTE_TLS_URI": r.tls_uri,
            "VMAPI_LAB_REMOTE_SSH_KEY": str(r.ssh_key),
            "VMAPI_LAB_REMOTE_WRONG_SSH_KEY": str(r.wrong_ssh_key),
            "VMAPI_LAB_REMOTE_KNOWN_HOSTS": str(r.known_hosts),
            "VMAPI_LAB_REMOTE_SSH_COMMAND": str(r.ssh_command),
            "VMAPI_LAB_REMOTE_CA_CRT": str(r.tls_pkipath / "cacert.pem"),
            "VMAPI_LAB_REMOTE_TLS_CRT": str(r.tls_pkipath / "clientcert.pem"),
            "VMAPI_LAB_REMOTE_TLS_KEY": str(r.tls_pkipath / "clientkey.pem"),
            "VMAPI_LAB_REMOTE_TLS_PKIPATH": str(r.tls_pkipath),
            "VMAPI_LAB_REMOTE_WRONG_TLS_CRT": str(r.wrong_tls_pkipath / "clientcert.pem"),
            "VMAPI_LAB_REMOTE_WRONG_TLS_KEY": str(r.wrong_tls_pkipath / "clientkey.pem"),
            "VMAPI_LAB_REMOTE_WRONG_TLS_PKIPATH": str(r.wrong_tls_pkipath),
            "VMAPI_LAB_REMOTE_NETWORK": lab.network,
            "VMAPI_LAB_REMOTE_POOL": lab.pool,
        }
    return [f"export {k}={shlex.quote(v)}" for k, v in values.items()]


def lab_healthy(lab: Lab) -> bool:
    state = load_state(lab)
    pids = [state.get(k) for k in ("apiserver_pid", "controller_manager_pid", "libvirtd_pid")]
    recorded = state.get("hosts")
    hosts = recorded if isinstance(recorded, list) else []
    pids += [h.get("libvirtd_pid") for h in hosts if isinstance(h, dict)]
    # A lab brought up with another VMAPI_LAB_HOST_COUNT is not the lab asked for.
    same_hosts = [h.get("netns") for h in hosts if isinstance(h, dict)] == [
        h.netns for h in lab.hosts
    ]
    return (
        bool(state.get("ready"))
        and same_hosts
        # A lab brought up before the API server had the front-proxy flags lacks the aggregation
        # layer the console tests need: `up` rebuilds it.
        and (lab.pki / "front-proxy-client.crt").exists()
        and all(isinstance(p, int) and pid_alive(p) for p in pids)
        and all(netns_exists(n) for n in [lab.netns, *(h.netns for h in lab.hosts)])
        and (not lab.hosts or netns_exists(lab.migration_netns))
        and apiserver_ready(lab)
        and libvirt_answers(lab.libvirtd)
        and all(libvirt_answers(h.libvirtd) for h in lab.hosts)
        and remote_healthy(lab, state)
    )


# ---------------------------------------------------------------------------------------------
# commands


def add_node(lab: Lab) -> None:
    """Start the optional node in a lab that is up (nothing to do when it runs already)."""
    if not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    state = load_state(lab)
    if state.get("node") and node_healthy(lab, state):
        return
    if state.get("node"):
        stop_node(lab, state)
    started = time.monotonic()
    try:
        start_node(lab, state)
    except (LabError, OSError, subprocess.SubprocessError) as exc:
        stop_node(lab, state)
        state["node"] = False
        save_state(lab, state)
        raise LabError(str(exc)) from exc
    print(f"lab: node {lab.node_name} Ready in {time.monotonic() - started:.1f} s")


def node_healthy(lab: Lab, state: dict[str, object]) -> bool:
    pids = [state.get(k) for k in ("containerd_pid", "kubelet_pid", "scheduler_pid")]
    return all(isinstance(p, int) and pid_alive(p) for p in pids) and node_ready(lab)


def up(lab: Lab, *, node: bool = False) -> None:
    if lab_healthy(lab):
        if lab.remote_enabled:
            # A test may have stopped it (and failed before starting it again).
            start_sshd(lab)
        if node:
            add_node(lab)
        print(
            f"lab: already up (kube-apiserver https://127.0.0.1:{lab.api_port}, "
            f"libvirt {lab.libvirt_uri})"
        )
        return
    if (
        lab.dir.exists()
        or netns_exists(lab.netns)
        or lab.existing_host_netns()
        or lab.existing_remote_netns()
        or lab.existing_migration_netns()
    ):
        down(lab, quiet=True)
    started = time.monotonic()
    kube_lab = build_kube(lab)
    guest = build_guest(lab)
    debian = build_debian_guest(lab)
    state: dict[str, object] = {
        "kube_lab": str(kube_lab),
        "guest_image": str(guest),
        "debian_image": str(debian),
    }
    lab.dir.mkdir(parents=True, exist_ok=True)
    save_state(lab, state)
    try:
        lab.bin.mkdir(parents=True, exist_ok=True)
        (lab.bin / "kubectl").symlink_to(kube_lab)
        start_control_plane(lab, kube_lab, state)
        state["domain_type"] = detect_domain_type(lab, guest)
        start_libvirt(lab, guest, debian, state)
        if lab.hosts:
            prepare_migration(lab, state)
        start_hosts(lab, guest, state)
        state["ready"] = True
        save_state(lab, state)
        lab.env_file.write_text("\n".join(env_lines(lab, state)) + "\n")
    except (LabError, OSError, subprocess.SubprocessError) as exc:
        down(lab, quiet=True)
        raise LabError(str(exc)) from exc
    if node:
        add_node(lab)
    print(
        f"lab: up in {time.monotonic() - started:.1f} s: kube-apiserver "
        f"https://127.0.0.1:{lab.api_port}, libvirt {lab.libvirt_uri} (netns {lab.netns}), "
        f"{len(lab.hosts)} extra libvirt hosts, "
        + (f"remote host {lab.remote.name} at {lab.remote.address}, " if lab.remote_enabled else "")
        + f"guest domain type {state['domain_type']}"
    )


def down(lab: Lab, *, quiet: bool = False) -> None:
    state = load_state(lab)
    stop_node(lab, state)
    control = [
        p
        for k in ("controller_manager_pid", "apiserver_pid")
        if isinstance(p := state.get(k), int) and pid_alive(p)
    ]
    stop_pids(control)
    stop_container_api(lab, state)
    # The API server's forwarder on the host side; its twin runs in the client namespace.
    remote = state.get("remote")
    pid = remote.get("forward_pid") if isinstance(remote, dict) else None
    if isinstance(pid, int) and pid_alive(pid):
        stop_pids([pid])
    # Every process of the lab's libvirt (libvirtd, dnsmasq, qemu) lives in the namespaces: the
    # lab's own and its hosts', as many as the last `up` made, whatever the count is now, and the
    # remote host's (its namespace holder, libvirtd and sshd) and its client's (the forwarder and
    # whatever a test started there). Deleting the namespaces deletes the link between them.
    names = [
        lab.netns,
        *lab.existing_host_netns(),
        *lab.existing_remote_netns(),
        *lab.existing_migration_netns(),
    ]
    for _ in range(3):
        pids = [p for name in names for p in netns_pids(name)]
        if not pids:
            break
        stop_pids(pids)
    for name in names:
        if netns_exists(name):
            run(["ip", "netns", "del", name], what=f"deleting network namespace {name}")
    if lab.dir.exists():
        shutil.rmtree(lab.dir)
    left = node_leftovers(lab)
    if left:
        raise LabError(f"the node left {', '.join(left)}")
    if not quiet:
        print("lab: down")


def env(lab: Lab) -> None:
    if not lab.env_file.exists():
        raise LabError("the lab is not up; run `make lab-up` first")
    sys.stdout.write(lab.env_file.read_text())


def describe(lab: Lab) -> None:
    state = load_state(lab)
    if not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    print("The lab is running:")
    print(
        f"  kube-apiserver {lab.api_port} on 127.0.0.1 (pid {state['apiserver_pid']}), "
        f"kube-controller-manager (pid {state['controller_manager_pid']})"
    )
    print(
        f"  libvirtd (pid {state['libvirtd_pid']}) in network namespace {lab.netns}: "
        f"{lab.libvirt_uri}"
    )
    print(
        f"  isolated networks {lab.network} ({lab.subnet_prefix}.0/24, DHCP) and "
        f"{lab.static_network} ({lab.static_subnet_prefix}.0/24, no DHCP)"
    )
    print(
        f"  storage pool {lab.pool} with {lab.guest_volume} (busybox) and {lab.debian_volume} "
        f"(Debian 12); guests use domain type {state.get('domain_type')}"
    )
    for host in lab.hosts:
        extras = [f"network {lab.only_network}"] if host.has_only_network else []
        extras += [f"pool {lab.extra_pool}"] if host.has_extra_pool else []
        print(
            f"  host {host.netns}: {host.libvirtd.uri}, network {lab.network} "
            f"({host.subnet_prefix}.0/24), pool {lab.pool} with {lab.guest_volume}"
            + "".join(f", {e}" for e in extras)
        )
    if lab.remote_enabled:
        r = lab.remote
        print(
            f"  remote host {r.name} at {r.address} (from namespace {r.client_netns}): "
            f"{r.ssh_uri}, {r.libssh_uri}, {r.tls_uri}; locally {r.libvirtd.uri}"
        )
    print(f"  logs in {lab.logs}")
    print('Use it from a shell: eval "$(make -s lab-env)"; kubectl get ns; virsh list --all')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab", description=__doc__.splitlines()[0])
    parser.add_argument(
        "command",
        choices=[
            "up",
            "down",
            "env",
            "status",
            "describe",
            "restart-libvirtd",
            "restart-apiserver",
            "image",
            "container-api",
            "node",
            "remote-sshd-stop",
            "remote-sshd-start",
            "remote-rotate-host-key",
            "remote-link-down",
            "remote-link-up",
            "remote-restart-libvirtd",
            "host-libvirtd-stop",
            "host-libvirtd-start",
            "host-libvirtd-kill",
            "migration-link-down",
            "migration-link-up",
        ],
    )
    parser.add_argument(
        "--node",
        action="store_true",
        help="with up: also start the node (containerd, kubelet, kube-scheduler)",
    )
    parser.add_argument(
        "--down-seconds",
        type=float,
        default=0.0,
        help="with restart-apiserver: keep it stopped this long before starting it again",
    )
    parser.add_argument(
        "--host",
        help="with host-libvirtd-stop, -start and -kill and migration-link-down and -up: the extra "
        "host (its namespace name)",
    )
    args = parser.parse_args(argv)
    lab = Lab.from_env()
    try:
        if args.command == "up":
            up(lab, node=args.node)
        elif args.command == "node":
            add_node(lab)
        elif args.command == "down":
            down(lab)
        elif args.command == "env":
            env(lab)
        elif args.command == "describe":
            describe(lab)
        elif args.command == "restart-libvirtd":
            restart_libvirtd(lab)
        elif args.command == "restart-apiserver":
            down_for = restart_apiserver(lab, down_for=args.down_seconds)
            state = load_state(lab)
            print(
                f"lab: kube-apiserver restarted in {down_for:.1f} s (pid {state['apiserver_pid']})"
            )
        elif args.command == "image":
            print(build_image(lab))
        elif args.command == "container-api":
            print(start_container_api(lab))
        elif args.command == "remote-sshd-stop":
            stop_sshd(lab)
        elif args.command == "remote-sshd-start":
            print(f"lab: sshd of {lab.remote.name} runs (pid {start_sshd(lab)})")
        elif args.command == "remote-rotate-host-key":
            print(rotate_host_key(lab))
        elif args.command in ("remote-link-down", "remote-link-up"):
            set_remote_link(lab, up=args.command == "remote-link-up")
        elif args.command in (
            "host-libvirtd-stop",
            "host-libvirtd-start",
            "host-libvirtd-kill",
            "migration-link-down",
            "migration-link-up",
        ):
            host_libvirtd_command(lab, args.command, args.host)
        elif args.command == "remote-restart-libvirtd":
            pid = restart_remote_libvirtd(lab)
            print(f"lab: libvirtd of {lab.remote.name} restarted (pid {pid})")
        else:
            healthy = lab_healthy(lab)
            print("lab: up" if healthy else "lab: down")
            return 0 if healthy else 1
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
