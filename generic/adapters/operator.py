"""The embedding entry point: `register()` puts the generic controller on a kopf registry.

This is what the daemon calls next to its own LibvirtMachine handlers, and what any other
provider's kopf process can call: one operator process, one registry, several controllers. It
registers only event handlers (which kopf neither retries nor persists state for) plus startup
and cleanup hooks, so it never uses kopf's finalizer or its progress annotations: the VM's
finalizer `vm-api.io/virtualmachine` is managed explicitly by the reconciler. The embedding
process still owns kopf's operator-wide settings; `configure_settings` gives them this project's
names and the watch timeouts that re-establish dead streams.

What the embedding process must do:
- run kopf cluster-wide and pass namespace patterns to `register(namespaces=...)` only: the
  controller applies them to every event itself. kopf's own namespace patterns are not used,
  because kopf can miss a namespace created while it starts: its namespace observer lists the
  namespaces, then starts a watch that lists them again and ignores that second listing, so a
  namespace created between the two is never served (seen as an operator that never started
  its watches, in two of three clean-clone test runs);
- give kopf's finalizer and progress/diff-base annotations its own prefix (`configure_settings`
  does so; do not keep kopf's defaults, which other operators share);
- let kopf log in (kopf's standard login handlers) and pass a `kubernetes` ApiClient, or let
  `register` build one from the in-cluster config or KUBECONFIG at startup;
- RBAC: see docs/generic-controller.md.
"""

from __future__ import annotations

import json
import logging
import os
import types
from collections.abc import Iterable, Sequence
from typing import Any

import kopf
from kopf._cogs.clients import api as kopf_api
from kubernetes import client

from generic import constants as c
from generic.adapters.controller import GenericController
from generic.adapters.informer import GENERIC_KEPT
from generic.adapters.kubeclient import lean_decoder, load_kube_config
from generic.lean import Kept

__all__ = [
    "GenericController",
    "api_client_for",
    "configure_settings",
    "lean_watch_events",
    "register",
    "register_login",
    "run_standalone",
]

log = logging.getLogger(__name__)


def configure_settings(settings: kopf.OperatorSettings, *, prefix: str = c.KOPF_PREFIX) -> None:
    """kopf settings for a process that runs the generic controller (alone or embedded)."""
    settings.persistence.finalizer = f"{prefix}/kopf-finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    # The API server ends each watch after server_timeout; the client gives up on a stream that
    # has been silent longer than inactivity/client timeouts, so a dead connection is replaced.
    settings.watching.server_timeout = 240
    settings.watching.client_timeout = 270
    settings.watching.connect_timeout = 10
    settings.posting.level = logging.WARNING


# How far into an event's text its object's kind is looked for: the API server writes a custom
# object's keys in order, so `"kind"` follows the event's type and the object's apiVersion.
_KIND_WITHIN = 256


def lean_watch_events(kinds: Iterable[str] = c.LEAN_KINDS, kept: Kept = GENERIC_KEPT) -> None:
    """Make kopf's watches decode the events of `kinds` lean (`generic.lean`): labels and
    annotations other than `kept` are dropped from the JSON text before it becomes objects.

    kopf decodes every watch event of the process with `json.loads` in its API module, with no
    hook of its own; a VM with 40,000 labels is then 9 MiB of Python objects on kopf's event loop,
    once per operator watching VMs (the generic controller's and the provider's). This replaces
    that module's `json` with one whose `loads` is lean for those kinds' events and plain for
    every other body. Its lists (at the start of a watch, and after an expired resourceVersion)
    go through `get`, which decodes with aiohttp's own `json.loads`: `get` is replaced too, by one
    that reads the body's text and decodes it with the same `loads`. Process-wide and
    idempotent; call it before the operators start."""
    # A watch event's object, or a list of them: the API server writes a list's items before
    # its own kind, so the first item's kind is what the head shows (an empty list, its own).
    marks = tuple(f'"kind":"{kind}{suffix}"' for kind in kinds for suffix in ("", "List"))
    lean_loads = lean_decoder(kept)

    def loads(text: str | bytes, **kwargs: Any) -> Any:
        if isinstance(text, str) and not kwargs:
            head = text[:_KIND_WITHIN]
            if any(mark in head for mark in marks):
                return lean_loads(text)
        return json.loads(text, **kwargs)

    shim = types.SimpleNamespace(**{k: getattr(json, k) for k in json.__all__})
    shim.loads = loads
    kopf_api.json = shim  # type: ignore[attr-defined,assignment]

    async def get(
        url: str,
        *,
        settings: kopf.OperatorSettings,
        payload: object | None = None,
        headers: dict[str, str] | None = None,
        timeout: Any = None,
        logger: Any,
    ) -> Any:
        response = await kopf_api.request(
            method="get",
            url=url,
            payload=payload,
            headers=headers,
            timeout=timeout,
            settings=settings,
            logger=logger,
        )
        async with response:
            return loads(await response.text())

    kopf_api.get = get


def register(
    registry: kopf.OperatorRegistry,
    *,
    api_client: client.ApiClient | None = None,
    namespaces: Sequence[str] = (),
    workers: int = 4,
    poll_interval: float = 30.0,
    missing_provider_grace: float = c.MISSING_PROVIDER_GRACE_SECONDS,
    autostart: bool = True,
) -> GenericController:
    """Register the generic VirtualMachine controller on `registry`; returns its handle.

    `workers` bounds the threads that call the Kubernetes API; `poll_interval` is how often an
    adopted VM whose provider kind is not watched (unlabelled CRD) is re-checked;
    `missing_provider_grace` is how long a new VM's provider object may be missing before the
    VM reports NotAdopted. With
    `autostart=False` the controller only remembers what it sees until the embedding process
    calls `start()` (for example on winning a leader Lease) and `stop()` (on losing it).
    """
    controller = GenericController(
        api_client=api_client,
        namespaces=namespaces,
        workers=workers,
        poll_interval=poll_interval,
        missing_provider_grace=missing_provider_grace,
    )

    if autostart:

        @kopf.on.startup(registry=registry, id="vm-api-generic/startup")
        def _start(**_: Any) -> None:
            controller.start()

    @kopf.on.cleanup(registry=registry, id="vm-api-generic/cleanup")
    def _stop(**_: Any) -> None:
        controller.shutdown()

    @kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, registry=registry, id="vm-api-generic/vm")
    async def _vm_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        controller.on_vm_event(
            dict(body), deleted=event.get("type") == "DELETED", listed=event.get("type") is None
        )

    @kopf.on.event(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        registry=registry,
        id="vm-api-generic/provider-crds",
    )
    def _crd_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        controller.on_crd_event(body, deleted=event.get("type") == "DELETED")

    return controller


def register_login(registry: kopf.OperatorRegistry, *, kubeconfig: str | None) -> None:
    """kopf's login from `kubeconfig` if given, else from the in-cluster service account."""

    @kopf.on.login(registry=registry, id="vm-api-generic/login")
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if kubeconfig:
            # kopf's kubeconfig reader looks at KUBECONFIG when called, unlike the client
            # library, which reads it once at import.
            os.environ["KUBECONFIG"] = kubeconfig
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_via_client(**kwargs)


def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    """A Kubernetes client for `kubeconfig`, or in-cluster/default config when None."""
    return load_kube_config(kubeconfig)


def run_standalone(
    *,
    kubeconfig: str | None,
    namespaces: Sequence[str],
    workers: int,
    poll_interval: float,
    missing_provider_grace: float = c.MISSING_PROVIDER_GRACE_SECONDS,
) -> None:
    """Run a kopf operator that hosts only the generic controller (blocks until signalled)."""
    registry = kopf.OperatorRegistry()
    register_login(registry, kubeconfig=kubeconfig)
    register(
        registry,
        api_client=api_client_for(kubeconfig),
        namespaces=namespaces,
        workers=workers,
        poll_interval=poll_interval,
        missing_provider_grace=missing_provider_grace,
    )
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    # Cluster-wide in kopf; `register` applies the namespace patterns (see the module's doc).
    kopf.run(registry=registry, settings=settings, standalone=True, clusterwide=True)
