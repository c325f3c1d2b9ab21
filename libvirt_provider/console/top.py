"""What `kubectl vm top` decides without I/O: the host filter, CPU use from two samples, and
the table it prints.

CPU use is a rate, and libvirt reports a counter (CPU seconds the domain used since it started,
all vCPUs together). So the plugin reads the statistics twice, `--interval` apart (1 s by default),
and for each machine divides the CPU seconds used between the two samples by the time between
them, both as the daemon measured them (each sample carries the Unix time of the middle of its
bulk call, `sampledAt`): the cores the machine kept busy over that interval, shown in millicores
as `kubectl top` does, and as a share of its vCPUs. A machine not running in both samples, or
whose counter went backwards (its domain started again in between), has no CPU figure. Memory
needs no rate: the second sample's balloon size (`MEMORY`, what the guest has) and the qemu
process' resident memory on the host (`RSS`).

The shell is `adapters/plugin/kubectl_vm.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c

__all__ = [
    "MachineUsage",
    "format_table",
    "machine_usage",
    "stats_field_selector",
]


def stats_field_selector(host: str | None) -> str | None:
    return f"{c.STATS_HOST_FIELD}={host}" if host else None


@dataclass(frozen=True)
class MachineUsage:
    namespace: str
    name: str
    host: str
    running: bool
    vcpus: int | None
    cpu_cores: float | None
    memory_bytes: float | None
    rss_bytes: float | None


def _items(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if document.get("kind") == c.STATS_KIND:
        return [document]
    return list(document.get("items") or [])


def _key(item: Mapping[str, Any]) -> tuple[str, str]:
    meta = item.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _number(item: Mapping[str, Any], field: str) -> float | None:
    value = item.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _cores(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> float | None:
    if before is None or not before.get("running") or not after.get("running"):
        return None
    cpu0, cpu1 = _number(before, "cpuSeconds"), _number(after, "cpuSeconds")
    t0, t1 = _number(before, "sampledAt"), _number(after, "sampledAt")
    if cpu0 is None or cpu1 is None or t0 is None or t1 is None:
        return None
    if t1 <= t0 or cpu1 < cpu0:
        return None
    return (cpu1 - cpu0) / (t1 - t0)


def machine_usage(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[MachineUsage]:
    """Each machine of the second sample, with its CPU use since the first."""
    before = {_key(item): item for item in _items(first)}
    usages = []
    for item in _items(second):
        namespace, name = _key(item)
        running = bool(item.get("running"))
        vcpus = _number(item, "vcpus")
        usages.append(
            MachineUsage(
                namespace=namespace,
                name=name,
                host=str(item.get("host", "")),
                running=running,
                vcpus=int(vcpus) if vcpus is not None else None,
                cpu_cores=_cores(before.get((namespace, name)), item),
                memory_bytes=_number(item, "memoryBytes") if running else None,
                rss_bytes=_number(item, "memoryRSSBytes") if running else None,
            )
        )
    return usages


def _millicores(cores: float | None) -> str:
    return "-" if cores is None else f"{round(cores * 1000)}m"


def _share(cores: float | None, vcpus: int | None) -> str:
    if cores is None or not vcpus:
        return "-"
    return f"{round(100 * cores / vcpus)}%"


def _mebibytes(size: float | None) -> str:
    return "-" if size is None else f"{round(size / (1 << 20))}Mi"


def format_table(usages: Sequence[MachineUsage], *, all_namespaces: bool) -> str:
    """The table `kubectl vm top` prints, columns aligned as kubectl aligns them."""
    header = ["NAME", "HOST", "STATE", "VCPUS", "CPU(cores)", "CPU%", "MEMORY", "RSS"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    rows = [header]
    for usage in usages:
        row = [
            usage.name,
            usage.host,
            "Running" if usage.running else "NotRunning",
            "-" if usage.vcpus is None else str(usage.vcpus),
            _millicores(usage.cpu_cores),
            _share(usage.cpu_cores, usage.vcpus),
            _mebibytes(usage.memory_bytes),
            _mebibytes(usage.rss_bytes),
        ]
        if all_namespaces:
            row.insert(0, usage.namespace)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
