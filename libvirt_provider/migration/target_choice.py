"""Where a migration without `spec.targetHost` goes, pure: placement's filters for a new machine
(readiness with a fresh heartbeat, cordon, failure domain, host selector, capacity), never the
source, and the host must offer the libvirt networks and pools the running domain uses. Among
the hosts left, the least loaded after the move (placement's share of CPU and memory)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Request, Usage, capacity_misfit, open_to

__all__ = ["Choice", "choose_target"]


@dataclass(frozen=True)
class Choice:
    host: str | None
    message: str = ""


def choose_target(
    request: Request,
    *,
    source: str,
    hosts: Sequence[HostView],
    allocated: Mapping[str, Usage],
    demand: Demand,
    networks: Collection[str] = (),
    pools: Collection[str] = (),
) -> Choice:
    """The target host, or why there is none (each other host with its reason)."""
    best: tuple[float, str] | None = None
    reasons: list[str] = []
    for host in hosts:
        if host.name == source:
            continue
        usage = allocated.get(host.name, Usage())
        why = _misfit(request, host, usage=usage, demand=demand, networks=networks, pools=pools)
        if why is not None:
            reasons.append(f"{host.name}: {why}")
            continue
        cpu = (usage.cpus + demand.cpus) / host.cpus if host.cpus else 1.0
        memory = (usage.memory + demand.memory) / host.memory if host.memory else 1.0
        score = ((cpu + memory) / 2, host.name)
        if best is None or score < best:
            best = score
    if best is None:
        listed = "; ".join(reasons) if reasons else "there is no other host"
        return Choice(None, f"no host can take the machine: {listed}")
    return Choice(best[1])


def _misfit(
    request: Request,
    host: HostView,
    *,
    usage: Usage,
    demand: Demand,
    networks: Collection[str],
    pools: Collection[str],
) -> str | None:
    refused = open_to(request, host)
    if refused is not None:
        return refused.kind
    missing = sorted(set(networks) - host.networks)
    if missing:
        return f"lacks network(s) {', '.join(missing)}"
    missing = sorted(set(pools) - set(host.pools))
    if missing:
        return f"lacks pool(s) {', '.join(missing)}"
    short = capacity_misfit(host, usage, demand)
    return short.kind if short is not None else None
