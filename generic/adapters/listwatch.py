"""List, then watch from the list's resourceVersion: the one loop behind every cache of ours.

Both the informers (`informer.ClusterInformer`: catalog kinds, hosts, placement) and the generic
controller's provider-kind watches (`watches.ProviderWatchHub`) keep a copy of one cluster-wide
custom resource kind current. The loop they share:

- a list, handed over whole (`on_list`), so a cache can replace its copy and notice deletions
  whose events were lost while no stream was open;
- then watch events from the list's resourceVersion (`on_event`), bookmarks keeping the version
  fresh, each stream renewed on the API server's timeout (jittered, so many watches do not renew
  together) and resumed where it stopped;
- a 410 Gone (the version is too old), or a failure of the API server, the network or the stream
  (`on_failure`), starts over from a fresh list, after a backoff of 0.5 s doubling to 30 s with
  jitter while failures repeat.

What is listed is asked for (`target`) before every list: a kind's served version can change.

An exception raised by a callback is the caller's bug, not the API server's: it is logged with its
traceback and counted (`vmapi_generic_watch_callback_errors_total`), and the loop goes on. A fresh
list would hand the same objects to the same code and fail the same way, so starting over would
only relist for ever (at most every 30 s) while the rest of the kind went stale. An event whose
callback fails is skipped (the object's next event or the next list brings it again); a list whose
callback fails counts as a failure for the caller (`on_failure`), and the watch still follows from
it. Only a failing `target` is retried after the backoff: without it nothing can be listed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any, TypeVarTuple

from kubernetes import client, watch

from generic.adapters.kubeclient import (
    API_ERRORS,
    REQUEST_TIMEOUT,
    ApiFailure,
    Decode,
    KubeApi,
    failure_of,
    new_watch,
)
from generic.background import BackgroundLoop
from generic.errors import ApiError
from generic.metrics import WATCH_CALLBACK_ERRORS

__all__ = ["ListWatch", "Target"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Target = tuple[str, str, str]
"""(group, version, plural) of the kind listed and watched."""
Args = TypeVarTuple("Args")

# Failures that mean "the API server or the network", as opposed to a bug: logged briefly.
_API_FAILURES: tuple[type[Exception], ...] = (ApiError, *API_ERRORS)
# The same, and what the client raises for a response it cannot decode: JSONDecodeError or
# UnicodeDecodeError for a list's body, and, in kubernetes releases whose watch does not skip an
# undecodable line itself, JSONDecodeError from the stream. Only the client can raise a ValueError
# where this is caught: the callbacks are called through `_hand_over`, which keeps theirs (such
# as pydantic's ValidationError) apart.
_CLIENT_FAILURES: tuple[type[Exception], ...] = (*_API_FAILURES, ValueError)

_FIRST_BACKOFF = 0.5
_LAST_BACKOFF = 30.0


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
        pause: Callable[[float], object] | None = None,
        decode: Decode | None = None,
    ) -> None:
        """`pause(seconds)` waits out a backoff; by default until the time passes or `stop`.
        `decode` turns lists and events from JSON text into dicts (the client's decoding when
        not given); a lean decoder (`kubeclient.lean_decoder`) never builds what it drops."""
        self._decode = decode
        self._custom = KubeApi(api)
        self._name = name
        self._target = target
        self._on_list = on_list
        self._on_event = on_event
        self._on_failure = on_failure
        self._selector: dict[str, Any] = (
            {"field_selector": field_selector} if field_selector else {}
        )
        self._server_timeout = server_timeout
        self._loop = BackgroundLoop(name, self._run)
        self._pause: Callable[[float], object] = pause or self._loop.pause
        self._watch: watch.Watch | None = None

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout: float | None = None) -> None:
        """End the loop; wait up to `timeout` seconds for the thread when given."""
        self._loop.stop(timeout=0)  # asks; the watch is ended below, then waited for
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
        if timeout is not None:
            self._loop.stop(timeout)

    def _run(self, _loop: BackgroundLoop) -> None:
        backoff = _FIRST_BACKOFF
        while not self._loop.stopping:
            try:
                target = self._target()
            except _API_FAILURES as exc:
                self._failed()
                log.info("%s: %s; asking again", self._name, exc)
            except Exception:
                # Nothing to list without a target; what it answers can change (discovery is
                # read again), so it is asked again after the backoff: at most every 30 s.
                self._callback_failed("target")
                self._failed()
            else:
                try:
                    resource_version = self._list(target)
                    backoff = _FIRST_BACKOFF
                    self._follow(target, resource_version)
                except _CLIENT_FAILURES as exc:
                    self._failed()
                    log.info("%s: %s; listing again", self._name, exc)
                except Exception:  # a bug here must not leave a cache stale for good
                    self._failed()
                    log.exception("%s failed; listing again", self._name)
            if self._loop.stopping:
                return
            self._pause(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, _LAST_BACKOFF)

    def _hand_over(self, callback: str, call: Callable[[*Args], None], *args: *Args) -> bool:
        """Run one of the caller's callbacks; False (logged, counted) when it raised."""
        try:
            call(*args)
        except Exception:
            self._callback_failed(callback)
            return False
        return True

    def _callback_failed(self, callback: str) -> None:
        WATCH_CALLBACK_ERRORS.labels(watch=self._name, callback=callback).inc()
        log.exception("%s: the %s callback failed (a bug, not the API's)", self._name, callback)

    def _failed(self) -> None:
        self._hand_over("failure", self._on_failure)

    def _list(self, target: Target) -> str:
        group, version, plural = target
        listing = self._custom.list_cluster_custom_object(
            group,
            version,
            plural,
            _request_timeout=REQUEST_TIMEOUT,
            _decode=self._decode,
            **self._selector,
        )
        if not isinstance(listing, dict):
            raise ApiError(f"listing {plural}.{group} returned {type(listing).__name__}")
        meta = listing.get("metadata")
        if not isinstance(meta, dict) or not meta.get("resourceVersion"):
            raise ApiError(f"listing {plural}.{group} returned no resourceVersion")
        objs = [
            obj
            for obj in listing.get("items") or []
            if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)
        ]
        if not self._hand_over("list", self._on_list, objs):
            # The caller's copy is not known to be whole: it is told so, as after a failure.
            # Events still follow, from this list's version; the next list (after a 410 or a
            # failure) hands it over again.
            self._failed()
        return str(meta["resourceVersion"])

    def _follow(self, target: Target, resource_version: str) -> None:
        """Hand on watch events from `resource_version` until stopped; returns on a 410."""
        group, version, plural = target
        while not self._loop.stopping:
            self._watch = new_watch(self._decode)
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
                    if self._loop.stopping:
                        return
                    if not isinstance(event, dict):
                        # The client's answer for a line it could not decode: an event was lost,
                        # and only a fresh list can tell which.
                        raise ApiError(f"watch of {plural}.{group}: a line that is no event")
                    kind, obj = event.get("type"), event.get("object")
                    if kind == "ERROR":
                        if isinstance(obj, dict) and obj.get("code") == 410:
                            return
                        raise ApiError(f"watch of {plural}.{group}: {obj}")
                    if not isinstance(obj, dict):
                        continue
                    meta = obj.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        resource_version = str(meta["resourceVersion"])
                    if kind == "BOOKMARK" or not meta.get("name"):
                        continue
                    self._hand_over("event", self._on_event, str(kind), obj)
                # The client library tracks bookmarks' resourceVersion for resumption too.
                resource_version = self._watch.resource_version or resource_version
            except API_ERRORS as err:
                if failure_of(err) is ApiFailure.GONE:
                    return
                raise
