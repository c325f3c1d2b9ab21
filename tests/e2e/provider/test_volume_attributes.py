"""A disk's VolumeAttributesClass: its I/O limits seen by libvirt, felt by the guest, changed live.

One machine for the module (booting costs most of the time): the busybox guest reads its data disk
with direct I/O in a loop (user-data flag `vmapi-read-rate`) and prints each pass's bytes and
seconds on its serial console, which the daemon logs to a file; the test reads the rates there.
"""

from __future__ import annotations

import base64
import re
import statistics
import uuid
from collections.abc import Iterator
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
    """Three classes, named apart from other runs': slow (10 MiB/s), fast (100 MiB/s), broken."""
    custom = client.CustomObjectsApi(api_client)
    suffix = uuid.uuid4().hex[:6]
    names = {"slow": f"slow-{suffix}", "fast": f"fast-{suffix}", "broken": f"broken-{suffix}"}
    bodies = [
        _vac(names["slow"], readBytesPerSecond="10Mi"),
        _vac(names["fast"], readBytesPerSecond="100Mi"),
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


def _disk_status(api_client: client.ApiClient, ns: str) -> dict[str, Any]:
    machine = get(api_client, ns, "tuned", vm=False) or {}
    disks = (machine.get("status") or {}).get("disks") or []
    return next((d for d in disks if d.get("name") == "data"), {})


def _disks(class_name: str | None) -> list[dict[str, Any]]:
    disk: dict[str, Any] = {"name": "data", "source": {"blank": True}, "sizeGiB": 1}
    if class_name is not None:
        disk["volumeAttributesClassName"] = class_name
    return [disk]


def test_a_disks_class_limits_its_reads_and_changes_live(
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    lab: LabInfo,
    ns: str,
    classes: dict[str, str],
) -> None:
    core = client.CoreV1Api(api_client)
    user_data = f"#cloud-config\n# vmapi-read-rate: {DEVICE}\n".encode()
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "ci"}, "data": {"ud": base64.b64encode(user_data).decode()}}
    )
    create(
        api_client,
        pair(
            ns,
            "tuned",
            vm_spec={
                "bootstrap": {"cloudInit": {"userData": {"name": "ci", "key": "ud"}}},
                "disks": _disks(classes["slow"]),
            },
        ),
    )
    wait_ready(api_client, ns, "tuned", what="the VM Ready with its slow data disk")
    domain = domain_of(api_client, ns, "tuned")
    dom = virt.lookupByName(domain)
    assert dom.blockIoTune("vdb", libvirt.VIR_DOMAIN_AFFECT_LIVE)["read_bytes_sec"] == 10 * MIB
    assert _read_limit(virt, domain, inactive=True) == 10 * MIB
    assert _disk_status(api_client, ns) == {
        "name": "data",
        "currentVolumeAttributesClassName": classes["slow"],
    }

    log = Path(console_log_dir(lab)) / f"{domain}.serial.log"
    slow = _steady_rate(log, 0, "the guest's read rate under the slow class")
    print(f"read rate under {classes['slow']} (10 MiB/s): {slow:.1f} MiB/s")
    assert 6 <= slow <= 13, slow

    # Switched live: no power cycle, the guest keeps running (one boot on its console).
    mark = log.stat().st_size
    patch_vm(api_client, ns, "tuned", {"disks": _disks(classes["fast"])})
    eventually(
        lambda: _read_limit(virt, domain, inactive=False) == 100 * MIB,
        timeout=60,
        interval=0.5,
        what="libvirt applying the fast class to the running domain",
    )
    assert _read_limit(virt, domain, inactive=True) == 100 * MIB
    fast = _steady_rate(log, mark, "the guest's read rate under the fast class")
    print(f"read rate under {classes['fast']} (100 MiB/s): {fast:.1f} MiB/s")
    assert fast >= 3 * slow, (slow, fast)
    eventually(
        lambda: (
            _disk_status(api_client, ns).get("currentVolumeAttributesClassName") == classes["fast"]
        ),
        timeout=30,
        interval=0.5,
        what="status naming the fast class",
    )
    up_to_date = condition(get(api_client, ns, "tuned", vm=True), "UpToDate")
    assert up_to_date.get("status") == "True", up_to_date
    assert log.read_text(errors="replace").count("VMAPI-GUEST-BOOTED") == 1
    assert dom.isActive()
    events = core.list_namespaced_event(ns).items
    assert any(
        e.reason == "UpdatedLive" and "disk ua-disk-data-data I/O limits" in (e.message or "")
        for e in events
    ), [e.message for e in events]

    # A class that cannot be honoured: said on the machine, and the fast limit stays in place.
    patch_vm(api_client, ns, "tuned", {"disks": _disks(classes["broken"])})
    refused = wait_reason(
        api_client, ns, "tuned", "InvalidSpec", what="the broken class refused as InvalidSpec"
    )
    assert f"VolumeAttributesClass '{classes['broken']}'" in refused["message"]
    assert "readBytesPerSecond" in refused["message"]
    status = eventually(
        lambda: (s := _disk_status(api_client, ns)).get("modifyVolumeStatus") and s,
        timeout=30,
        interval=0.5,
        what="the disk's modifyVolumeStatus saying Infeasible",
    )
    assert status["currentVolumeAttributesClassName"] == classes["fast"]
    assert status["modifyVolumeStatus"]["status"] == "Infeasible"
    assert status["modifyVolumeStatus"]["targetVolumeAttributesClassName"] == classes["broken"]
    assert _read_limit(virt, domain, inactive=False) == 100 * MIB
    assert _read_limit(virt, domain, inactive=True) == 100 * MIB
    assert dom.isActive()
    warnings = core.list_namespaced_event(ns).items
    assert any(e.type == "Warning" and e.reason == "InvalidSpec" for e in warnings)

    # No class at all: the limits are cleared, live.
    patch_vm(api_client, ns, "tuned", {"disks": _disks(None)})
    eventually(
        lambda: (
            _read_limit(virt, domain, inactive=False) == 0
            and _read_limit(virt, domain, inactive=True) == 0
        ),
        timeout=60,
        interval=0.5,
        what="the limits cleared with the class removed",
    )
    eventually(
        lambda: (
            condition(get(api_client, ns, "tuned", vm=True), "UpToDate").get("status") == "True"
        ),
        timeout=30,
        interval=0.5,
        what="the VM up to date without limits (no drift from what libvirt wrote back)",
    )
    assert dom.isActive()
    assert log.read_text(errors="replace").count("VMAPI-GUEST-BOOTED") == 1

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", "tuned"
    )
