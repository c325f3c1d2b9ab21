"""Placement, domain type and size: where the machine runs and how big it is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import ValidationError

from catalog.machineclass import CpuMode as CatalogCpuMode
from catalog.machineclass import CpuSpec
from catalog.quantity import QuantityError, parse_quantity
from libvirt_provider.api import DomainTypeChoice
from libvirt_provider.constants import (
    REASON_INVALID_SPEC,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_REFERENCE_NOT_FOUND,
)
from libvirt_provider.resolve.context import LM, VM, Context, validation_problems
from libvirt_provider.resolved import Cpu, CpuMode, CpuTopology, DomainType, Memory

MIB = 2**20
_CPU_MODES = {
    CatalogCpuMode.HOST_MODEL: CpuMode.HOST_MODEL,
    CatalogCpuMode.HOST_PASSTHROUGH: CpuMode.HOST_PASSTHROUGH,
    CatalogCpuMode.MAXIMUM: CpuMode.MAXIMUM,
    CatalogCpuMode.CUSTOM: CpuMode.CUSTOM,
}


@dataclass
class Size:
    cpu: Cpu
    memory: Memory


def check_placement(ctx: Context) -> None:
    wanted = ctx.machine.spec.host
    if wanted is not None and wanted != ctx.host.hostname:
        ctx.problem(
            REASON_NOT_AVAILABLE_ON_HOST,
            f"{LM}.spec.host",
            f"the machine is placed on host {wanted!r}, not on this host {ctx.host.hostname!r}",
        )
    placed = wanted or ctx.host.hostname
    domain = ctx.vm.failure_domain
    if domain is not None and domain not in (placed, ctx.host.zone):
        ctx.problem(
            REASON_INVALID_SPEC,
            f"{VM}.spec.failureDomain",
            f"for the libvirt provider a failure domain is a host or a zone (the host's "
            f"topology.kubernetes.io/zone label); {domain!r} is neither the machine's host "
            f"{placed!r} nor its zone {ctx.host.zone or '(none)'}",
        )


def resolve_domain_type(ctx: Context) -> DomainType | None:
    offered = set(ctx.host.domain_types)
    choice = ctx.machine.spec.domain_type
    if DomainType.TEST.value in offered:
        # Only libvirt's test driver offers `test`, and it offers nothing else: every requested
        # type (kvm, qemu, auto) runs there as `test`, so benchmarks use unmodified machines.
        return DomainType.TEST
    if choice is DomainTypeChoice.AUTO:
        for candidate in (DomainType.KVM, DomainType.QEMU):
            if candidate.value in offered:
                return candidate
    elif choice.value in offered:
        return DomainType(choice.value)
    ctx.problem(
        REASON_NOT_AVAILABLE_ON_HOST,
        f"{LM}.spec.domainType",
        f"domain type {choice.value} is not available on host {ctx.host.hostname!r} "
        f"(it offers: {', '.join(sorted(offered)) or 'none'})",
        missing=f"domain type {choice.value}",
    )
    return None


def _bytes(ctx: Context, text: str | int, where: str) -> int | None:
    try:
        return text if isinstance(text, int) else parse_quantity(text)
    except QuantityError as error:
        ctx.problem(REASON_INVALID_SPEC, where, str(error))
        return None


@dataclass(frozen=True)
class _Request:
    """What the VM's instanceType asks for, from a LibvirtMachineClass or inline resources."""

    cpus: int
    memory: int
    cpu_spec: CpuSpec | None = None
    topology: CpuTopology | None = None
    hugepage_kib: int | None = None


def resolve_size(ctx: Context, domain_type: DomainType | None) -> Size | None:
    where = f"{VM}.spec.instanceType"
    request = _requested_size(ctx, where)
    if request is None:
        return None
    memory_mib = math.ceil(request.memory / MIB)  # qemu sizes RAM in whole MiB anyway
    cpu_spec = ctx.machine.spec.cpu or request.cpu_spec
    mode = _cpu_mode(ctx, cpu_spec, domain_type, where)
    max_cpus, max_mib = _hotplug_ceilings(ctx, request, memory_mib)
    topology = request.topology
    if topology is not None and topology.sockets * topology.cores * topology.threads != max_cpus:
        ctx.problem(
            REASON_INVALID_SPEC,
            f"{LM}.spec.hotplug.maxCPUs",
            f"the class's CPU topology gives {request.cpus} vCPUs, so maxCPUs cannot be {max_cpus}",
        )
        return None
    try:
        return Size(
            cpu=Cpu(
                vcpus=request.cpus,
                max_vcpus=max_cpus,
                mode=mode,
                model=cpu_spec.model if cpu_spec is not None else None,
                topology=topology,
            ),
            memory=Memory(
                current_mib=memory_mib, max_mib=max_mib, hugepage_kib=request.hugepage_kib
            ),
        )
    except ValidationError as error:
        ctx.problems.extend(validation_problems(error, where))
        return None


def _requested_size(ctx: Context, where: str) -> _Request | None:
    instance = ctx.vm.instance_type
    if instance is None:
        ctx.problem(
            REASON_INVALID_SPEC,
            where,
            "instanceType is required: name a LibvirtMachineClass or give resources",
        )
        return None
    if instance.name is None:
        assert instance.resources is not None  # exactly one, by the model
        memory = _bytes(ctx, instance.resources.memory, f"{where}.resources.memory")
        request = None if memory is None else _Request(cpus=instance.resources.cpus, memory=memory)
    else:
        request = _class_size(ctx, instance.name, where)
    if request is not None and request.memory < MIB:
        ctx.problem(REASON_INVALID_SPEC, where, "memory must be at least 1Mi")
        return None
    return request


def _class_size(ctx: Context, name: str, where: str) -> _Request | None:
    profile = ctx.catalog.machine_classes.get(name)
    if profile is None:
        ctx.problem(
            REASON_REFERENCE_NOT_FOUND, f"{where}.name", f"LibvirtMachineClass {name!r} not found"
        )
        return None
    memory = _bytes(ctx, profile.spec.memory, f"LibvirtMachineClass {name}")
    if memory is None:
        return None
    t = profile.spec.topology
    hugepages = profile.spec.hugepages
    return _Request(
        cpus=profile.spec.cpus,
        memory=memory,
        cpu_spec=profile.spec.cpu,
        topology=CpuTopology(sockets=t.sockets, cores=t.cores, threads=t.threads) if t else None,
        hugepage_kib=parse_quantity(hugepages.page_size) // 1024 if hugepages else None,
    )


def _cpu_mode(
    ctx: Context, cpu_spec: CpuSpec | None, domain_type: DomainType | None, where: str
) -> CpuMode | None:
    mode = _CPU_MODES[cpu_spec.mode] if cpu_spec is not None else None
    if mode is None and domain_type is DomainType.KVM:
        mode = CpuMode.HOST_MODEL  # kvm's own default (kvm64) hides most host features
    if mode is CpuMode.HOST_PASSTHROUGH and domain_type is DomainType.QEMU:
        ctx.problem(
            REASON_INVALID_SPEC,
            f"{LM}.spec.cpu" if ctx.machine.spec.cpu else where,
            "CPU mode HostPassthrough needs KVM, and this machine runs emulated (qemu); "
            "use Maximum or HostModel",
        )
    return mode


def _hotplug_ceilings(ctx: Context, request: _Request, memory_mib: int) -> tuple[int, int]:
    """The vCPU and memory (MiB) ceilings a running machine may grow to."""
    max_cpus, max_mib = request.cpus, memory_mib
    hotplug = ctx.machine.spec.hotplug
    if hotplug is not None and hotplug.max_cpus is not None:
        if hotplug.max_cpus < request.cpus:
            ctx.problem(
                REASON_INVALID_SPEC,
                f"{LM}.spec.hotplug.maxCPUs",
                f"maxCPUs {hotplug.max_cpus} is below the requested {request.cpus} vCPUs",
            )
        max_cpus = max(request.cpus, hotplug.max_cpus)
    if hotplug is not None and hotplug.max_memory is not None:
        ceiling = _bytes(ctx, hotplug.max_memory, f"{LM}.spec.hotplug.maxMemory")
        if ceiling is not None:
            if ceiling < request.memory:
                ctx.problem(
                    REASON_INVALID_SPEC,
                    f"{LM}.spec.hotplug.maxMemory",
                    f"maxMemory {hotplug.max_memory} is below the requested memory",
                )
            max_mib = max(memory_mib, math.ceil(ceiling / MIB))
    return max_cpus, max_mib
