"""A disk's VolumeAttributesClass: its I/O limits seen by libvirt, felt by the guest, changed live.

One machine for the module (booting costs most of the time), its tests run in file order, each
starting where the last left it: the busybox guest reads its data disk with direct I/O in a loop
(user-data flag `vmapi-read-rate`) and prints each pass's bytes and times on its serial console,
which the daemon logs to a file; the test reads the rates there.
"""

from __future__ import annotations

import base64
import re
import statistics
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider.constants import VOLUME_ATTRIBUTES_DRIVER
from tests.support.daemons import console_log_dir
from tests.support.factories import pair
from tests.support.kube import (
    VM_GROUP,
    V,
    condition,
    create,
    domain_of,
    get,
    namespace,
    patch_vm,
    wait_ready,
    wait_reason,
)
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

MIB = 2**20
VAC = ("storage.k8s.io", "v1", "volumeattributesclasses")
RATE = re.compile(r"VMAPI-GUEST-READ-RATE device=\S+ bytes=(\d+) start=([0-9.]+) end=([0-9.]+)")
DEVICE = "/dev/vdb"  # the data disk: the boot disk is vda, the cloud-init media a CD-ROM


def _vac(name: str, **parameters: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttributesClass",
        "metadata": {"name": name},
        "driverName": VOLUME_ATTRIBUTES_DRIVER,
        "parameters": parameters,
    }


@pytest.fixture(scope="module")
def classes(api_client: client.ApiClient) -> Iterator[dict[str, str]]:
    """The classes, named apart from other runs': slow (10 MiB/s), fast (100 MiB/s), burst (fast
    with a burst and a group), broken (a negative rate)."""
    custom = client.CustomObjectsApi(api_client)
    suffix = uuid.uuid4().hex[:6]
    names = {k: f"{k}-{suffix}" for k in ("slow", "fast", "burst", "broken")}
    bodies = [
        _vac(names["slow"], readBytesPerSecond="10Mi"),
        _vac(names["fast"], readBytesPerSecond="100Mi"),
        # A burst and a group: libvirt must write back exactly these, or every pass would see
        # drift and set them again.
        _vac(
            names["burst"],
            readBytesPerSecond="100Mi",
            readBytesPerSecondMax="150Mi",
            groupName="e2e",
        ),
        _vac(names["broken"], readBytesPerSecond="-10Mi"),
    ]
    for body in bodies:
        custom.create_cluster_custom_object(*VAC, body)
    try:
        yield names
    finally:
        for name in names.values():
            custom.delete_cluster_custom_object(*VAC, name)


def _rates(log: Path, after: int) -> list[float]:
    """MiB/s of each read pass the guest printed after byte `after` of its console log."""
    text = log.read_bytes()[after:].decode(errors="replace")
    passes = [(int(m[1]), float(m[3]) - float(m[2])) for m in RATE.finditer(text)]
    return [size / seconds / MIB for size, seconds in passes if size and seconds > 0]


def _steady_rate(log: Path, after: int, what: str) -> float:
    """The median of three passes, the first pass after `after` left out (it may straddle a
    change of limits)."""
    rates: list[float] = eventually(
        lambda: (r := _rates(log, after)) and len(r) >= 4 and r[1:4],
        timeout=120,
        interval=1,
        what=what,
    )
    return statistics.median(rates)


def _read_limit(virt: libvirt.virConnect, domain: str, *, inactive: bool) -> int:
    flags = libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0
    root = etree.fromstring(virt.lookupByName(domain).XMLDesc(flags).encode())
    for disk in root.iterfind("devices/disk"):
        target = disk.find("target")
        if target is not None and target.get("dev") == "vdb":
            return int(disk.findtext("iotune/read_bytes_sec") or 0)
    raise AssertionError(f"{domain} has no disk vdb")


def _iotune(virt: libvirt.virConnect, domain: str) -> dict[str, str]:
    """The persistent definition's `<iotune>` of the data disk, as libvirt wrote it."""
    root = etree.fromstring(virt.lookupByName(domain).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    for disk in root.iterfind("devices/disk"):
        target = disk.find("target")
        if target is not None and target.get("dev") == "vdb":
            iotune = disk.find("iotune")
            return {} if iotune is None else {str(e.tag): e.text or "" for e in iotune}
    raise AssertionError(f"{domain} has no disk vdb")


def _disk_status(api_client: client.ApiClient, ns: str) -> dict[str, Any]:
    """The data disk's entry in the LibvirtMachine's status.disks."""
    machine = get(api_client, ns, "tuned", vm=False) or {}
    disks = (machine.get("status") or {}).get("disks") or []
    return next((d for d in disks if d.get("name") == "data"), {})


def _disks(class_name: str | None) -> list[dict[str, Any]]:
    disk: dict[str, Any] = {"name": "data", "source": {"blank": True}, "sizeGiB": 1}
    if class_name is not None:
        disk["volumeAttributesClassName"] = class_name
    return [disk]


@dataclass(frozen=True)
class Tuned:
    """The module's machine: its namespace, domain, console log and the classes."""

    ns: str
    domain: str
    log: Path
    classes: dict[str, str]


@pytest.fixture(scope="module")
def tuned(
    api_client: client.ApiClient,
    lab: LabInfo,
    daemon: str,
    classes: dict[str, str],
) -> Iterator[Tuned]:
    """A running machine whose data disk has the slow class and whose guest measures its reads."""
    with namespace(api_client) as ns:
        core = client.CoreV1Api(api_client)
        user_data = f"#cloud-config\n# vmapi-read-rate: {DEVICE}\n".encode()
        core.create_namespaced_secret(
            ns, {"metadata": {"name": "ci"}, "data": {"ud": base64.b64encode(user_data).decode()}}
        )
        vm_spec = {
            "bootstrap": {"cloudInit": {"userData": {"name": "ci", "key": "ud"}}},
            "disks": _disks(classes["slow"]),
        }
        create(api_client, pair(ns, "tuned", vm_spec=vm_spec))
        wait_ready(api_client, ns, "tuned", what="the VM Ready with its slow data disk")
        domain = domain_of(api_client, ns, "tuned")
        yield Tuned(ns, domain, Path(console_log_dir(lab)) / f"{domain}.serial.log", classes)


def _events(api_client: client.ApiClient, ns: str) -> list[client.CoreV1Event]:
    return list(client.CoreV1Api(api_client).list_namespaced_event(ns).items)


def _switch(api_client: client.ApiClient, m: Tuned, kind: str | None) -> None:
    patch_vm(api_client, m.ns, "tuned", {"disks": _disks(m.classes[kind] if kind else None)})


def _wait_current(api_client: client.ApiClient, m: Tuned, kind: str) -> None:
    eventually(
        lambda: (
            _disk_status(api_client, m.ns).get("currentVolumeAttributesClassName")
            == m.classes[kind]
        ),
        timeout=30,
        interval=0.5,
        what=f"status naming the {kind} class",
    )


def test_the_slow_class_limits_the_guests_reads(
    api_client: client.ApiClient, virt: libvirt.virConnect, tuned: Tuned
) -> None:
    dom = virt.lookupByName(tuned.domain)
    assert dom.blockIoTune("vdb", libvirt.VIR_DOMAIN_AFFECT_LIVE)["read_bytes_sec"] == 10 * MIB
    assert _iotune(virt, tuned.domain) == {"read_bytes_sec": str(10 * MIB)}
    assert _disk_status(api_client, tuned.ns) == {
        "name": "data",
        "currentVolumeAttributesClassName": tuned.classes["slow"],
    }
    slow = _steady_rate(tuned.log, 0, "the guest's read rate under the slow class")
    print(f"read rate under {tuned.classes['slow']} (10 MiB/s): {slow:.1f} MiB/s")
    assert 6 <= slow <= 13, slow


def test_a_faster_class_applies_live_without_a_reboot(
    api_client: client.ApiClient, virt: libvirt.virConnect, tuned: Tuned
) -> None:
    slow = statistics.median(_rates(tuned.log, 0)[1:])
    mark = tuned.log.stat().st_size
    _switch(api_client, tuned, "fast")
    eventually(
        lambda: _read_limit(virt, tuned.domain, inactive=False) == 100 * MIB,
        timeout=60,
        interval=0.5,
        what="libvirt applying the fast class to the running domain",
    )
    assert _iotune(virt, tuned.domain) == {"read_bytes_sec": str(100 * MIB)}
    fast = _steady_rate(tuned.log, mark, "the guest's read rate under the fast class")
    print(f"read rate under {tuned.classes['fast']} (100 MiB/s): {fast:.1f} MiB/s")
    assert fast >= 3 * slow, (slow, fast)
    _wait_current(api_client, tuned, "fast")
    up_to_date = condition(get(api_client, tuned.ns, "tuned", vm=True), "UpToDate")
    assert up_to_date.get("status") == "True", up_to_date
    assert tuned.log.read_text(errors="replace").count("VMAPI-GUEST-BOOTED") == 1
    assert virt.lookupByName(tuned.domain).isActive()
    assert any(
        e.reason == "UpdatedLive" and "disk ua-disk-data-data I/O limits" in str(e.message)
        for e in _events(api_client, tuned.ns)
    )


def test_a_burst_and_a_group_are_read_back_as_written(
    api_client: client.ApiClient, virt: libvirt.virConnect, tuned: Tuned
) -> None:
    _switch(api_client, tuned, "burst")
    want = {
        "read_bytes_sec": str(100 * MIB),
        "read_bytes_sec_max": str(150 * MIB),
        "group_name": "e2e",
    }
    eventually(
        lambda: _iotune(virt, tuned.domain) == want,
        timeout=60,
        interval=0.5,
        what="libvirt applying the burst class",
    )
    _wait_current(api_client, tuned, "burst")
    # Another live change makes the daemon compare again: were what libvirt wrote back drift,
    # the limits would be applied again in the same pass, and the Event would say so.
    patch_vm(api_client, tuned.ns, "tuned", {"tags": {"e2e": "burst"}})
    tagged = eventually(
        lambda: [
            str(e.message)
            for e in _events(api_client, tuned.ns)
            if e.reason == "UpdatedLive" and "tags" in str(e.message)
        ],
        timeout=30,
        interval=0.5,
        what="the tags applied live",
    )
    assert not any("I/O limits" in m for m in tagged), tagged


def test_an_unhonoured_class_keeps_the_limits_and_says_why(
    api_client: client.ApiClient, virt: libvirt.virConnect, tuned: Tuned
) -> None:
    _switch(api_client, tuned, "broken")
    refused = wait_reason(
        api_client, tuned.ns, "tuned", "InvalidSpec", what="the broken class refused"
    )
    assert f"VolumeAttributesClass '{tuned.classes['broken']}'" in refused["message"]
    assert "readBytesPerSecond" in refused["message"]
    status = eventually(
        lambda: (s := _disk_status(api_client, tuned.ns)).get("modifyVolumeStatus") and s,
        timeout=30,
        interval=0.5,
        what="the disk's modifyVolumeStatus saying Infeasible",
    )
    assert status["currentVolumeAttributesClassName"] == tuned.classes["burst"]
    assert status["modifyVolumeStatus"]["status"] == "Infeasible"
    target = status["modifyVolumeStatus"]["targetVolumeAttributesClassName"]
    assert target == tuned.classes["broken"]
    assert _read_limit(virt, tuned.domain, inactive=False) == 100 * MIB
    assert _read_limit(virt, tuned.domain, inactive=True) == 100 * MIB
    assert virt.lookupByName(tuned.domain).isActive()
    assert any(
        e.type == "Warning" and e.reason == "InvalidSpec" for e in _events(api_client, tuned.ns)
    )


def test_removing_the_class_clears_the_limits_live(
    api_client: client.ApiClient, virt: libvirt.virConnect, tuned: Tuned
) -> None:
    _switch(api_client, tuned, None)
    eventually(
        lambda: (
            _read_limit(virt, tuned.domain, inactive=False) == 0
            and _iotune(virt, tuned.domain) == {}
        ),
        timeout=60,
        interval=0.5,
        what="the limits cleared with the class removed",
    )
    eventually(
        lambda: (
            condition(get(api_client, tuned.ns, "tuned", vm=True), "UpToDate").get("status")
            == "True"
            and _disk_status(api_client, tuned.ns) == {"name": "data"}
        ),
        timeout=30,
        interval=0.5,
        what="the VM up to date, its disk on no class",
    )
    assert virt.lookupByName(tuned.domain).isActive()
    assert tuned.log.read_text(errors="replace").count("VMAPI-GUEST-BOOTED") == 1
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, tuned.ns, "virtualmachines", "tuned"
    )
