"""Names derive from the machine's identity (its uid), and teardown removes only what it owns.

Before, a domain name was a 32-bit hash of namespace and name: two tenants' machines could share
one, the second machine's deletion removed every volume named after it, and a machine made again
under an old name silently got the disks its predecessor kept. Machines created with such names
keep them across the upgrade, and their teardown trusts only their own domain definition.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libvirt_provider import naming
from libvirt_provider.driver.types import DomainState
from libvirt_provider.machine.reconciler import MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.reconciling import DOMAIN, KEY, NS, UID, make_hypervisor, make_store

LEGACY = naming.legacy_domain_name(NS, "web")

IDENTITY = st.tuples(st.text(max_size=70), st.text(max_size=260), st.text(max_size=40))


@settings(max_examples=300)
@given(IDENTITY, IDENTITY)
def test_distinct_machines_never_share_a_domain_or_volume_name(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    if a == b:
        return
    assert naming.domain_name(*a) != naming.domain_name(*b)
    boot_a = naming.volume_name(naming.domain_name(*a), "boot", extension="qcow2")
    boot_b = naming.volume_name(naming.domain_name(*b), "boot", extension="qcow2")
    assert boot_a != boot_b


def test_a_machine_made_again_under_the_same_name_gets_a_name_of_its_own() -> None:
    first = naming.domain_name(NS, "web", "11111111-1111-4111-8111-111111111111")
    again = naming.domain_name(NS, "web", "22222222-2222-4222-8222-222222222222")
    assert first != again
    assert first.startswith(f"{NS}_web-")
    assert again.startswith(f"{NS}_web-")
    assert naming.is_machine_volume(f"{first}--boot.qcow2")
    assert naming.is_machine_volume(f"{LEGACY}--boot.qcow2")


def test_only_the_legacy_name_is_taken_from_the_status() -> None:
    uid = UID
    assert naming.machine_domain_name(NS, "web", uid, recorded=None) == DOMAIN
    assert naming.machine_domain_name(NS, "web", uid, recorded=LEGACY) == LEGACY
    # A status is not proof: another machine's name written there is ignored.
    other = naming.domain_name("tenant-b", "db", "5c0ffee5-0000-4000-8000-00000000000b")
    assert naming.machine_domain_name(NS, "web", uid, recorded=other) == DOMAIN


def _legacy_machine() -> tuple[MemoryStore, FakeHypervisor, MachineReconciler]:
    """A machine built by a daemon from before names carried the uid, and its status."""
    store, hv = make_store(), make_hypervisor()
    reconciler = MachineReconciler(store=store, hypervisor=hv, host="node-1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(naming, "domain_name", lambda namespace, name, uid: LEGACY)
        reconciler.reconcile(KEY)
    assert hv.domains[UID].name == LEGACY
    return store, hv, reconciler


def _settle(reconciler: MachineReconciler, hv: FakeHypervisor) -> None:
    for _ in range(5):
        reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING


@pytest.mark.parametrize("status_kept", [True, False], ids=["recorded", "status-lost"])
def test_a_legacy_machine_keeps_its_domain_and_volumes_across_the_upgrade(
    status_kept: bool,
) -> None:
    store, hv, reconciler = _legacy_machine()
    volumes_before = sorted(hv.volumes)
    if not status_kept:
        del store.machines["web"]["status"]["providerMetadata"]
    _settle(reconciler, hv)
    assert list(hv.domains) == [UID]
    assert hv.domains[UID].name == LEGACY
    assert sorted(hv.volumes) == volumes_before
    status = store.machines["web"]["status"]
    assert status["providerMetadata"]["domainName"] == LEGACY
    assert not status.get("pendingChanges")


def test_a_legacy_machines_teardown_spares_a_volume_its_definition_does_not_name() -> None:
    store, hv, reconciler = _legacy_machine()
    # Another tenant's machine whose legacy name collides with this one's, and its disk.
    hv.add_volume("vmapi-lab", f"{LEGACY}--data-theirs.qcow2", capacity_bytes=1 << 20)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert "web" not in store.machines
    assert UID not in hv.domains
    assert sorted(name for _, name in hv.volumes if name.startswith(LEGACY)) == [
        f"{LEGACY}--data-theirs.qcow2"
    ]


def test_a_volume_named_after_another_identity_is_never_removed() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = MachineReconciler(store=store, hypervisor=hv, host="node-1")
    reconciler.reconcile(KEY)
    stranger = naming.domain_name(NS, "web", "99999999-9999-4999-8999-999999999999")
    hv.add_volume("vmapi-lab", f"{stranger}--boot.qcow2", capacity_bytes=1 << 20)
    # What an interrupted creation left before the domain was defined: named after this
    # machine's identity, so it is this machine's even though no definition names it.
    hv.add_volume("vmapi-lab", f"{DOMAIN}--data-orphan.raw", capacity_bytes=1 << 20)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert "web" not in store.machines
    left = sorted(name for _, name in hv.volumes if name != "guest.qcow2")
    assert left == [f"{stranger}--boot.qcow2"]


def test_a_teardown_interrupted_before_undefine_finishes_when_run_again() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = MachineReconciler(store=store, hypervisor=hv, host="node-1")
    reconciler.reconcile(KEY)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    hv.delete_volume("vmapi-lab", f"{DOMAIN}--boot.qcow2")  # the first run got this far
    hv.destroy(UID)
    reconciler.reconcile(KEY)
    assert "web" not in store.machines
    assert UID not in hv.domains


def test_a_kept_disk_is_not_attached_to_a_new_machine_of_the_same_name() -> None:
    disks = [
        {"name": "keep", "source": {"blank": True}, "sizeGiB": 1, "deleteOnTermination": False}
    ]
    store, hv = make_store(disks=disks), make_hypervisor()
    reconciler = MachineReconciler(store=store, hypervisor=hv, host="node-1")
    reconciler.reconcile(KEY)
    kept = f"{DOMAIN}--data-keep.qcow2"
    machine = store.machines["web"]
    machine["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert ("vmapi-lab", kept) in hv.volumes
    # Someone makes a machine of the same name again (a new object: a new uid).
    new_uid = "77777777-7777-4777-8777-777777777777"
    store.machines["web"] = {
        **machine,
        "metadata": {
            k: v for k, v in machine["metadata"].items() if k not in ("deletionTimestamp",)
        }
        | {"uid": new_uid},
    }
    store.machines["web"].pop("status", None)
    for _ in range(3):  # the finalizer first, then the domain
        reconciler.reconcile(KEY)
    assert new_uid in hv.domains
    assert kept not in hv.domains[new_uid].xml
    fresh = naming.domain_name(NS, "web", new_uid)
    assert f"{fresh}--data-keep.qcow2" in hv.domains[new_uid].xml
    assert ("vmapi-lab", kept) in hv.volumes
