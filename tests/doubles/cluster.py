"""An in-memory ClusterGateway: objects in dicts, resourceVersions that move, recorded Events."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from generic import constants as c
from generic.errors import ConflictError, GoneError, KindNotServedError
from generic.gateway import EventType, ProviderKind

GROUP = "stub.example.io"
KIND = "StubMachine"
Obj = dict[str, Any]


@dataclass
class FakeCluster:
    vms: dict[tuple[str, str], Obj] = field(default_factory=dict)
    providers: dict[tuple[str, str], Obj] = field(default_factory=dict)
    kinds: dict[tuple[str, str], ProviderKind] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    conflict_next_write: bool = False
    lagging_providers: dict[tuple[str, str], Obj | None] = field(default_factory=dict)
    """What a copy shows of a provider object instead of its latest state (a watch that lags);
    a `fresh` read sees through it."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def install_kind(self, *, watched: bool = True) -> None:
        self.kinds[(GROUP, KIND)] = ProviderKind(GROUP, "v1", KIND, "stubmachines", watched)

    def _bump(self, obj: Obj) -> Obj:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def add_vm(self, name: str, *, namespace: str = "ns", target: str | None = None) -> Obj:
        vm: Obj = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "generation": 1,
            },
            "spec": {
                "infrastructureRef": {"apiGroup": GROUP, "kind": KIND, "name": target or name}
            },
        }
        self.vms[(namespace, name)] = vm
        return self._bump(vm)

    def add_provider(
        self,
        name: str,
        *,
        namespace: str = "ns",
        backlink: str | None = None,
        owners: list[Obj] | None = None,
        status: object = None,
    ) -> Obj:
        meta: Obj = {"name": name, "namespace": namespace, "uid": f"puid-{name}"}
        if backlink is not None:
            meta["annotations"] = {c.LINK_ANNOTATION: backlink}
        if owners is not None:
            meta["ownerReferences"] = owners
        obj: Obj = {"apiVersion": f"{GROUP}/v1", "kind": KIND, "metadata": meta}
        if status is not None:
            obj["status"] = status
        self.providers[(namespace, name)] = obj
        return self._bump(obj)

    def vm(self, name: str, namespace: str = "ns") -> Obj:
        return self.vms[(namespace, name)]

    def provider(self, name: str, namespace: str = "ns") -> Obj:
        return self.providers[(namespace, name)]

    # ClusterGateway

    def get_vm(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        self.calls.append("get_vm_fresh" if fresh else "get_vm")
        found = self.vms.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def resolve_kind(self, api_group: str, kind: str) -> ProviderKind:
        found = self.kinds.get((api_group, kind))
        if found is None:
            raise KindNotServedError(f"group {api_group!r} serves no kind {kind!r}")
        return found

    def get_provider(
        self, kind: ProviderKind, namespace: str, name: str, *, fresh: bool = False
    ) -> Obj | None:
        self.calls.append("get_provider_fresh" if fresh else "get_provider")
        if not fresh and (namespace, name) in self.lagging_providers:
            lagging = self.lagging_providers[(namespace, name)]
            return copy.deepcopy(lagging) if lagging is not None else None
        found = self.providers.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def _guarded(self, store: dict[tuple[str, str], Obj], obj: Mapping[str, Any]) -> Obj:
        meta = obj["metadata"]
        current = store.get((meta["namespace"], meta["name"]))
        if current is None:
            raise GoneError("gone")
        if self.conflict_next_write:
            self.conflict_next_write = False
            raise ConflictError("conflict")
        if current["metadata"]["resourceVersion"] != meta["resourceVersion"]:
            raise ConflictError("stale resourceVersion")
        return current

    def set_vm_finalizers(self, vm: Mapping[str, Any], finalizers: Sequence[str]) -> Obj:
        self.calls.append("set_vm_finalizers")
        current = self._guarded(self.vms, vm)
        current["metadata"]["finalizers"] = list(finalizers)
        if not finalizers and current["metadata"].get("deletionTimestamp"):
            del self.vms[(current["metadata"]["namespace"], current["metadata"]["name"])]
        return self._bump(current)

    def set_provider_owners(
        self, kind: ProviderKind, provider: Mapping[str, Any], owners: Sequence[Mapping[str, Any]]
    ) -> Obj:
        self.calls.append("set_provider_owners")
        current = self._guarded(self.providers, provider)
        current["metadata"]["ownerReferences"] = [dict(o) for o in owners]
        return self._bump(current)

    def delete_provider(self, kind: ProviderKind, provider: Mapping[str, Any]) -> None:
        self.calls.append("delete_provider")
        current = self._guarded(self.providers, provider)
        assert current["metadata"]["uid"] == provider["metadata"]["uid"]
        current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self._bump(current)

    def patch_vm_status(self, vm: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
        self.calls.append("patch_vm_status")
        meta = vm["metadata"]
        current = self.vms[(meta["namespace"], meta["name"])]
        status = current.setdefault("status", {})
        for key, value in patch.items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = copy.deepcopy(value)
        return self._bump(current)

    def post_event(
        self, vm: Mapping[str, Any], *, type_: EventType, reason: str, message: str
    ) -> None:
        self.events.append((type_, reason, message))

    # helpers for tests

    def delete_vm(self, name: str, namespace: str = "ns") -> None:
        self.vms[(namespace, name)]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

    def finish_provider_deletion(self, name: str, namespace: str = "ns") -> None:
        del self.providers[(namespace, name)]

    def condition(self, vm: str, type_: str) -> Obj | None:
        for item in self.vm(vm).get("status", {}).get("conditions", []):
            if item["type"] == type_:
                return dict(item)
        return None

    def event_reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]
