"""A real Debian 12 guest: its own cloud-init, qemu-guest-agent, sshd and systemd meet the product.

Every other e2e guest is the lab's busybox image, whose init script reads our NoCloud ISO the way
this project wrote it. Here the guest is Debian's own software (tests/lab/guest-debian), so these
tests prove what a user's first boot looks like: the declared key logs in over ssh as the declared
user, network-data sets a static address only the guest agent can report, the agent tells the
guest's OS, a Filesystem-consistent snapshot freezes the guest through the agent and leaves it
thawed (and a clone of it holds what was written before it and not after, and is a new
cloud-init instance; restored in place from it, the machine itself holds the same), a live
resize is seen inside, a graceful power-off goes through the agent or (without one) systemd's
handling of the ACPI power button, and a changed Secret takes effect after a power cycle.
`kubectl vm ssh` logs in from the machine's own network namespace, through the API server and the
daemon (the module's daemon also serves the console subresources).

A Debian boot takes about a minute under software emulation, so the module shares one machine, and
the tests run in file order, each leaving it running for the next (the power-cycle test last).
Boots overlap where they can: the second machine (broken cloud-init data, the last test's) boots
alongside the first from the start, and the snapshot's clone alongside the rollback. The
machine has two NICs: `eth0` on the lab's DHCP network (addresses from leases) and `eth1` on the
lab's network without DHCP, with a static address from network-data (addresses from the agent).
ssh runs from inside the lab's network namespace, where both networks' bridges are. The guest's
journal is forwarded to its serial console, which the daemon logs to a file: that is how a test
tells which way the guest was asked to power off.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import naming
from tests.support.console import (
    bind_portforward,
    console_flags,
    plugin_command,
    register_apiservice,
    unregister_apiservice,
    user_kubeconfig,
)
from tests.support.daemons import console_log_dir, free_port
from tests.support.factories import pair
from tests.support.kube import (
    GROUP,
    V,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    namespace,
    patch_vm,
    vm_status,
    wait_ready,
)
from tests.support.lab_access import REPO, LabInfo
from tests.support.snapshots import (
    SNAPSHOTS,
    create_restore,
    create_snapshot,
    get_restore,
    get_snapshot,
)
from tests.support.waiting import eventually

IMAGE = "e2e-debian-guest"
STATIC_NETWORK = "e2e-lab-static"
USER = "vmapi"
HOST_NAME = "debian-e2e"
CLONE = "debian-clone"
BOOT_TIMEOUT = 300
# What the guest's journal (forwarded to its serial console) says for each way of asking it to
# power off: qemu-guest-agent's log line, and systemd-logind's.
AGENT_SHUTDOWN = "guest-shutdown called"
POWER_KEY = "Power key pressed"
# cloud-init's warning (on the console) for user-data that is not valid YAML, and its last line.
CLOUD_INIT_BAD_YAML = "Failed loading yaml blob"
CLOUD_INIT_FINISHED = re.compile(r"Cloud-init v\. \S+ finished at")
# The module's daemon also serves the console subresources here, for `kubectl vm ssh`.
CONSOLE_PORT = free_port()


def daemon_lab_args(lab: LabInfo) -> tuple[str, ...]:
    return console_flags(lab, CONSOLE_PORT)


@dataclass(frozen=True)
class Keys:
    declared: Path
    stranger: Path
    optioned: Path

    def public(self, key: Path) -> str:
        return key.with_suffix(".pub").read_text().strip()


@dataclass(frozen=True)
class Machine:
    ns: str
    name: str
    domain: str
    macs: dict[str, str]
    static_address: str

    def console(self, lab: LabInfo) -> str:
        log = console_log_dir(lab) / f"{self.domain}.serial.log"
        return log.read_text(errors="replace") if log.exists() else ""


def user_data(mark: str) -> bytes:
    """A cloud-config that names the default user and leaves `mark` in a file from runcmd."""
    document = {
        "user": {"name": USER},
        "runcmd": [["sh", "-c", f"echo {mark} >> /var/tmp/vmapi-runcmd"]],
    }
    return b"#cloud-config\n" + yaml.safe_dump(document).encode()


def network_data(macs: dict[str, str], static_address: str) -> bytes:
    document = {
        "network": {
            "version": 2,
            "ethernets": {
                "eth0": {"match": {"macaddress": macs["eth0"]}, "set-name": "eth0", "dhcp4": True},
                "eth1": {
                    "match": {"macaddress": macs["eth1"]},
                    "set-name": "eth1",
                    "dhcp4": False,
                    "addresses": [f"{static_address}/24"],
                },
            },
        }
    }
    return yaml.safe_dump(document).encode()


def optioned_key_line(keys: Keys) -> str:
    """The third key as an authorized_keys line with options and a comment with spaces."""
    key_type, key_data = keys.public(keys.optioned).split()[:2]
    return f"no-agent-forwarding,no-X11-forwarding {key_type} {key_data} vmapi e2e: options"


def ssh(
    lab: LabInfo, key: Path, address: str, command: str, *, user: str = USER
) -> subprocess.CompletedProcess[str]:
    """Debian's OpenSSH client, run inside the lab's namespace; host keys are not remembered
    (the guest makes new ones for each cloud-init instance)."""
    return subprocess.run(
        [
            "ip", "netns", "exec", lab.netns,
            "ssh", "-F", "/dev/null", "-i", str(key),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
            f"{user}@{address}", command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip


def ssh_ok(lab: LabInfo, key: Path, address: str, command: str, *, user: str = USER) -> str | None:
    """The command's output once it succeeds (None while the guest is not there yet)."""
    proc = ssh(lab, key, address, command, user=user)
    return proc.stdout if proc.returncode == 0 else None


def addresses(api_client: client.ApiClient, m: Machine) -> list[dict[str, Any]]:
    return list(vm_status(api_client, m.ns, m.name).get("addresses") or [])


def guest_metadata(api_client: client.ApiClient, m: Machine) -> dict[str, str]:
    """The guest* keys of the LibvirtMachine's providerMetadata."""
    status = (get(api_client, m.ns, m.name, vm=False) or {}).get("status") or {}
    metadata = status.get("providerMetadata") or {}
    return {k: v for k, v in metadata.items() if k.startswith("guest")}


def lease_address(api_client: client.ApiClient, m: Machine, nic: str = "eth0") -> str:
    found: str = eventually(
        lambda: next(
            (a["address"] for a in addresses(api_client, m) if a.get("interface") == nic), None
        ),
        timeout=BOOT_TIMEOUT,
        interval=1,
        what=f"an address on {nic}",
    )
    return found


def touch(api_client: client.ApiClient, m: Machine) -> None:
    """Secrets are not watched (docs/operations.md): a label change makes the daemon look now."""
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, V, m.ns, "libvirtmachines", m.name, {"metadata": {"labels": {"touched": _token()}}}
    )


def _token() -> str:
    return uuid.uuid4().hex[:12]


def _create_or_keep(custom: client.CustomObjectsApi, plural: str, body: dict[str, Any]) -> None:
    try:
        custom.create_cluster_custom_object(GROUP, V, plural, body)
    except ApiException as err:
        if err.status != 409:
            raise


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("ssh")
    for name in ("declared", "stranger", "optioned"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vmapi e2e {name}",
             "-f", str(folder / name)],
            check=True,
        )  # fmt: skip
    return Keys(
        declared=folder / "declared", stranger=folder / "stranger", optioned=folder / "optioned"
    )


@pytest.fixture(scope="module")
def machine(
    lab: LabInfo, api_client: client.ApiClient, daemon: str, keys: Keys
) -> Iterator[Machine]:
    custom = client.CustomObjectsApi(api_client)
    image = {"source": {"volume": {"pool": lab.pool, "volume": lab.debian_volume}}}
    image |= {"format": "qcow2", "firmware": {"type": "BIOS"}}
    _create_or_keep(
        custom,
        "libvirtimages",
        {"apiVersion": f"{GROUP}/{V}", "kind": "LibvirtImage", "metadata": {"name": IMAGE},
         "spec": image},
    )  # fmt: skip
    _create_or_keep(
        custom,
        "libvirtnetworks",
        {"apiVersion": f"{GROUP}/{V}", "kind": "LibvirtNetwork",
         "metadata": {"name": STATIC_NETWORK},
         "spec": {"source": {"network": lab.static_network}, "addressSource": "Agent"}},
    )  # fmt: skip
    with namespace(api_client) as ns:
        name = "debian"
        docs = pair(
            ns,
            name,
            vm_spec={
                "instanceType": {"resources": {"cpus": 1, "memory": "512Mi"}},
                "bootDisk": {
                    "source": {"image": {"apiGroup": GROUP, "kind": "LibvirtImage", "name": IMAGE}},
                    "sizeGiB": 2,
                },
                "bootstrap": {
                    "cloudInit": {
                        "userData": {"name": "debian-ci", "key": "user-data"},
                        "networkData": {"name": "debian-ci", "key": "network-data"},
                    }
                },
                "sshPublicKeys": [keys.public(keys.declared), optioned_key_line(keys)],
                "network": {
                    "hostName": HOST_NAME,
                    "interfaces": [
                        {"name": "eth0"},
                        {
                            "name": "eth1",
                            "network": {
                                "apiGroup": GROUP,
                                "kind": "LibvirtNetwork",
                                "name": STATIC_NETWORK,
                            },
                        },
                    ],
                },
            },
        )
        docs[1]["spec"]["hotplug"] = {"maxCPUs": 2, "maxMemory": "768Mi"}
        docs[1]["spec"]["gracefulShutdownTimeoutSeconds"] = 120
        create(api_client, docs)
        # The network-data matches NICs by MAC, and MACs derive from the LibvirtMachine's uid:
        # the Secret is written once the machine exists (until then it reports SecretNotFound).
        uid = (get(api_client, ns, name, vm=False) or {})["metadata"]["uid"]
        macs = {nic: naming.mac_address(uid, nic) for nic in ("eth0", "eth1")}
        m = Machine(
            ns=ns,
            name=name,
            domain=domain_of(api_client, ns, name),
            macs=macs,
            static_address=f"{lab.static_prefix}.20",
        )
        secret = {
            "user-data": user_data("first-boot"),
            "network-data": network_data(macs, m.static_address),
        }
        client.CoreV1Api(api_client).create_namespaced_secret(
            ns,
            {
                "metadata": {"name": "debian-ci"},
                "data": {k: base64.b64encode(v).decode() for k, v in secret.items()},
            },
        )
        touch(api_client, m)
        yield m


@pytest.fixture(scope="module", autouse=True)
def booting_together(machine: Machine, broken: Machine) -> None:
    """Both of the module's machines are created before its first test: the broken one's boot
    (its test is the last) then runs while the other tests do, not after them."""


def test_the_declared_key_logs_in_as_the_declared_user_and_nothing_else_does(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    wait_ready(
        api_client,
        machine.ns,
        machine.name,
        addresses=True,
        timeout=BOOT_TIMEOUT,
        what="the Debian machine Ready with an address",
    )
    address = lease_address(api_client, machine)
    # runcmd runs late in the boot (cloud-final), after sshd is up: wait for its mark.
    probe = "id -un; hostname; cat /var/tmp/vmapi-runcmd"
    out = eventually(
        lambda: (o := ssh_ok(lab, keys.declared, address, probe)) and "first-boot" in o and o,
        timeout=BOOT_TIMEOUT,
        interval=2,
        what=f"ssh as {USER} to {address} and the runcmd's mark",
    )
    assert out.split() == [USER, HOST_NAME, "first-boot"]
    # A key with options and a comment reaches the guest exactly as declared, and works.
    authorized = ssh_ok(lab, keys.optioned, address, "cat ~/.ssh/authorized_keys")
    assert authorized is not None
    assert optioned_key_line(keys) in authorized.splitlines()

    stranger = ssh(lab, keys.stranger, address, "true")
    assert stranger.returncode == 255
    # The server offers public keys only: no password, no keyboard-interactive.
    assert "Permission denied (publickey)." in stranger.stderr
    nobody = ssh(lab, keys.declared, address, "true", user="debian")
    assert nobody.returncode == 255, "the image's default user must not exist under its own name"


@pytest.fixture(scope="module")
def subresources(lab: LabInfo, api_client: client.ApiClient, daemon: str) -> Iterator[None]:
    """The APIService naming the module's daemon's console port, Available."""
    register_apiservice(lab, api_client, CONSOLE_PORT)
    try:
        yield
    finally:
        unregister_apiservice(api_client)


@pytest.mark.usefixtures("subresources")
def test_kubectl_vm_ssh_logs_in_through_the_api_server_from_where_the_guest_is_unreachable(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys, tmp_path: Path
) -> None:
    """`kubectl vm ssh` from the machine's own network namespace (the guest's networks are only
    in the lab's), as a ServiceAccount bound to the port-forward role: the local OpenSSH client
    with the user's own key and known_hosts, the stream through the API server and the daemon
    (docs/console.md, "Port-forward and ssh")."""
    kubeconfig = tmp_path / "user.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=machine.ns, name="sshuser")
    bind_portforward(api_client, machine.ns, user)
    known = tmp_path / "known_hosts"
    command = plugin_command(
        kubeconfig, "ssh", f"{USER}@{machine.name}", "-n", machine.ns, "--",
        "-F", "/dev/null", "-i", str(keys.declared), "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"UserKnownHostsFile={known}", "-o", "LogLevel=ERROR",
        "id -un; hostname",
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    def login() -> str:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False, env=env, cwd=REPO
        )
        # Not yet (the RoleBinding on its way): the last refusal is what a timeout reports.
        assert done.returncode == 0, f"exit {done.returncode}: {done.stderr.strip()}"
        return done.stdout

    out = eventually(login, timeout=120, interval=2, what="kubectl vm ssh logged in")
    assert out.split() == [USER, HOST_NAME]
    # The host key is remembered under the machine's namespaced name, not its address.
    assert known.read_text().startswith(f"{machine.name}.{machine.ns}.libvirtmachines "), (
        known.read_text()
    )
    # Remembered, it is checked: the next login needs no new entry.
    assert eventually(login, timeout=60, interval=2, what="a second login").split()[0] == USER
    assert len(known.read_text().splitlines()) == 1


def test_network_data_gives_a_static_address_that_the_real_agent_reports(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    def machine_addresses() -> list[dict[str, Any]]:
        status = (get(api_client, machine.ns, machine.name, vm=False) or {}).get("status") or {}
        return list(status.get("addresses") or [])

    found = eventually(
        lambda: [a for a in machine_addresses() if a.get("interface") == "eth1"],
        timeout=BOOT_TIMEOUT,
        interval=1,
        what="an address reported on eth1",
    )
    # The LibvirtMachine records where each address came from; the VM shows the address. The
    # agent also reports the NIC's IPv6 link-local address.
    assert {a["source"] for a in found} == {"agent"}
    ipv4 = [a["address"] for a in found if ipaddress.ip_address(a["address"]).version == 4]
    assert ipv4 == [machine.static_address]
    by_lease = [a for a in machine_addresses() if a.get("interface") == "eth0"]
    assert by_lease
    assert all(a["source"] == "lease" for a in by_lease)
    eventually(
        lambda: machine.static_address in [a["address"] for a in addresses(api_client, machine)],
        timeout=30,
        interval=0.5,
        what="the static address on the VirtualMachine",
    )
    assert vm_status(api_client, machine.ns, machine.name).get("ready")
    # The address is the guest's for real: ssh reaches it over the network without DHCP.
    out = ssh_ok(lab, keys.declared, machine.static_address, "cat /sys/class/net/eth1/address")
    assert out is not None
    assert out.strip() == machine.macs["eth1"]


def test_the_agent_tells_the_guest_os_kernel_and_host_name(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    facts = eventually(
        lambda: (m := guest_metadata(api_client, machine)).get("guestHostName") and m,
        timeout=60,
        interval=1,
        what="guest facts in providerMetadata",
    )
    kernel = ssh_ok(lab, keys.declared, lease_address(api_client, machine), "uname -r")
    assert kernel is not None
    assert (
        facts["guestAgent"],
        facts["guestOSName"],
        facts["guestOSVersion"],
        facts["guestKernel"],
        facts["guestHostName"],
    ) == ("connected", "Debian GNU/Linux", "12 (bookworm)", kernel.strip(), HOST_NAME)


def test_a_filesystem_consistent_snapshot_freezes_through_the_agent_and_thaws(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    address = lease_address(api_client, machine)
    assert ssh_ok(lab, keys.declared, address, "echo A > snapshot-a && sync") is not None
    create_snapshot(api_client, machine.ns, "quiesced", machine.name, consistency="Filesystem")

    def snapshot() -> dict[str, Any] | None:
        return get_snapshot(api_client, machine.ns, "quiesced")

    try:
        taken = eventually(
            lambda: (s := snapshot()) and (s.get("status") or {}).get("readyToUse") and s,
            timeout=120,
            interval=1,
            what="the Filesystem-consistent snapshot ready",
        )
        assert taken["status"]["consistency"] == "Filesystem"
        assert taken["status"]["source"]["powerState"] == "Running"
        # Thawed: a write and a sync inside the guest complete.
        out = ssh_ok(lab, keys.declared, address, "echo B > snapshot-b && sync && echo thawed")
        assert out is not None
        assert out.strip() == "thawed"
        # The clone and the rollback both boot from the snapshot's copies: started together, their
        # two boots (a minute each under emulation) overlap.
        clone, uid = _clone_from_the_snapshot(api_client, machine, keys)
        create_restore(api_client, machine.ns, "rollback", "quiesced", machine.name)
        _clone_has_the_snapshots_files_and_is_a_new_cloud_init_instance(
            lab, api_client, clone, uid, keys
        )
        delete_vm_and_wait(api_client, machine.ns, CLONE, what="the clone deleted")
        _restored_in_place_it_holds_the_snapshots_files(lab, api_client, machine, keys)
        # The machine now runs on overlays on the snapshot's copies: the snapshot's deletion
        # waits for it and names what it waits for (the module's namespace, deleted after the
        # machine, sees it go).
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            GROUP, V, machine.ns, SNAPSHOTS, "quiesced"
        )
        waits = eventually(
            lambda: (cd := condition(snapshot(), "Ready")).get("reason") == "InUse" and cd,
            timeout=60,
            interval=0.5,
            what="the snapshot's deletion waiting for the restored machine",
        )
        assert machine.domain in waits["message"], waits
    finally:
        if get(api_client, machine.ns, CLONE, vm=True) is not None:
            delete_vm_and_wait(api_client, machine.ns, CLONE, what="the clone deleted")
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                GROUP, V, machine.ns, SNAPSHOTS, "quiesced"
            )


def _restored_in_place_it_holds_the_snapshots_files(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    """The LibvirtRestore `rollback` rolled the running machine back to the snapshot: it was
    powered off (through its agent), its disks became the snapshot's, and it runs again: file A,
    written before the snapshot, is there, file B, written after, is not."""
    done = eventually(
        lambda: (
            (r := get_restore(api_client, machine.ns, "rollback"))
            and (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            and r
        ),
        timeout=BOOT_TIMEOUT,
        interval=1,
        what="the restore finished",
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["returnPowerState"] == "Running"
    wait_ready(
        api_client, machine.ns, machine.name, addresses=True, timeout=BOOT_TIMEOUT,
        what="the restored machine Ready",
    )  # fmt: skip
    address = lease_address(api_client, machine)
    out = eventually(
        lambda: ssh_ok(
            lab,
            keys.declared,
            address,
            "cat snapshot-a; test -e snapshot-b && echo B-present || echo B-absent",
        ),
        timeout=BOOT_TIMEOUT,
        interval=2,
        what="ssh into the restored machine",
    )
    assert out.split() == ["A", "B-absent"]


def _clone_from_the_snapshot(
    api_client: client.ApiClient, machine: Machine, keys: Keys
) -> tuple[Machine, str]:
    """A VM cloned from the snapshot (`source.snapshot`), created; with its uid."""
    snapshot = {"apiGroup": GROUP, "kind": "LibvirtSnapshot", "name": "quiesced"}
    docs = pair(
        machine.ns,
        CLONE,
        vm_spec={
            "instanceType": {"resources": {"cpus": 1, "memory": "512Mi"}},
            "bootDisk": {"source": {"snapshot": snapshot}, "sizeGiB": 3},
            "sshPublicKeys": [keys.public(keys.declared)],
            "network": {"hostName": CLONE, "interfaces": [{"name": "eth0"}]},
        },
    )
    create(api_client, docs)
    uid = (get(api_client, machine.ns, CLONE, vm=False) or {})["metadata"]["uid"]
    clone = Machine(
        ns=machine.ns,
        name=CLONE,
        domain=domain_of(api_client, machine.ns, CLONE),
        macs={"eth0": naming.mac_address(uid, "eth0")},
        static_address="",
    )
    return clone, uid


def _clone_has_the_snapshots_files_and_is_a_new_cloud_init_instance(
    lab: LabInfo, api_client: client.ApiClient, clone: Machine, uid: str, keys: Keys
) -> None:
    """In the clone, file A, written before the snapshot, is there, file B, written after, is
    not; cloud-init saw a new instance (the clone's own id, host name and network), as on any new
    machine."""
    address = lease_address(api_client, clone)
    # The user and its key came with the disk (the source's cloud-init made them).
    out = eventually(
        lambda: ssh_ok(
            lab,
            keys.declared,
            address,
            "cat snapshot-a; test -e snapshot-b && echo B-present || echo B-absent; hostname; "
            "cat /var/lib/cloud/data/instance-id",
        ),
        timeout=BOOT_TIMEOUT,
        interval=2,
        what="ssh into the clone",
    )
    file_a, file_b, host_name, instance = out.split()
    assert (file_a, file_b, host_name) == ("A", "B-absent", CLONE)
    assert instance.startswith(f"{uid}-")


def test_a_live_cpu_and_memory_change_is_seen_inside_the_guest(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    address = lease_address(api_client, machine)

    def cpus_and_memory() -> tuple[int, int] | None:
        out = ssh_ok(lab, keys.declared, address, "nproc; grep MemTotal /proc/meminfo")
        if out is None:
            return None
        lines = out.splitlines()
        return int(lines[0]), int(lines[1].split()[1])

    before = eventually(cpus_and_memory, timeout=60, interval=1, what="the guest's sizes")
    assert before[0] == 1
    patch_vm(
        api_client,
        machine.ns,
        machine.name,
        {"instanceType": {"resources": {"cpus": 2, "memory": "640Mi"}}},
    )
    after = eventually(
        lambda: (s := cpus_and_memory()) and s[0] == 2 and s[1] >= before[1] + 100 * 1024 and s,
        timeout=120,
        interval=2,
        what="the guest seeing two vCPUs and 128 MiB more memory",
    )
    assert after[1] <= before[1] + 130 * 1024
    assert (
        condition(get(api_client, machine.ns, machine.name, vm=True), "UpToDate").get("status")
        == "True"
    )


def test_power_off_asks_the_agent_then_the_power_button_and_the_disk_and_new_data_survive(
    lab: LabInfo, api_client: client.ApiClient, machine: Machine, keys: Keys
) -> None:
    ns, name = machine.ns, machine.name
    address = lease_address(api_client, machine)
    token = _token()
    written = ssh_ok(lab, keys.declared, address, f"echo {token} > ~/survivor && sync && echo ok")
    assert written == "ok\n"

    # A changed Secret waits for the next power cycle; cloud-init then sees a new instance id.
    secret = {"user-data": base64.b64encode(user_data("second-boot")).decode()}
    client.CoreV1Api(api_client).patch_namespaced_secret("debian-ci", ns, {"data": secret})
    touch(api_client, machine)
    eventually(
        lambda: (
            condition(get(api_client, ns, name, vm=True), "UpToDate").get("reason")
            == "RequiresPowerOff"
        ),
        timeout=60,
        interval=0.5,
        what="the Secret change pending a power cycle",
    )

    # With the agent connected, Soft goes through it (the guest's journal is on its console).
    assert guest_metadata(api_client, machine).get("guestAgent") == "connected"
    seen = len(machine.console(lab))
    patch_vm(api_client, ns, name, {"powerState": "PoweredOff", "powerOffMode": "Soft"})
    eventually(
        lambda: vm_status(api_client, ns, name).get("powerState") == "PoweredOff",
        timeout=120,
        interval=1,
        what="Soft power-off through the guest agent",
    )
    shutdown = machine.console(lab)[seen:]
    assert AGENT_SHUTDOWN in shutdown
    assert POWER_KEY not in shutdown
    assert "reboot: Power down" in shutdown
    eventually(
        lambda: condition(get(api_client, ns, name, vm=True), "UpToDate").get("status") == "True",
        timeout=60,
        interval=0.5,
        what="the new cloud-init data applied while off",
    )

    patch_vm(api_client, ns, name, {"powerState": "PoweredOn"})
    wait_ready(api_client, ns, name, addresses=True, timeout=BOOT_TIMEOUT, what="Ready again")
    address = lease_address(api_client, machine)
    out = eventually(
        lambda: (
            (o := ssh_ok(lab, keys.declared, address, "cat ~/survivor /var/tmp/vmapi-runcmd"))
            and "second-boot" in o
            and o
        ),
        timeout=BOOT_TIMEOUT,
        interval=2,
        what="the file written before, and the changed user-data's runcmd mark",
    )
    assert out.split() == [token, "first-boot", "second-boot"]

    # Without an agent, the request is an ACPI power-button press, which systemd-logind acts on.
    # TrySoft asks the same way; a complying guest is off long before its 120 s timeout.
    stopped = ssh(lab, keys.declared, address, "sudo -n systemctl stop qemu-guest-agent")
    assert stopped.returncode == 0, stopped.stderr
    eventually(
        lambda: guest_metadata(api_client, machine).get("guestAgent") == "disconnected",
        timeout=60,
        interval=0.5,
        what="the agent reported disconnected",
    )
    seen = len(machine.console(lab))
    patch_vm(api_client, ns, name, {"powerState": "PoweredOff", "powerOffMode": "TrySoft"})
    eventually(
        lambda: vm_status(api_client, ns, name).get("powerState") == "PoweredOff",
        timeout=100,
        interval=1,
        what="TrySoft power-off through the power button, before its timeout",
    )
    shutdown = machine.console(lab)[seen:]
    assert POWER_KEY in shutdown
    assert AGENT_SHUTDOWN not in shutdown
    assert "reboot: Power down" in shutdown
    assert not guest_metadata(api_client, machine), "guest facts outlived the running domain"


# ---------------------------------------------------------------------------------------------
# Bad input, on one more machine (each Debian boot costs about a minute of the test budget): its
# user-data is not valid YAML and its network-data turns DHCP off without giving an address.

BROKEN_USER_DATA = b"#cloud-config\nuser: {name: vmapi\nruncmd: [\n"


@pytest.fixture(scope="module")
def broken(lab: LabInfo, api_client: client.ApiClient, daemon: str) -> Iterator[Machine]:
    core = client.CoreV1Api(api_client)
    with namespace(api_client) as ns:
        name = "broken"
        create(
            api_client,
            pair(
                ns,
                name,
                vm_spec={
                    "instanceType": {"resources": {"cpus": 1, "memory": "512Mi"}},
                    "bootDisk": {
                        "source": {
                            "image": {"apiGroup": GROUP, "kind": "LibvirtImage", "name": IMAGE}
                        },
                        "sizeGiB": 2,
                    },
                    "bootstrap": {
                        "cloudInit": {
                            "userData": {"name": "broken", "key": "user-data"},
                            "networkData": {"name": "broken", "key": "network-data"},
                        }
                    },
                },
            ),
        )
        uid = (get(api_client, ns, name, vm=False) or {})["metadata"]["uid"]
        mac = naming.mac_address(uid, "default")  # a VM without interfaces gets `default`
        no_address = {
            "network": {
                "version": 2,
                "ethernets": {"nic": {"match": {"macaddress": mac}, "dhcp4": False}},
            }
        }
        secret = {
            "user-data": BROKEN_USER_DATA,
            "network-data": yaml.safe_dump(no_address).encode(),
        }
        core.create_namespaced_secret(
            ns,
            {
                "metadata": {"name": "broken"},
                "data": {k: base64.b64encode(v).decode() for k, v in secret.items()},
            },
        )
        m = Machine(
            ns=ns, name=name, domain=domain_of(api_client, ns, name), macs={}, static_address=""
        )
        touch(api_client, m)
        yield m


def test_rejected_user_data_still_boots_and_address_less_network_data_is_named(
    lab: LabInfo, api_client: client.ApiClient, broken: Machine
) -> None:
    # The guest runs its boot to the end; cloud-init says on the console what it rejected.
    eventually(
        lambda: CLOUD_INIT_FINISHED.search(broken.console(lab)),
        timeout=BOOT_TIMEOUT,
        interval=1,
        what="the guest's cloud-init finished",
    )
    assert CLOUD_INIT_BAD_YAML in broken.console(lab)
    status = vm_status(api_client, broken.ns, broken.name)
    assert status.get("powerState") == "PoweredOn"
    assert not status.get("addresses")
    ready = condition(get(api_client, broken.ns, broken.name, vm=True), "InfrastructureReady")
    assert (ready.get("status"), ready.get("reason")) == ("False", "WaitingForAddress")
    assert "network-data" in ready["message"]
    assert "likely cause" in ready["message"]
