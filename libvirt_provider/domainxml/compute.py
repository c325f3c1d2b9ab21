"""vCPUs, CPU model and topology, memory and huge pages.

Sizes are written exactly as resolved (memory in MiB); this module does not round, default or
check them against the host, which is the resolver's and libvirt's business respectively. Read
back, memory is normalised to KiB whatever unit libvirt chose. Two values change on a running
domain: more vCPUs within the slots (hotplug) and memory within the ceiling (the balloon).
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import Change, Compared, Setting, compare
from libvirt_provider.resolved import Cpu, CpuMode, Memory

__all__ = ["ComputeFacts", "compare_compute", "parse_compute", "render_cpu", "render_memory"]

_KIB = {"b": 1 / 1024, "bytes": 1 / 1024, "k": 1, "kib": 1, "kb": 1000 / 1024, "m": 1024}
_KIB |= {"mib": 1024, "mb": 10**6 / 1024, "g": 2**20, "gib": 2**20, "gb": 10**9 / 1024}
_KIB |= {"t": 2**30, "tib": 2**30, "tb": 10**12 / 1024}


def render_cpu(domain: etree._Element, cpu: Cpu) -> None:
    vcpu = etree.SubElement(domain, "vcpu", placement="static")
    vcpu.text = str(cpu.max_vcpus)
    if cpu.vcpus != cpu.max_vcpus:
        # vCPUs beyond `current` exist but are offline: they can be hot-plugged without a reboot.
        vcpu.set("current", str(cpu.vcpus))
    if cpu.mode is None and cpu.topology is None:
        return  # The hypervisor's default CPU model (qemu64 under emulation).
    element = etree.SubElement(domain, "cpu")
    if cpu.mode is not None:
        element.set("mode", cpu.mode.value)
    if cpu.mode is CpuMode.CUSTOM:
        element.set("match", "exact")
        # fallback='forbid': a host that cannot offer this model fails to start the domain rather
        # than quietly presenting a different CPU.
        model = etree.SubElement(element, "model", fallback="forbid")
        model.text = cpu.model
    if cpu.topology is not None:
        etree.SubElement(
            element,
            "topology",
            sockets=str(cpu.topology.sockets),
            dies="1",
            cores=str(cpu.topology.cores),
            threads=str(cpu.topology.threads),
        )


def render_memory(domain: etree._Element, memory: Memory) -> None:
    # <memory> is the boot-time maximum; <currentMemory> is the balloon target, which can move
    # at run time anywhere up to that maximum.
    maximum = etree.SubElement(domain, "memory", unit="MiB")
    maximum.text = str(memory.max_mib)
    current = etree.SubElement(domain, "currentMemory", unit="MiB")
    current.text = str(memory.current_mib)
    if memory.hugepage_kib is not None:
        backing = etree.SubElement(domain, "memoryBacking")
        pages = etree.SubElement(backing, "hugepages")
        etree.SubElement(pages, "page", size=str(memory.hugepage_kib), unit="KiB")


@dataclass(frozen=True)
class ComputeFacts:
    vcpus: int | None
    max_vcpus: int | None
    cpu_mode: str | None
    cpu_model: str | None
    topology: tuple[int, int, int] | None
    memory_max_kib: int | None
    memory_current_kib: int | None
    hugepage_kib: int | None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _kib(element: etree._Element | None) -> int | None:
    if element is None or element.text is None:
        return None
    value = _int(element.text.strip())
    factor = _KIB.get((element.get("unit") or "KiB").lower())
    return None if value is None or factor is None else round(value * factor)


def _topology(cpu: etree._Element | None) -> tuple[int, int, int] | None:
    element = cpu.find("topology") if cpu is not None else None
    if element is None:
        return None
    sockets, cores, threads = (_int(element.get(k)) for k in ("sockets", "cores", "threads"))
    if sockets is None or cores is None or threads is None:
        return None
    return sockets, cores, threads


def _hugepage_kib(page: etree._Element | None) -> int | None:
    if page is None:
        return None
    return round((_int(page.get("size")) or 0) * _KIB.get(page.get("unit", "kib").lower(), 1))


def parse_compute(root: etree._Element) -> ComputeFacts:
    vcpu = root.find("vcpu")
    max_vcpus = _int(vcpu.text) if vcpu is not None else None
    online = vcpu.get("current") if vcpu is not None else None
    cpu = root.find("cpu")
    ceiling = _kib(root.find("memory"))
    return ComputeFacts(
        vcpus=_int(online) if online else max_vcpus,
        max_vcpus=max_vcpus,
        cpu_mode=cpu.get("mode", "custom") if cpu is not None else None,
        cpu_model=cpu.findtext("model") if cpu is not None else None,
        topology=_topology(cpu),
        memory_max_kib=ceiling,
        memory_current_kib=_kib(root.find("currentMemory")) or ceiling,
        hugepage_kib=_hugepage_kib(root.find("memoryBacking/hugepages/page")),
    )


def _cpu_mode(facts: ComputeFacts) -> str | None:
    # <cpu> carrying only a topology is libvirt's "custom" without a model: the default CPU.
    if facts.cpu_mode == "custom" and facts.cpu_model is None:
        return None
    return facts.cpu_mode


def _libvirt_default_cpu(observed: ComputeFacts, domain_type: str | None) -> bool:
    # A qemu (TCG) domain defined without <cpu> comes back from libvirt (seen with 9.0) as
    # <cpu mode='custom'><model>qemu64</model>: libvirt's own pick for "the default CPU", not drift.
    return (
        domain_type == "qemu" and observed.cpu_mode == "custom" and observed.cpu_model == "qemu64"
    )


_COMPARED: tuple[Compared[ComputeFacts], ...] = (
    Compared(Setting.VCPU_SLOTS, lambda f: f.max_vcpus),
    Compared(Setting.CPU_MODE, _cpu_mode),
    Compared(Setting.CPU_MODEL, lambda f: f.cpu_model),
    Compared(Setting.CPU_TOPOLOGY, lambda f: f.topology),
    Compared(Setting.MEMORY_CEILING, lambda f: f.memory_max_kib),
    Compared(Setting.HUGE_PAGES, lambda f: f.hugepage_kib),
)
_CPU_CHOICE = frozenset({Setting.CPU_MODE, Setting.CPU_MODEL})


def compare_compute(
    desired: ComputeFacts, observed: ComputeFacts, *, observed_domain_type: str | None
) -> list[Change]:
    changes = compare(desired, observed, _COMPARED)
    if _cpu_mode(desired) is None and _libvirt_default_cpu(observed, observed_domain_type):
        changes = [c for c in changes if c.key not in _CPU_CHOICE]
    if desired.vcpus != observed.vcpus:
        # Adding vCPUs within the slots is live; removing one needs the guest to let it go, which
        # it may never do (libvirt then times out), so fewer vCPUs wait for the next power cycle.
        fits = desired.max_vcpus == observed.max_vcpus and (desired.vcpus or 0) > (
            observed.vcpus or 0
        )
        changes.append(Change(Setting.VCPUS, desired.vcpus, observed.vcpus, live=fits))
    if desired.memory_current_kib != observed.memory_current_kib:
        fits = desired.memory_max_kib == observed.memory_max_kib
        changes.append(
            Change(Setting.MEMORY, desired.memory_current_kib, observed.memory_current_kib, fits)
        )
    return changes
