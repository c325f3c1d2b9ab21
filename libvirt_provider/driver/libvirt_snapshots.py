"""Snapshot calls of the libvirt adapter: copy a volume through libvirt's streams, move a running
machine's writes onto pending overlays for the copy's duration, and merge them back.

Every call is a libvirt API call (storage streams, domain snapshots, block jobs), so a remote
host works the same as the local one: nothing here reads or writes a file of the host.
docs/snapshots.md says why this mechanism was chosen and what it costs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import libvirt
from lxml import etree
from lxml.builder import E

from libvirt_provider.driver.libvirt_domains import LibvirtDomains
from libvirt_provider.driver.libvirt_errors import is_agent_unavailable, translated
from libvirt_provider.driver.libvirt_volumes import LibvirtVolumes, _volume_info
from libvirt_provider.driver.types import PendingOverlay, VolumeInfo
from libvirt_provider.errors import GuestAgentUnavailableError, RetryableError

__all__ = ["LibvirtSnapshots"]

log = logging.getLogger(__name__)

_SNAPSHOT_FLAGS = (
    libvirt.VIR_DOMAIN_SNAPSHOT_CREATE_DISK_ONLY
    # No snapshot object is kept in libvirt: the overlays are merged back at once, and a domain
    # with snapshot metadata could no longer be undefined without a flag older libvirts lack.
    | libvirt.VIR_DOMAIN_SNAPSHOT_CREATE_NO_METADATA
    # The overlays are made first through the storage API, so the pool knows (and counts) them.
    | libvirt.VIR_DOMAIN_SNAPSHOT_CREATE_REUSE_EXT
    | libvirt.VIR_DOMAIN_SNAPSHOT_CREATE_ATOMIC
)
_POLL_SECONDS = 0.05
_READ_CHUNK = 1024 * 1024


class LibvirtSnapshots(LibvirtDomains, LibvirtVolumes):
    def copy_volume(self, *, pool: str, source: str, target: str) -> VolumeInfo:
        """A new volume `target` in `pool` whose bytes are those of `source`, streamed through
        libvirt (holes stay holes). A qcow2 overlay stays an overlay on the same backing image:
        the copy costs what the source's own file holds, never the image again. A failed copy
        leaves nothing behind."""

        def create(conn: libvirt.virConnect) -> None:
            p = conn.storagePoolLookupByName(pool)
            src = p.storageVolLookupByName(source)
            root = etree.fromstring(src.XMLDesc(0).encode())
            fmt = root.find("target/format")
            volume = E.volume(
                E.name(target),
                E.capacity(str(int(src.info()[1])), unit="bytes"),
                E.allocation("0", unit="bytes"),
                E.target(E.format(type=fmt.get("type") if fmt is not None else "raw")),
            )
            backing = root.findtext("backingStore/path")
            if backing:
                backing_format = root.find("backingStore/format")
                volume.append(
                    E.backingStore(
                        E.path(backing),
                        E.format(
                            type=backing_format.get("type")
                            if backing_format is not None
                            else "qcow2"
                        ),
                    )
                )
            p.createXML(etree.tostring(volume, encoding="unicode"), 0)

        def remove(conn: libvirt.virConnect) -> None:
            with contextlib.suppress(libvirt.libvirtError):
                conn.storagePoolLookupByName(pool).storageVolLookupByName(target).delete(0)

        def described(conn: libvirt.virConnect) -> VolumeInfo:
            return _volume_info(
                pool, conn.storagePoolLookupByName(pool).storageVolLookupByName(target)
            )

        with self._pool_lock(pool):
            self._call(create)
        try:
            # The bytes flow outside the call slots (a copy can take a while; libvirt's streams
            # are thread-safe), as image imports do.
            with translated():
                conn = self._connection()
                p = conn.storagePoolLookupByName(pool)
                inbound = conn.newStream(0)
                outbound = conn.newStream(0)
                p.storageVolLookupByName(source).download(
                    inbound, 0, 0, libvirt.VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM
                )
                p.storageVolLookupByName(target).upload(
                    outbound, 0, 0, libvirt.VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM
                )
                try:
                    inbound.sparseRecvAll(_forward(outbound), _hole(outbound), None)
                    inbound.finish()
                    outbound.finish()
                except BaseException:
                    for stream in (inbound, outbound):
                        with contextlib.suppress(libvirt.libvirtError):
                            stream.abort()
                    raise
            return self._call(described)
        except BaseException:
            with self._pool_lock(pool):
                self._call(remove)
            raise

    def divert_writes(
        self, uuid: str, overlays: Sequence[PendingOverlay], *, quiesce: bool
    ) -> None:
        """From this instant on, the running domain writes each listed disk into its pending
        overlay (made beforehand, backed by the disk's volume), all disks at one instant; the
        disks' own volumes change no more until `merge_writes`. With `quiesce`, the guest agent
        freezes the guest's file systems for that instant and libvirtd thaws them on every path
        (the agent's answers are bounded by the domain's agent timeout); an agent that is not
        there is `GuestAgentUnavailableError`, and nothing was done."""
        targets = {o.target: o for o in overlays}

        def divert(conn: libvirt.virConnect) -> None:
            dom = self._domain(conn, uuid)
            disks = []
            for element in etree.fromstring(dom.XMLDesc(0).encode()).findall("devices/disk"):
                dev = element.find("target")
                name = dev.get("dev") if dev is not None else None
                if name is None:
                    continue
                overlay = targets.get(name)
                if overlay is None:
                    disks.append(E.disk(name=name, snapshot="no"))
                else:
                    disks.append(
                        E.disk(
                            E.driver(type="qcow2"),
                            E.source(file=overlay.path),
                            name=name,
                            snapshot="external",
                            type="file",
                        )
                    )
            xml = etree.tostring(E.domainsnapshot(E.disks(*disks)), encoding="unicode")
            flags = _SNAPSHOT_FLAGS
            if quiesce:
                self._set_agent_timeout(dom)
                flags |= libvirt.VIR_DOMAIN_SNAPSHOT_CREATE_QUIESCE
            try:
                dom.snapshotCreateXML(xml, flags)
            except libvirt.libvirtError as err:
                if quiesce and is_agent_unavailable(err):
                    raise GuestAgentUnavailableError(err.get_error_message() or str(err)) from err
                raise

        self._call(divert)

    def merge_writes(self, uuid: str, target: str, *, timeout: float) -> None:
        """Merge what the running domain wrote into disk `target`'s pending overlay back into the
        volume under it, and make the domain write there again (an active block commit, then a
        pivot); the overlay is unused afterwards. A commit already under way (a daemon that
        stopped in the middle) is finished rather than started again."""
        deadline = time.monotonic() + timeout

        def job(conn: libvirt.virConnect) -> dict[str, int]:
            info = self._domain(conn, uuid).blockJobInfo(target, 0)
            return dict(info) if info else {}

        def start(conn: libvirt.virConnect) -> None:
            self._domain(conn, uuid).blockCommit(
                target,
                None,
                None,
                0,
                libvirt.VIR_DOMAIN_BLOCK_COMMIT_ACTIVE | libvirt.VIR_DOMAIN_BLOCK_COMMIT_SHALLOW,
            )

        def pivot(conn: libvirt.virConnect) -> bool:
            try:
                self._domain(conn, uuid).blockJobAbort(
                    target, libvirt.VIR_DOMAIN_BLOCK_JOB_ABORT_PIVOT
                )
            except libvirt.libvirtError as err:
                # "block job not ready for pivot": still copying; look again.
                if "not ready" in (err.get_error_message() or ""):
                    return False
                raise
            return True

        if not self._call(job):
            self._call(start)
        pivoted = False
        while True:
            info = self._call(job)
            if not info:
                if pivoted:
                    return
                # The job ended without our pivot (another client aborted it): the domain
                # still writes into the overlay.
                raise RetryableError(f"the block commit of disk {target} ended before its pivot")
            if not pivoted and info.get("end") and info.get("cur") == info.get("end"):
                pivoted = self._call(pivot)
            if time.monotonic() > deadline:
                raise RetryableError(
                    f"the block commit of disk {target} did not finish in {timeout:.0f} s "
                    f"({info.get('cur')}/{info.get('end')} bytes)"
                )
            time.sleep(_POLL_SECONDS)

    def thaw(self, uuid: str) -> None:
        """Thaw the guest's file systems (a no-op on a guest not frozen); bounded by the agent
        timeout. For a snapshot found interrupted, whatever interrupted it."""
        self._agent_call(uuid, lambda dom: dom.fsThaw(None, 0))


def _forward(outbound: libvirt.virStream) -> Callable[[libvirt.virStream, bytes, object], int]:
    def send(_stream: libvirt.virStream, data: bytes, _opaque: object) -> int:
        view = memoryview(data)
        while view:
            sent = outbound.send(bytes(view[:_READ_CHUNK]))
            view = view[sent:]
        return len(data)

    return send


def _hole(outbound: libvirt.virStream) -> Callable[[libvirt.virStream, int, object], int]:
    def hole(_stream: libvirt.virStream, length: int, _opaque: object) -> int:
        outbound.sendHole(length, 0)
        return 0

    return hole
