"""NIC MACs carry 46 random bits, and a NIC keeps the MAC its domain already has.

Before, a MAC was qemu's 52:54:00 prefix and 24 bits of a hash: on one network, about 4,800 NICs
gave even odds that two shared a MAC (and then traffic and reported addresses went astray). New
NICs get locally administered unicast MACs with 46 bits of the hash; NICs of domains made before
keep theirs, so no running guest sees a NIC detached and attached again.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from libvirt_provider import naming
from libvirt_provider.driver.types import DomainState
from tests.doubles.hypervisor import FakeHypervisor
from tests.support.reconciling import (
    KEY,
    UID,
    make_hypervisor,
    make_reconciler,
    make_store,
)


def _macs(hv: FakeHypervisor) -> list[str]:
    root = etree.fromstring(hv.domains[UID].xml.encode())
    return [str(m.get("address")) for m in root.iterfind("devices/interface/mac")]


@settings(max_examples=300)
@given(st.text(max_size=40), st.text(max_size=20))
def test_a_new_mac_is_locally_administered_unicast_with_46_bits_of_hash(uid: str, nic: str) -> None:
    mac = naming.mac_address(uid, nic)
    first = int(mac[:2], 16)
    assert first & 0x01 == 0  # unicast
    assert first & 0x02 == 0x02  # locally administered
    assert naming.machine_mac_address(uid, nic, existing=frozenset()) == mac
    assert naming.machine_mac_address(uid, nic, existing={"52:54:00:00:00:01"}) == mac


def test_ten_thousand_nics_get_ten_thousand_macs() -> None:
    # With 24 bits this many NICs collide with a probability of about 95 %; with 46, about 1e-6.
    macs = {naming.mac_address(f"uid-{n}", "default") for n in range(10_000)}
    assert len(macs) == 10_000


def test_a_legacy_mac_is_kept_only_by_the_nic_whose_domain_has_it() -> None:
    legacy = naming.legacy_mac_address(UID, "default")
    assert legacy.startswith("52:54:00:")
    assert naming.machine_mac_address(UID, "default", existing={legacy}) == legacy
    # Another NIC's legacy MAC is not this NIC's.
    other = naming.legacy_mac_address(UID, "eth1")
    assert naming.machine_mac_address(UID, "default", existing={other}) != other


def test_a_running_machine_made_before_keeps_its_mac_and_its_nic() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    new = _macs(hv)[0]
    legacy = naming.legacy_mac_address(UID, "default")
    assert new == naming.mac_address(UID, "default") != legacy
    # As an older daemon defined it: the legacy MAC.
    hv.domains[UID].xml = hv.domains[UID].xml.replace(new, legacy)
    hv.calls.clear()
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING
    assert _macs(hv) == [legacy]
    assert not {"attach_device", "detach_device", "define"} & set(hv.calls)
    hv.give_lease(UID, legacy, "10.0.0.9")
    reconciler.reconcile(KEY)
    assert store.machines["web"]["status"]["addresses"][0]["address"] == "10.0.0.9"
    assert not store.machines["web"]["status"].get("pendingChanges")


def test_a_new_machine_gets_the_new_mac() -> None:
    store, hv = make_store(), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert _macs(hv) == [naming.mac_address(UID, "default")]
