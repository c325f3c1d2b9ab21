"""The lab's API server is a real one: CRDs install, objects persist, watches deliver changes."""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from typing import Any

from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from tests.support.waiting import eventually

GROUP = "smoke.lab.vm-api.io"


def _crd(plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": "Probe" + plural[-6:-1]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"colour": {"type": "string"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _install(ext: client.ApiextensionsV1Api, crd: dict[str, Any]) -> None:
    ext.create_custom_resource_definition(crd)

    def established() -> bool:
        got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        return any(
            c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])
        )

    eventually(established, timeout=30, what="CRD Established")


def _create_once_served(
    custom: client.CustomObjectsApi, ns: str, plural: str, body: dict[str, Any]
) -> dict[str, Any]:
    def create() -> dict[str, Any] | None:
        try:
            created: dict[str, Any] = custom.create_namespaced_custom_object(
                GROUP, "v1", ns, plural, body
            )
            return created
        except client.exceptions.ApiException as err:
            if err.status == 404:  # Established, but not yet in every discovery cache
                return None
            raise

    return eventually(create, timeout=30, what="object created once the new API is served")


def test_crd_object_and_watch_event(api_client: client.ApiClient) -> None:
    plural = "probes" + uuid.uuid4().hex[:6]
    ext = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    crd = _crd(plural)
    _install(ext, crd)
    try:
        kind = crd["spec"]["names"]["kind"]
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": kind,
            "metadata": {"name": "one"},
            "spec": {"colour": "red"},
        }
        created = _create_once_served(custom, "default", plural, body)
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        w = watch.Watch()

        def follow() -> None:
            # The stream ends abruptly when the CRD is deleted at the end of the test.
            with contextlib.suppress(ProtocolError):
                for event in w.stream(
                    custom.list_namespaced_custom_object,
                    GROUP,
                    "v1",
                    "default",
                    plural,
                    resource_version=created["metadata"]["resourceVersion"],
                    timeout_seconds=30,
                ):
                    events.put(event)

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        custom.patch_namespaced_custom_object(
            GROUP, "v1", "default", plural, "one", {"spec": {"colour": "blue"}}
        )
        event = events.get(timeout=30)
        w.stop()
        assert event["type"] == "MODIFIED"
        assert event["object"]["spec"]["colour"] == "blue"
    finally:
        ext.delete_custom_resource_definition(crd["metadata"]["name"])


def test_rbac_is_enforced(api_client: client.ApiClient) -> None:
    """A user without bindings is denied: the lab runs with RBAC authorization on."""
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "nobody-in-particular",
                "resourceAttributes": {"verb": "list", "resource": "secrets"},
            },
        }
    )
    assert review.status.allowed is False


def test_namespace_deletion_removes_custom_objects(api_client: client.ApiClient) -> None:
    """The lab's controller manager may act on custom resources, as a real cluster's does."""
    plural = "probes" + uuid.uuid4().hex[:6]
    ext = client.ApiextensionsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    crd = _crd(plural)
    _install(ext, crd)
    ns = "gc-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": ns}})
    try:
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": crd["spec"]["names"]["kind"],
            "metadata": {"name": "one"},
        }
        _create_once_served(custom, ns, plural, body)
        core.delete_namespace(ns)

        def gone() -> bool:
            try:
                core.read_namespace(ns)
            except client.exceptions.ApiException as err:
                return err.status == 404
            return False

        eventually(gone, timeout=60, what=f"namespace {ns} and its custom object gone")
    finally:
        ext.delete_custom_resource_definition(crd["metadata"]["name"])
