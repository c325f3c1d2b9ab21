"""Which spec changes a running domain takes at once, and the libvirt step for each.

The areas say what differs between the desired domain and the persistent definition, and mark each
difference live or not. This module turns the live ones into concrete steps (a vCPU count, a
balloon target, a device to attach or detach, the ownership metadata, a disk's I/O limits),
choosing by the change's
typed key, and leaves the rest deferred to the next power cycle. It is pure: the reconciler carries
the steps out through the hypervisor adapter, which applies each to the running domain and its
persistent definition alike, so the next comparison sees the change as done.

A device to attach is taken from the desired document itself, so a device attached live is exactly
the element a redefinition would write, and is not drift afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import (
    Change,
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    Setting,
)
from libvirt_provider.domainxml.disks import disk_facts, find_disk, iotune_parameters
from libvirt_provider.domainxml.domain import diff_owned, owned_fields
from libvirt_provider.domainxml.metadata import marker_element
from libvirt_provider.domainxml.nics import find_interface

__all__ = [
    "AttachDevice",
    "DetachDevice",
    "LivePlan",
    "LiveStep",
    "SetBlockIoTune",
    "SetMemory",
    "SetMetadata",
    "SetVcpus",
    "plan_live_update",
]


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


@dataclass(frozen=True)
class SetBlockIoTune:
    """A disk's I/O limits, every libvirt parameter given (0 clears one), for its target."""

    target: str
    parameters: tuple[tuple[str, int | str], ...]


LiveStep = SetVcpus | SetMemory | AttachDevice | DetachDevice | SetMetadata | SetBlockIoTune


@dataclass(frozen=True)
class LivePlan:
    steps: tuple[tuple[Change, LiveStep], ...] = ()
    deferred: tuple[Change, ...] = ()


def plan_live_update(current: str, desired: str) -> LivePlan:
    """Steps that bring a running domain's live and persistent state to `desired` where that can
    be done without a power cycle; `deferred` holds every change that needs one."""
    current_root = etree.fromstring(current)
    desired_root = etree.fromstring(desired)
    diff = diff_owned(owned_fields(desired_root), owned_fields(current_root))
    # The cloud-init digest lives in the same metadata element as the marker and tags; writing
    # that element early would record media the guest has not been given. It waits with them.
    metadata_waits = Setting.CLOUD_INIT_DATA in diff.keys
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
    match change.key:
        case Setting.VCPUS:
            return SetVcpus(int(change.desired))
        case Setting.MEMORY:
            return SetMemory(int(change.desired))
        case Setting.OWNERSHIP_MARKER | Setting.TAGS:
            xml = _xml(marker_element(desired))
            return SetMetadata(xml) if xml is not None else None
        case DeviceEdit(kind=DeviceKind.DISK, action=DeviceAction.IO_LIMITS) as edit:
            return _iotune_step(desired, edit)
        case DeviceEdit(action=DeviceAction.ADDED) as edit:
            xml = _xml(_device(desired, edit))
            return AttachDevice(xml) if xml is not None else None
        case DeviceEdit(action=DeviceAction.REMOVED) as edit:
            xml = _xml(_device(current, edit))
            return DetachDevice(xml) if xml is not None else None
    return None


def _iotune_step(desired: etree._Element, edit: DeviceEdit) -> SetBlockIoTune | None:
    element = find_disk(desired, edit.device)
    if element is None:
        return None
    facts = disk_facts(element)
    if facts.target is None:
        return None
    return SetBlockIoTune(facts.target, tuple(iotune_parameters(facts.iotune).items()))


def _device(root: etree._Element, edit: DeviceEdit) -> etree._Element | None:
    if edit.kind is DeviceKind.DISK:
        return find_disk(root, edit.device)
    return find_interface(root, edit.device)


def _xml(element: etree._Element | None) -> str | None:
    return None if element is None else etree.tostring(element, encoding="unicode", with_tail=False)
