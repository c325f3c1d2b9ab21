"""`KubeApi` sends what the client library's generated API classes send, and answers the same.

Each of its methods is compared with the generated method of the same name at the `ApiClient`
boundary (method, URL with query, headers, serialised body, timeout): the same request, whatever
the library does underneath. Answers and error answers come from a stub API server on 127.0.0.1,
against both clients. What a failure means (`failure_of`, `translated_api_errors`) is decided in
`kubeclient` alone.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from generic.adapters.kubeclient import (
    JSON_PATCH,
    ApiFailure,
    ErrorFactory,
    KubeApi,
    api_failure,
    describe_failure,
    failure_message,
    failure_of,
    new_watch,
    translated_api_errors,
)
from tests.support.apiserver import StubApiServer

REPO = Path(__file__).resolve().parents[3]
T = (5.0, 30.0)
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
GROUP, VERSION = "infrastructure.vm-api.io", "v1alpha1"


class _Sent(Exception):  # noqa: N818 (not an error: the request went no further)
    pass


def _request(api: client.ApiClient, call: Any) -> tuple[Any, ...]:
    """What `call()` hands to `ApiClient.call_api`: (method, url, headers, body, post_params,
    timeout)."""
    seen: list[tuple[Any, ...]] = []

    def call_api(*args: Any, _request_timeout: Any = None) -> Any:
        seen.append((*args, _request_timeout))
        raise _Sent

    api.call_api = call_api  # type: ignore[method-assign, assignment]
    with pytest.raises(_Sent):
        call()
    [request] = seen
    return request


def _lease(**spec: Any) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name="l", namespace="ns", labels={"k": "v"}),
        spec=client.V1LeaseSpec(**spec),
    )


LEASE_SPEC = {
    "holderIdentity": "me",
    "acquireTime": NOW,
    "renewTime": NOW,
    "leaseDurationSeconds": 15,
    "leaseTransitions": 0,
}
LEASE = {"metadata": {"name": "l", "namespace": "ns", "labels": {"k": "v"}}, "spec": LEASE_SPEC}
LEASE_MODEL = _lease(
    holder_identity="me",
    acquire_time=NOW,
    renew_time=NOW,
    lease_duration_seconds=15,
    lease_transitions=0,
)
EVENT = {
    "metadata": {"name": "vm.1", "namespace": "ns"},
    "involvedObject": {"apiVersion": "v", "kind": "K", "name": "vm", "namespace": "ns"},
    "type": "Normal",
    "reason": "Started",
    "message": "m",
    "source": {"component": "c", "host": "h"},
    "reportingComponent": "c",
    "reportingInstance": "i",
    "firstTimestamp": NOW,
    "lastTimestamp": NOW,
    "count": 1,
}
OPS = [{"op": "test", "path": "/metadata/finalizers", "value": ["a"]}]

# (generated class, method, its arguments, KubeApi's arguments when they differ: the generated
# class takes built-in kinds as models, KubeApi as dicts)
REVIEW = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SubjectAccessReview",
    "spec": {
        "user": "alice",
        "groups": ["dev"],
        "resourceAttributes": {"namespace": "ns", "verb": "get", "resource": "libvirtmachines"},
    },
}

CASES: list[tuple[str, str, tuple[Any, ...], dict[str, Any], tuple[Any, ...] | None]] = [
    ("CustomObjectsApi", "get_namespaced_custom_object",
     (GROUP, VERSION, "ns", "libvirtmachines", "a b/c%"), {"_request_timeout": T}, None),
    ("CustomObjectsApi", "get_cluster_custom_object",
     (GROUP, VERSION, "libvirtimages", "img"), {"_request_timeout": T}, None),
    ("CustomObjectsApi", "list_cluster_custom_object",
     (GROUP, VERSION, "libvirtmachines"),
     {"label_selector": "infrastructure.vm-api.io/host=h1", "limit": 1,
      "_request_timeout": (3.0, 3.0)}, None),
    ("CustomObjectsApi", "list_cluster_custom_object",
     (GROUP, VERSION, "libvirthosts"),
     {"field_selector": "metadata.name=h1", "_request_timeout": T}, None),
    # As kubernetes.watch.Watch.stream calls it for ListWatch.
    ("CustomObjectsApi", "list_cluster_custom_object",
     (GROUP, VERSION, "libvirthosts"),
     {"resource_version": "41", "allow_watch_bookmarks": True,
      "field_selector": "metadata.name=h1", "timeout_seconds": 287, "watch": True,
      "_preload_content": False, "_request_timeout": (5.0, 317.5)}, None),
    ("CustomObjectsApi", "list_namespaced_custom_object",
     ("subresources." + GROUP, VERSION, "ns", "libvirtmachinestats"),
     {"field_selector": "spec.host=h1", "_request_timeout": T}, None),
    ("CustomObjectsApi", "create_cluster_custom_object",
     (GROUP, VERSION, "libvirthosts", {"kind": "LibvirtHost", "metadata": {"name": "h1"},
                                       "spec": {}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "create_namespaced_custom_object",
     (GROUP, VERSION, "ns", "libvirtmigrations",
      {"kind": "LibvirtMigration", "metadata": {"generateName": "m-"}, "spec": {}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "patch_namespaced_custom_object",
     (GROUP, VERSION, "ns", "libvirtmachines", "m", {"metadata": {"labels": {"h": "x"}}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "patch_namespaced_custom_object",
     (GROUP, VERSION, "ns", "libvirtmachines", "m", OPS),
     {"_content_type": JSON_PATCH, "_request_timeout": T}, None),
    ("CustomObjectsApi", "patch_namespaced_custom_object_status",
     (GROUP, VERSION, "ns", "libvirtmachines", "m", {"status": {"phase": None}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "patch_cluster_custom_object",
     (GROUP, VERSION, "libvirthosts", "h1", {"spec": {"drain": None}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "patch_cluster_custom_object_status",
     (GROUP, VERSION, "libvirtimages", "img",
      {"metadata": {"resourceVersion": "7"}, "status": {"hosts": []}}),
     {"_request_timeout": T}, None),
    ("CustomObjectsApi", "delete_namespaced_custom_object",
     (GROUP, VERSION, "ns", "libvirtmachines", "m"),
     {"body": client.V1DeleteOptions(
         preconditions=client.V1Preconditions(uid="u1", resource_version="9")),
      "_request_timeout": T},
     None),
    ("CustomObjectsApi", "delete_cluster_custom_object",
     ("networking.k8s.io", "v1", "ipaddresses", "10.0.0.5"),
     {"body": client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="u2")),
      "_request_timeout": T},
     None),
    ("CustomObjectsApi", "get_api_resources", (GROUP, VERSION), {"_request_timeout": T}, None),
    ("ApisApi", "get_api_versions", (), {"_request_timeout": T}, None),
    ("ApiextensionsV1Api", "read_custom_resource_definition",
     ("libvirtmachines." + GROUP,), {"_request_timeout": T}, None),
    ("CoreV1Api", "read_namespaced_secret", ("creds", "ns"), {"_request_timeout": T}, None),
    ("CoreV1Api", "list_namespace", (), {"_request_timeout": T}, None),
    ("CoreV1Api", "read_namespaced_config_map",
     ("extension-apiserver-authentication", "kube-system"), {"_request_timeout": T}, None),
    ("AuthorizationV1Api", "create_subject_access_review",
     (client.V1SubjectAccessReview.from_dict(REVIEW),), {"_request_timeout": T}, (REVIEW,)),
    ("CoreV1Api", "create_namespaced_event",
     ("ns", client.CoreV1Event.from_dict(EVENT)), {"_request_timeout": T}, ("ns", EVENT)),
    ("CoreV1Api", "patch_namespaced_event",
     ("vm.1", "ns", {"count": 2, "lastTimestamp": "2026-01-02T03:04:05Z"}),
     {"_request_timeout": T}, None),
    ("CoordinationV1Api", "read_namespaced_lease", ("l", "ns"), {"_request_timeout": 5.0}, None),
    ("CoordinationV1Api", "list_namespaced_lease",
     ("ns",), {"label_selector": "infrastructure.vm-api.io/host", "_request_timeout": T}, None),
    ("CoordinationV1Api", "create_namespaced_lease",
     ("ns", LEASE_MODEL), {"_request_timeout": 5.0}, ("ns", LEASE)),
    ("CoordinationV1Api", "replace_namespaced_lease",
     ("l", "ns", LEASE_MODEL), {"_request_timeout": 5.0}, ("l", "ns", LEASE)),
    ("CoordinationV1Api", "patch_namespaced_lease",
     ("l", "ns", {"spec": {"holderIdentity": "h1", "renewTime": NOW}}),
     {"_request_timeout": T}, None),
]  # fmt: skip


@pytest.fixture
def api() -> client.ApiClient:
    configuration = client.Configuration(host="https://apiserver.example:6443")
    configuration.api_key = {"BearerToken": "secret-token"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_each_request_is_the_generated_classes_request(
    api: client.ApiClient, case: tuple[str, str, tuple[Any, ...], dict[str, Any], Any]
) -> None:
    api_class, method, args, kwargs, ours = case
    generated = getattr(getattr(client, api_class)(api), method)
    theirs = _request(api, lambda: generated(*args, **kwargs))
    our_kwargs = dict(kwargs)
    if isinstance(our_kwargs.get("body"), client.V1DeleteOptions):
        our_kwargs["body"] = api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            our_kwargs["body"]
        )
    mine = _request(api, lambda: getattr(KubeApi(api), method)(*(ours or args), **our_kwargs))
    assert mine == theirs
    assert mine[2]["authorization"] == "Bearer secret-token"


def test_every_method_is_compared() -> None:
    methods = {name for name in vars(KubeApi) if not name.startswith("_")}
    # get_bytes has no generated twin; it is compared with a GET of the same path below.
    assert methods == {case[1] for case in CASES} | {"get_bytes"}


def test_get_bytes_sends_the_generated_classes_get_of_its_path(api: client.ApiClient) -> None:
    theirs = _request(
        api,
        lambda: client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION, _request_timeout=T),
    )
    mine = _request(
        api, lambda: KubeApi(api).get_bytes(f"/apis/{GROUP}/{VERSION}", _request_timeout=T)
    )
    assert mine == theirs


# -- answers, against a stub API server ------------------------------------------------------


@pytest.fixture
def server() -> Iterator[StubApiServer]:
    with StubApiServer(watch_hold=0.2) as stub:
        yield stub


MACHINES = f"/apis/{GROUP}/{VERSION}/namespaces/ns/libvirtmachines"


def test_answers_are_plain_json(server: StubApiServer) -> None:
    stored = server.put(f"{MACHINES}/m", {"spec": {"host": "h1"}})
    spec = {**LEASE_SPEC, "renewTime": NOW.isoformat(), "acquireTime": NOW.isoformat()}
    server.put("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", {"spec": spec})
    kube = KubeApi(server.api_client())

    assert kube.get_namespaced_custom_object(GROUP, VERSION, "ns", "libvirtmachines", "m") == (
        stored
    )
    lease = kube.read_namespaced_lease("l", "ns")
    assert lease["spec"]["renewTime"] == NOW.isoformat()  # as sent: no model in between
    listing = kube.list_namespaced_lease("ns")
    assert [item["metadata"]["name"] for item in listing["items"]] == ["l"]


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (404, ApiFailure.NOT_FOUND),
        (409, ApiFailure.CONFLICT),
        (403, ApiFailure.FORBIDDEN),
        (422, ApiFailure.REJECTED),
        (410, ApiFailure.GONE),
        (503, ApiFailure.UNAVAILABLE),
    ],
)
def test_an_error_answer_raises_what_the_generated_class_raises(
    server: StubApiServer, status: int, failure: ApiFailure
) -> None:
    api = server.api_client()
    path = f"{MACHINES}/m"
    raised = []
    for call in (
        client.CustomObjectsApi(api).get_namespaced_custom_object,
        KubeApi(api).get_namespaced_custom_object,
    ):
        server.fail("GET", path, status)
        with pytest.raises(ApiException) as caught:
            call(GROUP, VERSION, "ns", "libvirtmachines", "m")
        raised.append(caught.value)
    theirs, mine = raised
    assert type(mine) is type(theirs)
    assert (mine.status, mine.reason, mine.body) == (theirs.status, theirs.reason, theirs.body)
    assert failure_of(mine) is failure


def _events(stream: Iterator[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(event["type"], event["object"]) for event in stream]


def test_a_watch_streams_dicts_and_follows_bookmarks_as_the_generated_class_did(
    server: StubApiServer,
) -> None:
    """ListWatch's stream: the same events, and the same resourceVersion to resume from."""
    server.put(f"{MACHINES}/m", {"spec": {}})
    api = server.api_client()
    args = (GROUP, VERSION, "libvirtmachines")
    kwargs = {"resource_version": "1", "allow_watch_bookmarks": True, "timeout_seconds": 1}
    # What ListWatch used: the return type read off the generated method (object).
    theirs = watch.Watch()  # type: ignore[no-untyped-call]
    generated = client.CustomObjectsApi(api).list_cluster_custom_object
    before = _events(theirs.stream(generated, *args, **kwargs))  # type: ignore[no-untyped-call]
    mine = new_watch()
    ours = KubeApi(api).list_cluster_custom_object
    after = _events(mine.stream(ours, *args, **kwargs))  # type: ignore[no-untyped-call]

    assert [kind for kind, _ in after] == ["ADDED", "BOOKMARK"]
    assert isinstance(after[0][1], dict)
    assert after[0][1]["metadata"]["name"] == "m"
    assert [kind for kind, _ in before] == [kind for kind, _ in after]
    assert before[0] == after[0]
    # Each resumes from its stream's bookmark.
    assert theirs.resource_version == before[1][1]["metadata"]["resourceVersion"]
    assert mine.resource_version == after[1][1]["metadata"]["resourceVersion"]
    watches = [r for r in server.requests if "watch=true" in r.query]
    assert watches[0].query == watches[1].query
    assert watches[0].query.startswith("allowWatchBookmarks=true&resourceVersion=1")


def test_a_watch_refused_raises_as_the_generated_class_did(server: StubApiServer) -> None:
    api = server.api_client()
    raised = []
    for func in (
        client.CustomObjectsApi(api).list_cluster_custom_object,
        KubeApi(api).list_cluster_custom_object,
    ):
        server.fail("GET", f"/apis/{GROUP}/{VERSION}/libvirtmachines", 410)
        with pytest.raises(ApiException) as caught:
            list(
                new_watch().stream(  # type: ignore[no-untyped-call]
                    func, GROUP, VERSION, "libvirtmachines", resource_version="5", timeout_seconds=1
                )
            )
        raised.append(caught.value)
    theirs, mine = raised
    assert type(mine) is type(theirs)
    assert (mine.status, mine.body) == (theirs.status, theirs.body)
    assert failure_of(mine) is ApiFailure.GONE


def test_the_client_loads_no_generated_model_or_api_module() -> None:
    """What the host daemon saves: no generated module is imported by any call it makes."""
    script = """
import sys
from tests.support.apiserver import StubApiServer
from generic.adapters.kubeclient import KubeApi, new_watch
with StubApiServer(watch_hold=0.1) as server:
    kube = KubeApi(server.api_client())
    server.put("/apis/g.io/v1/namespaces/ns/things/a", {"spec": {}})
    kube.get_namespaced_custom_object("g.io", "v1", "ns", "things", "a")
    kube.patch_namespaced_custom_object("g.io", "v1", "ns", "things", "a", {"spec": {"x": 1}})
    kube.create_namespaced_lease("ns", {"metadata": {"name": "l"}, "spec": {}})
    kube.read_namespaced_lease("l", "ns")
    kube.list_namespaced_lease("ns", label_selector="x")
    try:
        kube.read_namespaced_secret("gone", "ns")
    except Exception as err:
        assert getattr(err, "status", None) == 404, err
    list(new_watch().stream(kube.list_cluster_custom_object, "g.io", "v1", "things",
                            timeout_seconds=1))
loaded = [m for m in sys.modules
          if m.startswith(("kubernetes.client.models.", "kubernetes.client.api."))]
print(len(loaded), loaded[:5])
"""
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0 []"


# -- what a failure means ----------------------------------------------------------------------


def test_statuses_and_network_errors_have_one_meaning_each() -> None:
    assert [api_failure(s) for s in (404, 410, 409, 403, 400, 422, 500, 0, None)] == [
        ApiFailure.NOT_FOUND,
        ApiFailure.GONE,
        ApiFailure.CONFLICT,
        ApiFailure.FORBIDDEN,
        ApiFailure.REJECTED,
        ApiFailure.REJECTED,
        ApiFailure.UNAVAILABLE,
        ApiFailure.UNAVAILABLE,
        ApiFailure.UNAVAILABLE,
    ]
    assert failure_of(ApiException(status=409, reason="Conflict")) is ApiFailure.CONFLICT
    assert failure_of(ProtocolError("reset")) is ApiFailure.UNAVAILABLE
    assert failure_of(ConnectionRefusedError()) is ApiFailure.UNAVAILABLE
    assert failure_of(ValueError("a bug")) is None
    assert describe_failure(ApiException(status=409, reason="Conflict")) == "409 Conflict"
    assert describe_failure(ConnectionRefusedError("no")) == "ConnectionRefusedError: no"


class _MeantError(Exception):
    def __init__(self, failure: ApiFailure, message: str, status: int | None) -> None:
        super().__init__(message)
        self.failure, self.status = failure, status


def _factories(*failures: ApiFailure) -> dict[ApiFailure, ErrorFactory]:
    def factory(failure: ApiFailure) -> ErrorFactory:
        return lambda message, status: _MeantError(failure, message, status)

    return {failure: factory(failure) for failure in failures}


def test_a_translation_without_forbidden_treats_it_as_rejected() -> None:
    without = _factories(*(f for f in ApiFailure if f is not ApiFailure.FORBIDDEN))
    with pytest.raises(_MeantError) as caught, translated_api_errors("reading x", without):
        raise ApiException(status=403, reason="Forbidden")
    assert (caught.value.failure, caught.value.status) == (ApiFailure.REJECTED, 403)
    assert str(caught.value) == "reading x: HTTP 403 Forbidden"

    with pytest.raises(_MeantError) as caught, translated_api_errors("x", _factories(*ApiFailure)):
        raise ApiException(status=403, reason="Forbidden")
    assert caught.value.failure is ApiFailure.FORBIDDEN

    with pytest.raises(_MeantError) as caught, translated_api_errors("x", without):
        raise ConnectionResetError("reset")
    assert (caught.value.failure, caught.value.status) == (ApiFailure.UNAVAILABLE, None)


def test_the_stub_answers_json_as_kube_apiserver_does(server: StubApiServer) -> None:
    """The stub itself: a create, a conflicting create, a tested JSON patch that fails."""
    kube = KubeApi(server.api_client())
    body = {"metadata": {"name": "h1"}, "spec": {}}
    kube.create_cluster_custom_object(GROUP, VERSION, "libvirthosts", body)
    with pytest.raises(ApiException) as caught:
        kube.create_cluster_custom_object(GROUP, VERSION, "libvirthosts", body)
    assert failure_of(caught.value) is ApiFailure.CONFLICT
    assert json.loads(str(caught.value.body))["reason"] == "AlreadyExists"
    server.put(f"{MACHINES}/m", {"metadata": {"finalizers": ["b"]}})
    with pytest.raises(ApiException) as caught:
        kube.patch_namespaced_custom_object(
            GROUP, VERSION, "ns", "libvirtmachines", "m", OPS, _content_type=JSON_PATCH
        )
    assert failure_of(caught.value) is ApiFailure.REJECTED


def test_a_failure_reads_as_kubectl_prints_it() -> None:
    status = {"kind": "Status", "reason": "Forbidden", "message": 'User "u" cannot list x'}
    refused = ApiException(status=403, reason="Forbidden", body=json.dumps(status))
    assert failure_message(refused) == 'Error from server (Forbidden): User "u" cannot list x'
    plain = ApiException(status=502, reason="Bad Gateway", body="upstream gone\n")
    assert failure_message(plain) == "Error from server (Bad Gateway): upstream gone"
    assert failure_message(ConnectionRefusedError(111, "refused")).startswith(
        "error: cannot reach the API server: "
    )
