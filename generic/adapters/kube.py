"""`ClusterGateway` over the official Kubernetes client, and the one place that maps its errors.

HTTP status codes become the project's error classes here (`generic.errors`) and nowhere else.
Discovery (group -> preferred served version, kind -> plural) is cached briefly, because every
reconcile needs it and it changes only when CRDs do; the watch hub invalidates the cache on
every CRD event so a newly installed provider kind is found at once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from kubernetes import client

from generic import constants as c
from generic.adapters.copies import Copies
from generic.adapters.events import EventRecorder
from generic.adapters.informer import GENERIC_KEPT
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
from generic.errors import ApiError, ConflictError, GoneError, KindNotServedError
from generic.gateway import EventType, ProviderKind

__all__ = ["KubeGateway", "translate_errors"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


_ERRORS: dict[ApiFailure, ErrorFactory] = {
    ApiFailure.NOT_FOUND: lambda detail, status: GoneError(detail, status=status),
    ApiFailure.GONE: lambda detail, status: GoneError(detail, status=status),
    ApiFailure.CONFLICT: lambda detail, status: ConflictError(detail, status=status),
    ApiFailure.REJECTED: lambda detail, status: ApiError(detail, status=status),
    ApiFailure.UNAVAILABLE: lambda detail, status: ApiError(detail, status=status),
}


def translate_errors(what: str) -> AbstractContextManager[None]:
    """Turn client exceptions raised inside the block into `generic.errors` classes."""
    return translated_api_errors(what, _ERRORS)


def _as_obj(value: object) -> Obj:
    if not isinstance(value, dict):
        raise ApiError(f"the API server answered with {type(value).__name__}, not an object")
    return value


class _Discovery:
    """group/kind -> ProviderKind (without the watched flag), cached for `ttl` seconds."""

    def __init__(self, api: client.ApiClient, *, ttl: float, negative_ttl: float) -> None:
        self._kube = KubeApi(api)
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, tuple[str, str] | str]] = {}

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()

    def resolve(self, group: str, kind: str) -> tuple[str, str]:
        """(version, plural) of the kind in its preferred served version."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get((group, kind))
        if hit is not None and hit[0] > now:
            if isinstance(hit[1], str):
                raise KindNotServedError(hit[1])
            return hit[1]
        try:
            found: tuple[str, str] | str = self._look_up(group, kind)
        except KindNotServedError as exc:
            found = str(exc)
        expiry = now + (self._negative_ttl if isinstance(found, str) else self._ttl)
        with self._lock:
            self._cache[(group, kind)] = (expiry, found)
        if isinstance(found, str):
            raise KindNotServedError(found)
        return found

    def _look_up(self, group: str, kind: str) -> tuple[str, str]:
        with translate_errors("discovery of API groups"):
            groups = self._kube.get_api_versions(_request_timeout=REQUEST_TIMEOUT).get("groups")
        entry = next((g for g in groups or [] if g.get("name") == group), None)
        if entry is None:
            raise KindNotServedError(
                f"the API server serves no group {group!r} (is the provider's CRD installed?)"
            )
        preferred = (entry.get("preferredVersion") or {}).get("version")
        versions = [v["version"] for v in entry.get("versions") or []]
        ordered = [preferred, *(v for v in versions if v != preferred)] if preferred else versions
        for version in ordered:
            with translate_errors(f"discovery of {group}/{version}"):
                resources = self._kube.get_api_resources(
                    group, version, _request_timeout=REQUEST_TIMEOUT
                ).get("resources")
            for resource in resources or []:
                name = resource.get("name") or ""
                if resource.get("kind") == kind and name and "/" not in name:
                    self._require_provider_crd(group, kind, name)
                    return version, name
        raise KindNotServedError(
            f"group {group!r} serves no kind {kind!r} (is the provider's CRD installed?)"
        )

    def _require_provider_crd(self, group: str, kind: str, plural: str) -> None:
        """Only a kind whose CRD carries the provider label is one: a VM's reference must never
        make the controller adopt (and, with the VM, delete) an arbitrary object, such as a
        built-in resource or another operator's custom resource in the tenant's namespace."""
        name = f"{plural}.{group}"
        try:
            with translate_errors(f"reading CustomResourceDefinition {name}"):
                crd = self._kube.read_custom_resource_definition(
                    name, _request_timeout=REQUEST_TIMEOUT
                )
        except GoneError:
            raise KindNotServedError(
                f"{kind}.{group} is not a custom resource, so it is no vm-api.io provider kind"
            ) from None
        labels = (crd.get("metadata") or {}).get("labels") or {}
        if labels.get(c.PROVIDER_CRD_LABEL) != c.PROVIDER_CRD_LABEL_VALUE:
            raise KindNotServedError(
                f"the CustomResourceDefinition {name} lacks the label "
                f"{c.PROVIDER_CRD_LABEL}={c.PROVIDER_CRD_LABEL_VALUE} that marks vm-api.io "
                "provider kinds; only those are adopted"
            )


ProviderCopies = Callable[[str, str], Copies | None]


class KubeGateway:
    """The real `ClusterGateway`.

    VMs are read from `vms` (the copies the controller's VM watch feeds) and provider objects
    from `provider_copies(group, kind)` (a watched kind's copies, None while its watch has not
    listed), falling back to the API server for an object no copy is held of (it may be one the
    watch has yet to deliver) and for unwatched kinds; `fresh` always reads the API server.
    Answers to writes become the copies; a conflict reads the object afresh into them.
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        vms: Copies | None = None,
        provider_copies: ProviderCopies | None = None,
        discovery_ttl: float = 60.0,
        negative_discovery_ttl: float = 2.0,
    ) -> None:
        self._vms = vms if vms is not None else Copies()
        self._provider_copies: ProviderCopies = provider_copies or (lambda _group, _kind: None)
        # VMs and provider objects, which tenants write: their answers are decoded lean.
        self._custom = KubeApi(api, decode=lean_decoder(GENERIC_KEPT))
        self._discovery = _Discovery(api, ttl=discovery_ttl, negative_ttl=negative_discovery_ttl)
        self._is_watched: Callable[[str, str], bool] = lambda _group, _kind: False
        self._events = EventRecorder(
            api,
            component=c.CONTROLLER_NAME,
            instance=f"{c.CONTROLLER_NAME}-{uuid.uuid4().hex[:8]}",
        )

    def use_watch_status(self, is_watched: Callable[[str, str], bool]) -> None:
        """Tell resolved kinds whether their objects are watched (see `ProviderWatchHub`)."""
        self._is_watched = is_watched

    def invalidate_discovery(self) -> None:
        self._discovery.invalidate()

    def get_vm(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        if not fresh:
            held = self._vms.get(namespace, name)
            if held is not None:
                return held
        got = self._get(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
        self._keep(self._vms, namespace, name, got)
        return got

    def resolve_kind(self, api_group: str, kind: str) -> ProviderKind:
        version, plural = self._discovery.resolve(api_group, kind)
        return ProviderKind(
            group=api_group,
            version=version,
            kind=kind,
            plural=plural,
            watched=self._is_watched(api_group, kind),
        )

    def get_provider(
        self, kind: ProviderKind, namespace: str, name: str, *, fresh: bool = False
    ) -> Obj | None:
        copies = self._provider_copies(kind.group, kind.kind)
        if copies is not None and not fresh:
            held = copies.get(namespace, name)
            if held is not None:
                return held
            # Not in the copies yet may be not seen yet: a VM is often created a moment before
            # its provider object, and "does not exist" would be reported as a Warning.
        got = self._get(kind.group, kind.version, namespace, kind.plural, name)
        if copies is not None:
            self._keep(copies, namespace, name, got)
        return got

    @staticmethod
    def _keep(copies: Copies, namespace: str, name: str, obj: Obj | None) -> None:
        if obj is None:
            copies.drop(namespace, name)
        else:
            copies.put(obj)

    def _refresh(self, kind: ProviderKind | None, obj: Mapping[str, Any]) -> None:
        """After a conflict: the object as it is now, into its copies (best effort; the retry
        reads the API itself when this fails)."""
        meta = obj["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        try:
            if kind is None:
                self.get_vm(namespace, name, fresh=True)
            else:
                self.get_provider(kind, namespace, name, fresh=True)
        except ApiError:
            if kind is None:
                self._vms.drop(namespace, name)

    def _get(self, group: str, version: str, namespace: str, plural: str, name: str) -> Obj | None:
        try:
            with translate_errors(f"reading {plural}.{group} {namespace}/{name}"):
                got = self._custom.get_namespaced_custom_object(
                    group, version, namespace, plural, name, _request_timeout=REQUEST_TIMEOUT
                )
        except GoneError:
            return None
        return _as_obj(got)

    def set_vm_finalizers(self, vm: Mapping[str, Any], finalizers: Sequence[str]) -> Obj:
        try:
            patched = self._patch_metadata(
                c.GROUP, c.VERSION, c.PLURAL, vm, {"finalizers": list(finalizers)}
            )
        except ConflictError:
            self._refresh(None, vm)
            raise
        except GoneError:
            self._vms.drop(str(vm["metadata"]["namespace"]), str(vm["metadata"]["name"]))
            raise
        self._vms.put(patched)
        return patched

    def set_provider_owners(
        self, kind: ProviderKind, provider: Mapping[str, Any], owners: Sequence[Mapping[str, Any]]
    ) -> Obj:
        try:
            patched = self._patch_metadata(
                kind.group,
                kind.version,
                kind.plural,
                provider,
                {"ownerReferences": [dict(o) for o in owners]},
            )
        except (ConflictError, GoneError):
            self._refresh(kind, provider)
            raise
        copies = self._provider_copies(kind.group, kind.kind)
        if copies is not None:
            copies.put(patched)
        return patched

    def _patch_metadata(
        self, group: str, version: str, plural: str, obj: Mapping[str, Any], fields: Obj
    ) -> Obj:
        meta = obj["metadata"]
        # A JSON patch that replaces each list wholesale after testing that it is still what was
        # read: someone else's change to the same list fails the test (422, a conflict here),
        # while a change elsewhere in the object (a provider adding its finalizer as this
        # controller adopts, both at once on every new machine) does not make either write fail
        # and be sent again, as a resourceVersion precondition would.
        ops = [
            op
            for name, value in fields.items()
            for op in tested_replace(f"/metadata/{name}", meta.get(name), value)
        ]
        what = f"updating {plural}.{group} {meta['namespace']}/{meta['name']}"
        changed = f"{what}: {', '.join(fields)} changed meanwhile"
        with translate_errors(what), failed_test_raises(lambda: ConflictError(changed)):
            patched = self._custom.patch_namespaced_custom_object(
                group,
                version,
                meta["namespace"],
                plural,
                meta["name"],
                ops,
                _content_type=JSON_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return _as_obj(patched)

    def delete_provider(self, kind: ProviderKind, provider: Mapping[str, Any]) -> None:
        meta = provider["metadata"]
        options = {
            "preconditions": {"resourceVersion": meta["resourceVersion"], "uid": meta["uid"]}
        }
        try:
            with translate_errors(f"deleting {kind.kind} {meta['namespace']}/{meta['name']}"):
                self._custom.delete_namespaced_custom_object(
                    kind.group,
                    kind.version,
                    meta["namespace"],
                    kind.plural,
                    meta["name"],
                    body=options,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except GoneError:
            return
        except ConflictError:
            self._refresh(kind, provider)
            raise

    def patch_vm_status(self, vm: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
        meta = vm["metadata"]
        with translate_errors(
            f"writing status of VirtualMachine {meta['namespace']}/{meta['name']}"
        ):
            patched = self._custom.patch_namespaced_custom_object_status(
                c.GROUP,
                c.VERSION,
                meta["namespace"],
                c.PLURAL,
                meta["name"],
                {"status": dict(patch)},
                _request_timeout=REQUEST_TIMEOUT,
            )
        self._vms.put(_as_obj(patched))
        return _as_obj(patched)

    def post_event(
        self, vm: Mapping[str, Any], *, type_: EventType, reason: str, message: str
    ) -> None:
        self._events.record(
            vm, type_=type_, reason=reason, message=message, api_version=c.API_VERSION, kind=c.KIND
        )
