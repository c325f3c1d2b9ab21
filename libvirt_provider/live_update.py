"""Which spec changes a running domain takes at once, and the libvirt step for each.

`domain_parse` says what differs between the desired domain and the persistent definition, and
marks each difference live or not. This module turns the live ones into concrete steps (a vCPU
count, a balloon target, a device to attach or detach, the ownership metadata) and leaves the rest
deferred to the next power cycle. It is pure: the reconciler carries the steps out through the
hypervisor adapter, which applies each to the running domain and its persistent definition alike,
so the next comparison sees the change as done.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.constants import METADATA_NAMESPACE
from libvirt_provider.domainxml import Change, diff_owned, owned_fields

__all__ = [
    "AttachDevice",
    "DetachDevice",
    "LivePlan",
    "LiveStep",
    "SetMemory",
    "SetMetadata",
    "SetVcpus",
    "plan_live_update",
]

_NS = {"vm": METADATA_NAMESPACE}


@dataclass(frozen=True)
class SetVcpus:
    count: int


@dataclass(frozen=True)
class SetMemory:
    kib: int


@dataclass(frozen=True)
class AttachDevice:
    xml: str


@dataclass(frozen=True)
class DetachDevice:
    xml: str


@dataclass(frozen=True)
class SetMetadata:
    """The whole ownership element (marker, tags, cloud-init digest) as the desired XML has it."""

    xml: str


LiveStep = SetVcpus | SetMemory | AttachDevice | DetachDevice | SetMetadata


@dataclass(frozen=True)
class LivePlan:
    steps: tuple[tuple[Change, LiveStep], ...] = ()
    deferred: tuple[Change, ...] = ()


def _device(root: etree._Element, kind: str, key: str) -> str | None:
    """The `<disk>` (by user alias or target) or `<interface>` (by MAC) named by a change key."""
    for element in root.findall(f"devices/{kind}"):
        if kind == "interface":
            mac = element.find("mac")
            found = mac is not None and (mac.get("address") or "").lower() == key
        else:
            alias, target = element.find("alias"), element.find("target")
            found = (alias is not None and alias.get("name") == key) or (
                alias is None and target is not None and target.get("dev") == key
            )
        if found:
            return etree.tostring(element, encoding="unicode", with_tail=False)
    return None


def _metadata(root: etree._Element) -> str | None:
    element = root.find("metadata/vm:machine", _NS)
    return None if element is None else etree.tostring(element, encoding="unicode", with_tail=False)


def plan_live_update(current: str, desired: str) -> LivePlan:
    """Steps that bring a running domain's live and persistent state to `desired` where that can
    be done without a power cycle; `deferred` holds every change that needs one."""
    current_root = etree.fromstring(current)
    desired_root = etree.fromstring(desired)
    have, want = owned_fields(current_root), owned_fields(desired_root)
    diff = diff_owned(want, have)
    # The cloud-init digest lives in the same metadata element as the marker and tags; writing
    # that element early would record media the guest has not been given. It waits with them.
    metadata_waits = want.ownership.cloud_init_digest != have.ownership.cloud_init_digest
    steps: list[tuple[Change, LiveStep]] = []
    deferred: list[Change] = []
    metadata_done = False
    for change in diff.changes:
        step = _step(change, current_root, desired_root) if change.live else None
        if isinstance(step, SetMetadata):
            if metadata_waits:
                step = None
            elif metadata_done:
                continue  # one write carries the marker and the tags together
            else:
                metadata_done = True
        if step is None:
            deferred.append(change)
        else:
            steps.append((change, step))
    return LivePlan(steps=tuple(steps), deferred=tuple(deferred))


def _step(change: Change, current: etree._Element, desired: etree._Element) -> LiveStep | None:
    what = change.what
    if what == "vCPUs":
        return SetVcpus(int(change.desired))
    if what == "memory (KiB)":
        return SetMemory(int(change.desired))
    if what in ("ownership marker", "tags"):
        xml = _metadata(desired)
        return SetMetadata(xml) if xml is not None else None
    for kind, label in (("disk", "disk "), ("interface", "interface ")):
        if not what.startswith(label):
            continue
        key = what[len(label) :]
        if key.endswith(" added"):
            xml = _device(desired, kind, key.removesuffix(" added"))
            return AttachDevice(xml) if xml is not None else None
        if key.endswith(" removed"):
            xml = _device(current, kind, key.removesuffix(" removed"))
            return DetachDevice(xml) if xml is not None else None
    return None
