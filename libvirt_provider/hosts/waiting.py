"""Which waiting machines a pass looks at again (pure).

A machine no host took is decided again only when something it was judged against changed: the
capacity (each host's readiness, cordon, labels, offers, allocatable, what is allocated there,
pool space to the GiB), its own object or its VirtualMachine's. Pool space is compared coarsely
because it moves with every guest write; a machine that waits for a few MiB of pool space is still
looked at by the full pass every `RECONSIDER_ALL_SECONDS` (which also catches catalog changes,
which do not wake the placer). Without this, 1,000 waiting machines are decided again on every
pass and a machine that fits waits behind all of them (kube-scheduler keeps such pods in its
unschedulable queue until a cluster event may make them schedulable, for the same reason).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence

from libvirt_provider.hosts.placement import HostView, Ledger

__all__ = ["RECONSIDER_ALL_SECONDS", "Waiting", "capacity_state"]

RECONSIDER_ALL_SECONDS = 60.0

_POOL_GRAIN = 2**30


def capacity_state(views: Sequence[HostView], ledger: Ledger) -> Hashable:
    """What decisions depend on besides the machine itself; equal when no decision can change."""
    state = []
    for view in sorted(views, key=lambda v: v.name):
        usage = ledger.usage(view.name)
        state.append(
            (
                view.name,
                view.ready,
                view.unschedulable,
                tuple(sorted(view.labels.items())),
                view.cpus,
                view.memory,
                tuple(sorted((p, free // _POOL_GRAIN) for p, free in view.pools.items())),
                view.domain_types,
                view.networks,
                view.machine_types,
                view.uefi,
                usage.cpus,
                usage.memory,
                usage.machines,
                tuple(sorted((p, n // _POOL_GRAIN) for p, n in usage.pending.items() if n)),
            )
        )
    return tuple(state)


class Waiting:
    """What each waiting machine was last judged against."""

    def __init__(self, started: float) -> None:
        self._judged: dict[str, Hashable] = {}
        self._full_pass_at = started

    def full_pass(self, now: float) -> bool:
        """True (and the clock restarted) when every waiting machine is due a look."""
        if now - self._full_pass_at < RECONSIDER_ALL_SECONDS:
            return False
        self._full_pass_at = now
        self._judged.clear()
        return True

    def unchanged(self, key: str, judged: Hashable) -> bool:
        """True when `key` was last judged against exactly this."""
        return self._judged.get(key) == judged

    def remember(self, key: str, judged: Hashable) -> None:
        self._judged[key] = judged

    def forget(self, key: str) -> None:
        self._judged.pop(key, None)

    def keep_only(self, live: Collection[str]) -> None:
        for key in [k for k in self._judged if k not in live]:
            del self._judged[key]

    def __contains__(self, key: object) -> bool:
        return key in self._judged

    def __len__(self) -> int:
        return len(self._judged)
