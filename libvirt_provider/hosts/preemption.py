"""Spot machines, reclaimed for machines that are not spot (pure).

A spot machine (`scheduling.spot: true`) runs on capacity others may take back. When a machine
that is not spot fits no host, placement may preempt spot machines on one host to make room:
the host passes every filter but capacity, and the vCPUs and memory of some of its spot machines
are what is missing. The choice costs least: fewest preemptions first, then the youngest machines
(of two sets of one size, the one whose oldest member is younger), then the host's name. A spot
machine never preempts anything, and a machine whose pool space is missing gets nothing from
preemption (a preempted machine keeps its disks).

Preempted machines are out of the ledger until they start again: each host starts its own in the
order they were preempted, as long as the head of that line fits (`restarts`), so a machine
preempted first is never overtaken by a smaller one preempted after it.

The choice is exact up to `MAX_COMBINATIONS` sets looked at per host; past that (a host with
dozens of spot machines) it is greedy: the youngest until the machine fits, then any of them it
can do without, oldest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import (
    Fit,
    HostView,
    Ledger,
    Misfit,
    Request,
    Spot,
    Usage,
    capacity_misfit,
    open_to,
)

__all__ = ["MAX_COMBINATIONS", "Preempted", "Preemption", "choose", "restarts"]

MAX_COMBINATIONS = 4096

# The capacity misfits preemption may cure (pool space it cannot: disks are kept).
_CURABLE = frozenset({"insufficient cpu", "insufficient memory"})


@dataclass(frozen=True)
class Preemption:
    """Where the machine goes, what it takes there, and the spot machines preempted for it,
    youngest first."""

    host: str
    demand: Demand
    victims: tuple[str, ...]


@dataclass(frozen=True)
class Preempted:
    """A preempted machine waiting for room on its host: `since` orders the line (RFC 3339,
    as written), `demand` what it takes once started (its volumes exist already)."""

    key: str
    host: str
    demand: Demand
    since: str


Cost = tuple[int, tuple[float, ...]]


def _without(usage: Usage, victims: Sequence[Spot]) -> Usage:
    freed = Usage(
        cpus=usage.cpus - sum(v.demand.cpus for v in victims),
        memory=usage.memory - sum(v.demand.memory for v in victims),
        machines=usage.machines - len(victims),
    )
    freed.pending.update(usage.pending)
    return freed


def _cost(victims: Sequence[Spot]) -> Cost:
    """Fewer first; then the set whose oldest member is youngest (and so on)."""
    return len(victims), tuple(-v.created for v in sorted(victims, key=lambda v: v.created))


def _least(amounts: list[int], needed: int) -> int:
    """How many of `amounts` (the largest first) it takes to reach `needed`."""
    if needed <= 0:
        return 0
    reached = 0
    for count, amount in enumerate(sorted(amounts, reverse=True), start=1):
        reached += amount
        if reached >= needed:
            return count
    return len(amounts) + 1


def _victims(
    host: HostView, usage: Usage, demand: Demand, spot: list[Spot], bound: Cost | None
) -> list[Spot] | None:
    """The cheapest spot machines of `host` whose room lets `demand` fit, or None (also when
    none would cost less than `bound`, the best found on another host)."""
    if capacity_misfit(host, _without(usage, spot), demand) is not None:
        return None  # not even all of them would do (or pool space is what is missing)
    # Pool space is not freed, and fits with all of them gone: only vCPUs and memory are left.
    need_cpus = demand.cpus - (host.cpus - usage.cpus)
    need_memory = demand.memory - (host.memory - usage.memory)

    def enough(chosen: Sequence[Spot]) -> bool:
        cpus = sum(v.demand.cpus for v in chosen)
        memory = sum(v.demand.memory for v in chosen)
        return cpus >= need_cpus and memory >= need_memory

    youngest = sorted(spot, key=lambda v: (-v.created, v.key))
    fewest = max(
        1,
        _least([v.demand.cpus for v in spot], need_cpus),
        _least([v.demand.memory for v in spot], need_memory),
    )
    looked = 0
    for size in range(fewest, len(youngest) + 1):
        if bound is not None and (size > bound[0] or _cost(youngest[:size]) >= bound):
            return None  # this host cannot beat the best found elsewhere
        best: list[Spot] | None = None
        for chosen in combinations(youngest, size):
            looked += 1
            if looked > MAX_COMBINATIONS:
                return best or _greedy(youngest, enough)
            if enough(chosen) and (best is None or _cost(chosen) < _cost(best)):
                best = list(chosen)
        if best is not None:
            return best
    return None  # unreachable: all of them fit


def _greedy(youngest: list[Spot], enough: Callable[[Sequence[Spot]], bool]) -> list[Spot]:
    chosen: list[Spot] = []
    for spot in youngest:
        chosen.append(spot)
        if enough(chosen):
            break
    for spot in sorted(chosen, key=lambda v: v.created):
        rest = [v for v in chosen if v is not spot]
        if enough(rest):
            chosen = rest
    return chosen


def choose(
    request: Request,
    hosts: Sequence[HostView],
    fit: Callable[[HostView], Fit],
    ledger: Ledger,
) -> Preemption | None:
    """Where a machine that fits no host goes by preempting spot machines, or None when no host
    would do even so (or the machine is spot itself). Records nothing."""
    best: tuple[Cost, str] | None = None
    chosen: Preemption | None = None
    for host in sorted(hosts, key=lambda h: h.name):  # a tie goes to the first name
        if open_to(request, host) is not None:
            continue
        found = fit(host)
        if isinstance(found, Misfit) or found.spot:
            continue
        usage = ledger.usage(host.name)
        misfit = capacity_misfit(host, usage, found)
        if misfit is None or misfit.kind not in _CURABLE:
            continue
        spot = ledger.spot_on(host.name)
        victims = _victims(host, usage, found, spot, best[0] if best else None) if spot else None
        if not victims:
            continue
        score = (_cost(victims), host.name)
        if best is None or score < best:
            best = score
            ordered = sorted(victims, key=lambda v: (-v.created, v.key))
            chosen = Preemption(host.name, found, tuple(v.key for v in ordered))
    return chosen


def restarts(
    preempted: Sequence[Preempted],
    hosts: Sequence[HostView],
    ledger: Ledger,
    refused: Sequence[Preempted] = (),
) -> list[str]:
    """The preempted machines to start again now, booked into `ledger`: per host, in the order
    they were preempted, while the first waiting fits (a ready host only; a cordon keeps no
    machine that is already there from starting again).

    `refused` are the machines bound to a host that it has not admitted yet (`NotAdmitted`,
    counted nowhere): each that fits in the room is booked ahead of the line, since the room may
    be what it waits for (a machine placed on preempted machines' room, refused by a host that
    had not seen them preempted yet); one too big for the room holds nothing up."""
    by_name = {h.name: h for h in hosts}
    for entry in sorted(refused, key=lambda p: (p.since, p.key)):
        host = by_name.get(entry.host)
        if (
            host is not None
            and capacity_misfit(host, ledger.usage(host.name), entry.demand) is None
        ):
            ledger.put(entry.key, host.name, entry.demand, pending=True)
    lines: dict[str, list[Preempted]] = {}
    for entry in sorted(preempted, key=lambda p: (p.since, p.key)):
        lines.setdefault(entry.host, []).append(entry)
    started: list[str] = []
    for name, line in sorted(lines.items()):
        host = by_name.get(name)
        if host is None or not host.ready:
            continue
        for entry in line:
            room = Demand(cpus=entry.demand.cpus, memory=entry.demand.memory)
            if capacity_misfit(host, ledger.usage(name), room) is not None:
                break
            ledger.put(entry.key, name, entry.demand)
            started.append(entry.key)
    return started
