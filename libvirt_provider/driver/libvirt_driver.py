"""The libvirt adapter: the only code that calls libvirt-python (besides error translation).

One shared connection per daemon, opened lazily and reopened after loss. libvirt-python blocks,
so callers run it from worker threads; a semaphore bounds how many calls are in flight toward
libvirtd at once. libvirt's default event loop runs in a daemon thread: it carries keepalive probes
(so a dead libvirtd is noticed within seconds) and lifecycle events (so the controller reconciles
promptly instead of polling). Volume creation and deletion are serialised per pool, as libvirt's
directory pools do not guard against concurrent allocation of the same name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import libvirt
from lxml import etree

from libvirt_provider.constants import GUEST_AGENT_CHANNEL, METADATA_NAMESPACE, METADATA_PREFIX
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.libvirt_errors import is_missing, is_refused_flag, translated
from libvirt_provider.driver.pool_files import remove_stale_partials, write_into
from libvirt_provider.driver.types import (
    AddressSource,
    DomainRef,
    DomainState,
    DomainStatus,
    GuestInfo,
    HostFacts,
    InterfaceAddress,
    LifecycleListener,
    OverlaySpec,
    VolumeInfo,
)
from libvirt_provider.driver.volume_xml import render_blank_volume, render_overlay_volume
from libvirt_provider.errors import (
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    RetryableError,
    UnsupportedError,
)

__all__ = ["LibvirtHypervisor", "stop_event_loop"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_STATES = {
    libvirt.VIR_DOMAIN_NOSTATE: DomainState.NOSTATE,
    libvirt.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: DomainState.BLOCKED,
    libvirt.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTDOWN: DomainState.SHUTTING_DOWN,
    libvirt.VIR_DOMAIN_SHUTOFF: DomainState.SHUTOFF,
    libvirt.VIR_DOMAIN_CRASHED: DomainState.CRASHED,
    libvirt.VIR_DOMAIN_PMSUSPENDED: DomainState.PMSUSPENDED,
}

_LIVE_AND_CONFIG = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG

_ADDRESS_SOURCES = {
    AddressSource.LEASE: libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE,
    AddressSource.AGENT: libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT,
    AddressSource.ARP: libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP,
}

# Undefine flag sets from most to least complete: a libvirt that rejects a flag (older daemons do
# not know TPM or checkpoints) gets the next set. Managed-save images are removed explicitly first,
# so even the last set leaves nothing of the domain behind.
_UNDEFINE_FLAGS = [
    libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
    | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
    | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_TPM,
    libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
    | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
    | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA,
    libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
    | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
    | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA,
    libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE,
    0,
]


class _EventLoop:
    """libvirt's default event loop on a thread of its own, started once per process and stopped
    before the interpreter exits.

    Stopping matters: the loop thread runs inside libvirt's C code and calls back into Python
    (lifecycle and close callbacks, freeing a callback's data after a connection closed). If the
    interpreter is already finalizing when such a callback wants the GIL, CPython ends the thread
    with pthread_exit, whose forced unwinding through libvirt's C frames aborts the process: the
    SIGABRT seen after an otherwise clean stop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def ensure(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            libvirt.virEventRegisterDefaultImpl()
            # libvirt prints every error to stderr by default, including the "not found" answers
            # that lookups expect; errors still raise, and are logged where they matter.
            libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
            self._thread = threading.Thread(target=self._run, name="libvirt-events", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            libvirt.virEventRunDefaultImpl()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the loop thread (a no-op timer wakes it from its poll); True once it is gone."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return True
        self._stopping.set()
        timer = libvirt.virEventAddTimeout(0, lambda _timer, _opaque: None, None)
        thread.join(timeout)
        if timer >= 0 and not thread.is_alive():
            libvirt.virEventRemoveTimeout(timer)
        return not thread.is_alive()


_event_loop = _EventLoop()


def stop_event_loop(timeout: float = 5.0) -> bool:
    """Stop libvirt's event loop thread; call once every connection is closed, before exit."""
    return _event_loop.stop(timeout)


class LibvirtHypervisor:
    """`Hypervisor` over one libvirt connection URI."""

    def __init__(
        self,
        uri: str,
        *,
        max_concurrent_calls: int = 4,
        keepalive_interval: int = 5,
        keepalive_count: int = 3,
    ) -> None:
        self._uri = uri
        self._keepalive = (keepalive_interval, keepalive_count)
        self._conn: libvirt.virConnect | None = None
        self._lifecycle_callback: int | None = None
        self._connected_before = False
        self._conn_lock = threading.Lock()
        self._calls = threading.BoundedSemaphore(max_concurrent_calls)
        self._pool_locks: dict[str, threading.Lock] = {}
        self._local_dirs: dict[str, Path | None] = {}
        self._listeners: list[LifecycleListener] = []
        self._reconnect_listeners: list[Callable[[], None]] = []

    # -- connection --------------------------------------------------------------------------

    def _connection(self) -> libvirt.virConnect:
        with self._conn_lock:
            conn = self._conn
            if conn is not None:
                try:
                    if conn.isAlive():
                        return conn
                except libvirt.libvirtError:
                    pass
                self._drop_locked(conn)
            _event_loop.ensure()
            try:
                conn = libvirt.open(self._uri)
            except libvirt.libvirtError as err:
                raise RetryableError(f"cannot connect to libvirt at {self._uri}: {err}") from err
            try:
                conn.setKeepAlive(*self._keepalive)
                conn.registerCloseCallback(self._on_close, None)
                self._lifecycle_callback = conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
                )
                # A guest agent connecting or leaving changes the guest facts and agent addresses
                # the status reports; its callback has the lifecycle one's shape.
                conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, self._on_lifecycle, None
                )
            except libvirt.libvirtError as err:
                conn.close()
                raise RetryableError(f"cannot set up the libvirt connection: {err}") from err
            reconnected = self._connected_before
            self._connected_before = True
            self._conn = conn
        if reconnected:
            log.info("reconnected to libvirt at %s", self._uri)
            for callback in list(self._reconnect_listeners):
                callback()
        return conn

    def _drop_locked(self, conn: libvirt.virConnect) -> None:
        self._conn = None
        # Callbacks are taken off before the close, so none runs (or is freed) afterwards.
        callback, self._lifecycle_callback = self._lifecycle_callback, None
        with contextlib.suppress(libvirt.libvirtError):
            if callback is not None:
                conn.domainEventDeregisterAny(callback)
        with contextlib.suppress(libvirt.libvirtError):
            conn.unregisterCloseCallback()
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()

    def _on_close(self, conn: libvirt.virConnect, reason: int, opaque: object) -> None:
        log.warning("libvirt connection to %s closed (reason %d)", self._uri, reason)
        with self._conn_lock:
            if self._conn is conn:
                self._conn = None

    def _on_lifecycle(
        self, conn: libvirt.virConnect, dom: libvirt.virDomain, event: int, detail: int, _: object
    ) -> None:
        uuid = dom.UUIDString()
        for listener in list(self._listeners):
            try:
                listener(uuid)
            except Exception:  # a listener's bug must not kill libvirt's event thread
                log.exception("lifecycle listener failed for domain %s", uuid)

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None:
        self._listeners.append(listener)

    def add_reconnect_listener(self, callback: Callable[[], None]) -> None:
        """Called after the connection was lost and opened again (events may have been missed)."""
        self._reconnect_listeners.append(callback)

    def close(self) -> None:
        with self._conn_lock:
            if self._conn is not None:
                self._drop_locked(self._conn)

    def _call(self, fn: Callable[[libvirt.virConnect], T]) -> T:
        with self._calls, translated():
            return fn(self._connection())

    def _domain(self, conn: libvirt.virConnect, uuid: str) -> libvirt.virDomain:
        return conn.lookupByUUIDString(uuid)

    # -- host --------------------------------------------------------------------------------

    def host_facts(self) -> HostFacts:
        def facts(conn: libvirt.virConnect) -> HostFacts:
            caps = etree.fromstring(conn.getCapabilities().encode())
            arch = caps.findtext("host/cpu/arch") or "x86_64"
            types: set[str] = set()
            for guest in caps.iterfind("guest"):
                guest_arch = guest.find("arch")
                if (
                    guest.findtext("os_type") == "hvm"
                    and guest_arch is not None
                    and guest_arch.get("name") == arch
                ):
                    types.update(str(d.get("type")) for d in guest_arch.iterfind("domain"))
            return HostFacts(
                hostname=conn.getHostname() or socket.gethostname(),
                arch=arch,
                domain_types=frozenset(types),
                pools=frozenset(p.name() for p in conn.listAllStoragePools()),
                networks=frozenset(n.name() for n in conn.listAllNetworks()),
            )

        return self._call(facts)

    # -- domains -----------------------------------------------------------------------------

    def lookup(self, *, uuid: str, name: str) -> DomainRef | None:
        def find(conn: libvirt.virConnect) -> DomainRef | None:
            try:
                dom = conn.lookupByUUIDString(uuid)
                return DomainRef(uuid=dom.UUIDString(), name=dom.name())
            except libvirt.libvirtError as err:
                if not is_missing(err):
                    raise
            try:
                other = conn.lookupByName(name)
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return None
                raise
            raise ForeignDomainError(name, other.UUIDString())

        return self._call(find)

    def define(self, xml: str) -> DomainRef:
        def define(conn: libvirt.virConnect) -> DomainRef:
            try:
                dom = conn.defineXMLFlags(xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            except libvirt.libvirtError as err:
                # Only a daemon that predates validation rejects the flag; define without it.
                if "unsupported flags" not in (err.get_error_message() or ""):
                    raise
                dom = conn.defineXML(xml)
            return DomainRef(uuid=dom.UUIDString(), name=dom.name())

        return self._call(define)

    def start(self, uuid: str) -> None:
        self._call(lambda c: self._domain(c, uuid).create())

    def set_autostart(self, uuid: str, autostart: bool) -> None:
        def apply(conn: libvirt.virConnect) -> None:
            dom = self._domain(conn, uuid)
            if bool(dom.autostart()) != autostart:
                dom.setAutostart(1 if autostart else 0)

        self._call(apply)

    def shutdown(self, uuid: str) -> None:
        # Both methods named: libvirt's qemu driver then asks a connected guest agent first (an
        # orderly `shutdown -P` in the guest, even where nothing handles the power button) and
        # presses the ACPI power button when there is no agent or the agent call fails.
        flags = libvirt.VIR_DOMAIN_SHUTDOWN_GUEST_AGENT | libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN
        self._call(lambda c: self._domain(c, uuid).shutdownFlags(flags))

    def destroy(self, uuid: str) -> None:
        self._call(lambda c: self._domain(c, uuid).destroy())

    def managed_save(self, uuid: str) -> None:
        self._call(lambda c: self._domain(c, uuid).managedSave(0))

    def discard_saved_state(self, uuid: str) -> None:
        self._call(lambda c: self._domain(c, uuid).managedSaveRemove(0))

    def resume(self, uuid: str) -> None:
        self._call(lambda c: self._domain(c, uuid).resume())

    def undefine(self, uuid: str) -> None:
        def undefine(conn: libvirt.virConnect) -> None:
            dom = self._domain(conn, uuid)
            if dom.hasManagedSaveImage(0):
                dom.managedSaveRemove(0)
            last: libvirt.libvirtError | None = None
            for flags in _UNDEFINE_FLAGS:
                try:
                    dom.undefineFlags(flags)
                    return
                except libvirt.libvirtError as err:
                    if is_refused_flag(err):
                        last = err
                        continue
                    raise
            assert last is not None
            raise UnsupportedError(f"no undefine flag set was accepted: {last}") from last

        self._call(undefine)

    def status(self, uuid: str) -> DomainStatus:
        def status(conn: libvirt.virConnect) -> DomainStatus:
            dom = self._domain(conn, uuid)
            state, reason = dom.state()
            return DomainStatus(
                state=_STATES.get(state, DomainState.NOSTATE),
                reason=reason,
                has_managed_save=bool(dom.hasManagedSaveImage(0)),
            )

        return self._call(status)

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str:
        flags = libvirt.VIR_DOMAIN_XML_INACTIVE if inactive else 0
        return self._call(lambda c: str(self._domain(c, uuid).XMLDesc(flags)))

    def disk_sources(self, uuid: str) -> list[str]:
        def sources(conn: libvirt.virConnect) -> list[str]:
            xml = self._domain(conn, uuid).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
            found: list[str] = []
            for src in etree.fromstring(xml.encode()).iterfind("devices/disk/source"):
                path = src.get("file") or src.get("dev")
                if path is None and src.get("pool") and src.get("volume"):
                    pool = conn.storagePoolLookupByName(src.get("pool"))
                    path = pool.storageVolLookupByName(src.get("volume")).path()
                if path:
                    found.append(str(path))
            return found

        return self._call(sources)

    def addresses(self, uuid: str, source: AddressSource) -> list[InterfaceAddress]:
        def addresses(conn: libvirt.virConnect) -> list[InterfaceAddress]:
            dom = self._domain(conn, uuid)
            raw: dict[str, Any] = dom.interfaceAddresses(_ADDRESS_SOURCES[source], 0) or {}
            found: list[InterfaceAddress] = []
            for iface in raw.values():
                mac = str(iface.get("hwaddr") or "").lower()
                for addr in iface.get("addrs") or []:
                    family = "ipv4" if addr["type"] == libvirt.VIR_IP_ADDR_TYPE_IPV4 else "ipv6"
                    found.append(
                        InterfaceAddress(
                            mac=mac,
                            address=str(addr["addr"]),
                            prefix=int(addr.get("prefix") or 0),
                            family=family,
                            source=source,
                        )
                    )
            return found

        return self._call(addresses)

    def guest_info(self, uuid: str) -> GuestInfo | None:
        def info(conn: libvirt.virConnect) -> GuestInfo | None:
            dom = self._domain(conn, uuid)
            root = etree.fromstring(dom.XMLDesc(0).encode())
            target = root.find(f"devices/channel/target[@name='{GUEST_AGENT_CHANNEL}']")
            if target is None:
                return None
            # libvirt tracks the channel (virtio-serial port open in the guest) in the live XML;
            # asking a disconnected agent would only wait for its timeout.
            state = target.get("state") or "disconnected"
            if state != "connected" or not dom.isActive():
                return GuestInfo(agent=state)
            types = libvirt.VIR_DOMAIN_GUEST_INFO_OS | libvirt.VIR_DOMAIN_GUEST_INFO_HOSTNAME
            try:
                raw: dict[str, Any] = dom.guestInfo(types, 0) or {}
            except libvirt.libvirtError as err:
                log.debug("guest info of %s: %s", dom.name(), err)
                return GuestInfo(agent=state)
            return GuestInfo(agent=state, facts={str(k): str(v) for k, v in raw.items()})

        return self._call(info)

    # -- storage -----------------------------------------------------------------------------

    def _pool_lock(self, pool: str) -> threading.Lock:
        with self._conn_lock:
            return self._pool_locks.setdefault(pool, threading.Lock())

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
            return [_volume_info(pool, v) for v in p.listAllVolumes(0)]

        return self._call(volumes)

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
        xml = render_blank_volume(name=name, capacity_bytes=size, format="raw")

        def upload(conn: libvirt.virConnect) -> VolumeInfo:
            p = conn.storagePoolLookupByName(pool)
            vol = p.createXML(xml, 0)
            try:
                stream = conn.newStream(0)
                vol.upload(stream, 0, size, 0)
                sent = 0
                try:
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
                # The bytes may be a qcow2 image: let libvirt re-read format and virtual size.
                p.refresh(0)
                return _volume_info(pool, p.storageVolLookupByName(name))
            except BaseException:
                with contextlib.suppress(libvirt.libvirtError):
                    vol.delete(0)
                raise

        with self._pool_lock(pool):
            return self._call(upload)

    def grow_attached_disk(self, uuid: str, *, target: str, capacity_bytes: int) -> None:
        self._call(
            lambda c: self._domain(c, uuid).blockResize(
                target, capacity_bytes, libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES
            )
        )

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

    def set_vcpus(self, uuid: str, count: int) -> None:
        self._call(lambda c: self._domain(c, uuid).setVcpusFlags(count, _LIVE_AND_CONFIG))

    def set_memory(self, uuid: str, kib: int) -> None:
        self._call(lambda c: self._domain(c, uuid).setMemoryFlags(kib, _LIVE_AND_CONFIG))

    def attach_device(self, uuid: str, xml: str) -> None:
        self._call(lambda c: self._domain(c, uuid).attachDeviceFlags(xml, _LIVE_AND_CONFIG))

    def detach_device(self, uuid: str, xml: str) -> None:
        self._call(lambda c: self._domain(c, uuid).detachDeviceFlags(xml, _LIVE_AND_CONFIG))

    def set_metadata(self, uuid: str, xml: str) -> None:
        self._call(
            lambda c: self._domain(c, uuid).setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                xml,
                METADATA_PREFIX,
                METADATA_NAMESPACE,
                _LIVE_AND_CONFIG,
            )
        )

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


if TYPE_CHECKING:

    def _satisfies_protocol(adapter: LibvirtHypervisor) -> Hypervisor:
        return adapter
