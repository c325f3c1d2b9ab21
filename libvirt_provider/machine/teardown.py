"""Removing a machine from its host: the domain, the volumes it owns and its console log.

A volume is removed only when the machine provably owns it, never for its name alone:
- it is a disk of the machine's own domain definition (found by the machine's UUID) and named
  after that domain, read before anything is removed; or
- its name carries the machine's identity (`naming.carries_identity`: a 64-bit hash over the
  namespace, name and uid, which no other object can aim at), which also finds volumes an
  interrupted creation made before the domain was defined.
A machine from before names carried the uid therefore loses only what its definition names.

Deletion keeps what the user asked to keep (disks with `deleteOnTermination: false`) and touches
nothing at all while a foreign domain holds the machine's name. The domain is stopped first and
undefined last, so a teardown interrupted by a crash still finds the definition and runs again;
every step treats "already gone" as done.
"""

from __future__ import annotations

import logging
from pathlib import Path

from libvirt_provider import constants as c
from libvirt_provider import naming
from libvirt_provider.domainxml import pool_volumes
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import DomainState
from libvirt_provider.errors import (
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    StateConflictError,
)
from libvirt_provider.faults import crash_point
from libvirt_provider.machine.store import EventSink, Obj

__all__ = ["Teardown", "remove_domain"]

log = logging.getLogger(__name__)


def remove_domain(hv: Hypervisor, uuid: str) -> None:
    """Stop the domain if it runs, then undefine it (with its NVRAM, saved state, snapshots)."""
    if hv.status(uuid).state is not DomainState.SHUTOFF:
        hv.destroy(uuid)
    hv.undefine(uuid)


class Teardown:
    def __init__(
        self, *, hypervisor: Hypervisor, events: EventSink, console_log_dir: str | None
    ) -> None:
        self._hv = hypervisor
        self._events = events
        self._console_log_dir = console_log_dir

    def run(self, obj: Obj, *, uuid: str, domain_name: str, keep: set[tuple[str, str]]) -> None:
        """Remove the machine's domain and every volume it owns except those in `keep`."""
        try:
            ref = self._hv.lookup(uuid=uuid, name=domain_name)
        except ForeignDomainError as err:
            # The name is another machine's: so are the volumes and the console log carrying it.
            # This machine never got a domain of its own, so it owns nothing here to remove.
            self._events.event(
                obj, reason=c.EVENT_NOTHING_REMOVED, message=f"{err}; nothing was removed"
            )
            return
        meta = obj.get("metadata") or {}
        identity = (str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
        named = naming.carries_identity(domain_name, *identity)
        owned: set[tuple[str, str]] = set()
        if ref is not None:
            prefix = f"{ref.name}--"
            owned |= {
                (pool, volume)
                for pool, volume in pool_volumes(self._hv.domain_xml(uuid, inactive=True))
                if volume.startswith(prefix)
            }
            if self._hv.status(uuid).state is not DomainState.SHUTOFF:
                self._hv.destroy(uuid)
        if named:
            owned |= self._named_after(obj, domain_name)
        for pool, volume in sorted(owned - keep):
            try:
                self._hv.delete_volume(pool, volume)
            except NotFoundError:
                continue
            self._events.event(
                obj, reason=c.EVENT_VOLUME_DELETED, message=f"deleted {pool}/{volume}"
            )
        if ref is not None or named:
            self._remove_console_log(ref.name if ref is not None else domain_name)
        if ref is not None:
            crash_point("delete:before-undefine")
            remove_domain(self._hv, uuid)
            self._events.event(obj, reason=c.EVENT_UNDEFINED, message=f"removed domain {ref.name}")

    def _named_after(self, obj: Obj, domain_name: str) -> set[tuple[str, str]]:
        """Every volume in the host's pools whose name starts with `<domain_name>--`."""
        prefix = f"{domain_name}--"
        found: set[tuple[str, str]] = set()
        for pool in sorted(self._hv.host_facts().pools):
            try:
                names = self._hv.volume_names(pool)
            except (StateConflictError, PermanentError) as err:
                # An inactive or broken pool must not block every deletion on the host; nothing
                # in it can be deleted now anyway.
                self._events.event(
                    obj,
                    reason=c.EVENT_POOL_SKIPPED,
                    message=f"pool {pool!r} could not be listed ({err}); this machine's volumes "
                    "there, if any, are left",
                    warning=True,
                )
                continue
            found |= {(pool, name) for name in names if name.startswith(prefix)}
        return found

    def _remove_console_log(self, domain_name: str) -> None:
        # The log is a host file the domain wrote, not a volume: it goes with the machine.
        path = naming.console_log_file(self._console_log_dir, domain_name)
        if path is None:
            return
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            log.warning("could not remove the console log %s: %s", path, err)
