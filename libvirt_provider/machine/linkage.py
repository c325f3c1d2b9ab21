"""Whether a LibvirtMachine and a VirtualMachine name each other: the provider's side of adoption.

The controller touches no platform resource for a LibvirtMachine until this says `linked`. A
reference alone is not enough: the LibvirtMachine must carry the backlink annotation naming the VM,
the VM's `spec.infrastructureRef` must name this LibvirtMachine's group, kind and name, both live in
one namespace (the VM is looked up in the machine's namespace, never elsewhere), and if the machine
already has a controller owner it must be that VM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generic import constants as vmapi
from libvirt_provider import constants as c

__all__ = ["Link", "check_link"]


@dataclass(frozen=True)
class Link:
    linked: bool
    vm_name: str | None
    reason: str | None = None
    message: str | None = None


def check_link(machine: dict[str, Any], vm: dict[str, Any] | None) -> Link:
    """Decide from the two objects as read; `vm` is None when the backlinked VM does not exist."""
    meta = machine.get("metadata") or {}
    name = meta.get("name")
    annotations = meta.get("annotations") or {}
    vm_name = annotations.get(vmapi.LINK_ANNOTATION)
    if not vm_name:
        return Link(
            False,
            None,
            c.REASON_NOT_LINKED,
            f"annotation {vmapi.LINK_ANNOTATION} is missing: it must name the VirtualMachine "
            "that uses this LibvirtMachine (in the same namespace)",
        )
    if vm is None:
        return Link(
            False,
            vm_name,
            c.REASON_VIRTUAL_MACHINE_NOT_FOUND,
            f"VirtualMachine {vm_name!r} named by annotation {vmapi.LINK_ANNOTATION} does not "
            f"exist in namespace {meta.get('namespace')!r}",
        )
    ref = (vm.get("spec") or {}).get("infrastructureRef") or {}
    wanted = {"apiGroup": c.GROUP, "kind": c.MACHINE_KIND, "name": name}
    actual = {k: ref.get(k) for k in wanted}
    if actual != wanted:
        return Link(
            False,
            vm_name,
            c.REASON_LINK_MISMATCH,
            f"VirtualMachine {vm_name!r} refers to {actual.get('kind')} "
            f"{actual.get('apiGroup')}/{actual.get('name')}, not to this LibvirtMachine",
        )
    vm_uid = (vm.get("metadata") or {}).get("uid")
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller") and owner.get("uid") != vm_uid:
            return Link(
                False,
                vm_name,
                c.REASON_OWNED_BY_ANOTHER,
                f"this LibvirtMachine is controlled by {owner.get('kind')} {owner.get('name')!r} "
                f"(uid {owner.get('uid')}), not by VirtualMachine {vm_name!r}",
            )
    return Link(True, vm_name)
