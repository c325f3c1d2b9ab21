"""Fat VirtualMachines do not fill the leader's memory (issue 24, item 4).

Kubernetes does not limit the number of labels an object carries, only its size (about 1.5 MB in
etcd). A tenant who may create VirtualMachines can make each one a megabyte of labels; the leader
watches every VM of the cluster (the generic controller's and its own host's kopf watches, the
placer's informer), so before it kept only what it reads, 14 such VMs took it past the
DaemonSet's 256 MiB limit. Here FAT_VMS VMs of 40,000 labels each (1.2 MB of JSON apiece) are
created while a daemon leads, and its resident memory, read from /proc, must move by less than
10 MiB once it has answered every one of them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.support.daemons import health_base, start_daemon, stop_daemon
from tests.support.kube import VM_GROUP, V, delete_quietly, install_api, namespace
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

# 8 in `make test`, about three times the bound even then (the code before kept every label and
# moved by about 70 MiB with 20 VMs, 175 with 50: 3.5 MiB a VM); the figure is measured
# with VMAPI_FAT_VMS=50. Each fat VM costs the API server seconds to store and serve.
FAT_VMS = int(os.environ.get("VMAPI_FAT_VMS", "8"))
LABELS = 40_000
BOUND_MIB = 10.0
# The daemon hands freed heap memory back every 30 s (HEAP_TRIM_SECONDS): the figure is read
# until it is under the bound, for at most two of those rounds.
SETTLE_SECONDS = 75.0
# The daemon's --missing-provider-grace: how old a VM without its provider object is when the
# leader answers it (NotAdopted). The default 10 s only delayed each answer here.
ANSWER_GRACE_SECONDS = 1.0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _vm(ns: str, name: str, labels: int) -> dict[str, Any]:
    """A VM whose provider object does not exist (the controller says NotAdopted once the VM is
    ANSWER_GRACE_SECONDS old, and posts an Event saying so), with `labels` labels."""
    return {
        "apiVersion": f"{VM_GROUP}/{V}",
        "kind": "VirtualMachine",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {f"fat.example.com/k{i:05d}": f"v{i}" for i in range(labels)},
        },
        "spec": {
            "infrastructureRef": {
                "apiGroup": "infrastructure.vm-api.io",
                "kind": "LibvirtMachine",
                "name": name,
            },
            "powerState": "PoweredOff",
            "instanceType": {"name": "small"},
            "bootDisk": {
                "source": {
                    "image": {
                        "apiGroup": "infrastructure.vm-api.io",
                        "kind": "LibvirtImage",
                        "name": "test-guest",
                    }
                },
                "sizeGiB": 1,
            },
        },
    }


@pytest.fixture
def lease_namespace(api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = "lease-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _told(api: client.ApiClient, ns: str, reason: str) -> set[str]:
    """The objects the leader posted an Event of `reason` about (read instead of the VMs: a
    list of 50 fat VMs is 60 MB for the API server to write and for this process to read)."""
    events = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"reason={reason}")
    return {str(e.involved_object.name) for e in events.items}


def _answered(api: client.ApiClient, ns: str) -> set[str]:
    """The VMs the leader has answered: each gets a NotAdopted Event."""
    return _told(api, ns, "NotAdopted")


def test_fat_vms_leave_the_leaders_memory_alone(
    lab: LabInfo, api_client: client.ApiClient, lease_namespace: str
) -> None:
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    proc, log = start_daemon(
        lab,
        host="fat-host",
        log_name="e2e-fat-objects.log",
        lease_namespace=lease_namespace,
        extra_args=(f"--missing-provider-grace={ANSWER_GRACE_SECONDS:g}",),
    )
    try:
        health_base(proc, log)
        eventually(
            lambda: "leads: starting the generic controller" in log.read_text(),
            timeout=60,
            what=f"the daemon leading ({log})",
        )
        with namespace(api_client) as ns:
            # A lean VM first: the controller, its watches and the placer are running and have
            # decoded a VM before the first figure is read.
            custom.create_namespaced_custom_object(
                VM_GROUP, V, ns, "virtualmachines", _vm(ns, "lean", 0)
            )
            eventually(
                lambda: "lean" in _answered(api_client, ns),
                timeout=60,
                what="the leader answering a lean VM",
            )
            before = _rss_mib(proc.pid)
            names = [f"fat-{i:02d}" for i in range(FAT_VMS)]
            try:
                for name in names:
                    custom.create_namespaced_custom_object(
                        VM_GROUP, V, ns, "virtualmachines", _vm(ns, name, LABELS)
                    )
                eventually(
                    lambda: _answered(api_client, ns) >= set(names),
                    timeout=240,
                    interval=1,
                    what="the leader answering every fat VM",
                )
                peak = _rss_mib(proc.pid)
                seen: list[float] = []

                def settled() -> bool:
                    seen.append(_rss_mib(proc.pid) - before)
                    return seen[-1] < BOUND_MIB

                try:
                    eventually(settled, timeout=SETTLE_SECONDS, interval=2, what="the leader's RSS")
                finally:
                    print(
                        f"\nleader RSS: {before:.1f} MiB before, {peak:.1f} MiB when every fat"
                        f" VM was answered, moved by {seen[-1] if seen else float('nan'):+.1f}"
                        f" MiB ({FAT_VMS} VMs x {LABELS} labels)"
                    )
            finally:
                for name in names:
                    delete_quietly(custom, VM_GROUP, ns, "virtualmachines", name)
                # Gone once the leader released each one's finalizer (it says so).
                eventually(
                    lambda: _told(api_client, ns, "InfrastructureDeleted") >= set(names),
                    timeout=240,
                    interval=1,
                    what="the leader releasing every fat VM",
                )
    finally:
        stop_daemon(proc, log)
