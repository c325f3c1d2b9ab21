"""Relabelling a running machine's host never builds a second domain, nor deletes the first."""

from __future__ import annotations

from libvirt_provider.constants import FINALIZER, REASON_HOST_CHANGED
from tests.doubles.store import MemoryStore
from tests.support.reconciling import KEY, UID, make_hypervisor, make_reconciler, make_store


def _created_elsewhere() -> MemoryStore:
    store = make_store()
    store.machines["web"]["status"] = {
        "providerID": f"libvirt://node-0/{UID}",
        "providerMetadata": {"host": "node-0", "domainName": "d", "domainUUID": UID},
        "powerState": "PoweredOn",
    }
    return store


def test_a_machine_relabelled_to_this_host_is_reported_never_built() -> None:
    store, hv = _created_elsewhere(), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains == {}
    assert "define" not in hv.calls
    status = store.machines["web"]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "InfrastructureReady")
    assert ready["reason"] == REASON_HOST_CHANGED
    assert "node-0" in ready["message"]
    # The status still says where the machine runs, so every later pass refuses too.
    assert status["providerID"] == f"libvirt://node-0/{UID}"
    assert any(r == REASON_HOST_CHANGED for _, r, _ in store.events)


def test_deleting_it_here_keeps_the_finalizer() -> None:
    store, hv = _created_elsewhere(), make_hypervisor()
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    make_reconciler(store, hv).reconcile(KEY)
    assert store.machines["web"]["metadata"]["finalizers"] == [FINALIZER]
    assert "undefine" not in hv.calls
