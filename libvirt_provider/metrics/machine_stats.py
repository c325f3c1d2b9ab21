"""Per-machine metrics from libvirt's bulk domain statistics: names, labels and units.

One bulk-stats record (`DomainStats`: the typed parameters `virConnectGetAllDomainStats`
returned for one domain) becomes samples here, with Prometheus' conventions: counters end in
`_total`, times are `_seconds`, sizes `_bytes`, all under the project's prefix. What a domain
does not report (no balloon driver, a shut-off domain, the test driver's state-only records) is
left out, never sent as zero. The bulk statistics carry no metadata, so which machine a domain
is comes from the daemon's own copies of its machines (`MachineIndex`): a machine's domain has
its uid as UUID (a domain that holds a machine's name under another UUID is foreign, and so is
not that machine's). Domains of no known machine get no series.

Pure: no libvirt, no Kubernetes; the collector (`adapters/process/machine_metrics.py`) calls it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from libvirt_provider.constants import METRICS_PREFIX
from libvirt_provider.driver.types import DomainStats

__all__ = [
    "FAMILIES",
    "Family",
    "Kind",
    "MachineIdentity",
    "MachineIndex",
    "Sample",
    "machine_samples",
]

_MACHINE = f"{METRICS_PREFIX}_machine"
MACHINE_LABELS = ("namespace", "name", "host")
_NS = 1e-9
_KIB = 1024.0


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True)
class Family:
    """One metric. `name` is without `_total` (the exposition adds it to a counter):
    `exposed` is the name a query uses."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = MACHINE_LABELS

    @property
    def exposed(self) -> str:
        return f"{self.name}_total" if self.kind is Kind.COUNTER else self.name


@dataclass(frozen=True)
class Sample:
    family: Family
    labels: tuple[str, ...]
    value: float


def _family(suffix: str, kind: Kind, help: str, extra: tuple[str, ...] = ()) -> Family:
    return Family(f"{_MACHINE}_{suffix}", kind, help, MACHINE_LABELS + extra)


# libvirt's domain-wide parameter, the family it feeds, and the factor to the family's unit.
_DOMAIN: tuple[tuple[str, Family, float], ...] = (
    (
        "state.state",
        _family("domain_state", Kind.GAUGE, "libvirt's domain state (1 running, 3 paused, ...)."),
        1.0,
    ),
    (
        "cpu.time",
        _family("cpu_seconds", Kind.COUNTER, "CPU time the domain used, all vCPUs together."),
        _NS,
    ),
    ("vcpu.current", _family("vcpus", Kind.GAUGE, "vCPUs online in the domain."), 1.0),
    (
        "balloon.current",
        _family("memory_actual_bytes", Kind.GAUGE, "Memory the domain has now (balloon)."),
        _KIB,
    ),
    (
        "balloon.available",
        _family(
            "memory_available_bytes",
            Kind.GAUGE,
            "Memory the guest sees as usable, as its balloon driver reports it.",
        ),
        _KIB,
    ),
    (
        "balloon.unused",
        _family(
            "memory_unused_bytes",
            Kind.GAUGE,
            "Memory the guest leaves unused, as its balloon driver reports it.",
        ),
        _KIB,
    ),
    (
        "balloon.rss",
        _family("memory_rss_bytes", Kind.GAUGE, "Resident memory of the domain's process."),
        _KIB,
    ),
)

_DRIVE = ("drive",)
# Per disk (`block.<n>.<field>`, labelled by the disk's target, e.g. vda).
_BLOCK: tuple[tuple[str, Family, float], ...] = (
    ("rd.bytes", _family("disk_read_bytes", Kind.COUNTER, "Bytes read from the disk.", _DRIVE), 1),
    (
        "wr.bytes",
        _family("disk_write_bytes", Kind.COUNTER, "Bytes written to the disk.", _DRIVE),
        1.0,
    ),
    (
        "rd.reqs",
        _family("disk_read_requests", Kind.COUNTER, "Read operations on the disk.", _DRIVE),
        1.0,
    ),
    (
        "wr.reqs",
        _family("disk_write_requests", Kind.COUNTER, "Write operations on the disk.", _DRIVE),
        1.0,
    ),
    (
        "rd.times",
        _family("disk_read_seconds", Kind.COUNTER, "Time spent reading the disk.", _DRIVE),
        _NS,
    ),
    (
        "wr.times",
        _family("disk_write_seconds", Kind.COUNTER, "Time spent writing the disk.", _DRIVE),
        _NS,
    ),
)

_NIC = ("interface",)
# Per NIC (`net.<n>.<field>`, labelled by the host-side device, e.g. vnet3).
_NET: tuple[tuple[str, Family, float], ...] = tuple(
    (
        f"{short}.{field}",
        _family(
            f"network_{way}_{unit}",
            Kind.COUNTER,
            f"{what.capitalize()} {'received' if short == 'rx' else 'sent'} on the NIC.",
            _NIC,
        ),
        1.0,
    )
    for short, way in (("rx", "receive"), ("tx", "transmit"))
    for field, unit, what in (
        ("bytes", "bytes", "bytes"),
        ("pkts", "packets", "packets"),
        ("errs", "errors", "errors"),
        ("drop", "drops", "packets dropped"),
    )
)

FAMILIES: tuple[Family, ...] = tuple(f for _, f, _ in (*_DOMAIN, *_BLOCK, *_NET))
"""Every per-machine family, in exposition order."""


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _devices(values: Mapping[str, object], kind: str) -> Iterable[tuple[str, str]]:
    """(`<kind>.<n>.` prefix, device name) of each device the record lists."""
    count = _number(values.get(f"{kind}.count"))
    for index in range(int(count or 0)):
        device = values.get(f"{kind}.{index}.name")
        if isinstance(device, str) and device:
            yield f"{kind}.{index}.", device


def machine_samples(stats: DomainStats, *, host: str, namespace: str, name: str) -> list[Sample]:
    """The samples of one machine's record, in the families' units; absent fields are left out."""
    values = stats.values
    labels = (namespace, name, host)
    samples: list[Sample] = []
    for key, family, factor in _DOMAIN:
        number = _number(values.get(key))
        if number is not None:
            samples.append(Sample(family, labels, number * factor))
    for fields, kind in ((_BLOCK, "block"), (_NET, "net")):
        for prefix, device in _devices(values, kind):
            for key, family, factor in fields:
                number = _number(values.get(prefix + key))
                if number is not None:
                    samples.append(Sample(family, (*labels, device), number * factor))
    return samples


@dataclass(frozen=True)
class MachineIdentity:
    """Who a LibvirtMachine is: its namespace, name and uid (its domain's UUID)."""

    namespace: str
    name: str
    uid: str


class MachineIndex:
    """Which machine a domain of the bulk statistics is, from the daemon's machine copies."""

    def __init__(self, machines: Iterable[MachineIdentity]) -> None:
        self._by_uuid = {m.uid.lower(): (m.namespace, m.name) for m in machines if m.uid}

    def find(self, stats: DomainStats) -> tuple[str, str] | None:
        """(namespace, name) of the machine whose domain this is; None for a domain of no known
        machine (not this provider's, or a machine this daemon has not seen yet)."""
        return self._by_uuid.get(stats.uuid.lower())

    def __len__(self) -> int:
        return len(self._by_uuid)
