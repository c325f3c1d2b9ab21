"""The running lab as tests and benchmarks reach it: its settings and its commands.

Why a module of its own: fixtures, tests and the bench scripts all need the same facts about the
lab (`tests/lab/lab.py env`: kubeconfig, libvirt URIs, pools, networks, the extra hosts and the
remote host) and the same way to ask the lab script for something (stop the remote sshd, rotate its
host key); one parser of `lab.py env` keeps them agreeing. Fixtures in tests/e2e/conftest.py build
on it; nothing here brings the lab up.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_SCRIPT = REPO / "tests" / "lab" / "lab.py"


@dataclass(frozen=True)
class LabHost:
    """One of the lab's extra libvirt hosts.

    `name` is its network namespace's name, `<lab netns>-h<index>`: a DNS-1123 subdomain, so that
    it can serve as the daemon's --host and as the LibvirtHost object's name.
    """

    index: int
    name: str
    uri: str
    netns: str
    # Its end of the lab's migration links: another host's libvirtd reaches it at `migration_uri`
    # (TLS), presenting the client certificate in its own `migration_pkipath`.
    migration_address: str = ""
    migration_uri: str = ""
    migration_pkipath: Path | None = None

    def migration_uri_from(self, source: LabHost) -> str:
        """The URI `source`'s libvirtd opens for a peer-to-peer migration to this host."""
        return f"{self.migration_uri}?pkipath={source.migration_pkipath}"


@dataclass(frozen=True)
class LabRemote:
    """The lab's remote libvirt host, reachable only over the network from `client_netns`.

    Run clients inside the client namespace (`ip netns exec <client_netns> …`); the lab's API
    server answers there on 127.0.0.1 at its usual port, so the admin kubeconfig works unchanged.
    `uri` is the host's local socket, for checking its state directly from the test process.
    """

    name: str  # the LibvirtHost name (and its hostname and network namespace)
    netns: str
    uri: str
    address: str  # the host's end of the link; sshd on port 22, libvirtd's TLS on 16514
    client_netns: str
    client_address: str
    ssh_uri: str  # qemu+ssh://root@<address>/system
    libssh_uri: str  # qemu+libssh://root@<address>/system
    tls_uri: str  # qemu+tls://<address>/system
    ssh_key: Path  # authorized for root
    wrong_ssh_key: Path  # a valid key that is not authorized
    known_hosts: Path  # the host key's line for <address>; rewritten by rotate_host_key
    ssh_command: Path  # for qemu+ssh's ?command=: strict checking against known_hosts only
    ca_crt: Path
    tls_crt: Path
    tls_key: Path
    tls_pkipath: Path  # ca_crt, tls_crt and tls_key under libvirt's names, for ?pkipath=
    wrong_tls_crt: Path  # signed by a CA the host does not trust
    wrong_tls_key: Path
    wrong_tls_pkipath: Path  # the right CA with wrong_tls_crt and wrong_tls_key
    network: str
    pool: str

    def ssh_uri_with(self, *, key: Path | None = None, command: Path | None = None) -> str:
        """The qemu+ssh URI with the lab's (or the given) key and ssh wrapper."""
        return f"{self.ssh_uri}?keyfile={key or self.ssh_key}&command={command or self.ssh_command}"

    def libssh_uri_with(self, *, key: Path | None = None, known_hosts: Path | None = None) -> str:
        """The qemu+libssh URI with the lab's (or the given) key and known_hosts, key auth only."""
        return (
            f"{self.libssh_uri}?keyfile={key or self.ssh_key}"
            f"&known_hosts={known_hosts or self.known_hosts}&known_hosts_verify=normal"
            "&sshauth=privkey"
        )

    def tls_uri_with(self, *, pkipath: Path | None = None) -> str:
        return f"{self.tls_uri}?pkipath={pkipath or self.tls_pkipath}"


def lab_command(*args: str) -> str:
    """Run a `lab.py` subcommand against the running lab; fails the test with its message."""
    proc = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"lab.py {' '.join(args)}: {proc.stderr.strip()}", pytrace=False)
    return proc.stdout


def remote_sshd_stop() -> None:
    """Stop the remote host's sshd, ending its open sessions too."""
    lab_command("remote-sshd-stop")


def remote_sshd_start() -> None:
    """Start it again (same host key); returns once it listens."""
    lab_command("remote-sshd-start")


def remote_rotate_host_key() -> str:
    """A new sshd host key (sessions end); `known_hosts` then holds the new line, returned."""
    return lab_command("remote-rotate-host-key").strip()


def remote_link(*, up: bool) -> None:
    """Take the host's end of the link down (the host becomes unreachable) or up again."""
    lab_command("remote-link-up" if up else "remote-link-down")


def remote_restart_libvirtd() -> None:
    lab_command("remote-restart-libvirtd")


def host_libvirtd(name: str, *, up: bool) -> None:
    """Stop the extra lab host `name`'s libvirtd (its daemon then finds it down) or start it again
    (returns once it answers)."""
    lab_command("host-libvirtd-start" if up else "host-libvirtd-stop", f"--host={name}")


def kill_host_libvirtd(name: str) -> None:
    """SIGKILL the extra lab host `name`'s libvirtd (its guests' qemu run on); `host_libvirtd(name,
    up=True)` starts it again."""
    lab_command("host-libvirtd-kill", f"--host={name}")


def migration_link(name: str, *, up: bool) -> None:
    """Take the extra lab host `name`'s migration link down (packets to and from it on the
    migration network are lost) or up again."""
    lab_command("migration-link-up" if up else "migration-link-down", f"--host={name}")


@dataclass(frozen=True)
class LabInfo:
    env: dict[str, str]

    @property
    def kubeconfig(self) -> str:
        return self.env["KUBECONFIG"]

    @property
    def libvirt_uri(self) -> str:
        return self.env["LIBVIRT_DEFAULT_URI"]

    @property
    def domain_type(self) -> str:
        return self.env["VMAPI_LAB_DOMAIN_TYPE"]

    @property
    def network(self) -> str:
        return self.env["VMAPI_LAB_NETWORK"]

    @property
    def pool(self) -> str:
        return self.env["VMAPI_LAB_POOL"]

    @property
    def guest_volume(self) -> str:
        return self.env["VMAPI_LAB_GUEST_VOLUME"]

    @property
    def debian_volume(self) -> str:
        return self.env["VMAPI_LAB_DEBIAN_VOLUME"]

    @property
    def static_network(self) -> str:
        """The lab's isolated network without DHCP."""
        return self.env["VMAPI_LAB_STATIC_NETWORK"]

    @property
    def static_prefix(self) -> str:
        """The first three octets of the network without DHCP (its bridge is `.1`)."""
        return self.env["VMAPI_LAB_STATIC_PREFIX"]

    @property
    def netns(self) -> str:
        return self.env["VMAPI_LAB_NETNS"]

    @property
    def dir(self) -> Path:
        return Path(self.env["VMAPI_LAB_DIR"])

    @property
    def hosts(self) -> list[LabHost]:
        """The extra libvirt hosts (besides the main libvirtd), in index order."""
        count = int(self.env.get("VMAPI_LAB_HOST_COUNT", "0"))
        return [
            LabHost(
                index=i,
                name=self.env[f"VMAPI_LAB_HOST_{i}_NETNS"],
                uri=self.env[f"VMAPI_LAB_HOST_{i}_URI"],
                netns=self.env[f"VMAPI_LAB_HOST_{i}_NETNS"],
                migration_address=self.env.get(f"VMAPI_LAB_HOST_{i}_MIGRATION_ADDRESS", ""),
                migration_uri=self.env.get(f"VMAPI_LAB_HOST_{i}_MIGRATION_URI", ""),
                migration_pkipath=(
                    Path(self.env[f"VMAPI_LAB_HOST_{i}_MIGRATION_PKIPATH"])
                    if f"VMAPI_LAB_HOST_{i}_MIGRATION_PKIPATH" in self.env
                    else None
                ),
            )
            for i in range(count)
        ]

    @property
    def remote(self) -> LabRemote | None:
        """The remote libvirt host; None when the lab was brought up without one."""
        if self.env.get("VMAPI_LAB_REMOTE") != "1":
            return None

        def path(key: str) -> Path:
            return Path(self.env[f"VMAPI_LAB_REMOTE_{key}"])

        return LabRemote(
            name=self.env["VMAPI_LAB_REMOTE_NAME"],
            netns=self.env["VMAPI_LAB_REMOTE_NETNS"],
            uri=self.env["VMAPI_LAB_REMOTE_URI"],
            address=self.env["VMAPI_LAB_REMOTE_ADDRESS"],
            client_netns=self.env["VMAPI_LAB_REMOTE_CLIENT_NETNS"],
            client_address=self.env["VMAPI_LAB_REMOTE_CLIENT_ADDRESS"],
            ssh_uri=self.env["VMAPI_LAB_REMOTE_SSH_URI"],
            libssh_uri=self.env["VMAPI_LAB_REMOTE_LIBSSH_URI"],
            tls_uri=self.env["VMAPI_LAB_REMOTE_TLS_URI"],
            ssh_key=path("SSH_KEY"),
            wrong_ssh_key=path("WRONG_SSH_KEY"),
            known_hosts=path("KNOWN_HOSTS"),
            ssh_command=path("SSH_COMMAND"),
            ca_crt=path("CA_CRT"),
            tls_crt=path("TLS_CRT"),
            tls_key=path("TLS_KEY"),
            tls_pkipath=path("TLS_PKIPATH"),
            wrong_tls_crt=path("WRONG_TLS_CRT"),
            wrong_tls_key=path("WRONG_TLS_KEY"),
            wrong_tls_pkipath=path("WRONG_TLS_PKIPATH"),
            network=self.env["VMAPI_LAB_REMOTE_NETWORK"],
            pool=self.env["VMAPI_LAB_REMOTE_POOL"],
        )

    @property
    def only_network(self) -> str:
        """An isolated network that only host h1 has (a machine on it can only go there)."""
        return self.env["VMAPI_LAB_ONLY_NETWORK"]

    @property
    def extra_pool(self) -> str:
        """A second directory pool that only host h2 has."""
        return self.env["VMAPI_LAB_EXTRA_POOL"]


def _parse_exports(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("export "):
            continue
        name, _, value = line[len("export ") :].partition("=")
        env[name] = shlex.split(value)[0] if value else ""
    return env


def read_lab() -> LabInfo:
    """The running lab's settings (`lab.py env`), for fixtures and the bench scripts alike."""
    out = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), "env"], capture_output=True, text=True, check=True
    )
    return LabInfo(env=_parse_exports(out.stdout))


def lab_output_line(command: str) -> str:
    """The last line a `lab.py` subcommand prints (an image's name, a socket's path); fails the
    test with its message."""
    out = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), command], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        pytest.fail(f"lab {command} failed: {out.stderr.strip()}", pytrace=False)
    return out.stdout.strip().splitlines()[-1]
