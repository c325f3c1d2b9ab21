"""Whether a host's daemon builds a machine bound to it: kubelet's admission, in placement's terms.

A machine reaches a host in two ways: placement binds it, or its creator pins it (`spec.host`,
or the host label the placer turns into `spec.host`). Placement filters hosts; a pin names one.
So that a pin is a filter and never a bypass, the host's daemon admits every machine before it
builds it, with the very filters placement runs (`placement.host_misfit`: readiness, cordon,
failure domain, `hostSelector`, what the host offers, vCPUs, memory, pool space), against what
the host holds: the machines it runs and the ones it admitted. A machine not admitted is built
nowhere and takes nothing (`NotAdmitted` on the machine, not counted in the host's allocation);
it is looked at again when the host's spec changes or capacity is freed.

A machine is admitted once: a machine whose domain exists, or that was admitted and is still
being built, is not judged again (a cordon set while it is built does not strand it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from libvirt_provider.hosts.inventory import Demand, format_size
from libvirt_provider.hosts.placement import HostView, Misfit, Request, Usage, host_misfit

__all__ = ["Booked", "refusal", "waits_for_preempted"]


@dataclass(frozen=True)
class Booked:
    """A machine the host holds: what it takes, and whether its volumes are still to be created
    (the pool's free space does not show them yet)."""

    demand: Demand
    pending: bool
    # A spot machine preempted by placement and still shutting down: it leaves soon.
    leaving: bool = False


def _usage(booked: Iterable[Booked]) -> Usage:
    usage = Usage()
    for entry in booked:
        usage.cpus += entry.demand.cpus
        usage.memory += entry.demand.memory
        usage.machines += 1
        if entry.pending:
            for pool, size in entry.demand.pools:
                usage.pending[pool] += size
    return usage


def _why(misfit: Misfit) -> str:
    if misfit.kind == "cordoned":
        return "the host is cordoned (spec.unschedulable)"
    if misfit.kind == "not ready":
        return "the host is not ready"
    if misfit.unit == "bytes":
        return f"{misfit.kind} (needs {format_size(misfit.needs)})"
    if misfit.unit:
        return f"{misfit.kind} (needs {misfit.needs})"
    return misfit.kind


def refusal(
    host: str,
    request: Request,
    view: HostView | None,
    demand: Demand,
    booked: Iterable[Booked],
) -> str | None:
    """Why `host` does not admit a machine asking `request` and taking `demand`, or None when it
    does; `view` is the host as its LibvirtHost shows it (None before a first inventory), `booked`
    what it holds already. The message says what the machine needs, never what the host has free
    (it would change with every guest and write a status each time)."""
    tail = (
        "; it is built here once the host admits it (spec.host cannot change: to run it "
        "elsewhere, delete it and create it again without a host)"
    )
    if view is None:
        return f"host {host} has not reported its inventory yet" + tail
    misfit = host_misfit(request, view, demand, _usage(booked))
    if misfit is None:
        return None
    why = _why(misfit)
    if demand.spot and misfit.unit:
        why += " (a spot machine preempts nothing: it runs where there is room)"
    return f"host {host} does not admit this machine: {why}" + tail


def waits_for_preempted(
    request: Request, view: HostView | None, demand: Demand, booked: Iterable[Booked]
) -> bool:
    """True when the machine fits once the preempted machines still shutting down are off: it
    is what they were preempted for, and is admitted then (not refused meanwhile)."""
    held = list(booked)
    if view is None or not any(entry.leaving for entry in held):
        return False
    staying = [entry for entry in held if not entry.leaving]
    return host_misfit(request, view, demand, _usage(staying)) is None
