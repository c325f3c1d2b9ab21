"""Who may hold a `coordination.k8s.io` Lease now: the rule of Kubernetes leader election.

Pure: the elector (`generic.adapters.lease`) reads the Lease, asks here, and writes. A Lease may
be taken when nobody holds it, when this candidate already does (a renewal), or when the
holder's last renewal is older than the lease duration (the holder is presumed dead). Every
write carries the resourceVersion that was read, so two candidates that both decide to take an
expired Lease cannot both succeed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

__all__ = ["LeaseRecord", "may_hold"]


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    renewed: dt.datetime | None
    duration_seconds: int


def may_hold(record: LeaseRecord | None, *, identity: str, now: dt.datetime) -> bool:
    """Whether `identity` may write itself as the holder of the Lease `record` describes."""
    if record is None or not record.holder or record.holder == identity:
        return True
    if record.renewed is None:
        return True
    return now >= record.renewed + dt.timedelta(seconds=record.duration_seconds)
