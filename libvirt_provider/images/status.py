"""A LibvirtImage's `status.hosts`: this host's entry, and merging it into the shared list.

Every daemon writes only its own host's entry into one list that all hosts share, so the merge
keeps every other entry exactly as read (even fields this version does not know) and says when
nothing changed, so no write is made. The shell does the read-modify-write with the object's
resourceVersion (`KubeAdapter.update_image_hosts`) and calls `hosts_update` again on a conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.image import ImageHostStatus, ImagePhase
from libvirt_provider.images.names import image_base_name

__all__ = ["BaseState", "host_entry", "hosts_update", "merge_hosts"]

Obj = dict[str, Any]

# Messages end up in every reader's output; an error this long says nothing more.
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class BaseState:
    """What this host knows of one cached base in one pool."""

    pool: str
    volume: str
    verified: bool = False  # the base and its marker are in the pool
    importing: bool = False
    bytes_done: int = 0
    bytes_total: int | None = None
    error: str | None = None  # the last import of it failed, and none ran since


def host_entry(host: str, states: Iterable[BaseState]) -> Obj | None:
    """This host's entry, or None when the host has nothing of the image.

    Several pools can hold the same base (disks in different storage classes); a running import
    is the most useful thing to show, then a failure (some disk cannot get its base), then Ready.
    """
    ordered = sorted(states, key=lambda s: s.pool)
    entry: ImageHostStatus | None = None
    if importing := [s for s in ordered if s.importing]:
        s = importing[0]
        entry = ImageHostStatus(
            host=host,
            phase=ImagePhase.IMPORTING,
            pool=s.pool,
            volume=s.volume,
            bytes_done=s.bytes_done,
            bytes_total=s.bytes_total,
        )
    elif failed := [s for s in ordered if s.error is not None and not s.verified]:
        s = failed[0]
        entry = ImageHostStatus(
            host=host,
            phase=ImagePhase.FAILED,
            pool=s.pool,
            volume=s.volume,
            message=(s.error or "")[:MAX_MESSAGE],
        )
    elif ready := [s for s in ordered if s.verified]:
        s = ready[0]
        entry = ImageHostStatus(host=host, phase=ImagePhase.READY, pool=s.pool, volume=s.volume)
    if entry is None:
        return None
    dumped: Obj = entry.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def merge_hosts(current: Sequence[Any], host: str, entry: Obj | None) -> list[Any] | None:
    """`current` with this host's entry replaced (or removed); None when that changes nothing."""
    mine = [e for e in current if isinstance(e, Mapping) and e.get("host") == host]
    if (entry is None and not mine) or (entry is not None and mine == [entry]):
        return None
    merged: list[Any] = []
    placed = False
    for item in current:
        if isinstance(item, Mapping) and item.get("host") == host:
            if entry is not None and not placed:
                merged.append(entry)
                placed = True
            continue
        merged.append(item)
    if entry is not None and not placed:
        merged.append(entry)
    return merged


def hosts_update(
    host: str, states_of: Callable[[str], list[BaseState] | None]
) -> Callable[[Mapping[str, Any]], list[Any] | None]:
    """The change `KubeAdapter.update_image_hosts` applies to a freshly read image.

    `states_of(base name)` says what the host has of that base, or None when it was not looked at
    (then the entry is left alone).
    """

    def update(image: Mapping[str, Any]) -> list[Any] | None:
        name = image_base_name(image)
        states = [] if name is None else states_of(name)
        if states is None:
            return None
        status = image.get("status")
        current = status.get("hosts") if isinstance(status, Mapping) else None
        return merge_hosts(
            current if isinstance(current, list) else [], host, host_entry(host, states)
        )

    return update
