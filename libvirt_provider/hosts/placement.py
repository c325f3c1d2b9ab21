"""Where a machine without a host goes: filters, then the least allocated host (pure).

The shape is kube-scheduler's, because that is what a Kubernetes user already reads: every host is
filtered (ready, schedulable, in the failure domain, matching the selector, offering what the
machine needs, with room for it), the survivors are scored (fewest members of the machine's spread
group first, then the lowest allocated share after placing it), and a machine that fits nowhere
gets one message that counts why ("0/3 hosts fit: 2 insufficient memory (needs 4Gi), 1 lacks
network prod"), with no figure of any host.

What "offering what the machine needs" means is not decided here: the caller passes a `fit`
function (in the daemon, the machine resolver run against the host's offers), so placement and
the host's daemon can never disagree about whether a machine can be built on a host.

`Ledger` is the allocation book, including placements made but not yet seen back from the API
(kube-scheduler's assumed pods): a burst of decisions accounts for each other before any binding
is observed, so a burst never overcommits a host.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from libvirt_provider.api import HostSelector, SpreadBy
from libvirt_provider.hosts.inventory import Demand, format_size

__all__ = [
    "ZONE_LABEL",
    "Decision",
    "HostView",
    "Ledger",
    "Misfit",
    "Request",
    "Spot",
    "Usage",
    "capacity_misfit",
    "decide",
    "host_misfit",
    "open_to",
    "selector_matches",
]

ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class HostView:
    """A host as placement sees it: its LibvirtHost and heartbeat, reduced to what is compared."""

    name: str
    labels: Mapping[str, str]
    ready: bool
    unschedulable: bool
    cpus: int
    memory: int
    pools: Mapping[str, int]
    domain_types: frozenset[str] = frozenset()
    networks: frozenset[str] = frozenset()
    machine_types: frozenset[str] = frozenset()
    uefi: bool = False
    # Not ready because its daemon stopped renewing the heartbeat (not because libvirtd failed).
    heartbeat_lost: bool = False

    @property
    def zone(self) -> str | None:
        return self.labels.get(ZONE_LABEL)


@dataclass(frozen=True)
class Misfit:
    """Why a host is filtered out. Hosts are counted per `kind`; `needs` and `free` (bytes or
    CPUs, per `unit`) say by how much it missed, for capacity."""

    kind: str
    needs: int = 0
    free: int = 0
    unit: str = ""


Fit = Demand | Misfit


@dataclass(frozen=True)
class Request:
    """A machine's placement constraints."""

    namespace: str
    failure_domain: str | None = None
    selector: HostSelector | None = None
    spread_group: str | None = None
    spread_by: SpreadBy = SpreadBy.HOST


@dataclass
class Usage:
    cpus: int = 0
    memory: int = 0
    machines: int = 0
    # Bytes of volumes not yet created on the host (the pool's free space does not show them).
    pending: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Entry:
    host: str
    demand: Demand
    pending: bool
    group: tuple[str, str] | None
    created: float


@dataclass(frozen=True)
class Spot:
    """A spot machine placed on a host, as preemption weighs it: `created` in epoch seconds."""

    key: str
    demand: Demand
    created: float


class Ledger:
    """What is placed where: every machine with a host, by the demand it was placed with."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._usage: dict[str, Usage] = {}
        self._groups: dict[tuple[str, str], Counter[str]] = {}
        # Built spot machines per host (preemption's candidates), so a host with none costs
        # nothing to look at.
        self._spot: dict[str, dict[str, Spot]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def host_of(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.host if entry is not None else None

    def put(
        self,
        key: str,
        host: str,
        demand: Demand,
        *,
        pending: bool = False,
        group: tuple[str, str] | None = None,
        created: float = 0.0,
    ) -> None:
        """Record (or replace) the machine `key` on `host`; `pending` while its volumes are not
        yet created; `created` (epoch seconds) ranks a spot machine for preemption."""
        self.drop(key)
        entry = _Entry(host, demand, pending, group, created)
        self._entries[key] = entry
        usage = self._usage.setdefault(host, Usage())
        usage.cpus += demand.cpus
        usage.memory += demand.memory
        usage.machines += 1
        if pending:
            for pool, size in demand.pools:
                usage.pending[pool] += size
        if group is not None:
            self._groups.setdefault(group, Counter())[host] += 1
        if demand.spot and not pending:
            self._spot.setdefault(host, {})[key] = Spot(key, demand, created)

    def drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        usage = self._usage[entry.host]
        usage.cpus -= entry.demand.cpus
        usage.memory -= entry.demand.memory
        usage.machines -= 1
        self._spot.get(entry.host, {}).pop(key, None)
        if entry.pending:
            for pool, size in entry.demand.pools:
                usage.pending[pool] -= size
        if entry.group is not None:
            members = self._groups[entry.group]
            members[entry.host] -= 1
            if members[entry.host] <= 0:
                del members[entry.host]

    def spot_on(self, host: str) -> list[Spot]:
        """The spot machines on `host` that preemption may reclaim: built ones only (a machine
        whose volumes are still to be created, or only assumed there, is left to come up)."""
        return list(self._spot.get(host, {}).values())

    def usage(self, host: str) -> Usage:
        return self._usage.get(host) or Usage()

    def group(self, group: tuple[str, str]) -> Counter[str]:
        return self._groups.get(group) or Counter()


@dataclass(frozen=True)
class Decision:
    """A host and the demand placed there, or None and the message that says why not."""

    host: str | None
    demand: Demand | None = None
    message: str = ""
    spread_honoured: bool = True


def selector_matches(selector: HostSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        present = key_value = labels.get(req.key)
        if req.operator == "In" and key_value not in req.values:
            return False
        if req.operator == "NotIn" and present is not None and key_value in req.values:
            return False
        if req.operator == "Exists" and present is None:
            return False
        if req.operator == "DoesNotExist" and present is not None:
            return False
    return True


def capacity_misfit(host: HostView, usage: Usage, demand: Demand) -> Misfit | None:
    free_cpus = host.cpus - usage.cpus
    if demand.cpus > free_cpus:
        return Misfit("insufficient cpu", demand.cpus, max(0, free_cpus), "cpu")
    free_memory = host.memory - usage.memory
    if demand.memory > free_memory:
        return Misfit("insufficient memory", demand.memory, max(0, free_memory), "bytes")
    for pool, size in demand.pools:
        free = host.pools.get(pool, 0) - usage.pending[pool]
        if size > free:
            return Misfit(f"insufficient space in pool {pool}", size, max(0, free), "bytes")
    return None


def _share(host: HostView, usage: Usage, demand: Demand) -> float:
    cpu = (usage.cpus + demand.cpus) / host.cpus if host.cpus else 1.0
    memory = (usage.memory + demand.memory) / host.memory if host.memory else 1.0
    return (cpu + memory) / 2


def open_to(request: Request, host: HostView) -> Misfit | None:
    """The filters that do not depend on what the machine takes: readiness, cordon, failure
    domain, selector."""
    if not host.ready:
        return Misfit("not ready")
    if host.unschedulable:
        return Misfit("cordoned")
    domain = request.failure_domain
    if domain is not None and domain not in (host.name, host.zone):
        return Misfit(f"not in failure domain {domain}")
    if not selector_matches(request.selector, host.labels):
        return Misfit("not matching hostSelector")
    return None


def host_misfit(request: Request, host: HostView, found: Fit, usage: Usage) -> Misfit | None:
    """Why `host` may not take the machine, or None when it may: every filter of placement but
    the choice of host, in order (the first that fails is the reason). `found` is what the
    machine takes there, or why it cannot be built there; `usage` what the host holds already.
    Placement runs it for every host; a host's daemon for itself, before it builds a machine
    bound to it (`admission`), so no path builds what placement would refuse."""
    refused = open_to(request, host)
    if refused is not None:
        return refused
    if isinstance(found, Misfit):
        return found
    return capacity_misfit(host, usage, found)


def decide(
    request: Request,
    hosts: Sequence[HostView],
    fit: Callable[[HostView], Fit],
    ledger: Ledger,
) -> Decision:
    """The host for one machine, or why there is none. Records nothing: the caller puts the
    decision into the ledger once it is bound (or assumed)."""
    misfits: list[Misfit] = []
    best: tuple[int, float, str] | None = None
    chosen: tuple[HostView, Demand] | None = None
    group = (request.namespace, request.spread_group) if request.spread_group else None
    members = ledger.group(group) if group is not None else Counter()
    by_zone = group is not None and request.spread_by is SpreadBy.ZONE
    zone_members: Counter[str | None] = Counter()
    if by_zone:
        zones = {h.name: h.zone for h in hosts}
        for name, count in members.items():
            zone_members[zones.get(name)] += count
    for host in hosts:
        usage = ledger.usage(host.name)
        # The filters in `host_misfit`'s order; `fit` (a resolution) only for the hosts open.
        misfit = open_to(request, host)
        if misfit is None:
            found = fit(host)
            misfit = found if isinstance(found, Misfit) else capacity_misfit(host, usage, found)
        if misfit is not None:
            misfits.append(misfit)
            continue
        assert isinstance(found, Demand)
        spread = zone_members[host.zone] if by_zone else members[host.name]
        score = (spread, _share(host, usage, found), host.name)
        if best is None or score < best:
            best, chosen = score, (host, found)
    if chosen is None:
        return Decision(None, message=_message(len(hosts), misfits))
    host, demand = chosen
    assert best is not None
    return Decision(host.name, demand, spread_honoured=group is None or best[0] == 0)


def _amount(value: int, unit: str) -> str:
    if unit == "bytes":
        return format_size(value) if value >= 2**20 else f"{value}B"
    return str(value)


def _message(total: int, misfits: Sequence[Misfit]) -> str:
    """kube-scheduler's summary: how many hosts fit, and how many failed for each reason.

    What the machine needs is said, what each host has free is not: free memory and pool space
    move with every guest write (a message that changes is a status write and an Event each
    time), and they would tell a tenant about other tenants' hosts."""
    if total == 0:
        return "0/0 hosts fit: no LibvirtHost exists (is the provider's DaemonSet running?)"
    counts: Counter[str] = Counter(m.kind for m in misfits)
    parts = []
    for kind, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        same = next(m for m in misfits if m.kind == kind)
        text = f"{count} {kind}"
        if same.unit:
            text += f" (needs {_amount(same.needs, same.unit)})"
        parts.append(text)
    return f"0/{total} hosts fit: " + ", ".join(parts)
