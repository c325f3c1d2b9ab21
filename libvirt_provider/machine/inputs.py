"""Gathering what one pass needs: the linked VirtualMachine and the machine resolved against the
catalog, its Secrets and this host's facts; for a deletion, the machine's domain name and the disks
it keeps, from what earlier passes recorded.

Reads only; the decisions are the resolver's (`libvirt_provider.resolve`) and the link check's
(`linkage`).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import cast, get_args

from pydantic import ValidationError

from generic import constants as vmapi
from generic.api import PowerOffMode, PowerState
from generic.lean import user_edit_mark
from libvirt_provider import naming
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import HostFacts
from libvirt_provider.errors import AccessDeniedError, ProviderError
from libvirt_provider.machine.catalog import CatalogReader
from libvirt_provider.machine.linkage import Link, check_link
from libvirt_provider.machine.status import recorded_retained, retained_volumes
from libvirt_provider.machine.store import MachineStore, Obj
from libvirt_provider.resolve import Resolution, resolve_machine

__all__ = [
    "InputReader",
    "LinkedVm",
    "PowerIntent",
    "SecretCache",
    "power_intent",
    "wants_public_address",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PowerIntent:
    desired: PowerState
    mode: PowerOffMode


def wants_public_address(vm: Obj) -> bool:
    """Whether any interface of the VM asks for a public address (its claims are then read)."""
    interfaces = ((vm.get("spec") or {}).get("network") or {}).get("interfaces") or []
    return any(isinstance(i, dict) and i.get("publicIP") is True for i in interfaces)


def power_intent(vm: Obj) -> PowerIntent:
    """The VM's power fields; the CRD's enums keep them valid, defaults fill them in."""
    spec = vm.get("spec") or {}
    desired = spec.get("powerState")
    mode = spec.get("powerOffMode")
    return PowerIntent(
        desired=cast(PowerState, desired) if desired in get_args(PowerState) else vmapi.POWERED_ON,
        mode=cast(PowerOffMode, mode)
        if mode in get_args(PowerOffMode)
        else vmapi.POWER_OFF_TRY_SOFT,
    )


@dataclass(frozen=True)
class LinkedVm:
    link: Link
    vm: Obj | None
    """The VirtualMachine, once the link is verified (problems are told on it too)."""


class InputReader:
    def __init__(
        self,
        *,
        store: MachineStore,
        hypervisor: Hypervisor,
        host: str,
        domain_types: frozenset[str] | None,
        console_log_dir: str | None,
        zone: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._zone = zone
        self._store = store
        self._hv = hypervisor
        self._host = host
        self._catalog = CatalogReader(store)
        # Restricts the domain types offered to the resolver (e.g. a host whose /dev/kvm exists
        # but cannot run guests is told to offer only "qemu").
        self._domain_types = domain_types
        self._console_log_dir = console_log_dir
        self._secret_cache = SecretCache(store)

    def linked_vm(self, obj: Obj, machine: LibvirtMachine) -> LinkedVm:
        meta = machine.metadata
        vm_name = meta.annotations.get(vmapi.LINK_ANNOTATION)
        vm = self._store.get_virtual_machine(meta.namespace, vm_name) if vm_name else None
        link = check_link(obj, vm)
        return LinkedVm(link=link, vm=vm if link.linked else None)

    def resolve(
        self,
        obj: Obj,
        machine: LibvirtMachine,
        vm: Obj,
        *,
        domain_name: str | None = None,
        existing_macs: frozenset[str] = frozenset(),
        existing_seed_digest: str | None = None,
        existing_volumes: frozenset[tuple[str, str]] = frozenset(),
        public_addresses: Mapping[str, str] | None = None,
    ) -> Resolution:
        """The machine resolved for this host; `public_addresses` are the addresses its claims
        hold, by interface (given whenever its VM asks for one)."""
        catalog = self._catalog.catalog()
        secrets, unreadable = self._secrets(machine.metadata.namespace, vm, obj)
        network_dhcp = None
        if public_addresses is not None:
            # Only the libvirt networks a pool can use: where libvirt's DHCP serves one, the
            # address is a reservation there, and the pool must keep out of its range.
            network_dhcp = {
                name: self._hv.network_dhcp(name)
                for name in sorted(
                    {
                        n.spec.source.network
                        for n in catalog.networks.values()
                        if n.spec.address_pool is not None and n.spec.source.network is not None
                    }
                )
            }
        return resolve_machine(
            vm_name=str((vm.get("metadata") or {}).get("name")),
            vm_spec=vm.get("spec") or {},
            machine=obj,
            catalog=catalog,
            secrets=secrets,
            unreadable_secrets=frozenset(unreadable),
            host=self.host_facts(),
            domain_name=domain_name,
            existing_macs=existing_macs,
            seed_key=str((vm.get("metadata") or {}).get("uid") or ""),
            existing_seed_digest=existing_seed_digest,
            existing_volumes=existing_volumes,
            public_addresses=public_addresses,
            network_dhcp=network_dhcp,
        )

    def domain_name(self, obj: Obj) -> str:
        """The name of the machine's domain: the one it has (see naming).

        A status without a recorded name is a first pass, or one whose status was lost (a
        restore from backup): then the domain with the machine's UUID, if any, tells the name it
        was created with.
        """
        meta = obj.get("metadata") or {}
        namespace, name, uid = (str(meta.get(k)) for k in ("namespace", "name", "uid"))
        recorded = ((obj.get("status") or {}).get("providerMetadata") or {}).get("domainName")
        chosen = naming.machine_domain_name(
            namespace, name, uid, recorded=recorded if isinstance(recorded, str) else None
        )
        if recorded is None:
            legacy = naming.legacy_domain_name(namespace, name)
            with contextlib.suppress(ProviderError):
                existing = self._hv.lookup(uuid=uid, name=chosen)
                if existing is not None and existing.name == legacy:
                    return legacy
        return chosen

    def volumes_to_keep(self, obj: Obj) -> set[tuple[str, str]]:
        """Volumes whose disks say deleteOnTermination: false.

        Read from what the machine's passes recorded (`status.retainedVolumes`), so deletion
        needs no catalog object or Secret: in a namespace being deleted, those may be gone
        first, and re-resolving the spec would then keep nothing. A machine that no pass of
        this version has recorded yet falls back to resolving."""
        recorded = recorded_retained(obj.get("status"))
        if recorded is not None:
            return recorded
        try:
            machine = LibvirtMachine.model_validate(obj)
            vm = self.linked_vm(obj, machine).vm
            resolution = (
                self.resolve(obj, machine, vm, domain_name=self.domain_name(obj))
                if vm is not None
                else None
            )
        except (ProviderError, ValidationError, ValueError) as err:
            meta = obj.get("metadata") or {}
            where = f"{meta.get('namespace')}/{meta.get('name')}"
            log.warning("deleting %s: which disks to keep is unknown: %s", where, err)
            return set()
        if resolution is None or resolution.machine is None:
            return set()
        return retained_volumes(resolution.machine)

    def host_facts(self) -> HostFacts:
        # The host's name is the daemon's --host (the value of the host label that shards the
        # machines), never libvirt's own idea of its hostname: spec.host, failureDomain and a
        # storage class's per-host pools all name hosts as users label them.
        facts = replace(
            self._hv.host_facts(),
            hostname=self._host,
            console_log_dir=self._console_log_dir,
            zone=self._zone(),
        )
        if self._domain_types is None:
            return facts
        return replace(facts, domain_types=facts.domain_types & self._domain_types)

    def _secrets(
        self, namespace: str, vm: Obj, machine: Obj | None = None
    ) -> tuple[dict[str, dict[str, bytes]], set[str]]:
        """The Secrets the VM's cloud-init names, and the names the daemon may not read there; a
        missing or unreadable one is simply absent (a problem the resolver reports)."""
        cloud_init = ((vm.get("spec") or {}).get("bootstrap") or {}).get("cloudInit") or {}
        found: dict[str, dict[str, bytes]] = {}
        unreadable: set[str] = set()
        edit = (_edit_mark(vm), _edit_mark(machine))
        for selector in (cloud_init.get("userData"), cloud_init.get("networkData")):
            name = selector.get("name") if isinstance(selector, dict) else None
            if not isinstance(name, str) or name in found or name in unreadable:
                continue
            try:
                data = self._secret_cache.data(namespace, name, edit)
            except AccessDeniedError:
                unreadable.add(name)
                continue
            if data is not None:
                found[name] = data
        return found, unreadable


# A Secret read by a pass is reused, without another GET, by the passes after it for this long
# unless either object of the pair is edited meanwhile. Secrets are not watched (that needs list
# on every Secret): a change is noticed within this time, or at once when the pair is touched.
SECRET_REREAD_SECONDS = 60.0
# The decoded data kept, in all (a Secret holds at most 1 MiB): past it, the least recently used
# go. A Secret bigger than it is decoded on every read, as before.
SECRET_CACHE_BYTES = 16 * 1024 * 1024


def _edit_mark(obj: Obj | None) -> tuple[object, ...]:
    """What changes when a user edits the object (not its status, which every pass writes)."""
    meta = (obj or {}).get("metadata") or {}
    return (meta.get("uid"), meta.get("generation"), user_edit_mark(meta))


@dataclass
class _Cached:
    version: str
    data: dict[str, bytes]
    size: int
    read_at: float
    edit: tuple[object, ...]


class SecretCache:
    """The cloud-init Secrets as the machine passes read them: by `get` of the named Secret only.

    A Secret whose resourceVersion is the one read before keeps its decoded data, the very same
    bytes objects, so the seed built from it is not hashed or rendered again
    (`resolve.cloudinit` remembers the digests of the latest contents). Passes that only wait
    (for an address, a power state) reuse the last read for `SECRET_REREAD_SECONDS` instead of
    reading it again; a pass for an edit of the VM or the machine reads it afresh. Nothing is
    kept for a Secret that is missing or unreadable, so its creation, or the RoleBinding that
    opts its namespace in, is seen at the next try.
    """

    def __init__(
        self,
        store: MachineStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        reread_seconds: float = SECRET_REREAD_SECONDS,
        max_bytes: int = SECRET_CACHE_BYTES,
    ) -> None:
        self._store = store
        self._clock = clock
        self._reread = reread_seconds
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], _Cached] = OrderedDict()
        self._lock = threading.Lock()

    def data(self, namespace: str, name: str, edit: tuple[object, ...]) -> dict[str, bytes] | None:
        """The Secret's decoded data, None when it does not exist; AccessDeniedError where the
        daemon may not read it."""
        key = (namespace, name)
        now = self._clock()
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and cached.edit == edit and now - cached.read_at < self._reread:
                self._entries.move_to_end(key)
                return cached.data
        try:
            read = self._store.get_secret_data(namespace, name)
        except AccessDeniedError:
            self._forget(key)
            raise
        if read is None:
            self._forget(key)
            return None
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and read.version and cached.version == read.version:
                cached.read_at, cached.edit = now, edit
                self._entries.move_to_end(key)
                return cached.data
            data = {k: base64.b64decode(v) for k, v in read.data.items()}
            size = sum(len(v) for v in data.values())
            self._entries.pop(key, None)
            if read.version and size <= self._max_bytes:
                self._entries[key] = _Cached(read.version, data, size, now, edit)
                while sum(e.size for e in self._entries.values()) > self._max_bytes:
                    self._entries.popitem(last=False)
            return data

    def _forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._entries.pop(key, None)
