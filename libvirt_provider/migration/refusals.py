"""What refuses a migration before anything is copied, pure: one list, checked in order.

The source's daemon gathers the facts (the machine, its VM, the target's LibvirtHost, the
machine's lock, the networks and pools its running domain uses) and this module says whether
the migration may go on, and if not, the reason (a constant) and a message a person can act on.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from libvirt_provider import constants as c

__all__ = ["Refusal", "Request", "TargetFacts", "refusal"]


@dataclass(frozen=True)
class TargetFacts:
    """The target's LibvirtHost as the refusals read it."""

    ready: bool
    cordoned: bool
    networks: frozenset[str] = frozenset()
    pools: frozenset[str] = frozenset()
    zone: str | None = None


@dataclass(frozen=True)
class Request:
    migration: str
    machine_host: str | None
    target: str | None
    target_facts: TargetFacts | None
    """None: no LibvirtHost of that name."""
    running: bool
    power_state: str | None
    failure_domain: str | None = None
    source_zone: str | None = None
    locked_by: str | None = None
    """The migration named in the machine's status.migration, if any."""
    networks: Collection[str] = field(default_factory=frozenset)
    pools: Collection[str] = field(default_factory=frozenset)
    target_migratable: bool = True
    """Whether the target's daemon takes migrations (--migration-uri); unknown counts as yes."""


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def refusal(req: Request) -> Refusal | None:
    """The first reason the migration cannot go on, or None."""
    if req.locked_by is not None and req.locked_by != req.migration:
        return Refusal(
            c.MIGRATION_REASON_ALREADY_MIGRATING,
            f"the machine is being moved by migration {req.locked_by!r}; one migration of a "
            "machine runs at a time (delete that one to cancel it, or wait for it to end)",
        )
    if req.machine_host is None:
        return Refusal(
            c.MIGRATION_REASON_MACHINE_NOT_BOUND,
            "the machine has no host yet: there is nothing to move",
        )
    if not req.running:
        return Refusal(
            c.MIGRATION_REASON_MACHINE_NOT_RUNNING,
            f"the machine is not running (power state {req.power_state or 'unknown'}): only a "
            "running machine is live-migrated; a stopped one is not moved (no offline migration)",
        )
    if req.target is None:
        return Refusal(
            c.MIGRATION_REASON_TARGET_REQUIRED,
            "no target host was given and none was chosen",
        )
    if req.target == req.machine_host:
        return Refusal(
            c.MIGRATION_REASON_SAME_HOST,
            f"the machine already runs on host {req.target!r}: the target must be another host",
        )
    domain = req.failure_domain
    if domain is not None and (domain in (req.machine_host, req.source_zone)):
        facts = req.target_facts
        if domain == req.machine_host or facts is None or facts.zone != domain:
            return Refusal(
                c.MIGRATION_REASON_PINNED,
                f"the VirtualMachine's failureDomain {domain!r} pins it to where it runs; host "
                f"{req.target!r} is outside it",
            )
    facts = req.target_facts
    if facts is None:
        return Refusal(
            c.MIGRATION_REASON_TARGET_NOT_FOUND, f"there is no LibvirtHost {req.target!r}"
        )
    if facts.cordoned:
        return Refusal(
            c.MIGRATION_REASON_TARGET_CORDONED,
            f"host {req.target!r} is cordoned (spec.unschedulable): nothing is moved onto it",
        )
    if not facts.ready:
        return Refusal(
            c.MIGRATION_REASON_TARGET_NOT_READY,
            f"host {req.target!r} is not Ready: its daemon or its libvirtd is not serving",
        )
    missing = sorted(set(req.networks) - facts.networks)
    if missing:
        return Refusal(
            c.MIGRATION_REASON_TARGET_UNSUITABLE,
            f"host {req.target!r} lacks the machine's network(s) {', '.join(missing)}",
        )
    missing = sorted(set(req.pools) - facts.pools)
    if missing:
        return Refusal(
            c.MIGRATION_REASON_TARGET_UNSUITABLE,
            f"host {req.target!r} lacks the machine's storage pool(s) {', '.join(missing)}",
        )
    if not req.target_migratable:
        return Refusal(
            c.MIGRATION_REASON_TARGET_NOT_MIGRATABLE,
            f"host {req.target!r} takes no migrations (its daemon runs without --migration-uri)",
        )
    return None
