"""A `kubectl vm top` list across daemons: which hosts are asked, what they are sent, how their
answers are read and joined (console/stats_fanout.py)."""

from __future__ import annotations

import json
import urllib.parse

from libvirt_provider import constants as c
from libvirt_provider.console.stats import StatsRoute, match_stats_route
from libvirt_provider.console.stats_fanout import (
    host_list_path,
    hosts_to_ask,
    merge_lists,
    parse_answer,
)

EVERYWHERE = StatsRoute(namespace=None, name=None, host=None)
MACHINES = [
    ("team-a", "here"),
    ("team-a", "far"),
    ("team-a", "far"),
    ("team-b", "farther"),
    ("team-c", None),  # not placed yet
]


def _item(ns: str, name: str, host: str) -> dict[str, object]:
    return {"metadata": {"namespace": ns, "name": name}, "host": host, "running": True}


def test_only_other_daemons_hosts_with_a_machine_the_caller_may_see_are_asked() -> None:
    allowed = {"team-a": True, "team-b": False}
    assert hosts_to_ask(MACHINES, frozenset({"here"}), allowed, EVERYWHERE) == ["far"]
    both = {"team-a": True, "team-b": True}
    assert hosts_to_ask(MACHINES, frozenset({"here"}), both, EVERYWHERE) == ["far", "farther"]
    one_host = StatsRoute(namespace=None, name=None, host="farther")
    assert hosts_to_ask(MACHINES, frozenset({"here"}), both, one_host) == ["farther"]
    one_ns = StatsRoute(namespace="team-b", name=None, host=None)
    assert hosts_to_ask(MACHINES, frozenset({"here"}), both, one_ns) == ["farther"]
    assert hosts_to_ask(MACHINES, frozenset({"here", "far", "farther"}), both, EVERYWHERE) == []


def test_the_path_sent_is_the_same_list_narrowed_to_the_host_and_routes_back_to_it() -> None:
    for route in (EVERYWHERE, StatsRoute(namespace="team-a", name=None, host="far")):
        path = host_list_path(route, "far")
        assert match_stats_route(path) == StatsRoute(route.namespace, None, "far")
        query = urllib.parse.parse_qs(path.partition("?")[2])
        assert query == {"fieldSelector": [f"{c.STATS_HOST_FIELD}=far"]}


def test_an_answer_is_read_from_its_status_line_length_and_json() -> None:
    body = json.dumps({"kind": c.STATS_LIST_KIND, "items": []}).encode()
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    assert parse_answer(raw) == (200, {"kind": c.STATS_LIST_KIND, "items": []})
    refused = b'HTTP/1.1 403 Forbidden\r\nContent-Length: 16\r\n\r\n{"reason": "no"}'
    assert parse_answer(refused) == (403, {"reason": "no"})
    assert "incomplete" in str(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Len"))
    assert "cut short" in str(parse_answer(raw[:-3]))
    assert "not an HTTP answer" in str(parse_answer(b"SSH-2.0-OpenSSH\r\n\r\n{}"))
    assert "not JSON" in str(parse_answer(b"HTTP/1.1 200 OK\r\n\r\n<html>"))
    assert "not a JSON object" in str(parse_answer(b"HTTP/1.1 200 OK\r\n\r\n[1]"))


def test_answers_join_the_list_sorted_and_silent_hosts_are_partial() -> None:
    local = {
        "kind": c.STATS_LIST_KIND,
        "items": [_item("team-b", "z", "here")],
        "partialHosts": ["here-too"],
    }
    merged = merge_lists(
        local,
        {
            "far": {"items": [_item("team-a", "m", "far"), _item("team-a", "x", "other")]},
            "farther": None,
            "farthest": {"items": [], "partialHosts": ["farthest"]},
        },
    )
    # The item an answering daemon gave for a host it was not asked about is left out.
    assert [(i["metadata"]["name"], i["host"]) for i in merged["items"]] == [
        ("m", "far"),
        ("z", "here"),
    ]
    assert merged["partialHosts"] == ["farther", "farthest", "here-too"]
    assert merged["kind"] == c.STATS_LIST_KIND
