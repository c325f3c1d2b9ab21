"""The machine reconciler over the in-memory doubles: a store holding the linked pair `web` (with
the catalog it needs), a hypervisor holding its image, the reconciler between them.

Why a module of its own: the reconciler's sequencing tests, its backoff and read-copy tests and the
security tests (names, kept disks, Secrets, a relabelled host) all start from this one world and
change one thing in it.
"""

from __future__ import annotations

from typing import Any

from libvirt_provider import naming
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import HOST, UID, ref

Obj = dict[str, Any]
NS = "default"
HOST_LABEL = "infrastructure.vm-api.io/host"
FINALIZER = "infrastructure.vm-api.io/libvirt-machine"
DOMAIN = naming.domain_name(NS, "web", UID)


def make_store(**vm_spec: Any) -> MemoryStore:
    """The linked pair `web` on HOST, its VM spec overridden by `vm_spec`, and its catalog."""
    store = MemoryStore()
    store.machines["web"] = {
        "apiVersion": "infrastructure.vm-api.io/v1alpha1",
        "kind": "LibvirtMachine",
        "metadata": {
            "name": "web",
            "namespace": NS,
            "uid": UID,
            "resourceVersion": "1",
            "generation": 1,
            "labels": {HOST_LABEL: HOST.hostname},
            "annotations": {"vm-api.io/virtual-machine": "web"},
            "finalizers": [FINALIZER],
        },
        "spec": {"host": HOST.hostname},
    }
    spec: Obj = {
        "infrastructureRef": ref("LibvirtMachine", "web"),
        "instanceType": {"name": "small"},
        "bootDisk": {"source": {"image": ref("LibvirtImage", "tiny")}, "sizeGiB": 1},
    }
    spec.update(vm_spec)
    store.vms["web"] = {
        "apiVersion": "vm-api.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": "web", "namespace": NS, "uid": "vm-uid"},
        "spec": spec,
    }
    store.catalog = {
        "libvirtimages": [
            {
                "metadata": {"name": "tiny"},
                "spec": {"source": {"volume": {"pool": "vmapi-lab", "volume": "guest.qcow2"}}},
            }
        ],
        "libvirtmachineclasses": [
            {"metadata": {"name": "small"}, "spec": {"cpus": 1, "memory": "256Mi"}}
        ],
        "libvirtnetworks": [
            {
                "metadata": {"name": "lab"},
                "spec": {"source": {"network": "vmapi-lab"}, "default": True},
            }
        ],
        "libvirtstorageclasses": [
            {"metadata": {"name": "lab"}, "spec": {"pool": "vmapi-lab", "default": True}}
        ],
    }
    return store


def make_hypervisor() -> FakeHypervisor:
    """HOST's hypervisor with the catalog image's volume in its pool."""
    hv = FakeHypervisor(facts=HOST)
    hv.add_volume("vmapi-lab", "guest.qcow2", capacity_bytes=1 << 28)
    return hv


def make_reconciler(store: MemoryStore, hv: FakeHypervisor) -> MachineReconciler:
    return MachineReconciler(store=store, hypervisor=hv, host=HOST.hostname)


KEY = MachineKey(NS, "web")


def owned_volumes(hv: FakeHypervisor) -> list[str]:
    return sorted(name for (_, name) in hv.volumes if name.startswith(f"{DOMAIN}--"))
