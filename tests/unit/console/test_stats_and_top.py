"""`kubectl vm top`: the stats resource's routes, the reviews that decide who sees which
machine's figures, the documents the daemon answers, and the plugin's CPU rate and table."""

from __future__ import annotations

from typing import Any

import pytest

from libvirt_provider.console.auth import Identity, Refusal
from libvirt_provider.console.stats import (
    HostSample,
    StatsRoute,
    cannot_read,
    match_stats_route,
    missing_machine,
    read_review,
    readable_namespaces,
    stats_document,
)
from libvirt_provider.console.top import (
    format_table,
    machine_usage,
    stats_field_selector,
)
from libvirt_provider.driver.types import DomainStats

PREFIX = "/apis/subresources.infrastructure.vm-api.io/v1alpha1"
ALICE = Identity(user="alice", groups=("dev", "system:authenticated"))


@pytest.mark.parametrize(
    ("path", "route"),
    [
        (f"{PREFIX}/namespaces/a/libvirtmachinestats/vm1", StatsRoute("a", "vm1", None)),
        (f"{PREFIX}/namespaces/a/libvirtmachinestats", StatsRoute("a", None, None)),
        (f"{PREFIX}/libvirtmachinestats", StatsRoute(None, None, None)),
        (
            f"{PREFIX}/libvirtmachinestats?fieldSelector=spec.host%3Dnode-1",
            StatsRoute(None, None, "node-1"),
        ),
        (
            f"{PREFIX}/namespaces/a/libvirtmachinestats?fieldSelector=spec.host%3D%3Dnode-1",
            StatsRoute("a", None, "node-1"),
        ),
        (f"{PREFIX}/libvirtmachinestats?limit=500", StatsRoute(None, None, None)),
    ],
)
def test_stats_paths_name_the_machines_asked_for(path: str, route: StatsRoute) -> None:
    assert match_stats_route(path) == route


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/namespaces/a/libvirtmachines/vm1/console",
        f"{PREFIX}/namespaces/a/libvirtmachinestats/vm1/extra",
        "/apis/other/v1/libvirtmachinestats",
        f"{PREFIX}/namespaces/A/libvirtmachinestats",
    ],
)
def test_other_paths_are_no_stats_route(path: str) -> None:
    assert match_stats_route(path) is None


@pytest.mark.parametrize(
    "selector", ["metadata.name%3Dx", "spec.host%21%3Dx", "spec.host%3Da%2Cspec.host%3Db"]
)
def test_other_field_selectors_are_refused(selector: str) -> None:
    refused = match_stats_route(f"{PREFIX}/libvirtmachinestats?fieldSelector={selector}")
    assert isinstance(refused, Refusal)
    assert refused.code == 400


def test_the_verb_is_get_for_one_machine_and_list_for_many() -> None:
    assert StatsRoute("a", "vm1", None).verb == "get"
    assert StatsRoute("a", None, None).verb == "list"
    assert StatsRoute(None, None, "h").verb == "list"


def test_the_review_asks_about_the_libvirtmachines_themselves() -> None:
    identity = Identity(user="alice", groups=("dev",), extra={"scopes": ("a", "b")})
    review = read_review(identity, "get", "ns1", "vm1")
    assert review["kind"] == "SubjectAccessReview"
    assert review["spec"]["user"] == "alice"
    assert review["spec"]["groups"] == ["dev"]
    assert review["spec"]["extra"] == {"scopes": ["a", "b"]}
    assert review["spec"]["resourceAttributes"] == {
        "namespace": "ns1",
        "verb": "get",
        "group": "infrastructure.vm-api.io",
        "version": "v1alpha1",
        "resource": "libvirtmachines",
        "name": "vm1",
    }
    everywhere = read_review(ALICE, "list", "", None)["spec"]["resourceAttributes"]
    assert everywhere["namespace"] == ""
    assert "name" not in everywhere


def test_a_refusal_is_worded_as_the_api_servers() -> None:
    refusal = cannot_read(ALICE, "list", "ns2")
    assert refusal.code == 403
    assert refusal.reason == "Forbidden"
    assert refusal.message == (
        'User "alice" cannot list resource "libvirtmachines" in API group '
        '"infrastructure.vm-api.io" in the namespace "ns2"'
    )


def _record(uuid: str, cpu_ns: int, *, state: int = 1) -> DomainStats:
    return DomainStats(
        uuid=uuid.upper(),
        name=f"domain-{uuid}",
        values={
            "state.state": state,
            "cpu.time": cpu_ns,
            "vcpu.current": 2,
            "balloon.current": 262144,
            "balloon.rss": 131072,
        },
    )


def _sample(records: tuple[DomainStats, ...] | None, taken_at: float = 1000.0) -> HostSample:
    return HostSample(
        host="h1",
        machines=(("a", "vm1", "u-1"), ("a", "off", "u-2"), ("b", "vm3", "u-3")),
        records=records,
        taken_at=taken_at,
    )


def test_a_namespace_list_has_its_machines_figures_and_the_sample_time() -> None:
    sample = _sample((_record("u-1", 5_000_000_000), _record("u-3", 1)))
    code, body = stats_document(StatsRoute("a", None, None), [sample], {"a": True})
    assert code == 200
    assert body["kind"] == "LibvirtMachineStatsList"
    assert body["partialHosts"] == []
    off, vm1 = body["items"]  # sorted by namespace and name
    assert vm1["metadata"] == {"namespace": "a", "name": "vm1"}
    assert vm1["host"] == "h1"
    assert vm1["running"] is True
    assert vm1["cpuSeconds"] == pytest.approx(5.0)
    assert vm1["vcpus"] == 2
    assert vm1["memoryBytes"] == 256 * 1024 * 1024
    assert vm1["memoryRSSBytes"] == 128 * 1024 * 1024
    assert vm1["sampledAt"] == 1000.0
    assert vm1["timestamp"] == "1970-01-01T00:16:40.000+00:00"
    # Held, but its domain is not running: listed, without figures.
    assert off["metadata"]["name"] == "off"
    assert off["running"] is False
    assert "cpuSeconds" not in off


def test_machines_of_namespaces_not_allowed_are_left_out() -> None:
    sample = _sample((_record("u-1", 1), _record("u-3", 1)))
    _code, body = stats_document(StatsRoute(None, None, None), [sample], {"a": True, "b": False})
    assert {i["metadata"]["namespace"] for i in body["items"]} == {"a"}
    _code, body = stats_document(StatsRoute(None, None, None), [sample], {})
    assert body["items"] == []


def test_one_machine_is_an_item_and_an_unheld_one_is_404() -> None:
    sample = _sample((_record("u-1", 1),))
    code, body = stats_document(StatsRoute("a", "vm1", None), [sample], {"a": True})
    assert code == 200
    assert body["kind"] == "LibvirtMachineStats"
    assert body["metadata"]["name"] == "vm1"
    code, _body = stats_document(StatsRoute("a", "nope", None), [sample], {"a": True})
    assert code == 404


def test_a_host_filter_keeps_that_hosts_machines() -> None:
    sample = _sample((_record("u-1", 1),))
    _code, body = stats_document(StatsRoute(None, None, "h2"), [sample], {"a": True, "b": True})
    assert body["items"] == []
    _code, body = stats_document(StatsRoute(None, None, "h1"), [sample], {"a": True, "b": True})
    assert len(body["items"]) == 3


def test_a_host_that_did_not_answer_is_named_partial_and_its_machines_have_no_figures() -> None:
    code, body = stats_document(StatsRoute("a", None, None), [_sample(None)], {"a": True})
    assert code == 200
    assert body["partialHosts"] == ["h1"]
    assert all(not i["running"] and "sampledAt" not in i for i in body["items"])
    code, item = stats_document(StatsRoute("a", "vm1", None), [_sample(None)], {"a": True})
    assert item["partial"] is True


@pytest.mark.parametrize(
    ("machine", "code"),
    [
        (None, 404),
        ({"spec": {}}, 409),
        ({"spec": {"host": "elsewhere"}}, 503),
    ],
)
def test_a_machine_the_daemon_does_not_hold(machine: dict[str, Any] | None, code: int) -> None:
    refusal = missing_machine(StatsRoute("a", "vm1", None), machine)
    assert refusal.code == code
    assert "vm1" in refusal.message


def test_the_plugins_host_filter() -> None:
    assert stats_field_selector("node-1") == "spec.host=node-1"
    assert stats_field_selector(None) is None


def _doc(cpu: float, at: float, *, running: bool = True, name: str = "vm1") -> dict[str, Any]:
    return {
        "kind": "LibvirtMachineStatsList",
        "items": [
            {
                "metadata": {"namespace": "a", "name": name},
                "host": "h1",
                "running": running,
                "cpuSeconds": cpu,
                "sampledAt": at,
                "vcpus": 2,
                "memoryBytes": 256 * 2**20,
                "memoryRSSBytes": 100 * 2**20,
            }
        ],
    }


def test_cpu_is_the_seconds_used_between_two_samples_over_the_time_between_them() -> None:
    (usage,) = machine_usage(_doc(10.0, 100.0), _doc(10.5, 102.0))
    assert usage.cpu_cores == pytest.approx(0.25)
    assert usage.vcpus == 2
    assert usage.memory_bytes == 256 * 2**20


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (_doc(10.0, 100.0, running=False), _doc(10.5, 102.0)),  # started in between
        (_doc(10.0, 100.0), _doc(0.5, 102.0)),  # its domain started again: counter went back
        (_doc(10.0, 100.0), _doc(10.5, 100.0)),  # one sample twice (no time between)
        (_doc(10.0, 100.0, name="other"), _doc(10.5, 102.0)),  # not in the first sample
    ],
)
def test_no_cpu_figure_without_two_comparable_samples(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    (usage,) = machine_usage(first, second)
    assert usage.cpu_cores is None


def test_one_machines_item_is_a_sample_too() -> None:
    first, second = _doc(1.0, 10.0)["items"][0], _doc(2.0, 12.0)["items"][0]
    first["kind"] = second["kind"] = "LibvirtMachineStats"
    (usage,) = machine_usage(first, second)
    assert usage.cpu_cores == pytest.approx(0.5)


def test_the_table_is_aligned_and_says_what_has_no_figure() -> None:
    usages = machine_usage(_doc(10.0, 100.0), _doc(10.6, 102.0))
    usages += machine_usage(_doc(0, 100.0, name="off"), _doc(0, 102.0, running=False, name="off"))
    table = format_table(usages, all_namespaces=True).splitlines()
    assert table[0].split() == [
        "NAMESPACE", "NAME", "HOST", "STATE", "VCPUS", "CPU(cores)", "CPU%", "MEMORY", "RSS",
    ]  # fmt: skip
    assert table[1].split() == ["a", "vm1", "h1", "Running", "2", "300m", "15%", "256Mi", "100Mi"]
    assert table[2].split() == ["a", "off", "h1", "NotRunning", "2", "-", "-", "-", "-"]
    assert table[0].index("HOST") == table[1].index("h1")
    assert format_table(usages, all_namespaces=False).splitlines()[0].startswith("NAME ")


class Reviews:
    """A fake SubjectAccessReview: the (verb, namespace) pairs allowed, and what was asked."""

    def __init__(self, *allowed: tuple[str, str]) -> None:
        self.allowed = set(allowed)
        self.asked: list[tuple[str, str, str | None]] = []

    def __call__(self, verb: str, namespace: str, name: str | None) -> bool:
        self.asked.append((verb, namespace, name))
        return (verb, namespace) in self.allowed


def test_a_namespace_asked_for_is_one_review_and_a_403_when_refused() -> None:
    reviews = Reviews(("get", "a"))
    assert readable_namespaces(ALICE, StatsRoute("a", "vm1", None), ["b"], reviews) == {"a": True}
    assert reviews.asked == [("get", "a", "vm1")]
    refused = readable_namespaces(ALICE, StatsRoute("b", None, None), [], reviews)
    assert isinstance(refused, Refusal)
    assert refused.code == 403
    assert 'cannot list resource "libvirtmachines"' in refused.message


def test_every_namespace_is_one_review_for_a_cluster_wide_reader() -> None:
    reviews = Reviews(("list", ""))
    everything = StatsRoute(None, None, None)
    assert readable_namespaces(ALICE, everything, ["b", "a", "a"], reviews) == {
        "a": True,
        "b": True,
    }
    assert reviews.asked == [("list", "", None)]


def test_else_each_namespace_holding_a_machine_is_reviewed_once() -> None:
    reviews = Reviews(("list", "a"))
    everything = StatsRoute(None, None, "h1")
    assert readable_namespaces(ALICE, everything, ["b", "a", "b"], reviews) == {
        "a": True,
        "b": False,
    }
    assert reviews.asked == [("list", "", None), ("list", "a", None), ("list", "b", None)]
