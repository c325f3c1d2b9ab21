"""Creating a machine's domain: its volumes, its cloud-init medium, define, start.

Every step finds what an interrupted earlier attempt made (the domain UUID is the
LibvirtMachine's uid, volume names derive from the domain name), so a repeated creation never makes
a second copy. When a step fails, what this attempt made is removed before the error goes up: the
work queue's backoff then decides when to try again, so a step that always fails costs a few
attempts an hour, never a loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from generic import constants as vmapi
from generic.api import PowerState
from libvirt_provider import constants as c
from libvirt_provider.domainxml import render_domain_xml
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.errors import ProviderError
from libvirt_provider.faults import crash_point
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.store import EventSink, Obj
from libvirt_provider.machine.teardown import remove_domain
from libvirt_provider.machine.update import ensure_volume
from libvirt_provider.resolve.cloudinit import build_cidata_iso
from libvirt_provider.resolved import ResolvedMachine

__all__ = ["Creation", "ImageWait"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageWait:
    """A base image the machine needs is not in its pool yet."""

    image: str
    failed: bool
    message: str


class Creation:
    def __init__(self, *, hypervisor: Hypervisor, events: EventSink, images: ImageImporter) -> None:
        self._hv = hypervisor
        self._events = events
        self._images = images

    def image_wait(self, plan: ResolvedMachine) -> ImageWait | None:
        """None when every base image is in the pool; else the first one still missing (its
        import is started or going on)."""
        for volume in plan.volumes:
            if volume.base is None:
                continue
            state = self._images.ensure(volume.base)
            if state.ready:
                continue
            name = volume.base.image
            if volume.base.snapshot:
                # Nothing imports a snapshot's copy: missing, it waits for the snapshot's pass.
                return ImageWait(
                    image=name,
                    failed=False,
                    message=f"{volume.base.label}: volume {volume.base.volume!r} is not in "
                    f"pool {volume.base.pool!r}",
                )
            if state.failed:
                return ImageWait(
                    image=name, failed=True, message=f"image {name!r}: {state.message}"
                )
            progress = (
                f"{state.bytes_done} of {state.bytes_total} bytes"
                if state.bytes_total
                else "starting"
            )
            return ImageWait(
                image=name,
                failed=False,
                message=f"importing image {name!r} into pool {volume.base.pool!r}: {progress}",
            )
        return None

    def create(self, obj: Obj, plan: ResolvedMachine, desired: PowerState) -> str:
        """Make the machine's volumes and domain, started when `desired` is on; the domain UUID.

        On failure, what this call made is removed and the error raised."""
        made_volumes: list[tuple[str, str]] = []
        uuid: str | None = None
        try:
            self.make_volumes(plan, made_volumes)
            crash_point("create:after-volumes")
            ref = self._hv.define(render_domain_xml(plan.domain))
            uuid = ref.uuid
            crash_point("create:after-define")
            self._hv.set_autostart(ref.uuid, plan.autostart)
            self._events.event(obj, reason=c.EVENT_DEFINED, message=f"defined domain {ref.name}")
            if desired == vmapi.POWERED_ON:
                self._hv.start(ref.uuid)
                crash_point("create:after-start")
                self._events.event(
                    obj, reason=c.EVENT_STARTED, message=f"started domain {ref.name}"
                )
        except ProviderError:
            self._undo(plan, uuid=uuid, volumes=made_volumes)
            raise
        return ref.uuid

    def make_volumes(self, plan: ResolvedMachine, made: list[tuple[str, str]]) -> None:
        """The machine's volumes (overlays on the cached bases, blank data disks) and its
        cloud-init medium, those missing; each one made is appended to `made`."""
        for volume in plan.volumes:
            if ensure_volume(self._hv, volume):
                made.append((volume.pool, volume.volume))
        if plan.cloud_init is not None:
            ci = plan.cloud_init
            if self._hv.find_volume(ci.pool, ci.volume) is None:
                self._hv.upload_volume(pool=ci.pool, name=ci.volume, data=build_cidata_iso(ci))
                made.append((ci.pool, ci.volume))

    def prepare(self, plan: ResolvedMachine) -> list[tuple[str, str]]:
        """The volumes of `plan` made (or found) without a domain, for a migration's target:
        (pool, volume) of each; on failure, what this call made is removed and the error
        raised."""
        made: list[tuple[str, str]] = []
        try:
            self.make_volumes(plan, made)
        except ProviderError:
            self._undo(plan, uuid=None, volumes=made)
            raise
        wanted = [(v.pool, v.volume) for v in plan.volumes]
        if plan.cloud_init is not None:
            wanted.append((plan.cloud_init.pool, plan.cloud_init.volume))
        return wanted

    def _undo(
        self, plan: ResolvedMachine, *, uuid: str | None, volumes: list[tuple[str, str]]
    ) -> None:
        try:
            if uuid is not None:
                remove_domain(self._hv, uuid)
            for pool, name in volumes:
                self._hv.delete_volume(pool, name)
        except ProviderError as err:
            log.warning(
                "cleaning up a failed create of %s left something: %s", plan.domain.name, err
            )
