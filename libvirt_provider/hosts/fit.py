"""Whether a machine can be built on a host, and what it takes there: the resolver, asked once per
host shape.

Placement must never pick a host whose daemon would then refuse the machine, so "fits" is decided
by the very resolver the host's daemon runs, against the host's offers (domain types, pools,
networks) as its LibvirtHost reports them. Hosts that offer the same things resolve alike, so one
resolution serves every host of a shape: with 100 hosts of three shapes a decision resolves three
times, not a hundred.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from catalog.lookup import Catalog
from generic.api import VirtualMachineSpec
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.constants import REASON_NOT_AVAILABLE_ON_HOST
from libvirt_provider.driver.types import HostFacts
from libvirt_provider.hosts.inventory import Demand, demand_of
from libvirt_provider.hosts.placement import HostView, Misfit
from libvirt_provider.resolve.context import Problem
from libvirt_provider.resolve.machine import resolve_machine
from libvirt_provider.resolved import FirmwareKind

__all__ = ["SPEC_MISFIT", "ResolverFit"]

SPEC_MISFIT = "invalid spec"
"""The misfit kind of a machine whose spec fails on every host (see `ResolverFit.problems`)."""


@dataclass(frozen=True)
class _Shape:
    """What resolving for one host shape found: the demand, and what the host must also offer."""

    demand: Demand
    machine_type: str
    firmware: FirmwareKind


class ResolverFit:
    """`fit(host)` for one machine; `problems` holds what is wrong with the spec itself (the same
    on every host), which placement reports instead of placing."""

    def __init__(
        self,
        *,
        vm_name: str,
        vm: VirtualMachineSpec,
        machine: LibvirtMachine,
        catalog: Catalog,
        per_host_pools: AbstractSet[str] = frozenset(),
    ) -> None:
        # The failure domain is placement's filter; the resolver must not compare it with the
        # name of whichever host stands for a shape.
        self._vm = vm.model_copy(update={"failure_domain": None})
        self._vm_name = vm_name
        self._machine = machine
        self._catalog = catalog
        # Hosts some storage class maps to a pool of their own resolve on their own.
        self._named = per_host_pools
        # A clone is built on its snapshot's host only: each host resolves on its own.
        self._by_host = vm.boot_disk is not None and vm.boot_disk.source.snapshot is not None
        self._by_host |= any(d.source.snapshot is not None for d in vm.disks or ())
        self._shapes: dict[tuple[object, ...], _Shape | Misfit] = {}
        self.problems: tuple[Problem, ...] = ()

    def __call__(self, host: HostView) -> Demand | Misfit:
        key = (
            host.domain_types,
            frozenset(host.pools),
            host.networks,
            host.name if self._by_host or host.name in self._named else None,
        )
        found = self._shapes.get(key)
        if found is None:
            found = self._shapes[key] = self._resolve(host)
        if isinstance(found, Misfit):
            return found
        # A driver that lists no machine types (libvirt's test driver) is not judged by them.
        if host.machine_types and found.machine_type not in host.machine_types:
            return Misfit(f"lacks machine type {found.machine_type}")
        if found.firmware is FirmwareKind.EFI and not host.uefi:
            return Misfit("lacks UEFI firmware")
        return found.demand

    def _resolve(self, host: HostView) -> _Shape | Misfit:
        # What the host's daemon would offer the resolver, as its LibvirtHost reports it.
        offer = HostFacts(
            hostname=host.name,
            arch="x86_64",
            domain_types=host.domain_types,
            pools=frozenset(host.pools),
            networks=host.networks,
            zone=host.zone,
        )
        resolution = resolve_machine(
            vm_name=self._vm_name,
            vm_spec=self._vm,
            machine=self._machine,
            catalog=self._catalog,
            secrets={},
            host=offer,
            secrets_deferred=True,
        )
        if resolution.machine is not None:
            plan = resolution.machine
            return _Shape(demand_of(plan), plan.domain.os.machine_type, plan.domain.os.firmware)
        lacking = [p for p in resolution.problems if p.reason == REASON_NOT_AVAILABLE_ON_HOST]
        others = [p for p in resolution.problems if p.reason != REASON_NOT_AVAILABLE_ON_HOST]
        if others:
            self.problems = tuple(others)
            return Misfit(SPEC_MISFIT)
        return Misfit(f"lacks {lacking[0].missing or 'what the machine needs'}")
