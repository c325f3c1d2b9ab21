"""Deletion works from what passes recorded: kept disks stay even when the catalog is gone."""

from __future__ import annotations

from typing import Any

from generic.workqueue import Outcome
from tests.doubles.store import MemoryStore
from tests.support.reconciling import (
    DOMAIN,
    KEY,
    make_hypervisor,
    make_reconciler,
    make_store,
    owned_volumes,
)

KEPT = f"{DOMAIN}--data-keep.qcow2"


def _with_a_kept_disk() -> MemoryStore:
    disks: list[dict[str, Any]] = [
        {"name": "keep", "source": {"blank": True}, "sizeGiB": 1, "deleteOnTermination": False},
        {"name": "scratch", "source": {"blank": True}, "sizeGiB": 1},
    ]
    return make_store(disks=disks)


def test_a_kept_disk_survives_deletion_after_the_image_and_vm_are_gone() -> None:
    store, hv = _with_a_kept_disk(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    assert KEPT in owned_volumes(hv)
    assert store.machines["web"]["status"]["retainedVolumes"] == [f"vmapi-lab/{KEPT}"]
    # A namespace being deleted: the catalog image and the VM can go before the machine.
    store.catalog["libvirtimages"] = []
    store.vms.clear()
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconciler.reconcile(KEY) == Outcome()
    assert "web" not in store.machines
    assert owned_volumes(hv) == [KEPT]


def test_a_machine_the_models_refuse_is_still_deleted() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    # Refused by the model: an older CRD without the quantity pattern let this through.
    store.machines["web"]["spec"]["hotplug"] = {"maxMemory": "lots"}
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconciler.reconcile(KEY) == Outcome()
    assert "web" not in store.machines
    assert owned_volumes(hv) == []
