"""Domain calls of the libvirt adapter: define, power, inspect, undefine, change live."""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import libvirt
from lxml import etree

from libvirt_provider.constants import (
    AGENT_TIMEOUT_SECONDS,
    GUEST_AGENT_CHANNEL,
    METADATA_NAMESPACE,
    METADATA_PREFIX,
)
from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import (
    is_missing,
    is_refused_flag,
    is_unsupported_call,
    translated,
)
from libvirt_provider.driver.types import (
    AddressSource,
    DomainRef,
    DomainState,
    DomainStats,
    DomainStatus,
    GuestInfo,
    InterfaceAddress,
)
from libvirt_provider.errors import (
    AgentBusyError,
    AgentUnresponsiveError,
    ForeignDomainError,
    ProviderError,
    UnsupportedError,
)

__all__ = ["LibvirtDomains"]

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

_GUEST_INFO_KINDS = (libvirt.VIR_DOMAIN_GUEST_INFO_OS, libvirt.VIR_DOMAIN_GUEST_INFO_HOSTNAME)

# What a scrape asks the bulk statistics for: state, CPU time, vCPUs, balloon, disks and NICs.
_STATS = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_CPU_TOTAL
    | libvirt.VIR_DOMAIN_STATS_BALLOON
    | libvirt.VIR_DOMAIN_STATS_VCPU
    | libvirt.VIR_DOMAIN_STATS_INTERFACE
    | libvirt.VIR_DOMAIN_STATS_BLOCK
)
# Running domains only (a shut-off one has nothing to count), and NOWAIT: a domain busy with a
# long job (a migration, a save) answers what it can without its job lock instead of holding
# the whole call behind the job.
_STATS_FLAGS = (
    libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE
    | libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT
)

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


class LibvirtDomains(LibvirtConnection):
    # An agent call that returns nothing after this long was answered by libvirt's timeout, not
    # by the agent (tests shorten it).
    _agent_silence_after: float = AGENT_TIMEOUT_SECONDS * 0.9

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

        def shutdown(conn: libvirt.virConnect) -> None:
            dom = self._domain(conn, uuid)
            # The agent's guest-shutdown is waited for like any agent call: with the agent timeout
            # set, a silent agent costs this slot 3 s before libvirt presses the button instead.
            with contextlib.suppress(libvirt.libvirtError):
                self._set_agent_timeout(dom)
            try:
                dom.shutdownFlags(flags)
            except libvirt.libvirtError as err:
                if not is_refused_flag(err):
                    raise
                # A driver that cannot be told the method (libvirt's test driver, on which the
                # daemon runs for benchmarks, refuses every flag) shuts down its own way.
                dom.shutdownFlags(0)

        self._call(shutdown)

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
                paused_by_io_error=state == libvirt.VIR_DOMAIN_PAUSED
                and reason == libvirt.VIR_DOMAIN_PAUSED_IOERROR,
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

    def domain_stats(self) -> list[DomainStats]:
        """Every running domain's statistics in one bulk call (`virConnectGetAllDomainStats`),
        however many domains there are; a domain that goes away meanwhile is simply absent.
        One call of the host's budget (`CallLimiter`), like any other."""

        def bulk(conn: libvirt.virConnect) -> list[tuple[libvirt.virDomain, dict[str, Any]]]:
            try:
                return list(conn.getAllDomainStats(_STATS, _STATS_FLAGS))
            except libvirt.libvirtError as err:
                if not is_refused_flag(err):
                    raise
                # A libvirt older than NOWAIT (4.5).
                return list(
                    conn.getAllDomainStats(_STATS, libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
                )

        records = self._call(bulk)
        # Outside the call's slot: a virDomain's name and UUID are held by the client (no call
        # to libvirtd), but each getter hands the interpreter's lock over and takes it back, and
        # with reconciles busy, taking it back 2,000 times for 1,000 domains can last long
        # enough to matter while the slot is one of the few the reconciles share.
        with translated():
            return [
                DomainStats(uuid=dom.UUIDString(), name=dom.name(), values=dict(values))
                for dom, values in records
            ]

    def addresses(self, uuid: str, source: AddressSource) -> list[InterfaceAddress]:
        def addresses(dom: libvirt.virDomain) -> list[InterfaceAddress]:
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

        if source is AddressSource.AGENT:
            # The guest answers this one: on the agent budget, with the agent timeout.
            return self._agent_call(uuid, addresses)
        return self._call(lambda c: addresses(self._domain(c, uuid)))

    def guest_info(self, uuid: str) -> GuestInfo | None:
        def channel(conn: libvirt.virConnect) -> tuple[str, bool] | None:
            dom = self._domain(conn, uuid)
            root = etree.fromstring(dom.XMLDesc(0).encode())
            target = root.find(f"devices/channel/target[@name='{GUEST_AGENT_CHANNEL}']")
            if target is None:
                return None
            return target.get("state") or "disconnected", bool(dom.isActive())

        found = self._call(channel)
        if found is None:
            return None
        state, active = found
        # libvirt tracks the channel (virtio-serial port open in the guest) in the live XML;
        # asking a disconnected agent would only fail.
        if state != "connected" or not active:
            return GuestInfo(agent=state)
        facts: dict[str, str] = {}
        # One kind per call: libvirt skips a kind whose command timed out as if the agent did not
        # support it and answers the rest, so a silent agent costs one timeout per kind asked
        # and is only seen by the time it took.
        for kind in _GUEST_INFO_KINDS:
            started = time.monotonic()
            try:
                raw: dict[str, Any] = self._agent_call(uuid, _guest_info_of(kind))
            except (AgentUnresponsiveError, AgentBusyError):
                raise
            except ProviderError as err:
                log.debug("guest info of %s: %s", uuid, err)
                return GuestInfo(agent=state, facts=facts)
            if not raw and time.monotonic() - started >= self._agent_silence_after:
                raise AgentUnresponsiveError(
                    f"the guest agent answered nothing within {AGENT_TIMEOUT_SECONDS} s"
                )
            facts.update({str(k): str(v) for k, v in raw.items()})
        return GuestInfo(agent=state, facts=facts)

    def _agent_call(self, uuid: str, fn: Callable[[libvirt.virDomain], T]) -> T:
        """One call that the guest's agent answers, bounded three ways: the domain's agent response
        timeout is set first (libvirt's default is to wait for ever), the call takes one of the
        host's agent slots and the machine's only one (`AgentGate`; `AgentBusyError` at once when
        taken), and it never holds the host's general call slots, which a silent agent would
        otherwise keep for the whole timeout. A timeout is `AgentUnresponsiveError`."""
        with self._agents.call(uuid, f"guest agent of domain {uuid}"), translated():
            dom = self._domain(self._connection(), uuid)
            self._set_agent_timeout(dom)
            return fn(dom)

    def _set_agent_timeout(self, dom: libvirt.virDomain) -> None:
        try:
            dom.agentSetResponseTimeout(AGENT_TIMEOUT_SECONDS, 0)
        except libvirt.libvirtError as err:
            # libvirt's test driver has no agent to wait for (its answers are canned) and no such
            # call; any other driver without it (qemu before libvirt 5.10) could block for ever,
            # so its agent is not asked.
            if not is_unsupported_call(err) or dom.connect().getType().upper() != "TEST":
                raise

    def grow_attached_disk(self, uuid: str, *, target: str, capacity_bytes: int) -> None:
        self._call(
            lambda c: self._domain(c, uuid).blockResize(
                target, capacity_bytes, libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES
            )
        )

    def set_vcpus(self, uuid: str, count: int) -> None:
        self._call(lambda c: self._domain(c, uuid).setVcpusFlags(count, _LIVE_AND_CONFIG))

    def set_memory(self, uuid: str, kib: int) -> None:
        self._call(lambda c: self._domain(c, uuid).setMemoryFlags(kib, _LIVE_AND_CONFIG))

    def attach_device(self, uuid: str, xml: str) -> None:
        self._call(lambda c: self._domain(c, uuid).attachDeviceFlags(xml, _LIVE_AND_CONFIG))

    def detach_device(self, uuid: str, xml: str) -> None:
        self._call(lambda c: self._domain(c, uuid).detachDeviceFlags(xml, _LIVE_AND_CONFIG))

    def set_block_io_tune(
        self, uuid: str, target: str, parameters: Mapping[str, int | str]
    ) -> None:
        values = dict(parameters)
        self._call(lambda c: self._domain(c, uuid).setBlockIoTune(target, values, _LIVE_AND_CONFIG))

    def set_metadata(self, uuid: str, xml: str) -> None:
        payload = _without_prefix(xml)
        self._call(
            lambda c: self._domain(c, uuid).setMetadata(
                libvirt.VIR_DOMAIN_METADATA_ELEMENT,
                payload,
                METADATA_PREFIX,
                METADATA_NAMESPACE,
                _LIVE_AND_CONFIG,
            )
        )


def _guest_info_of(kind: int) -> Callable[[libvirt.virDomain], dict[str, Any]]:
    def info(dom: libvirt.virDomain) -> dict[str, Any]:
        return dict(dom.guestInfo(kind, 0) or {})

    return info


def _without_prefix(xml: str) -> str:
    """The element with its namespace as the default one instead of a prefix.

    libvirt declares `METADATA_PREFIX` on the element itself and refuses an element that already
    declares that prefix ("failed to create a new XML namespace"), as the marker rendered in the
    domain XML does; with the namespace as the default, every element keeps its namespace.
    """
    root = etree.fromstring(xml.encode())
    namespace = etree.QName(root).namespace
    if namespace is None:
        return xml
    # lxml spells the default namespace as the key None, which its stubs do not admit.
    default: dict[Any, str] = {None: namespace}
    bare = etree.Element(root.tag, nsmap=default)
    for key, value in root.attrib.items():
        bare.set(key, value)
    bare.text = root.text
    bare.extend(copy.deepcopy(child) for child in root)
    return str(etree.tostring(bare, encoding="unicode"))
