"""vCPUs, CPU model and topology, memory and huge pages.

Sizes are written exactly as resolved (memory in MiB); this module does not round, default or
check them against the host, which is the resolver's and libvirt's business respectively.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.resolved import Cpu, CpuMode, Memory

__all__ = ["render_cpu", "render_memory"]


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
