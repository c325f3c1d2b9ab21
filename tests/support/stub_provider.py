"""The generic controller's e2e world: this session's namespaces, a stub provider kind whose
status the tests write, and `Cluster`, the helpers over one test namespace.

Why a module of its own: the generic controller's tests, its embedding in the daemon, its restart
tests and the status-latency benchmark all drive the same objects; `SESSION` is drawn once per
process, so every module of a session names the same namespaces.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from generic import constants as c
from tests.support.waiting import eventually

SESSION = uuid.uuid4().hex[:6]
NAMESPACE_PREFIX = f"gen-e2e-{SESSION}-"


@dataclass
class StubKind:
    group: str
    kind: str = "StubMachine"
    plural: str = "stubmachines"
    version: str = "v1"


@dataclass
class Cluster:
    """Helpers over the real API for one test namespace."""

    api: client.ApiClient
    namespace: str
    stub: StubKind

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def vm_body(self, name: str, *, target: str | None = None, **spec: Any) -> dict[str, Any]:
        ref = {"apiGroup": self.stub.group, "kind": self.stub.kind, "name": target or name}
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"infrastructureRef": ref, **spec},
        }

    def create_vm(self, name: str, *, target: str | None = None, **spec: Any) -> dict[str, Any]:
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.vm_body(name, target=target, **spec)
        )
        return created

    def vm(self, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = self.custom.get_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got

    def patch_vm(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name, body
        )

    def delete_vm(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )

    def create_provider(
        self,
        name: str,
        *,
        backlink: str | None = None,
        owners: list[dict[str, Any]] | None = None,
        finalizers: list[str] | None = None,
        stub: StubKind | None = None,
    ) -> dict[str, Any]:
        kind = stub or self.stub
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace}
        if backlink is not None:
            meta["annotations"] = {c.LINK_ANNOTATION: backlink}
        if owners is not None:
            meta["ownerReferences"] = owners
        if finalizers is not None:
            meta["finalizers"] = finalizers
        body = {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.kind, "metadata": meta}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            kind.group, kind.version, self.namespace, kind.plural, body
        )
        return created

    def provider(self, name: str, *, stub: StubKind | None = None) -> dict[str, Any] | None:
        kind = stub or self.stub
        try:
            got: dict[str, Any] = self.custom.get_namespaced_custom_object(
                kind.group, kind.version, self.namespace, kind.plural, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got

    def patch_provider(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            self.stub.group, self.stub.version, self.namespace, self.stub.plural, name, body
        )

    def write_provider_status(self, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            self.stub.group,
            self.stub.version,
            self.namespace,
            self.stub.plural,
            name,
            {"status": status},
        )

    def delete_provider(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            self.stub.group, self.stub.version, self.namespace, self.stub.plural, name
        )

    def condition(self, vm: str, type_: str) -> dict[str, Any] | None:
        got = self.vm(vm) or {}
        for item in got.get("status", {}).get("conditions", []):
            if item.get("type") == type_:
                return dict(item)
        return None

    def event_reasons(self, vm: str) -> list[str]:
        events = client.CoreV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={vm}"
        )
        return [e.reason for e in events.items]


def remove_vms(cluster: Cluster) -> None:
    """Delete the namespace's VMs through the running controller and wait until they are gone.

    Namespace deletion alone is not enough: the VMs' finalizer needs the controller, which is
    stopped at the end of the session.
    """
    custom = cluster.custom
    listing = custom.list_namespaced_custom_object(c.GROUP, c.VERSION, cluster.namespace, c.PLURAL)
    for vm in listing["items"]:
        with contextlib.suppress(client.ApiException):
            cluster.delete_vm(vm["metadata"]["name"])
    # Test providers may hold a finalizer of their own; nothing else would release it.
    with contextlib.suppress(client.ApiException):
        stubs = custom.list_namespaced_custom_object(
            cluster.stub.group, cluster.stub.version, cluster.namespace, cluster.stub.plural
        )
        for provider in stubs["items"]:
            if provider["metadata"].get("finalizers"):
                cluster.patch_provider(
                    provider["metadata"]["name"], {"metadata": {"finalizers": None}}
                )

    def vms_gone() -> bool:
        listing = custom.list_namespaced_custom_object(
            c.GROUP, c.VERSION, cluster.namespace, c.PLURAL
        )
        return not listing["items"]

    eventually(vms_gone, timeout=60, what=f"VMs in {cluster.namespace} deleted")
