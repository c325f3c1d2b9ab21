"""Reads from watch-fed copies: the rule that a domain is created, and anything removed, only
after the machine was read from the API server and found unchanged; and the copies' ordering."""

from __future__ import annotations

import copy
from typing import Any

from generic.adapters.copies import Copies
from tests.doubles.store import MemoryStore
from tests.support.reconciling import KEY, UID, make_hypervisor, make_reconciler, make_store

Obj = dict[str, Any]


class LaggingCopies(MemoryStore):
    """A store whose watch-fed copy of the machine is one version behind the API server's."""

    lagging: Obj | None = None

    def get_machine(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        if not fresh and self.lagging is not None:
            return copy.deepcopy(self.lagging)
        return super().get_machine(namespace, name, fresh=fresh)


def _lagging(**vm_spec: Any) -> LaggingCopies:
    base = make_store(**vm_spec)
    store = LaggingCopies(machines=base.machines, vms=base.vms, catalog=base.catalog)
    store.lagging = copy.deepcopy(store.machines["web"])
    store.machines["web"]["metadata"]["resourceVersion"] = "2"
    return store


def test_no_domain_is_created_from_a_copy_that_is_behind() -> None:
    store, hv = _lagging(), make_hypervisor()
    outcome = make_reconciler(store, hv).reconcile(KEY)
    assert outcome.immediately
    assert UID not in hv.domains
    assert store.fresh_reads == 1
    # Once the copy has caught up, the same pass builds the machine.
    store.lagging = None
    make_reconciler(store, hv).reconcile(KEY)
    assert UID in hv.domains


def test_nothing_is_removed_from_a_copy_that_is_behind() -> None:
    store, hv = make_store(), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert UID in hv.domains
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    lagging = LaggingCopies(machines=store.machines, vms=store.vms, catalog=store.catalog)
    lagging.lagging = copy.deepcopy(store.machines["web"])
    store.machines["web"]["metadata"]["resourceVersion"] = "7"
    make_reconciler(lagging, hv).reconcile(KEY)
    assert UID in hv.domains
    lagging.lagging = None
    make_reconciler(lagging, hv).reconcile(KEY)
    assert UID not in hv.domains


def test_a_pass_on_an_existing_domain_reads_nothing_fresh() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    before = store.fresh_reads
    for _ in range(3):
        reconciler.reconcile(KEY)
    assert store.fresh_reads == before


def _obj(version: str, marker: str) -> Obj:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "m",
            "resourceVersion": version,
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"marker": marker},
    }


def test_copies_move_only_forward_and_are_not_shared() -> None:
    copies = Copies()
    copies.put(_obj("5", "written"))
    copies.put(_obj("4", "late event"))
    held = copies.get("ns", "m")
    assert held is not None
    assert held["spec"]["marker"] == "written"
    assert "managedFields" not in held["metadata"]
    held["spec"]["marker"] = "changed by a reader"
    again = copies.get("ns", "m")
    assert again is not None
    assert again["spec"]["marker"] == "written"
    copies.put(_obj("6", "newer"))
    newest = copies.get("ns", "m")
    assert newest is not None
    assert newest["spec"]["marker"] == "newer"
    copies.drop("ns", "m")
    assert copies.get("ns", "m") is None
    assert len(copies) == 0
