"""Each disk's VolumeAttributesClass in the LibvirtMachine's status (pure).

Modelled on a PersistentVolumeClaim's `currentVolumeAttributesClassName` and `modifyVolumeStatus`:
`current` is the class whose limits the disk has now, and a change not applied yet says what it
is waiting for. A class the resolver cannot honour fails the whole resolution (nothing is applied,
so no disk gets half a change): its disks stay on their current class and say `Infeasible`, with
the resolver's message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from libvirt_provider import constants as c

__all__ = ["BOOT_DISK", "applied_disks", "disk_status_name", "infeasible_disks"]

BOOT_DISK = "bootDisk"
"""The boot disk's name in status.disks: the VM's field name, which no data disk name can spell
(they are DNS labels)."""

_FIELD = re.compile(
    r"^VirtualMachine\.spec\.(?:(?P<boot>bootDisk)|disks\[(?P<disk>[^\]]+)\])"
    r"\.volumeAttributesClassName$"
)


def disk_status_name(device: str) -> str:
    """The status name of a resolved disk (`boot`, `data-<name>`)."""
    return BOOT_DISK if device == "boot" else device.removeprefix("data-")


def _by_name(current: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(d.get("name")): d for d in current or () if isinstance(d, Mapping)}


def applied_disks(
    current: Sequence[Mapping[str, Any]] | None,
    classes: Iterable[tuple[str, str | None]],
    pending: AbstractSet[str],
) -> list[dict[str, Any]]:
    """After a pass that brought the domain up to date: each disk (resolved device name, class)
    on its class, except those in `pending` (device names whose new limits wait for the
    machine), which keep their current class and say Pending."""
    before = _by_name(current)
    disks: list[dict[str, Any]] = []
    for device, class_name in classes:
        name = disk_status_name(device)
        entry: dict[str, Any] = {"name": name}
        if device in pending:
            previous = before.get(name, {}).get("currentVolumeAttributesClassName")
            if previous is not None:
                entry["currentVolumeAttributesClassName"] = previous
            entry["modifyVolumeStatus"] = _modify(class_name, c.MODIFY_VOLUME_PENDING, None)
        elif class_name is not None:
            entry["currentVolumeAttributesClassName"] = class_name
        disks.append(entry)
    return disks


def infeasible_disks(
    current: Sequence[Mapping[str, Any]] | None,
    problems: Iterable[tuple[str, str]],
    vm_spec: Mapping[str, Any],
) -> list[dict[str, Any]] | None:
    """After a resolution that failed with `problems` (field, message): the disks as they were,
    those whose class is a problem marked Infeasible; None when no problem is about a class (the
    status stays as it was)."""
    messages: dict[str, list[str]] = {}
    for field, message in problems:
        match = _FIELD.match(field)
        if match is not None:
            messages.setdefault(BOOT_DISK if match["boot"] else match["disk"], []).append(message)
    if not messages:
        return None
    targets = _classes_asked(vm_spec)
    disks = {name: dict(entry) for name, entry in _by_name(current).items()}
    for name, said in messages.items():
        entry = disks.setdefault(name, {"name": name})
        entry["modifyVolumeStatus"] = _modify(
            targets.get(name), c.MODIFY_VOLUME_INFEASIBLE, "; ".join(said)[:1024]
        )
    return [disks[name] for name in sorted(disks, key=lambda n: (n != BOOT_DISK, n))]


def _classes_asked(vm_spec: Mapping[str, Any]) -> dict[str, str | None]:
    asked: dict[str, str | None] = {}
    boot = vm_spec.get("bootDisk")
    if isinstance(boot, Mapping):
        asked[BOOT_DISK] = boot.get("volumeAttributesClassName")
    for disk in vm_spec.get("disks") or ():
        if isinstance(disk, Mapping) and disk.get("name"):
            asked[str(disk["name"])] = disk.get("volumeAttributesClassName")
    return asked


def _modify(target: str | None, status: str, message: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {"status": status}
    if target is not None:
        found["targetVolumeAttributesClassName"] = target
    if message:
        found["message"] = message
    return found
