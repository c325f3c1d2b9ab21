"""Volume calls of the libvirt adapter: find, create, fill, grow and delete pool volumes.

Volume creation and deletion are serialised per pool, as libvirt's directory pools do not guard
against concurrent allocation of the same name. An import is written straight into a local
directory pool's folder when the daemon shares it with libvirtd (far cheaper than libvirt's
upload stream), otherwise through the stream.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid as uuidlib
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import libvirt
from lxml import etree

from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import is_missing, translated
from libvirt_provider.driver.pool_files import remove_stale_partials, write_into
from libvirt_provider.driver.types import OverlaySpec, VolumeInfo
from libvirt_provider.driver.volume_xml import render_blank_volume, render_overlay_volume
from libvirt_provider.errors import NotFoundError, PermanentError

__all__ = ["LibvirtVolumes"]

log = logging.getLogger(__name__)


class LibvirtVolumes(LibvirtConnection):
    def find_volume(self, pool: str, name: str) -> VolumeInfo | None:
        def find(conn: libvirt.virConnect) -> VolumeInfo | None:
            p = conn.storagePoolLookupByName(pool)
            try:
                return _volume_info(pool, p.storageVolLookupByName(name))
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return None
                raise

        return self._call(find)

    def list_volumes(self, pool: str) -> list[VolumeInfo]:
        def volumes(conn: libvirt.virConnect) -> list[VolumeInfo]:
            # No refresh: every volume of ours is made through libvirt, so the pool knows it, and a
            # refresh fails while another client's volume job is running in the pool.
            p = conn.storagePoolLookupByName(pool)
            found = []
            for vol in p.listAllVolumes(0):
                try:
                    found.append(_volume_info(pool, vol))
                except libvirt.libvirtError as err:
                    if not is_missing(err):
                        raise
                    # Deleted by another worker between the listing and this look: not there.
            return found

        return self._call(volumes)

    def volume_names(self, pool: str) -> list[str]:
        def names(conn: libvirt.virConnect) -> list[str]:
            return [str(name) for name in conn.storagePoolLookupByName(pool).listVolumes()]

        return self._call(names)

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo:
        xml = render_overlay_volume(spec)

        def create(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(spec.pool)
            return _volume_info(spec.pool, p.createXML(xml, 0))

        with self._pool_lock(spec.pool):
            return self._call(create)

    def create_blank(self, *, pool: str, name: str, capacity_bytes: int, format: str) -> VolumeInfo:
        xml = render_blank_volume(name=name, capacity_bytes=capacity_bytes, format=format)

        def create(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(pool)
            return _volume_info(pool, p.createXML(xml, 0))

        with self._pool_lock(pool):
            return self._call(create)

    def upload_volume(self, *, pool: str, name: str, data: bytes) -> VolumeInfo:
        xml = render_blank_volume(name=name, capacity_bytes=len(data), format="raw")

        def upload(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(pool)
            vol = p.createXML(xml, 0)
            try:
                stream = conn.newStream(0)
                vol.upload(stream, 0, len(data), 0)
                sent = 0
                while sent < len(data):
                    sent += stream.send(data[sent : sent + 256 * 1024])
                stream.finish()
            except libvirt.libvirtError:
                # Half-written volumes must not look usable: remove what this call made.
                with contextlib.suppress(libvirt.libvirtError):
                    vol.delete(0)
                raise
            return _volume_info(pool, vol)

        with self._pool_lock(pool):
            return self._call(upload)

    def upload_stream(
        self, *, pool: str, name: str, size: int, chunks: Iterable[bytes]
    ) -> VolumeInfo:
        directory = self._local_directory(pool)
        if directory is None:
            return self._upload_through_libvirt(pool=pool, name=name, size=size, chunks=chunks)
        # No pool lock while the bytes arrive: the file is not a volume until the rescan below.
        write_into(directory, name, size, chunks)

        def register(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(pool)
            p.refresh(0)
            return _volume_info(pool, p.storageVolLookupByName(name))

        try:
            with self._pool_lock(pool):
                return self._call(register)
        except BaseException:
            self._local_dirs.pop(pool, None)
            with contextlib.suppress(OSError):
                (directory / name).unlink()
            raise

    def _local_directory(self, pool: str) -> Path | None:
        """The folder of `pool` when it is a directory pool that this process shares with libvirtd
        (proved once per pool by a probe file libvirt must find); else None."""
        if pool not in self._local_dirs:
            # libvirt errors propagate uncached: the upload could not go through libvirt either.
            try:
                self._local_dirs[pool] = self._probe_local_directory(pool)
            except OSError as err:
                log.info("pool %s: writing through libvirt streams (%s)", pool, err)
                self._local_dirs[pool] = None
        return self._local_dirs[pool]

    def _probe_local_directory(self, pool: str) -> Path | None:
        def describe(conn: libvirt.virConnect) -> tuple[str, str, str]:
            p = conn.storagePoolLookupByName(pool)
            root = etree.fromstring(p.XMLDesc(0).encode())
            return conn.getURI(), root.get("type") or "", root.findtext("target/path") or ""

        uri, kind, path = self._call(describe)
        directory = Path(path)
        if urlsplit(uri).hostname or kind != "dir" or not directory.is_absolute():
            return None
        if not directory.is_dir() or not os.access(directory, os.W_OK):
            return None
        for leftover in remove_stale_partials(directory):
            log.warning("pool %s: removed %s, left by an interrupted import", pool, leftover)
        probe = f"vmapi-probe-{uuidlib.uuid4().hex}.tmp"
        (directory / probe).write_bytes(b"")

        def seen(conn: libvirt.virConnect) -> bool:
            p = conn.storagePoolLookupByName(pool)
            p.refresh(0)
            try:
                p.storageVolLookupByName(probe).delete(0)
            except libvirt.libvirtError:
                return False
            return True

        try:
            with self._pool_lock(pool):
                shared = self._call(seen)
        finally:
            with contextlib.suppress(OSError):
                (directory / probe).unlink()
        log.info(
            "pool %s: %s",
            pool,
            f"images are written into {directory}"
            if shared
            else f"{directory} here is not libvirtd's; writing through libvirt streams",
        )
        return directory if shared else None

    def _upload_through_libvirt(
        self, *, pool: str, name: str, size: int, chunks: Iterable[bytes]
    ) -> VolumeInfo:
        """Create the volume, stream the bytes into it, register what arrived.

        Only creating and registering hold the pool's lock and a call slot: a download can last
        hours, and every other machine's volume work in the pool, and every libvirt call slot,
        must stay available meanwhile (libvirt connections and streams are thread-safe).
        """
        xml = render_blank_volume(name=name, capacity_bytes=size, format="raw")

        def create(conn: libvirt.virConnect) -> None:
            conn.storagePoolLookupByName(pool).createXML(xml, 0)

        def register(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(pool)
            # The bytes may be a qcow2 image: let libvirt re-read format and virtual size.
            p.refresh(0)
            return _volume_info(pool, p.storageVolLookupByName(name))

        def remove(conn: libvirt.virConnect) -> None:
            with contextlib.suppress(libvirt.libvirtError):
                conn.storagePoolLookupByName(pool).storageVolLookupByName(name).delete(0)

        with self._pool_lock(pool):
            self._call(create)
        try:
            with translated():
                conn = self._connection()
                vol = conn.storagePoolLookupByName(pool).storageVolLookupByName(name)
                stream = conn.newStream(0)
                vol.upload(stream, 0, size, 0)
                try:
                    sent = 0
                    for chunk in chunks:
                        view = memoryview(chunk)
                        while view:
                            n = stream.send(bytes(view))
                            sent += n
                            view = view[n:]
                    if sent != size:
                        raise PermanentError(f"{sent} bytes arrived, {size} were announced")
                    stream.finish()
                except BaseException:
                    with contextlib.suppress(libvirt.libvirtError):
                        stream.abort()
                    raise
            with self._pool_lock(pool):
                return self._call(register)
        except BaseException:
            with self._pool_lock(pool):
                self._call(remove)
            raise

    def pool_available(self, pool: str) -> int | None:
        def available(conn: libvirt.virConnect) -> int | None:
            _state, capacity, _allocation, free = conn.storagePoolLookupByName(pool).info()
            # A pool that reports no capacity at all (some network pools) does not account space.
            return int(free) if capacity else None

        return self._call(available)

    def grow_volume(self, *, pool: str, name: str, capacity_bytes: int) -> VolumeInfo:
        def grow(conn: libvirt.virConnect) -> VolumeInfo:
            vol = conn.storagePoolLookupByName(pool).storageVolLookupByName(name)
            current = int(vol.info()[1])
            if capacity_bytes < current:
                raise PermanentError(
                    f"volume {name!r} is {current} bytes; shrinking to {capacity_bytes} is refused"
                )
            if capacity_bytes > current:
                vol.resize(capacity_bytes, 0)
            return _volume_info(pool, vol)

        with self._pool_lock(pool):
            return self._call(grow)

    def delete_volume(self, pool: str, name: str) -> None:
        def delete(conn: libvirt.virConnect) -> None:
            p = conn.storagePoolLookupByName(pool)
            try:
                vol = p.storageVolLookupByName(name)
            except libvirt.libvirtError as err:
                if is_missing(err):
                    raise NotFoundError(f"volume {name!r} not found in pool {pool!r}") from err
                raise
            vol.delete(0)

        with self._pool_lock(pool):
            self._call(delete)


def _volume_info(pool: str, vol: libvirt.virStorageVol) -> VolumeInfo:
    xml = etree.fromstring(vol.XMLDesc(0).encode())
    _, capacity, allocation = vol.info()
    fmt = xml.find("target/format")
    backing = xml.findtext("backingStore/path")
    return VolumeInfo(
        pool=pool,
        name=vol.name(),
        path=vol.path(),
        capacity_bytes=int(capacity),
        allocation_bytes=int(allocation),
        format=fmt.get("type") if fmt is not None else None,
        backing_path=backing,
    )
