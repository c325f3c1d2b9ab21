"""The provider's Kubernetes adapter: every API call the LibvirtMachine controller makes.

Reads return plain dicts (or None when the object does not exist); the reconciler parses them
into models. Writes are narrow: the LibvirtMachine's status subresource, its finalizer (with the
object's resourceVersion, so a concurrent change is a conflict, not a lost update), this host's
entry in a LibvirtImage's `status.hosts` (likewise, since every host writes into that one list)
and Events. Kubernetes API errors become the provider's error classes here and nowhere else.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, cast

from kubernetes import client

from catalog.constants import WATCHED_KINDS
from generic import constants as vmapi
from generic.adapters.copies import Copies
from generic.adapters.events import EventRecorder
from generic.adapters.informer import GENERIC_KEPT, ClusterInformer, lean_slim, slim, without_status
from generic.adapters.kubeclient import (
    JSON_PATCH,
    REQUEST_TIMEOUT,
    ApiFailure,
    ErrorFactory,
    KubeApi,
    failed_test_raises,
    lean_decoder,
    tested_replace,
    translated_api_errors,
)
from generic.lean import Kept
from libvirt_provider import constants as c
from libvirt_provider.console.keeping import KeptMachine, kept_machine
from libvirt_provider.errors import (
    AccessDeniedError,
    NotFoundError,
    PermanentError,
    RetryableError,
    StateConflictError,
)
from libvirt_provider.machine.store import MachineKey, SecretData
from libvirt_provider.metrics.fleet import (
    MachineReadiness,
    MachineState,
    machine_readiness,
    machine_state,
    vm_desired_power,
)
from libvirt_provider.metrics.machine_stats import MachineIdentity

__all__ = ["COMPONENT", "KEPT", "LEAN_KINDS", "KubeAdapter", "patch_finalizers", "translated"]

KEPT = GENERIC_KEPT | Kept.of(labels=c.KEPT_LABELS)
"""The labels and annotations anything in the daemon reads of VMs and LibvirtMachines; the rest,
which tenants write without bound, is dropped before it is decoded or kept (`generic.lean`)."""
LEAN_KINDS = (vmapi.KIND, c.MACHINE_KIND)
"""The kinds whose watch events are decoded lean."""

log = logging.getLogger(__name__)
Obj = dict[str, Any]

COMPONENT = "libvirt-provider"
# Conflicts on an image's status mean other hosts wrote meanwhile; each retry reads afresh after
# a random pause whose bound doubles (up to STATUS_BACKOFF_MAX), so hosts that collided spread
# out however many import at once (a bound growing by steps of 50 ms let one of seven writers
# on a loaded API server lose eight times in a row).
STATUS_ATTEMPTS = 10
STATUS_BACKOFF_FIRST = 0.05
STATUS_BACKOFF_MAX = 1.0


_ERRORS: dict[ApiFailure, ErrorFactory] = {
    ApiFailure.NOT_FOUND: lambda message, _: NotFoundError(message),
    ApiFailure.GONE: lambda message, _: RetryableError(message),
    ApiFailure.CONFLICT: lambda message, _: StateConflictError(message),
    ApiFailure.REJECTED: lambda message, _: PermanentError(message),
    ApiFailure.UNAVAILABLE: lambda message, _: RetryableError(message),
}


def _translated() -> AbstractContextManager[None]:
    return translated_api_errors("Kubernetes API", _ERRORS)


def translated() -> AbstractContextManager[None]:
    """Kubernetes API failures as the provider's error classes (for this room's other stores)."""
    return _translated()


def patch_finalizers(
    api: KubeApi,
    obj: Obj,
    finalizers: list[str],
    *,
    plural: str,
    kind: str,
    also: list[dict[str, Any]] | None = None,
) -> object:
    """Set the finalizers of one of this API group's namespaced objects; returns what the API
    server answered.

    A JSON patch guarded by a test of the finalizers alone, not by the resourceVersion: other
    parties write other fields of these objects at the very moment a daemon adds its finalizer
    (the generic controller adopts a machine, a user labels a snapshot), and a resourceVersion
    would make one of two writes that touch different fields fail and be sent again. A finalizer
    another party changed meanwhile still fails the test (422), raised as `StateConflictError`.
    `also`: further operations of the same patch, failing it the same way when their own tests
    fail.
    """
    meta = obj.get("metadata") or {}
    ops = [*tested_replace("/metadata/finalizers", meta.get("finalizers"), finalizers)]
    ops.extend(also or ())
    changed = f"{kind} {meta.get('namespace')}/{meta.get('name')}: its finalizers changed meanwhile"
    with _translated(), failed_test_raises(lambda: StateConflictError(changed)):
        return api.patch_namespaced_custom_object(
            c.GROUP,
            c.VERSION,
            str(meta.get("namespace")),
            plural,
            str(meta.get("name")),
            ops,
            _content_type=JSON_PATCH,
            _request_timeout=REQUEST_TIMEOUT,
        )


class KubeAdapter:
    """The machine loop's reads and writes. This host's LibvirtMachines, and the VirtualMachines
    linked to them, are read from watch-fed copies (`observe_machine`, `observe_vm`, fed by the
    operator's watches, plus the answers to this adapter's own writes); a read goes to the API
    server when no copy is held yet, or when the caller asks for `fresh` (the reconciler does,
    right before it creates a domain or removes anything)."""

    def __init__(self, api: client.ApiClient, *, host: str) -> None:
        self._custom = self._core = KubeApi(api)
        # VMs and LibvirtMachines, which tenants write: their answers are decoded lean.
        self._tenants = KubeApi(api, decode=lean_decoder(KEPT))
        self._host = host
        self._events = EventRecorder(api, component=COMPONENT, instance=host, host=host)
        self._informers: dict[str, ClusterInformer] = {}
        self.machines = Copies(keep=lean_slim(KEPT, slim))
        # A machine's pass reads what its VM asks for, never the VM's status (the generic
        # controller's to write): not keeping it saves a third of each copy.
        self.vms = Copies(keep=lean_slim(KEPT, without_status))
        # This host's machines whose status shows a domain (a providerID): the ones a restarted
        # daemon must count before it admits a new machine (`machine/book.py`).
        self._built: set[MachineKey] = set()
        self._built_lock = threading.Lock()
        self._built_listed = False

    # -- watch-fed copies --------------------------------------------------------------------

    def observe_machine(self, obj: Obj, *, deleted: bool) -> None:
        meta = obj.get("metadata") or {}
        key = MachineKey(str(meta.get("namespace")), str(meta.get("name")))
        built = not deleted and bool((obj.get("status") or {}).get("providerID"))
        with self._built_lock:
            if built:
                self._built.add(key)
            else:
                self._built.discard(key)
        if deleted:
            self.machines.drop(key.namespace, key.name)
        else:
            self.machines.put(obj)

    def list_built_machines(self) -> None:
        """Learn this host's machines that have a domain from one list of the API server.

        The watch alone would show them one event at a time: kopf hands its first list out to
        concurrent workers, so a new machine's pass could see only part of them and admit it
        against a half-empty book. Called before the watch starts (events that follow are all
        later than the list, so a deletion is never undone by it); raises a ProviderError when
        the list fails, and `built_machines` then tries again."""
        with _translated():
            listing = cast(
                Obj,
                self._tenants.list_cluster_custom_object(
                    c.GROUP,
                    c.VERSION,
                    c.MACHINE_PLURAL,
                    field_selector=f"{c.HOST_FIELD}={self._host}",
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        with self._built_lock:
            for obj in listing.get("items") or ():
                meta = obj.get("metadata") or {}
                if (obj.get("status") or {}).get("providerID"):
                    self._built.add(MachineKey(str(meta.get("namespace")), str(meta.get("name"))))
            self._built_listed = True

    def built_machines(self) -> list[MachineKey]:
        """This host's machines whose status shows a domain: those listed at the start
        (`list_built_machines`), kept current by the watch."""
        with self._built_lock:
            listed = self._built_listed
        if not listed:
            self.list_built_machines()
        with self._built_lock:
            return list(self._built)

    def machine_identities(self) -> list[MachineIdentity]:
        """Who each of this host's machines is and which domain it has, from the watch-fed
        copies (no API call): what /metrics needs to name a domain's statistics."""
        return self.machines.project(_identity)

    def machine_states(self) -> list[MachineState]:
        """Each of this host's machines' power state and InfrastructureReady reason, from the
        watch-fed copies (no API call)."""
        return self.machines.project(machine_state)

    def kept_consoles(self) -> list[KeptMachine]:
        """Each of this host's machines as the console keeper sees it (its domain, whether it
        runs), from the watch-fed copies (no API call)."""
        return [m for m in self.machines.project(kept_machine) if m is not None]

    def machine_readiness(self) -> list[MachineReadiness]:
        """Each of this host's machines' readiness and its VM's desired power state, from the
        watch-fed copies of both (no API call)."""
        desired = dict(self.vms.project(vm_desired_power))
        return self.machines.project(lambda obj: machine_readiness(obj, desired))

    def observe_vm(self, obj: Obj, *, deleted: bool, wanted: bool) -> None:
        """A VirtualMachine's event; kept only for a machine of this host (`wanted`) or when a
        copy is already held (the VMs of other hosts' machines are not this daemon's memory)."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        if deleted:
            self.vms.drop(namespace, name)
        elif wanted or self.vms.holds(namespace, name):
            self.vms.put(obj)

    # -- reads -------------------------------------------------------------------------------

    def get_machine(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        if not fresh:
            held = self.machines.get(namespace, name)
            if held is not None:
                return held
        obj = self._get_namespaced(c.GROUP, c.VERSION, c.MACHINE_PLURAL, namespace, name)
        if obj is None:
            self.machines.drop(namespace, name)
        else:
            self.machines.put(obj)
        return obj

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        held = self.vms.get(namespace, name)
        if held is not None:
            return held
        obj = self._get_namespaced(vmapi.GROUP, vmapi.VERSION, vmapi.PLURAL, namespace, name)
        if obj is not None:
            self.vms.put(obj)
        return obj

    def _get_namespaced(
        self, group: str, version: str, plural: str, namespace: str, name: str
    ) -> Obj | None:
        try:
            with _translated():
                return cast(
                    Obj,
                    self._tenants.get_namespaced_custom_object(
                        group, version, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT
                    ),
                )
        except NotFoundError:
            return None

    def get_image(self, name: str) -> Obj | None:
        try:
            with _translated():
                return cast(
                    Obj,
                    self._custom.get_cluster_custom_object(
                        c.GROUP, c.VERSION, c.IMAGE_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
                    ),
                )
        except NotFoundError:
            return None

    def access_problem(self) -> str | None:
        """Why this daemon cannot read its own machines, or None: a missing RBAC rule or an API
        server it cannot reach, said once in readiness instead of in every reconcile."""
        try:
            with _translated():
                self._custom.list_cluster_custom_object(
                    c.GROUP,
                    c.VERSION,
                    c.MACHINE_PLURAL,
                    field_selector=f"{c.HOST_FIELD}={self._host}",
                    limit=1,
                    _request_timeout=(3.0, 3.0),
                )
        except (PermanentError, RetryableError, NotFoundError, StateConflictError) as err:
            return f"cannot list this host's LibvirtMachines: {err}"
        return None

    def use_informers(self, informers: Mapping[str, ClusterInformer]) -> None:
        """Serve `list_cluster` of these plurals from watch-fed memory once each has synced."""
        self._informers = dict(informers)

    def list_cluster(self, plural: str) -> list[Obj]:
        informer = self._informers.get(plural)
        cached = informer.items() if informer is not None else None
        if cached is not None:
            return cached
        # The custom-objects path serves built-in groups too (VolumeAttributesClasses).
        group, version = WATCHED_KINDS.get(plural, (c.GROUP, c.VERSION))
        with _translated():
            listing = cast(
                Obj,
                self._custom.list_cluster_custom_object(
                    group, version, plural, _request_timeout=REQUEST_TIMEOUT
                ),
            )
        return list(listing.get("items") or [])

    def get_secret_data(self, namespace: str, name: str) -> SecretData | None:
        """The Secret's resourceVersion and base64-encoded data; None when it does not exist.

        Raises AccessDeniedError when the daemon may not read Secrets in `namespace` (it reads
        them only where a RoleBinding opts the namespace in; see docs/security.md)."""
        forbidden = f"reading Secret {name!r} in namespace {namespace!r} is forbidden"
        errors: dict[ApiFailure, ErrorFactory] = {
            **_ERRORS,
            ApiFailure.FORBIDDEN: lambda _message, _status: AccessDeniedError(forbidden),
        }
        try:
            with translated_api_errors("Kubernetes API", errors):
                secret = self._core.read_namespaced_secret(
                    name, namespace, _request_timeout=REQUEST_TIMEOUT
                )
        except NotFoundError:
            return None
        return SecretData(
            version=str((secret.get("metadata") or {}).get("resourceVersion") or ""),
            data={k: str(v) for k, v in (secret.get("data") or {}).items()},
        )

    # -- writes ------------------------------------------------------------------------------

    def patch_machine_status(self, namespace: str, name: str, status: Obj) -> None:
        with _translated():
            written = self._tenants.patch_namespaced_custom_object_status(
                c.GROUP,
                c.VERSION,
                namespace,
                c.MACHINE_PLURAL,
                name,
                {"status": status},
                _request_timeout=REQUEST_TIMEOUT,
            )
        if isinstance(written, dict):
            self.machines.put(written)

    def machine_uid(self, namespace: str, name: str) -> str | None:
        obj = self._get_namespaced(c.GROUP, c.VERSION, c.MACHINE_PLURAL, namespace, name)
        uid = (obj.get("metadata") or {}).get("uid") if obj is not None else None
        return str(uid) if uid else None

    def address_claims(self, *, machine_uid: str | None = None) -> list[Obj]:
        selector = f"{c.ADDRESS_MANAGED_BY_LABEL}={c.ADDRESS_MANAGER}"
        if machine_uid is not None:
            selector += f",{c.CLAIM_MACHINE_UID_LABEL}={machine_uid}"
        with _translated():
            listing = cast(
                Obj,
                self._custom.list_cluster_custom_object(
                    c.IPADDRESS_GROUP,
                    c.IPADDRESS_VERSION,
                    c.IPADDRESS_PLURAL,
                    label_selector=selector,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        return list(listing.get("items") or [])

    def create_address_claim(self, body: Obj) -> Obj:
        with _translated():
            return cast(
                Obj,
                self._custom.create_cluster_custom_object(
                    c.IPADDRESS_GROUP,
                    c.IPADDRESS_VERSION,
                    c.IPADDRESS_PLURAL,
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )

    def delete_address_claim(self, name: str, *, uid: str) -> None:
        try:
            with _translated():
                self._custom.delete_cluster_custom_object(
                    c.IPADDRESS_GROUP,
                    c.IPADDRESS_VERSION,
                    c.IPADDRESS_PLURAL,
                    name,
                    body={"preconditions": {"uid": uid}},
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except (NotFoundError, StateConflictError):
            # Gone already, or the name now belongs to another claim (its uid differs).
            return

    def update_image_hosts(
        self,
        name: str,
        change: Callable[[Mapping[str, Any]], list[Any] | None],
        *,
        current: Obj | None = None,
    ) -> bool:
        """Read-modify-write of a LibvirtImage's `status.hosts`: `change` gets the object as read
        and returns the whole new list, or None to leave it. The write carries the resourceVersion
        it was computed from, so an entry another host wrote meanwhile is never lost: on a
        conflict the object is read again and `change` asked again. True when written."""
        obj = current
        for attempt in range(STATUS_ATTEMPTS):
            if attempt:
                # Hosts that collided once would collide again if they retried in lockstep.
                bound = min(STATUS_BACKOFF_MAX, STATUS_BACKOFF_FIRST * 2**attempt)
                time.sleep(random.uniform(0, bound))
            if obj is None:
                obj = self.get_image(name)
                if obj is None:
                    return False
            hosts = change(obj)
            if hosts is None:
                return False
            version = (obj.get("metadata") or {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": version}, "status": {"hosts": hosts}}
            try:
                with _translated():
                    self._custom.patch_cluster_custom_object_status(
                        c.GROUP,
                        c.VERSION,
                        c.IMAGE_PLURAL,
                        name,
                        body,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                return True
            except StateConflictError:
                obj = None
            except NotFoundError:
                return False
        raise StateConflictError(
            f"LibvirtImage {name}: status still conflicting after {STATUS_ATTEMPTS} attempts"
        )

    def set_finalizers(self, obj: Obj, finalizers: list[str], *, host: str | None = None) -> None:
        meta = obj.get("metadata") or {}
        also: list[dict[str, Any]] = []
        if host is not None:
            # spec.host cannot change once set (CEL): a host set meanwhile fails the patch too.
            if isinstance(obj.get("spec"), dict):
                also.append({"op": "add", "path": "/spec/host", "value": host})
            else:
                also.append({"op": "add", "path": "/spec", "value": {"host": host}})
        written = patch_finalizers(
            self._tenants, obj, finalizers, plural=c.MACHINE_PLURAL, kind=c.MACHINE_KIND, also=also
        )
        if not finalizers and meta.get("deletionTimestamp"):
            # The last finalizer of a deleted object: the API server removes it now.
            self.machines.drop(str(meta.get("namespace")), str(meta.get("name")))
        elif isinstance(written, dict):
            self.machines.put(written)

    def event(self, obj: Obj, *, reason: str, message: str, warning: bool = False) -> None:
        """Record a Kubernetes Event on `obj` (repeats are counted); never raises."""
        self._events.record(
            obj, type_="Warning" if warning else "Normal", reason=reason, message=message
        )


def _identity(obj: Obj) -> MachineIdentity:
    meta = obj.get("metadata") or {}
    return MachineIdentity(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
    )
