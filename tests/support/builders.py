"""Unit tests' objects: a valid linked pair (VM spec and LibvirtMachine), a catalog and a host's
facts, each overridable, and the resolver run on them.

Why a module of its own: the resolver, placement, image, hostile-input and reconciler tests all
start from the same valid pair and change one thing; one copy keeps "valid" the same for all of
them, so a test's failure points at the one thing it changed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from catalog.image import LibvirtImage
from catalog.lookup import Catalog
from catalog.machineclass import LibvirtMachineClass
from catalog.network import LibvirtNetwork
from catalog.storage import LibvirtStorageClass
from catalog.volume_attributes import VolumeAttributesClass
from libvirt_provider.constants import VOLUME_ATTRIBUTES_DRIVER
from libvirt_provider.driver.types import HostFacts, NetworkDhcp
from libvirt_provider.resolve import Resolution, SecretData, resolve_machine

UID = "6f1d3c2a-8b4e-4d7a-9c1b-2e3f4a5b6c7d"
SHA = "ab" * 32
HOST = HostFacts(
    hostname="node-1",
    arch="x86_64",
    domain_types=frozenset({"qemu", "kvm"}),
    pools=frozenset({"vmapi-lab", "fast"}),
    networks=frozenset({"vmapi-lab"}),
)


def host(**overrides: Any) -> HostFacts:
    fields: dict[str, Any] = {
        "hostname": HOST.hostname,
        "arch": HOST.arch,
        "domain_types": HOST.domain_types,
        "pools": HOST.pools,
        "networks": HOST.networks,
    }
    fields.update(overrides)
    return HostFacts(**fields)


def ref(kind: str, name: str, group: str = "infrastructure.vm-api.io") -> dict[str, str]:
    return {"apiGroup": group, "kind": kind, "name": name}


def vm_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "infrastructureRef": ref("LibvirtMachine", "web"),
        "instanceType": {"name": "small"},
        "bootDisk": {"source": {"image": ref("LibvirtImage", "tiny")}, "sizeGiB": 2},
    }
    spec.update(copy.deepcopy(overrides))
    return spec


def machine(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    metadata = {"name": "web", "namespace": "default", "uid": UID}
    metadata.update(meta)
    return {"metadata": metadata, "spec": spec or {}}


def image(name: str = "tiny", **spec: Any) -> LibvirtImage:
    body: dict[str, Any] = {"source": {"volume": {"pool": "vmapi-lab", "volume": "guest.qcow2"}}}
    body.update(spec)
    return LibvirtImage.model_validate({"metadata": {"name": name}, "spec": body})


def machine_class(name: str = "small", **spec: Any) -> LibvirtMachineClass:
    body: dict[str, Any] = {"cpus": 1, "memory": "256Mi"}
    body.update(spec)
    return LibvirtMachineClass.model_validate({"metadata": {"name": name}, "spec": body})


def network(name: str = "lab", **spec: Any) -> LibvirtNetwork:
    body: dict[str, Any] = {"source": {"network": "vmapi-lab"}, "default": True}
    body.update(spec)
    return LibvirtNetwork.model_validate({"metadata": {"name": name}, "spec": body})


def storage_class(name: str = "standard", **spec: Any) -> LibvirtStorageClass:
    body: dict[str, Any] = {"pool": "vmapi-lab", "default": True}
    body.update(spec)
    return LibvirtStorageClass.model_validate({"metadata": {"name": name}, "spec": body})


def volume_attributes_class(
    name: str = "slow", driver: str = VOLUME_ATTRIBUTES_DRIVER, **parameters: str
) -> VolumeAttributesClass:
    return VolumeAttributesClass.model_validate(
        {"metadata": {"name": name}, "driverName": driver, "parameters": parameters}
    )


def catalog(**kinds: Any) -> Catalog:
    defaults: dict[str, Any] = {
        "images": [image()],
        "machine_classes": [machine_class()],
        "networks": [network()],
        "storage_classes": [storage_class()],
    }
    defaults.update(kinds)
    return Catalog.of(**defaults)


# -- the resolver on them -------------------------------------------------------------------------


def resolve(
    *,
    vm: dict[str, Any] | None = None,
    lm: dict[str, Any] | None = None,
    secrets: SecretData | None = None,
    unreadable: frozenset[str] = frozenset(),
    public_addresses: Mapping[str, str] | None = None,
    network_dhcp: Mapping[str, NetworkDhcp | None] | None = None,
    **kinds: Any,
) -> Resolution:
    """The valid pair (or `vm`, `lm`) resolved against the catalog (its kinds overridable by
    `images=`, `networks=`, ...) on the host (`host=`), with the public addresses the machine
    holds and the host's DHCP when given."""
    return resolve_machine(
        vm_name="web",
        vm_spec=vm if vm is not None else vm_spec(),
        machine=lm if lm is not None else machine(),
        catalog=catalog(**{k: v for k, v in kinds.items() if k != "host"}),
        secrets=secrets or {},
        host=kinds.get("host", HOST),
        unreadable_secrets=unreadable,
        public_addresses=public_addresses,
        network_dhcp=network_dhcp,
    )


def only_problem(resolution: Resolution) -> tuple[str, str, str]:
    """The one problem of a resolution that failed: reason, field, message."""
    assert resolution.machine is None
    assert len(resolution.problems) == 1, resolution.message()
    problem = resolution.problems[0]
    return problem.reason, problem.field, problem.message
