"""Console routes, discovery, the target a request reaches, one writer per machine, and the
plugin's URL and escape key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.client import console_path, split_at_escape, websocket_url
from libvirt_provider.console.routes import (
    ConsoleRoute,
    ConsoleTarget,
    console_target,
    discovery_document,
    match_route,
)
from libvirt_provider.console.sessions import SessionRegistry, WriterBusyError

PREFIX = "/apis/subresources.infrastructure.vm-api.io/v1alpha1"
ROUTE = ConsoleRoute("team-a", "vm1", "console")


def test_the_console_path_is_matched_and_the_plugin_builds_it() -> None:
    path = console_path("team-a", "vm1")
    assert path == f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/console"
    assert match_route(path) == ROUTE
    assert match_route(path + "?x=1") == ROUTE


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/vnc/screenshot",  # console/vnc.py's
        f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1",
        f"{PREFIX}/namespaces/Team/libvirtmachines/vm1/console",
        f"{PREFIX}/namespaces/../libvirtmachines/vm1/console",
        "/apis/other/v1/namespaces/a/libvirtmachines/vm1/console",
    ],
)
def test_other_paths_are_no_route(path: str) -> None:
    assert match_route(path) is None


def test_discovery_lists_the_console_subresource_and_the_stats() -> None:
    body = discovery_document(PREFIX)
    assert body is not None
    doc = json.loads(body)
    assert doc["kind"] == "APIResourceList"
    assert [(r["name"], r["verbs"], r["namespaced"]) for r in doc["resources"]] == [
        ("libvirtmachines/console", ["get"], True),
        ("libvirtmachines/vnc", ["get"], True),
        ("libvirtmachines/portforward", ["get"], True),
        ("libvirtmachinestats", ["get", "list"], True),
    ]
    group = discovery_document("/apis/subresources.infrastructure.vm-api.io")
    assert group is not None
    assert json.loads(group)["preferredVersion"]["version"] == "v1alpha1"
    assert discovery_document("/openapi/v2") is None


def _machine(power: str | None = "PoweredOn", host: str = "h1", uuid: str = "u-1") -> Any:
    return {
        "metadata": {"uid": uuid},
        "spec": {"host": host},
        "status": {"powerState": power, "providerMetadata": {"host": host, "domainUUID": uuid}},
    }


def test_a_running_machine_on_a_served_host_is_reached() -> None:
    assert console_target(ROUTE, _machine(), frozenset({"h1"})) == ConsoleTarget("h1", "u-1")


def test_the_console_target_never_comes_from_what_a_status_writer_may_change() -> None:
    """A status patched to name another machine's domain, or another host, still reaches this
    machine's own domain (its uid) on its own host (its immutable spec.host)."""
    forged = _machine()
    forged["status"]["providerMetadata"] = {"host": "h2", "domainUUID": "someone-elses"}
    assert console_target(ROUTE, forged, frozenset({"h1", "h2"})) == ConsoleTarget("h1", "u-1")


@pytest.mark.parametrize(
    ("machine", "code", "words"),
    [
        (None, 404, "not found"),
        (
            {"metadata": {"uid": "u-1"}, "spec": {"host": "h1"}, "status": {}},
            409,
            "still being created",
        ),
        (_machine(host="h2"), 503, "host h2"),
        (_machine(power="PoweredOff"), 409, "PoweredOff"),
        (_machine(power=None), 409, "in transition"),
    ],
)
def test_a_machine_that_cannot_be_reached_says_why(machine: Any, code: int, words: str) -> None:
    found = console_target(ROUTE, machine, frozenset({"h1"}))
    assert isinstance(found, Refusal)
    assert found.code == code
    assert words in found.message


def test_one_writer_per_machine_until_it_leaves() -> None:
    registry = SessionRegistry()
    seat, _ = registry.take_writer("team-a", "vm1", "alice")
    with pytest.raises(WriterBusyError, match="alice"):
        registry.take_writer("team-a", "vm1", "bob")
    other, _ = registry.take_writer("team-a", "vm2", "bob")
    assert registry.release(seat)
    assert not registry.release(seat)
    again, displaced = registry.take_writer("team-a", "vm1", "bob")
    assert displaced is None
    assert {s.user for s in registry.writers()} == {"bob"}
    assert again != seat
    assert registry.release(other)


def test_the_plugin_dials_the_api_server_over_websocket() -> None:
    assert websocket_url("https://10.0.0.1:6443/", "/x") == "wss://10.0.0.1:6443/x"
    assert websocket_url("http://localhost:8080", "/x") == "ws://localhost:8080/x"


def test_ctrl_close_bracket_leaves_and_nothing_after_it_is_sent() -> None:
    assert split_at_escape(b"ls\n") == (b"ls\n", False)
    assert split_at_escape(b"ab\x1dcd") == (b"ab", True)
