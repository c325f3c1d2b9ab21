"""The cloud-init digest in a domain's metadata is keyed, so it confirms no guess of user-data.

libvirt's read-only socket shows every domain's metadata to anyone on the host. The digest there
was a plain sha256 over the seed's files, all of which but the user-data anyone could rebuild: a
guess of a password in the user-data was confirmed offline. It is now an HMAC keyed with the
VirtualMachine's uid, which libvirt never sees. A domain made before keeps its unkeyed digest while
the seed is unchanged, so the upgrade reports no cloud-init change on running machines.
"""

from __future__ import annotations

import base64
from typing import Any

from libvirt_provider.domainxml import owned_fields
from libvirt_provider.machine.catalog import CatalogReader
from libvirt_provider.resolve.cloudinit import cloud_init_digest, legacy_cloud_init_digest
from libvirt_provider.resolve.machine import resolve_machine
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.reconciling import (
    DOMAIN,
    KEY,
    UID,
    make_hypervisor,
    make_reconciler,
    make_store,
)

BOOT = {"cloudInit": {"userData": {"name": "boot", "key": "user-data"}}}
USER_DATA = b"#cloud-config\npassword: hunter2\n"


def _store() -> MemoryStore:
    store = make_store(bootstrap=BOOT)
    store.secrets["boot"] = {"user-data": base64.b64encode(USER_DATA).decode()}
    return store


def _digest(hv: FakeHypervisor) -> str | None:
    return owned_fields(hv.domains[UID].xml).ownership.cloud_init_digest


def _up_to_date(store: MemoryStore) -> dict[str, Any]:
    conditions = store.machines["web"]["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "UpToDate")


def _seed_of(store: MemoryStore, hv: FakeHypervisor) -> Any:
    vm, machine = store.vms["web"], store.machines["web"]
    resolution = resolve_machine(
        vm_name="web",
        vm_spec=vm["spec"],
        machine=machine,
        catalog=CatalogReader(store).catalog(),
        secrets={"boot": {"user-data": USER_DATA}},
        host=hv.host_facts(),
    )
    assert resolution.machine is not None
    assert resolution.machine.cloud_init is not None
    return resolution.machine.cloud_init


def test_the_domain_carries_a_digest_keyed_with_the_vms_uid() -> None:
    store, hv = _store(), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    seed = _seed_of(store, hv)
    vm_uid = store.vms["web"]["metadata"]["uid"]
    assert _digest(hv) == cloud_init_digest(seed, key=vm_uid)
    assert _digest(hv) != legacy_cloud_init_digest(seed)
    assert vm_uid not in hv.domains[UID].xml


def test_a_domain_with_the_unkeyed_digest_is_not_reported_changed_after_the_upgrade() -> None:
    store, hv = _store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    seed = _seed_of(store, hv)
    keyed = _digest(hv)
    assert keyed is not None
    # As an older daemon wrote it.
    hv.domains[UID].xml = hv.domains[UID].xml.replace(keyed, legacy_cloud_init_digest(seed))
    iso = ("vmapi-lab", f"{DOMAIN}--cidata.iso")
    uploads_before = hv.calls.count("upload_volume")
    reconciler.reconcile(KEY)
    assert _up_to_date(store)["status"] == "True"
    assert hv.calls.count("upload_volume") == uploads_before
    assert b"hunter2" in hv.uploads[iso]
    # A changed seed gets the keyed digest (at the next power cycle, as any seed change).
    store.secrets["boot"] = {"user-data": base64.b64encode(b"#cloud-config\n# v2\n").decode()}
    # Touched, so the pass reads the Secret again instead of reusing its last read.
    store.machines["web"]["metadata"].setdefault("labels", {})["touched"] = "1"
    reconciler.reconcile(KEY)
    up = _up_to_date(store)
    assert (up["status"], up["reason"]) == ("False", "RequiresPowerOff")
