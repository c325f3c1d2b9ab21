"""A reconcile pass over a machine whose data disk names a VolumeAttributesClass: limits applied
live on a class change, an unhonoured class changing nothing, and what status says of each."""

from __future__ import annotations

from typing import Any

from lxml import etree

from libvirt_provider.constants import VOLUME_ATTRIBUTES_CLASS_PLURAL, VOLUME_ATTRIBUTES_DRIVER
from libvirt_provider.driver.types import DomainState
from libvirt_provider.errors import PermanentError
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import UID
from tests.support.reconciling import KEY, make_hypervisor, make_reconciler, make_store

MI = 2**20


def _vac(name: str, **parameters: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "driverName": VOLUME_ATTRIBUTES_DRIVER,
        "parameters": parameters,
    }


def _disks(class_name: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "data",
            "source": {"blank": True},
            "sizeGiB": 1,
            "volumeAttributesClassName": class_name,
        }
    ]


def _running() -> tuple[MemoryStore, FakeHypervisor]:
    store, hv = make_store(disks=_disks("slow")), make_hypervisor()
    store.catalog[VOLUME_ATTRIBUTES_CLASS_PLURAL] = [
        _vac("slow", readBytesPerSecond="10Mi"),
        _vac("fast", readBytesPerSecond="100Mi"),
        _vac("broken", readBytesPerSecond="-1"),
    ]
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING
    hv.calls.clear()
    return store, hv


def _limit(hv: FakeHypervisor) -> int:
    root = etree.fromstring(hv.domains[UID].xml.encode())
    return int(root.findall("devices/disk")[1].findtext("iotune/read_bytes_sec") or 0)


def _condition(store: MemoryStore, kind: str) -> dict[str, Any]:
    conditions = store.machines["web"]["status"]["conditions"]
    found: dict[str, Any] = next(c for c in conditions if c["type"] == kind)
    return found


def _data(store: MemoryStore) -> dict[str, Any]:
    found: dict[str, Any] = store.machines["web"]["status"]["disks"][1]
    return found


def test_the_class_is_rendered_and_reported_at_creation() -> None:
    store, hv = _running()
    assert _limit(hv) == 10 * MI
    assert _data(store) == {"name": "data", "currentVolumeAttributesClassName": "slow"}
    assert store.machines["web"]["status"]["disks"][0] == {"name": "bootDisk"}


def test_another_class_is_applied_live() -> None:
    store, hv = _running()
    store.vms["web"]["spec"]["disks"] = _disks("fast")
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.calls.count("set_block_io_tune") == 1
    assert "define" not in hv.calls
    assert _limit(hv) == 100 * MI
    assert _condition(store, "UpToDate")["status"] == "True"
    assert _data(store) == {"name": "data", "currentVolumeAttributesClassName": "fast"}
    assert any(
        r == "UpdatedLive" and "disk ua-disk-data-data I/O limits" in m for _, r, m in store.events
    )
    hv.calls.clear()
    make_reconciler(store, hv).reconcile(KEY)  # what libvirt wrote back is no drift
    assert "set_block_io_tune" not in hv.calls


def test_an_unhonoured_class_changes_nothing_and_says_why() -> None:
    store, hv = _running()
    store.vms["web"]["spec"]["disks"] = _disks("broken")
    make_reconciler(store, hv).reconcile(KEY)
    assert "set_block_io_tune" not in hv.calls
    assert "define" not in hv.calls
    assert _limit(hv) == 10 * MI
    assert hv.domains[UID].state is DomainState.RUNNING
    ready = _condition(store, "InfrastructureReady")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "VolumeAttributesClass 'broken' parameter readBytesPerSecond" in ready["message"]
    data = _data(store)
    assert data["currentVolumeAttributesClassName"] == "slow"
    assert data["modifyVolumeStatus"]["status"] == "Infeasible"
    assert data["modifyVolumeStatus"]["targetVolumeAttributesClassName"] == "broken"
    assert any(r == "InvalidSpec" for _, r, _ in store.events)


def test_an_unknown_class_is_infeasible_too() -> None:
    store, hv = _running()
    store.vms["web"]["spec"]["disks"] = _disks("gold")
    make_reconciler(store, hv).reconcile(KEY)
    assert _condition(store, "InfrastructureReady")["reason"] == "ReferenceNotFound"
    assert _data(store)["modifyVolumeStatus"]["status"] == "Infeasible"
    assert _limit(hv) == 10 * MI


def test_limits_libvirt_refuses_live_are_pending_on_the_old_class() -> None:
    store, hv = _running()
    store.vms["web"]["spec"]["disks"] = _disks("fast")
    hv.fail_next("set_block_io_tune", PermanentError("unsupported on this disk"))
    make_reconciler(store, hv).reconcile(KEY)
    assert _limit(hv) == 10 * MI
    data = _data(store)
    assert data["currentVolumeAttributesClassName"] == "slow"
    assert data["modifyVolumeStatus"] == {
        "status": "Pending",
        "targetVolumeAttributesClassName": "fast",
    }
    assert any(r == "LiveUpdateFailed" for _, r, _ in store.events)


def test_a_machine_powered_off_takes_the_new_class_with_its_definition() -> None:
    store, hv = _running()
    hv.domains[UID].state = DomainState.SHUTOFF
    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    store.vms["web"]["spec"]["disks"] = _disks("fast")
    make_reconciler(store, hv).reconcile(KEY)
    assert "define" in hv.calls
    assert _limit(hv) == 100 * MI
    assert _data(store) == {"name": "data", "currentVolumeAttributesClassName": "fast"}
