"""This host's cache of imported images: its entries in LibvirtImage status, and its cleanup.

One thread per daemon does two jobs that need the same facts (the cluster's LibvirtImages and the
cached bases in the host's pools):

- **status**: each LibvirtImage's `status.hosts` gets this host's entry (Importing with bytes,
  Ready, Failed with the reason), written only when it differs from what is there. Progress of a
  running import is written at the importer's ticks; a full pass also repairs entries a restarted
  daemon finds missing or stale.
- **collection**: cached bases nothing uses any more are deleted with their markers, by the rule in
  `image_gc.py`.

A full pass runs at start, when asked (a LibvirtImage's spec changed or it was deleted, a machine of
this host was deleted, an import ended) and periodically. Passes never overlap, and requests made
while one runs are folded into the next.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

from prometheus_client import Counter, Gauge

from generic.background import BackgroundLoop
from libvirt_provider import constants as c
from libvirt_provider.driver.base import PoolAccess
from libvirt_provider.driver.types import VolumeInfo
from libvirt_provider.errors import NotFoundError, ProviderError
from libvirt_provider.images.gc import CachedBase, PoolVolume, plan_collection, references
from libvirt_provider.images.importer import ImageImporter, ImportRecord
from libvirt_provider.images.names import marker_name, parse_cached_name
from libvirt_provider.images.status import BaseState, hosts_update
from libvirt_provider.resolved import BaseImage

__all__ = ["ImageCache", "ImageStore"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
HostsChange = Callable[[Mapping[str, Any]], list[Any] | None]
T = TypeVar("T")

# How long after the importer hands a base to a machine it stays off-limits to the collector: it
# covers the moment between a machine learning that its base is ready and its overlay existing.
HANDOUT_GRACE_SECONDS = 60.0
# After a failed pass (API or libvirt unreachable), try again this soon rather than a period later.
RETRY_SECONDS = 30.0

PASSES: Final = Counter(
    "vmapi_libvirt_image_cache_passes_total",
    "Full passes over this host's cached images, by result.",
    ["result"],
)
"""result: ok; incomplete (a pool could not be listed: nothing collected); error."""

LAST_PASS: Final = Gauge(
    "vmapi_libvirt_image_cache_last_pass_timestamp_seconds",
    "When the last full pass that completed began (Unix time); every LibvirtImage and volume it "
    "looked at was read after that moment.",
)

BASES_DELETED: Final = Counter(
    "vmapi_libvirt_image_bases_deleted_total",
    "Cached base images deleted because nothing used them any more.",
)


class ImageStore(Protocol):
    def list_cluster(self, plural: str) -> list[Obj]: ...

    def update_image_hosts(
        self, name: str, change: HostsChange, *, current: Obj | None = None
    ) -> bool: ...


class ImageCache:
    def __init__(
        self,
        *,
        store: ImageStore,
        hypervisor: PoolAccess,
        importer: ImageImporter,
        host: str,
        interval: float = 300.0,
        collect: bool = True,
        grace: float = HANDOUT_GRACE_SECONDS,
    ) -> None:
        self._store = store
        self._hv = hypervisor
        self._importer = importer
        self._host = host
        self._interval = interval
        self._collect = collect
        self._grace = grace
        self._lock = threading.Lock()
        self._full = True  # the first pass repairs what a previous daemon left
        self._progressed: dict[str, BaseImage] = {}
        self._loop = BackgroundLoop("image-cache", self._run)

    # -- requests (any thread) ---------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._loop.stop(timeout)

    def request_pass(self) -> None:
        """Look at every image and every cached base soon."""
        with self._lock:
            self._full = True
        self._loop.wake()

    def import_changed(self, base: BaseImage) -> None:
        """The importer's callback: progress is written for the image; an ended import asks for a
        full pass (other images may share the base, and a finished base may now be collectable)."""
        if not self._importer.running(base):
            self.request_pass()
            return
        with self._lock:
            self._progressed[base.image] = base
        self._loop.wake()

    # -- the thread --------------------------------------------------------------------------

    def _run(self, loop: BackgroundLoop) -> None:
        next_full = time.monotonic()
        while not loop.stopping:
            if loop.wait(next_full - time.monotonic()):
                return
            with self._lock:
                full = self._full or time.monotonic() >= next_full
                progressed = {} if full else self._progressed
                self._full = False
                self._progressed = {}
            if full:
                next_full = time.monotonic() + self._measured_pass()
            for base in progressed.values():
                self._guarded(functools.partial(self._progress, base))

    def _measured_pass(self) -> float:
        """One full pass, counted; the delay until the next one."""
        began = time.time()
        outcome = self._guarded(self._full_pass)
        if outcome is None:
            PASSES.labels("error").inc()
            return RETRY_SECONDS
        delay, complete = outcome
        if complete:
            PASSES.labels("ok").inc()
            LAST_PASS.set(began)
        else:
            PASSES.labels("incomplete").inc()
        return delay

    def _guarded(self, work: Callable[[], T]) -> T | None:
        try:
            return work()
        except ProviderError as err:
            log.warning("image cache on host %s: %s; trying again later", self._host, err)
        except Exception:
            log.exception("image cache on host %s failed; trying again later", self._host)
        return None

    def _progress(self, base: BaseImage) -> None:
        """Write the entry of the image whose import just ticked (one read, at most one write)."""
        states = self._states_by_lookup(base.volume)

        def states_of(name: str) -> list[BaseState] | None:
            return states if name == base.volume else None

        self._store.update_image_hosts(base.image, hosts_update(self._host, states_of))

    def _full_pass(self) -> tuple[float, bool]:
        """Collect, then bring every image's entry for this host up to date. Returns the delay
        until the next pass, and whether every pool could be looked at."""
        started = time.monotonic()
        images = self._store.list_cluster(c.IMAGE_PLURAL)
        volumes, unlisted = self._host_volumes()
        delay = self._interval
        if self._collect and not unlisted:
            deleted, deferred = self._collect_unused(images, volumes, started)
            volumes = [v for v in volumes if (v.pool, v.name) not in deleted]
            if deferred:
                delay = min(delay, self._grace)
        elif unlisted:
            log.warning(
                "image cache: pools %s could not be listed; nothing is collected and no image "
                "status is written until they can be",
                ", ".join(unlisted),
            )
            return min(delay, RETRY_SECONDS), False
        states = _states_from_listing(volumes, self._importer.records())

        def states_of(name: str) -> list[BaseState]:
            return states.get(name, [])

        update = hosts_update(self._host, states_of)
        for image in images:
            name = (image.get("metadata") or {}).get("name")
            if not isinstance(name, str):
                continue
            try:
                self._store.update_image_hosts(name, update, current=image)
            except ProviderError as err:
                log.warning("could not write the status of LibvirtImage %s: %s", name, err)
        return delay, True

    def _host_volumes(self) -> tuple[list[VolumeInfo], list[str]]:
        volumes: list[VolumeInfo] = []
        unlisted: list[str] = []
        for pool in sorted(self._hv.host_facts().pools):
            try:
                volumes.extend(self._hv.list_volumes(pool))
            except ProviderError as err:
                # An inactive pool may hold overlays on a base: without seeing it, nothing is safe.
                log.debug("listing pool %s: %s", pool, err)
                unlisted.append(pool)
        return volumes, unlisted

    def _collect_unused(
        self, images: list[Obj], volumes: list[VolumeInfo], started: float
    ) -> tuple[set[tuple[str, str]], bool]:
        """Delete what the rule allows; the (pool, name) of every deleted volume, and whether
        something was spared only because the importer was busy with it."""
        since = started - self._grace
        plan = plan_collection(
            [PoolVolume(v.pool, v.name, v.path, v.backing_path) for v in volumes],
            references(images),
            self._importer.busy(since),
        )
        deleted: set[tuple[str, str]] = set()
        wanted = {base.key: base for base in plan.delete}
        with self._importer.claim_for_collection(wanted.keys(), since) as claimed:
            for key in sorted(claimed):
                deleted |= self._delete(wanted[key])
        return deleted, bool(plan.deferred) or len(claimed) < len(wanted)

    def _delete(self, base: CachedBase) -> set[tuple[str, str]]:
        gone: set[tuple[str, str]] = set()
        for name in base.deletions:
            try:
                self._hv.delete_volume(base.pool, name)
            except NotFoundError:
                pass
            except ProviderError as err:
                log.warning("could not delete unused image volume %s/%s: %s", base.pool, name, err)
                return gone
            gone.add((base.pool, name))
        BASES_DELETED.inc()
        log.info(
            "deleted unused cached image %s/%s%s: no LibvirtImage resolves to it and no volume "
            "is backed by it",
            base.pool,
            base.volume,
            "" if base.path is not None else " (only its marker was left)",
        )
        return gone

    def _states_by_lookup(self, volume: str) -> list[BaseState]:
        """What each pool of the host has of one base, looked up rather than listed."""
        records = self._importer.records()
        states = []
        for pool in sorted(self._hv.host_facts().pools):
            record = records.get((pool, volume))
            verified = self._importer.verified(pool, volume)
            if verified or record is not None:
                states.append(_state(pool, volume, verified, record))
        return states


def _state(pool: str, volume: str, verified: bool, record: ImportRecord | None) -> BaseState:
    if record is None:
        return BaseState(pool=pool, volume=volume, verified=verified)
    return BaseState(
        pool=pool,
        volume=volume,
        verified=verified and not record.running,
        importing=record.running,
        bytes_done=record.bytes_done,
        bytes_total=record.bytes_total,
        error=record.error,
    )


def _states_from_listing(
    volumes: list[VolumeInfo], records: Mapping[tuple[str, str], ImportRecord]
) -> dict[str, list[BaseState]]:
    """What the host has of each base, by base name, from a listing of its pools."""
    present = {(v.pool, v.name) for v in volumes}
    keys = {
        (pool, parsed.base)
        for pool, name in present
        if (parsed := parse_cached_name(name)) is not None
    } | set(records)
    states: dict[str, list[BaseState]] = {}
    for pool, name in sorted(keys):
        verified = (pool, name) in present and (pool, marker_name(name)) in present
        states.setdefault(name, []).append(_state(pool, name, verified, records.get((pool, name))))
    return states
