"""Kubernetes client plumbing shared by both controllers of the daemon.

One place for what every shell needs from the client library: the request timeout, loading the
client configuration (a kubeconfig, else the in-cluster ServiceAccount), and what an API failure
means. Each controller keeps its own error classes (the generic controller's `generic.errors`, the
provider's `libvirt_provider.errors`); which HTTP status means what is decided here only.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

__all__ = [
    "JSON_PATCH",
    "REQUEST_TIMEOUT",
    "ApiFailure",
    "ErrorFactory",
    "api_failure",
    "failed_test_raises",
    "load_kube_config",
    "tested_replace",
    "translated_api_errors",
]


class ApiFailure(enum.Enum):
    """What a failed API call means for its caller."""

    NOT_FOUND = "not found"  # 404: the object does not exist
    GONE = "gone"  # 410: a resourceVersion (or the object) is too old
    CONFLICT = "conflict"  # 409: a precondition (resourceVersion, existence) failed
    REJECTED = "rejected"  # 400, 403, 422: the same request will fail again
    UNAVAILABLE = "unavailable"  # anything else: the server or the network, for now


def api_failure(status: int | None) -> ApiFailure:
    match status:
        case 404:
            return ApiFailure.NOT_FOUND
        case 410:
            return ApiFailure.GONE
        case 409:
            return ApiFailure.CONFLICT
        case 400 | 403 | 422:
            return ApiFailure.REJECTED
        case _:
            return ApiFailure.UNAVAILABLE


ErrorFactory = Callable[[str, int | None], Exception]


@contextmanager
def translated_api_errors(what: str, errors: Mapping[ApiFailure, ErrorFactory]) -> Iterator[None]:
    """Raise, for a client exception inside the block, the caller's error for what it means
    (`errors` maps every `ApiFailure` to a factory taking the message and the HTTP status)."""
    try:
        yield
    except ApiException as exc:
        status = exc.status
        raise errors[api_failure(status)](f"{what}: HTTP {status} {exc.reason}", status) from exc
    except (HTTPError, OSError) as exc:  # refused, reset, timed out (urllib3 wraps some)
        message = f"{what}: unreachable: {exc.__class__.__name__}: {exc}"
        raise errors[ApiFailure.UNAVAILABLE](message, None) from exc


REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every non-watch request: a hung call must not hold a worker."""


def load_kube_config(kubeconfig: str | None) -> client.ApiClient:
    """An API client for `kubeconfig`, else in-cluster credentials, else the default kubeconfig.

    An explicit kubeconfig is also put into $KUBECONFIG, where kopf's login handler reads it.
    """
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


JSON_PATCH = "application/json-patch+json"
"""The content type of a JSON patch (RFC 6902), for `_content_type=`."""


def tested_replace(path: str, current: object | None, value: object) -> list[dict[str, Any]]:
    """JSON patch operations that set `path` to `value` only if it still holds `current` (a
    field that was absent is added). Guarding one field this way, rather than the whole object
    by its resourceVersion, lets writers of different fields of one object not fail each other."""
    if current is None:
        return [{"op": "add", "path": path, "value": value}]
    return [
        {"op": "test", "path": path, "value": current},
        {"op": "replace", "path": path, "value": value},
    ]


@contextmanager
def failed_test_raises(conflict: Callable[[], Exception]) -> Iterator[None]:
    """The API server answers a JSON patch whose `test` failed with 422: raise the caller's
    conflict for it (any other failure passes through)."""
    try:
        yield
    except ApiException as err:
        if err.status != 422:
            raise
        raise conflict() from err
