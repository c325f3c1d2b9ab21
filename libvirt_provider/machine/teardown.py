"""Removing a machine from its host: the domain, the volumes it owns and its console log.

Deletion keeps what the user asked to keep (disks with `deleteOnTermination: false`) and never
touches a domain that holds the machine's name without being the machine's own, nor anything
named after it (its volumes, its console log). Every step treats
"already gone" as done, so a teardown interrupted by a crash is simply run again.
"""

from __future__ import annotations

import logging
from pathlib import Path

from libvirt_provider import constants as c
from libvirt_provider import naming
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
        if ref is not None:
            remove_domain(self._hv, uuid)
            crash_point("delete:after-undefine")
            self._events.event(obj, reason=c.EVENT_UNDEFINED, message=f"removed domain {ref.name}")
        self._remove_console_log(domain_name)
        prefix = f"{domain_name}--"
        for pool in sorted(self._hv.host_facts().pools):
            try:
                volumes = self._hv.list_volumes(pool)
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
            for volume in volumes:
                if volume.name.startswith(prefix) and (pool, volume.name) not in keep:
                    try:
                        self._hv.delete_volume(pool, volume.name)
                    except NotFoundError:
                        continue
                    self._events.event(
                        obj, reason=c.EVENT_VOLUME_DELETED, message=f"deleted {pool}/{volume.name}"
                    )

    def _remove_console_log(self, domain_name: str) -> None:
        # The log is a host file the domain wrote, not a volume: it goes with the machine.
        path = naming.console_log_file(self._console_log_dir, domain_name)
        if path is None:
            return
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as err:
            log.warning("could not remove the console log %s: %s", path, err)
