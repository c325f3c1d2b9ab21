"""What differs between a desired and an observed domain, each difference named by a typed key.

Every area of the document compares its own fields and reports each difference as a `Change` whose
key is a `Setting` (a single-valued field) or a `DeviceEdit` (a disk or interface changed, added or
removed). Code dispatches on the key (the live-update planner does); people read the label derived
from it in status.pendingChanges and in Events. The label text is observable behaviour (users and
the end-to-end tests read it), so it changes only on purpose.

Changes are reported in one order whichever area found them: the order in which `Setting` lists
its members, then disks, then interfaces, each by key.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "Change",
    "ChangeKey",
    "Compared",
    "DeviceAction",
    "DeviceEdit",
    "DeviceKind",
    "DomainDiff",
    "Setting",
    "compare",
    "compare_devices",
]

Facts = TypeVar("Facts")
Device = TypeVar("Device")


class Setting(enum.Enum):
    """A single-valued field the provider owns; the value is its label, the order the report's."""

    DOMAIN_NAME = "domain name"
    UUID = "UUID"
    DOMAIN_TYPE = "domain type"
    VCPU_SLOTS = "vCPU slots"
    CPU_MODE = "CPU mode"
    CPU_MODEL = "CPU model"
    CPU_TOPOLOGY = "CPU topology"
    MEMORY_CEILING = "memory ceiling (KiB)"
    HUGE_PAGES = "huge pages (KiB)"
    ARCHITECTURE = "architecture"
    FIRMWARE = "firmware"
    SECURE_BOOT = "secure boot"
    SYSTEM_MANAGEMENT_MODE = "system management mode"
    SERIAL_CONSOLE = "serial console"
    SERIAL_CONSOLE_LOG = "serial console log"
    GRAPHICS = "graphics"
    GUEST_AGENT = "guest agent channel"
    CLOUD_INIT_DATA = "cloud-init data"
    OWNERSHIP_MARKER = "ownership marker"
    TAGS = "tags"
    MACHINE_TYPE = "machine type"
    VCPUS = "vCPUs"
    MEMORY = "memory (KiB)"
    CLOUD_INIT_MEDIA = "cloud-init media"

    def __str__(self) -> str:
        return self.value


class DeviceKind(enum.Enum):
    DISK = "disk"
    INTERFACE = "interface"


class DeviceAction(enum.Enum):
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"
    # A disk's `<iotune>` (its VolumeAttributesClass), changed on the running domain.
    IO_LIMITS = "I/O limits"


@dataclass(frozen=True)
class DeviceEdit:
    """A disk (keyed by its user alias, else its target) or an interface (keyed by its MAC)."""

    kind: DeviceKind
    device: str
    action: DeviceAction

    def __str__(self) -> str:
        named = f"{self.kind.value} {self.device}"
        return named if self.action is DeviceAction.CHANGED else f"{named} {self.action.value}"


ChangeKey = Setting | DeviceEdit

# Derived from Secret data (the cloud-init digest): reported as changed, never with the values.
_REDACTED: frozenset[ChangeKey] = frozenset({Setting.CLOUD_INIT_DATA})


@dataclass(frozen=True)
class Change:
    """One owned field that differs; `live` when it can be applied to a running domain."""

    key: ChangeKey
    desired: Any
    observed: Any
    live: bool

    @property
    def what(self) -> str:
        """The label status and Events show for this change."""
        return str(self.key)

    @property
    def redacted(self) -> bool:
        return self.key in _REDACTED

    def __str__(self) -> str:
        if self.redacted:
            return f"{self.what} changed"
        return f"{self.what}: {self.observed!r} -> {self.desired!r}"


_SETTING_RANK = {setting: rank for rank, setting in enumerate(Setting)}
_DEVICE_RANK = {kind: len(Setting) + rank for rank, kind in enumerate(DeviceKind)}


def _report_order(change: Change) -> tuple[int, str]:
    key = change.key
    if isinstance(key, Setting):
        return _SETTING_RANK[key], ""
    return _DEVICE_RANK[key.kind], key.device


@dataclass(frozen=True)
class DomainDiff:
    changes: tuple[Change, ...] = ()

    @classmethod
    def of(cls, changes: Iterable[Change]) -> DomainDiff:
        """The changes the areas found, in report order."""
        return cls(tuple(sorted(changes, key=_report_order)))

    @property
    def up_to_date(self) -> bool:
        return not self.changes

    @property
    def needs_power_off(self) -> bool:
        return any(not c.live for c in self.changes)

    @property
    def live(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.live)

    @property
    def keys(self) -> frozenset[ChangeKey]:
        return frozenset(c.key for c in self.changes)

    def describe(self) -> list[str]:
        return [str(c) for c in self.changes]


@dataclass(frozen=True)
class Compared(Generic[Facts]):
    """One field of an area's facts, compared as a whole value; `live` if it changes at run time."""

    setting: Setting
    value: Callable[[Facts], object]
    live: bool = False


def compare(desired: Facts, observed: Facts, compared: Iterable[Compared[Facts]]) -> list[Change]:
    """A change for each compared field whose values differ."""
    changes = []
    for item in compared:
        want, have = item.value(desired), item.value(observed)
        if want != have:
            changes.append(Change(item.setting, want, have, item.live))
    return changes


def compare_devices(
    kind: DeviceKind,
    desired: Mapping[str, Device],
    observed: Mapping[str, Device],
    *,
    view: Callable[[Device], tuple[Any, ...]],
    hotplug: Callable[[Device], bool],
) -> list[Change]:
    """Devices matched by key: a changed one needs a power cycle; one added or removed is live
    when `hotplug` says the device can be attached or detached at run time."""
    changes = []
    for device in sorted(set(desired) | set(observed)):
        want, have = desired.get(device), observed.get(device)
        if want is not None and have is not None:
            if view(want) != view(have):
                edit = DeviceEdit(kind, device, DeviceAction.CHANGED)
                changes.append(Change(edit, view(want), view(have), live=False))
        elif want is not None:
            edit = DeviceEdit(kind, device, DeviceAction.ADDED)
            changes.append(Change(edit, view(want), None, live=hotplug(want)))
        elif have is not None:
            edit = DeviceEdit(kind, device, DeviceAction.REMOVED)
            changes.append(Change(edit, None, view(have), live=hotplug(have)))
    return changes
