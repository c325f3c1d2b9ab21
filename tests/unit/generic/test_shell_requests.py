"""What the generic shells send and how they read the answers, against a stub API server.

The requests are spelled out (method, path, query, content type, body), so a change of the client
underneath (the generated API classes then, `KubeApi` now) cannot change what reaches the API
server unnoticed; and the answers' failures keep their meaning (a missing Event is posted again,
a Lease taken meanwhile is not ours, a provider object already gone is no error).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from generic import constants as c
from generic.adapters.events import EventRecorder
from generic.adapters.kube import KubeGateway
from generic.adapters.lease import LeaseElector
from generic.adapters.listwatch import ListWatch
from generic.errors import ConflictError, KindNotServedError
from generic.gateway import ProviderKind
from tests.support.apiserver import StubApiServer

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
EVENTS = "/api/v1/namespaces/ns/events"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")
STRATEGIC = "application/strategic-merge-patch+json"


def shape(value: Any) -> Any:
    """A body with its timestamps as "<time>" (the format itself is checked apart)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, str) and TIME.match(value):
        return "<time>"
    return value


def sent(server: StubApiServer) -> list[tuple[str, str, str, str | None, Any]]:
    return [(r.method, r.path, r.query, r.content_type, shape(r.body)) for r in server.requests]


def bodies(server: StubApiServer, method: str) -> list[Any]:
    return [r.body for r in server.requests if r.method == method]


@pytest.fixture
def server() -> Iterator[StubApiServer]:
    with StubApiServer(watch_hold=0.2) as stub:
        yield stub


# -- Events ------------------------------------------------------------------------------------

VM = {
    "apiVersion": "vm-api.io/v1alpha1",
    "kind": "VirtualMachine",
    "metadata": {"name": "vm", "namespace": "ns", "uid": "u1", "resourceVersion": "5"},
}


def test_an_event_is_posted_once_then_counted(server: StubApiServer) -> None:
    recorder = EventRecorder(server.api_client(), component="comp", instance="inst", host="h1")
    recorder.record(VM, type_="Warning", reason="Failed", message="it broke")
    recorder.record(VM, type_="Warning", reason="Failed", message="it broke")

    [created] = bodies(server, "POST")
    name = created["metadata"]["name"]
    assert re.fullmatch(r"vm\.[0-9a-f]{16}", name)
    assert sent(server) == [
        (
            "POST",
            EVENTS,
            "",
            None,
            {
                "count": 1,
                "firstTimestamp": "<time>",
                "involvedObject": {
                    "apiVersion": "vm-api.io/v1alpha1",
                    "kind": "VirtualMachine",
                    "name": "vm",
                    "namespace": "ns",
                    "resourceVersion": "5",
                    "uid": "u1",
                },
                "lastTimestamp": "<time>",
                "message": "it broke",
                "metadata": {"name": name, "namespace": "ns"},
                "reason": "Failed",
                "reportingComponent": "comp",
                "reportingInstance": "inst",
                "source": {"component": "comp", "host": "h1"},
                "type": "Warning",
            },
        ),
        ("PATCH", f"{EVENTS}/{name}", "", STRATEGIC, {"count": 2, "lastTimestamp": "<time>"}),
    ]
    # Whole seconds, as the Event API has them.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|\+00:00)", created["firstTimestamp"])


def test_an_event_gone_meanwhile_is_posted_again_and_a_failure_is_only_logged(
    server: StubApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = EventRecorder(server.api_client(), component="comp", instance="inst")
    obj = {"metadata": {"name": "x", "namespace": "ns"}}  # no uid, kind or apiVersion
    recorder.record(obj, type_="Normal", reason="R", message="m", kind="Thing")
    [first] = bodies(server, "POST")
    assert first["involvedObject"] == {"kind": "Thing", "name": "x", "namespace": "ns"}
    assert "host" not in first["source"]
    server.fail("PATCH", f"{EVENTS}/{first['metadata']['name']}", 404)
    recorder.record(obj, type_="Normal", reason="R", message="m", kind="Thing")
    assert [r.method for r in server.requests] == ["POST", "PATCH", "POST"]

    server.fail("POST", EVENTS, 500)
    recorder.record(obj, type_="Normal", reason="Other", message="m", kind="Thing")
    assert "could not record event Other on x: 500" in caplog.text


# -- Leases ------------------------------------------------------------------------------------


def elector(server: StubApiServer, identity: str, started: threading.Event) -> LeaseElector:
    return LeaseElector(
        server.api_client(),
        name="lead",
        namespace="ns",
        identity=identity,
        on_start=started.set,
        on_stop=lambda: None,
        retry_period=30.0,
        labels={"app": "x"},
    )


def test_a_lease_is_created_taken_over_and_handed_back(server: StubApiServer) -> None:
    started = threading.Event()
    first = elector(server, "a", started)
    first.start()
    assert started.wait(10)
    first.stop()
    assert not first.alive()
    released = server.get(f"{LEASES}/lead")
    assert released is not None
    assert "holderIdentity" not in released["spec"]

    started.clear()
    second = elector(server, "b", started)
    second.start()
    assert started.wait(10)
    second.stop()

    spec = {
        "acquireTime": "<time>",
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 0,
        "renewTime": "<time>",
    }
    meta = {"name": "lead", "namespace": "ns", "labels": {"app": "x"}}
    lease = f"{LEASES}/lead"
    requests = sent(server)
    assert requests[:2] == [
        ("GET", lease, "", None, None),
        ("POST", LEASES, "", None, {"metadata": meta, "spec": spec}),
    ]
    # Handed back: read, then written without a holder (the read's resourceVersion guards it).
    assert [r[:2] for r in requests[2:4]] == [("GET", lease), ("PUT", lease)]
    handed = requests[3][4]
    assert "holderIdentity" not in handed["spec"]
    assert handed["metadata"]["resourceVersion"]
    # Taken over by b: a transition, acquired now.
    assert [r[:2] for r in requests[4:6]] == [("GET", lease), ("PUT", lease)]
    taken = requests[5][4]["spec"]
    assert taken["holderIdentity"] == "b"
    assert taken["leaseTransitions"] == 1
    assert taken["leaseDurationSeconds"] == 15
    assert TIME.match(server.requests[5].body["spec"]["renewTime"])


def test_a_lease_taken_meanwhile_is_not_held(server: StubApiServer) -> None:
    started = threading.Event()
    server.fail("POST", LEASES, 409)
    candidate = elector(server, "a", started)
    candidate.start()
    candidate.stop()
    assert not started.is_set()
    assert [r.method for r in server.requests][:2] == ["GET", "POST"]


def _announcing(server: StubApiServer, started: threading.Event) -> LeaseElector:
    """A candidate publishing where it is reached, and removing a key a former holder wrote."""
    return LeaseElector(
        server.api_client(),
        name="lead",
        namespace="ns",
        identity="a",
        on_start=started.set,
        on_stop=lambda: None,
        retry_period=30.0,
        annotations={"where": "10.0.0.1:8444", "stale": None},
    )


def test_a_holder_publishes_its_annotations_and_takes_them_back(server: StubApiServer) -> None:
    """What a former holder published under the holder's keys is replaced (a None value removes
    it); annotations under other keys are left alone; handing back removes the holder's own."""
    lease = f"{LEASES}/lead"
    server.put(
        lease,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "lead",
                "namespace": "ns",
                "annotations": {"where": "10.0.0.9:1", "stale": "old", "theirs": "kept"},
            },
            "spec": {},
        },
    )
    started = threading.Event()
    candidate = _announcing(server, started)
    candidate.start()
    assert started.wait(10)
    held = server.get(lease)
    assert held is not None
    assert held["metadata"]["annotations"] == {"where": "10.0.0.1:8444", "theirs": "kept"}
    candidate.stop()
    released = server.get(lease)
    assert released is not None
    assert released["metadata"]["annotations"] == {"theirs": "kept"}


def test_a_created_lease_carries_the_holders_annotations(server: StubApiServer) -> None:
    started = threading.Event()
    candidate = _announcing(server, started)
    candidate.start()
    assert started.wait(10)
    created = bodies(server, "POST")[0]
    assert created["metadata"]["annotations"] == {"where": "10.0.0.1:8444"}
    candidate.stop()


# -- the gateway: discovery, deletes -----------------------------------------------------------

GROUP = "example.vm-api.io"


def serve_kind(server: StubApiServer, *, labelled: bool = True) -> None:
    server.set_discovery(
        "/apis/",
        {
            "kind": "APIGroupList",
            "groups": [
                {
                    "name": GROUP,
                    "versions": [
                        {"groupVersion": f"{GROUP}/v1", "version": "v1"},
                        {"groupVersion": f"{GROUP}/v2", "version": "v2"},
                    ],
                    "preferredVersion": {"groupVersion": f"{GROUP}/v2", "version": "v2"},
                }
            ],
        },
    )
    server.set_discovery(
        f"/apis/{GROUP}/v2",
        {
            "kind": "APIResourceList",
            "groupVersion": f"{GROUP}/v2",
            "resources": [
                {
                    "name": "widgets/status",
                    "singularName": "",
                    "kind": "Widget",
                    "namespaced": True,
                    "verbs": [],
                },
                {
                    "name": "widgets",
                    "singularName": "widget",
                    "kind": "Widget",
                    "namespaced": True,
                    "verbs": [],
                },
            ],
        },
    )
    labels = {c.PROVIDER_CRD_LABEL: c.PROVIDER_CRD_LABEL_VALUE} if labelled else {"other": "x"}
    server.put(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{GROUP}",
        {
            "metadata": {"labels": labels},
            "spec": {
                "group": GROUP,
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [{"name": "v2", "served": True, "storage": True}],
            },
        },
    )


def test_discovery_finds_the_preferred_version_of_a_labelled_kind(server: StubApiServer) -> None:
    serve_kind(server)
    gateway = KubeGateway(server.api_client())
    kind = gateway.resolve_kind(GROUP, "Widget")
    assert (kind.version, kind.plural) == ("v2", "widgets")
    assert sent(server) == [
        ("GET", "/apis/", "", None, None),
        ("GET", f"/apis/{GROUP}/v2", "", None, None),
        ("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{GROUP}",
         "", None, None),
    ]  # fmt: skip
    assert {r.accept for r in server.requests} == {"application/json"}


def test_discovery_refuses_an_unlabelled_kind_and_a_missing_group(server: StubApiServer) -> None:
    serve_kind(server, labelled=False)
    gateway = KubeGateway(server.api_client(), negative_discovery_ttl=0)
    with pytest.raises(KindNotServedError, match="lacks the label"):
        gateway.resolve_kind(GROUP, "Widget")
    with pytest.raises(KindNotServedError, match="serves no group"):
        gateway.resolve_kind("other.example", "Widget")


def test_a_provider_is_deleted_with_preconditions_and_a_gone_one_is_no_error(
    server: StubApiServer,
) -> None:
    path = f"/apis/{GROUP}/v2/namespaces/ns/widgets/w"
    stored = server.put(path, {"spec": {}})
    gateway = KubeGateway(server.api_client())
    kind = ProviderKind(group=GROUP, version="v2", kind="Widget", plural="widgets", watched=False)
    stale = {"metadata": {**stored["metadata"], "resourceVersion": "1"}}
    with pytest.raises(ConflictError):
        gateway.delete_provider(kind, stale)
    gateway.delete_provider(kind, stored)
    gateway.delete_provider(kind, stored)  # gone: nothing to do
    preconditions = {"resourceVersion": stored["metadata"]["resourceVersion"], "uid": "uid-w"}
    deletes = [r for r in server.requests if r.method == "DELETE"]
    assert [(r.path, r.content_type, r.body) for r in deletes[1:]] == [
        (path, None, {"preconditions": preconditions})
    ] * 2
    assert server.get(path) is None


# -- the list-then-watch loop --------------------------------------------------------------------


def test_the_loop_lists_then_watches_from_the_lists_version(server: StubApiServer) -> None:
    server.put("/apis/example.io/v1/widgets/a", {"spec": {}})
    lists: list[list[str]] = []
    events: list[tuple[str, str]] = []
    watched = threading.Event()

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        events.append((kind, obj["metadata"]["name"]))
        watched.set()

    loop = ListWatch(
        server.api_client(),
        name="test-stub-loop",
        target=lambda: ("example.io", "v1", "widgets"),
        on_list=lambda objs: lists.append([o["metadata"]["name"] for o in objs]),
        on_event=on_event,
        field_selector="metadata.name=a",
        server_timeout=60,
    )
    loop.start()
    assert watched.wait(10)
    loop.stop(timeout=10)
    assert lists[0] == ["a"]
    assert events[0] == ("ADDED", "a")
    first, second = server.requests[:2]
    assert (first.method, first.path, first.query) == (
        "GET",
        "/apis/example.io/v1/widgets",
        "fieldSelector=metadata.name%3Da",
    )
    assert second.path == first.path
    query = dict(part.split("=", 1) for part in second.query.split("&"))
    assert set(query) == {
        "allowWatchBookmarks",
        "fieldSelector",
        "resourceVersion",
        "timeoutSeconds",
        "watch",
    }
    assert second.query.startswith("allowWatchBookmarks=true&fieldSelector=metadata.name%3Da&")
    assert query["watch"] == "true"
    assert query["resourceVersion"] == "101"  # the list's (the stored object took 100)
    assert 54 <= int(query["timeoutSeconds"]) <= 66
