"""Kubernetes client plumbing shared by both controllers of the daemon.

One place for what every shell needs from the client library: the request timeout, loading the
client configuration (a kubeconfig, else the in-cluster ServiceAccount), the API client every
shell calls through (`KubeApi`, and `new_watch` for its streams), and what an API failure means.
Each controller keeps its own error classes (the generic controller's `generic.errors`, the
provider's `libvirt_provider.errors`); which HTTP status means what is decided here only: a shell
translates failures (`translated_api_errors`), or asks what one means (`failure_of`), and never
reads a status code itself. `tests/unit/generic/test_kube_rules.py` keeps it so.
"""

from __future__ import annotations

import enum
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from generic.lean import Kept, lean_text

__all__ = [
    "API_ERRORS",
    "JSON_PATCH",
    "REQUEST_TIMEOUT",
    "ApiFailure",
    "Decode",
    "ErrorFactory",
    "KubeApi",
    "api_failure",
    "describe_failure",
    "failed_test_raises",
    "failure_message",
    "failure_of",
    "lean_decoder",
    "load_kube_config",
    "new_watch",
    "tested_replace",
    "translated_api_errors",
]


class ApiFailure(enum.Enum):
    """What a failed API call means for its caller."""

    NOT_FOUND = "not found"  # 404: the object does not exist
    GONE = "gone"  # 410: a resourceVersion (or the object) is too old
    CONFLICT = "conflict"  # 409: a precondition (resourceVersion, existence) failed
    FORBIDDEN = "forbidden"  # 403: RBAC refuses it; a kind of REJECTED (see translated_api_errors)
    REJECTED = "rejected"  # 400, 422: the same request will fail again
    UNAVAILABLE = "unavailable"  # anything else: the server or the network, for now


API_ERRORS: tuple[type[Exception], ...] = (ApiException, HTTPError, OSError)
"""What a call through `KubeApi` raises when it fails: an error answer (the client library's
`ApiException`), or the network (refused, reset, timed out; urllib3 wraps some). Catch these, then
ask `failure_of` what the failure means."""


def api_failure(status: int | None) -> ApiFailure:
    match status:
        case 404:
            return ApiFailure.NOT_FOUND
        case 410:
            return ApiFailure.GONE
        case 409:
            return ApiFailure.CONFLICT
        case 403:
            return ApiFailure.FORBIDDEN
        case 400 | 422:
            return ApiFailure.REJECTED
        case _:
            return ApiFailure.UNAVAILABLE


def failure_of(exc: BaseException) -> ApiFailure | None:
    """What a failed call means, for a caller that branches on it (a 404 that means "create it",
    a 409 that means "someone else was first"); None for an exception that is no API failure."""
    if isinstance(exc, ApiException):
        return api_failure(exc.status)
    if isinstance(exc, (HTTPError, OSError)):
        return ApiFailure.UNAVAILABLE
    return None


def describe_failure(exc: BaseException) -> str:
    """A short account of a failed call for a log line: "409 Conflict", or the network error."""
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def failure_message(exc: BaseException) -> str:
    """A failed call as kubectl prints it: `Error from server (Reason): message` from the
    Status object of an error answer, else the network error."""
    if not isinstance(exc, ApiException):
        return f"error: cannot reach the API server: {exc}"
    body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
    try:
        status = json.loads(body or "")
        return f"Error from server ({status.get('reason') or exc.status}): {status['message']}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"Error from server ({exc.reason or exc.status}): {(body or '').strip()}"


ErrorFactory = Callable[[str, int | None], Exception]


@contextmanager
def translated_api_errors(what: str, errors: Mapping[ApiFailure, ErrorFactory]) -> Iterator[None]:
    """Raise, for a client exception inside the block, the caller's error for what it means
    (`errors` maps every `ApiFailure` to a factory taking the message and the HTTP status;
    `FORBIDDEN` may be left out, and is then `REJECTED`)."""
    try:
        yield
    except ApiException as exc:
        status = exc.status
        failure = api_failure(status)
        if failure not in errors and failure is ApiFailure.FORBIDDEN:
            failure = ApiFailure.REJECTED
        raise errors[failure](f"{what}: HTTP {status} {exc.reason}", status) from exc
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


Timeout = float | tuple[float, float] | None
"""A request's timeout as the client library takes it: total, or (connect, read) seconds."""

_ANSWER_TYPES = {"2XX": "object"}
"""Every successful answer decoded as plain JSON (the generated classes name a model here)."""

# Content types the generated classes send by default, for the same requests. A patch of a
# built-in kind defaults to a JSON patch, which the client library's REST layer sends as a
# strategic merge patch when the body is an object rather than a list of operations.
_MERGE_PATCH = "application/merge-patch+json"
_BUILT_IN_PATCH = "application/json-patch+json"


Decode = Callable[[str], Any]
"""How a body (a list, one watch event) is turned from JSON text into dicts."""

# One lean decode at a time in the process: what a decode allocates for a moment is then never
# allocated by several threads at once (the allocator keeps such a peak).
_DECODING = threading.Lock()


def lean_decoder(kept: Kept) -> Decode:
    """Decode JSON text with every labels and annotations map cut to what `kept` names before
    it becomes Python objects (`generic.lean`), one decode at a time in the process."""

    def decode(text: str) -> Any:
        with _DECODING:
            return json.loads(lean_text(text, kept))

    return decode


class _Watch(watch.Watch):
    """The client library's watch, decoding each event once, with `decode`: the library's own
    decodes it, then encodes and decodes the object again to build the return type."""

    def __init__(self, decode: Decode) -> None:
        super().__init__(return_type=object)  # type: ignore[no-untyped-call]
        self._decode = decode

    def unmarshal_event(self, data: str, return_type: object) -> Any:
        if not data or data.isspace():
            return None
        try:
            event = self._decode(data)
        except json.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        event["raw_object"] = obj = event.get("object")
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            meta = obj.get("metadata")
            if isinstance(meta, dict) and "resourceVersion" in meta:
                self.resource_version = meta["resourceVersion"]
        return event


def new_watch(decode: Decode | None = None) -> watch.Watch:
    """A watch for streaming a `KubeApi` list method: events keep their objects as dicts, and
    the watch tracks the resourceVersion (bookmarks' too) as it does for custom objects. With
    `decode`, each event is decoded by it, once."""
    if decode is not None:
        return _Watch(decode)
    return watch.Watch(return_type=object)  # type: ignore[no-untyped-call]


class KubeApi:
    """The API endpoints the daemon calls, answering plain dicts: the one API client every shell
    builds (`KubeApi(api)`), instead of the library's generated API classes.

    Why not those: building `CoreV1Api` imports the model module of every type its methods name
    (some 250 modules, ~19 MiB; `CoordinationV1Api` 15), each method builds a pydantic validator
    on its first call, and answers for built-in kinds come back as model objects. This sends the
    same requests through the same `ApiClient` (configuration, token refresh, TLS, connection
    pool): the generated classes' paths, query parameters in their order, headers, `BearerToken`
    auth, and the same `ApiException` for an error answer. Method names and arguments are the
    generated classes' (the subset used here), so `new_watch()` streams a list method as it
    streams theirs; `tests/unit/generic/test_kubeclient.py` compares each request with theirs.
    """

    def __init__(self, api: client.ApiClient, *, decode: Decode | None = None) -> None:
        """`decode` turns every answer of this instance from JSON text into dicts (the client's
        decoding when not given): a lean decoder for the objects tenants write."""
        self.api_client = api
        self._decode = decode

    def _call(
        self,
        method: str,
        path: str,
        path_params: dict[str, str],
        *,
        query: Sequence[tuple[str, object]] = (),
        body: object = None,
        content_type: str | None = None,
        request_timeout: Timeout = None,
        preload_content: bool = True,
        decode: Decode | None = None,
    ) -> Any:
        """One request; its decoded JSON answer, or (`preload_content=False`, for a watch) the
        urllib3 response to stream. An error answer raises `ApiException`, as the generated
        classes do."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=[(name, value) for name, value in query if value is not None],
            header_params=headers,
            body=body,
            post_params=[],
            files={},
            auth_settings=["BearerToken"],
            collection_formats={},
        )
        response = self.api_client.call_api(*request, _request_timeout=request_timeout)
        if not preload_content:
            if not 200 <= response.status <= 299:
                response.read()  # type: ignore[no-untyped-call]
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response
        response.read()  # type: ignore[no-untyped-call]
        decode = decode or self._decode
        if decode is not None and 200 <= response.status <= 299:
            return decode((response.data or b"").decode("utf-8"))
        return self.api_client.response_deserialize(
            response_data=response, response_types_map=_ANSWER_TYPES
        ).data

    def get_bytes(self, path: str, *, _request_timeout: Timeout = None) -> bytes:
        """A GET of `path` whose answer is not JSON (an aggregated API's image, say): its body.
        An error answer raises `ApiException`, as every other call."""
        response = self._call(
            "GET", path, {}, request_timeout=_request_timeout, preload_content=False
        )
        return bytes(response.data)

    # -- custom objects (CustomObjectsApi) ---------------------------------------------------

    def get_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "GET",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            _custom(group, version, plural, name=name, namespace=namespace),
            request_timeout=_request_timeout,
        )

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "GET",
            "/apis/{group}/{version}/{plural}/{name}",
            _custom(group, version, plural, name=name),
            request_timeout=_request_timeout,
        )

    def list_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        allow_watch_bookmarks: bool | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        limit: int | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        watch: bool | None = None,
        _request_timeout: Timeout = None,
        _preload_content: bool = True,
        _decode: Decode | None = None,
    ) -> Any:
        """A list; with `watch`, a stream of events (through `new_watch().stream`). A list's
        answer is decoded by `_decode` when given."""
        return self._call(
            "GET",
            "/apis/{group}/{version}/{plural}",
            _custom(group, version, plural),
            query=[
                ("allowWatchBookmarks", allow_watch_bookmarks),
                ("fieldSelector", field_selector),
                ("labelSelector", label_selector),
                ("limit", limit),
                ("resourceVersion", resource_version),
                ("timeoutSeconds", timeout_seconds),
                ("watch", watch),
            ],
            request_timeout=_request_timeout,
            preload_content=_preload_content,
            decode=_decode,
        )

    def list_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        """A namespace's list."""
        return self._call(
            "GET",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}",
            _custom(group, version, plural, namespace=namespace),
            query=[("fieldSelector", field_selector), ("labelSelector", label_selector)],
            request_timeout=_request_timeout,
        )

    def create_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        body: object,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "POST",
            "/apis/{group}/{version}/{plural}",
            _custom(group, version, plural),
            body=body,
            request_timeout=_request_timeout,
        )

    def create_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        body: object,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "POST",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}",
            _custom(group, version, plural, namespace=namespace),
            body=body,
            request_timeout=_request_timeout,
        )

    def patch_namespaced_custom_object(  # noqa: PLR0917 (the generated classes' order)
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: object,
        *,
        _content_type: str | None = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        """A merge patch, or what `_content_type` says (a JSON patch)."""
        return self._call(
            "PATCH",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            _custom(group, version, plural, name=name, namespace=namespace),
            body=body,
            content_type=_content_type or _MERGE_PATCH,
            request_timeout=_request_timeout,
        )

    def patch_namespaced_custom_object_status(  # noqa: PLR0917 (the generated classes' order)
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: object,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "PATCH",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/status",
            _custom(group, version, plural, name=name, namespace=namespace),
            body=body,
            content_type=_MERGE_PATCH,
            request_timeout=_request_timeout,
        )

    def patch_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: object,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "PATCH",
            "/apis/{group}/{version}/{plural}/{name}",
            _custom(group, version, plural, name=name),
            body=body,
            content_type=_MERGE_PATCH,
            request_timeout=_request_timeout,
        )

    def patch_cluster_custom_object_status(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        body: object,
        *,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "PATCH",
            "/apis/{group}/{version}/{plural}/{name}/status",
            _custom(group, version, plural, name=name),
            body=body,
            content_type=_MERGE_PATCH,
            request_timeout=_request_timeout,
        )

    def delete_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        body: object = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        """`body` is the DeleteOptions (preconditions, propagation), as a dict."""
        return self._call(
            "DELETE",
            "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
            _custom(group, version, plural, name=name, namespace=namespace),
            body=body,
            request_timeout=_request_timeout,
        )

    def delete_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        name: str,
        *,
        body: object = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        """`body` is the DeleteOptions (preconditions, propagation), as a dict."""
        return self._call(
            "DELETE",
            "/apis/{group}/{version}/{plural}/{name}",
            _custom(group, version, plural, name=name),
            body=body,
            request_timeout=_request_timeout,
        )

    # -- discovery (CustomObjectsApi, ApisApi, ApiextensionsV1Api) ---------------------------

    def get_api_resources(
        self, group: str, version: str, *, _request_timeout: Timeout = None
    ) -> Any:
        """The APIResourceList of a group version."""
        return self._call(
            "GET",
            "/apis/{group}/{version}",
            {"group": group, "version": version},
            request_timeout=_request_timeout,
        )

    def get_api_versions(self, *, _request_timeout: Timeout = None) -> Any:
        """The APIGroupList."""
        return self._call("GET", "/apis/", {}, request_timeout=_request_timeout)

    def read_custom_resource_definition(
        self, name: str, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            {"name": name},
            request_timeout=_request_timeout,
        )

    # -- core/v1 (CoreV1Api) -----------------------------------------------------------------

    def read_namespaced_secret(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "GET",
            "/api/v1/namespaces/{namespace}/secrets/{name}",
            {"name": name, "namespace": namespace},
            request_timeout=_request_timeout,
        )

    def list_namespace(self, *, _request_timeout: Timeout = None) -> Any:
        return self._call("GET", "/api/v1/namespaces", {}, request_timeout=_request_timeout)

    def read_namespaced_config_map(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "GET",
            "/api/v1/namespaces/{namespace}/configmaps/{name}",
            {"name": name, "namespace": namespace},
            request_timeout=_request_timeout,
        )

    # -- authorization (AuthorizationV1Api) --------------------------------------------------

    def create_subject_access_review(
        self, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {},
            body=body,
            request_timeout=_request_timeout,
        )

    def create_namespaced_event(
        self, namespace: str, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "POST",
            "/api/v1/namespaces/{namespace}/events",
            {"namespace": namespace},
            body=body,
            request_timeout=_request_timeout,
        )

    def patch_namespaced_event(
        self, name: str, namespace: str, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "PATCH",
            "/api/v1/namespaces/{namespace}/events/{name}",
            {"name": name, "namespace": namespace},
            body=body,
            content_type=_BUILT_IN_PATCH,
            request_timeout=_request_timeout,
        )

    # -- coordination.k8s.io/v1 Leases (CoordinationV1Api) -----------------------------------

    def read_namespaced_lease(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            {"name": name, "namespace": namespace},
            request_timeout=_request_timeout,
        )

    def list_namespaced_lease(
        self,
        namespace: str,
        *,
        label_selector: str | None = None,
        _request_timeout: Timeout = None,
    ) -> Any:
        return self._call(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            {"namespace": namespace},
            query=[("labelSelector", label_selector)],
            request_timeout=_request_timeout,
        )

    def create_namespaced_lease(
        self, namespace: str, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            {"namespace": namespace},
            body=body,
            request_timeout=_request_timeout,
        )

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            {"name": name, "namespace": namespace},
            body=body,
            request_timeout=_request_timeout,
        )

    def patch_namespaced_lease(
        self, name: str, namespace: str, body: object, *, _request_timeout: Timeout = None
    ) -> Any:
        return self._call(
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            {"name": name, "namespace": namespace},
            body=body,
            content_type=_BUILT_IN_PATCH,
            request_timeout=_request_timeout,
        )


def _custom(
    group: str, version: str, plural: str, *, name: str | None = None, namespace: str | None = None
) -> dict[str, str]:
    params = {"group": group, "version": version, "plural": plural}
    if name is not None:
        params["name"] = name
    if namespace is not None:
        params["namespace"] = namespace
    return params
