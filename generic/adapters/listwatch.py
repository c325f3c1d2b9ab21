"""List, then watch from the list's resourceVersion: the one loop behind every cache of ours.

Both the informers (`informer.ClusterInformer`: catalog kinds, hosts, placement) and the generic
controller's provider-kind watches (`watches.ProviderWatchHub`) keep a copy of one cluster-wide
custom resource kind current. The loop they share:

- a list, handed over whole (`on_list`), so a cache can replace its copy and notice deletions
  whose events were lost while no stream was open;
- then watch events from the list's resourceVersion (`on_event`), bookmarks keeping the version
  fresh, each stream renewed on the API server's timeout (jittered, so many watches do not renew
  together) and resumed where it stopped;
- a 410 Gone (the version is too old), or any failure (`on_failure`), starts over from a fresh
  list, after a backoff of 0.5 s doubling to 30 s with jitter while failures repeat.

What is listed is asked for (`target`) before every list: a kind's served version can change.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from generic.adapters.kubeclient import REQUEST_TIMEOUT
from generic.errors import ApiError

__all__ = ["ListWatch", "Target"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Target = tuple[str, str, str]
"""(group, version, plural) of the kind listed and watched."""

# Failures that mean "the API server or the network", as opposed to a bug: logged briefly.
_EXPECTED = (ApiError, ApiException, HTTPError, OSError, ValueError)


class ListWatch:
    """One thread running the list-then-watch loop for one kind until `stop`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        target: Callable[[], Target],
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
        on_failure: Callable[[], None] = lambda: None,
        field_selector: str | None = None,
        server_timeout: float = 300.0,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._name = name
        self._target = target
        self._on_list = on_list
        self._on_event = on_event
        self._on_failure = on_failure
        self._selector: dict[str, Any] = (
            {"field_selector": field_selector} if field_selector else {}
        )
        self._server_timeout = server_timeout
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """End the loop; wait up to `timeout` seconds for the thread when given."""
        self._stopped.set()
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
        if timeout is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopped.is_set():
            try:
                target = self._target()
                resource_version = self._list(target)
                backoff = 0.5
                self._follow(target, resource_version)
            except _EXPECTED as exc:
                self._on_failure()
                log.info("%s: %s; listing again", self._name, exc)
            except Exception:  # a bug must not leave a cache stale for good
                self._on_failure()
                log.exception("%s failed; listing again", self._name)
            self._stopped.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, 30.0)

    def _list(self, target: Target) -> str:
        group, version, plural = target
        listing = self._custom.list_cluster_custom_object(
            group, version, plural, _request_timeout=REQUEST_TIMEOUT, **self._selector
        )
        if not isinstance(listing, dict):
            raise ValueError(f"listing {plural}.{group} returned {type(listing).__name__}")
        self._on_list(
            [
                obj
                for obj in listing.get("items") or []
                if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)
            ]
        )
        return str(listing["metadata"]["resourceVersion"])

    def _follow(self, target: Target, resource_version: str) -> None:
        """Hand on watch events from `resource_version` until stopped; returns on a 410."""
        group, version, plural = target
        while not self._stopped.is_set():
            self._watch = watch.Watch()  # type: ignore[no-untyped-call]
            seconds = self._server_timeout * random.uniform(0.9, 1.1)
            try:
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self._custom.list_cluster_custom_object,
                    group,
                    version,
                    plural,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    **self._selector,
                    timeout_seconds=int(seconds),
                    _request_timeout=(REQUEST_TIMEOUT[0], seconds + 30),
                ):
                    if self._stopped.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object")
                    if kind == "ERROR":
                        if isinstance(obj, dict) and obj.get("code") == 410:
                            return
                        raise ValueError(f"watch error: {obj}")
                    if not isinstance(obj, dict):
                        continue
                    meta = obj.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        resource_version = str(meta["resourceVersion"])
                    if kind == "BOOKMARK" or not meta.get("name"):
                        continue
                    self._on_event(str(kind), obj)
                # The client library tracks bookmarks' resourceVersion for resumption too.
                resource_version = self._watch.resource_version or resource_version
            except ApiException as err:
                if err.status == 410:
                    return
                raise
