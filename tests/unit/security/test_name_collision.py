"""Two machines whose names collide: deleting the second never touches the first's volumes.

Domain names are readable parts plus a hash; a collision was found by brute force across
namespaces. The second machine then sees `ForeignDomain`, and its deletion used to remove every
`<domain>--*` volume in every pool: the first machine's boot, data (kept ones too) and
cloud-init volumes.
"""

from __future__ import annotations

from libvirt_provider.constants import REASON_FOREIGN_DOMAIN
from libvirt_provider.machine.reconciler import MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.support.reconciling import DOMAIN, KEY, UID, make_hypervisor, make_store

OTHER_UUID = "0b9e2f4c-1111-4c4c-8888-222233334444"


def _occupied_by_another_tenant() -> FakeHypervisor:
    """The first tenant's machine holds the name our machine derives, with its volumes."""
    hv = make_hypervisor()
    hv.define(f"<domain><name>{DOMAIN}</name><uuid>{OTHER_UUID}</uuid></domain>")
    for role in ("boot.qcow2", "data-keep.qcow2", "cidata.iso"):
        hv.add_volume("vmapi-lab", f"{DOMAIN}--{role}", capacity_bytes=1 << 20)
    return hv


def test_the_second_machine_is_reported_and_builds_nothing() -> None:
    store, hv = make_store(), _occupied_by_another_tenant()
    MachineReconciler(store=store, hypervisor=hv, host="node-1").reconcile(KEY)
    assert UID not in hv.domains
    status = store.machines["web"]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "InfrastructureReady")
    assert ready["reason"] == REASON_FOREIGN_DOMAIN


def test_deleting_the_second_machine_leaves_the_first_ones_domain_and_volumes() -> None:
    store, hv = make_store(), _occupied_by_another_tenant()
    reconciler = MachineReconciler(store=store, hypervisor=hv, host="node-1")
    reconciler.reconcile(KEY)
    before = sorted(hv.volumes)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert sorted(hv.volumes) == before
    assert OTHER_UUID in hv.domains
    assert "web" not in store.machines  # its own deletion completes: it owned nothing here
    assert any(r == "NothingRemoved" for _, r, _ in store.events)
