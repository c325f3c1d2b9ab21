"""The lean decoders in the shells: kopf's watch events, the client's watch events and answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kopf._cogs.clients import api as kopf_api

from generic.adapters.kubeclient import lean_decoder, new_watch
from generic.adapters.operator import lean_watch_events
from generic.lean import Kept

KEPT = Kept.of(labels=["keep/me"], annotations=["vm-api.io/virtual-machine"])


def _event(kind: str, rv: str = "7") -> str:
    obj: dict[str, Any] = {
        "apiVersion": "vm-api.io/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": "a",
            "resourceVersion": rv,
            "labels": {"keep/me": "1", **{f"t/{i}": "x" for i in range(100)}},
            "annotations": {"vm-api.io/virtual-machine": "a", "other": "y"},
        },
    }
    return json.dumps({"type": "MODIFIED", "object": obj}, separators=(",", ":"))


def test_kopf_decodes_the_named_kinds_lean_and_every_other_body_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kopf_api, "json", kopf_api.json)  # put back after the test
    lean_watch_events(["VirtualMachine"], KEPT)
    vm = kopf_api.json.loads(_event("VirtualMachine"))
    assert vm["object"]["metadata"]["labels"] == {"keep/me": "1"}
    assert vm["object"]["metadata"]["annotations"] == {"vm-api.io/virtual-machine": "a"}
    other = kopf_api.json.loads(_event("Namespace"))
    assert len(other["object"]["metadata"]["labels"]) == 101
    assert kopf_api.json.dumps({"a": 1}) == '{"a": 1}'


class _Response:
    def __init__(self, text: str) -> None:
        self._text = text

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def text(self) -> str:
        return self._text


def test_kopfs_lists_of_the_named_kinds_are_decoded_lean_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf lists before it watches (and again after an expired resourceVersion): that body, the
    biggest of all, must not become every tenant's labels."""
    monkeypatch.setattr(kopf_api, "json", kopf_api.json)
    monkeypatch.setattr(kopf_api, "get", kopf_api.get)
    vms = [json.loads(_event("VirtualMachine"))["object"] for _ in range(3)]
    namespaces = [json.loads(_event("Namespace"))["object"] for _ in range(3)]

    def listing(kind: str, items: list[Any]) -> str:
        # In the API server's order: the items come before the list's own kind.
        body = {"apiVersion": "vm-api.io/v1alpha1", "items": items, "kind": kind}
        return json.dumps(body, separators=(",", ":"))

    bodies = {
        "/vms": listing("VirtualMachineList", vms),
        "/ns": listing("NamespaceList", namespaces),
    }

    async def request(*, url: str, **_: Any) -> _Response:
        return _Response(bodies[url])

    monkeypatch.setattr(kopf_api, "request", request)
    lean_watch_events(["VirtualMachine"], KEPT)

    def get(url: str) -> Any:
        return asyncio.run(kopf_api.get(url, settings=None, logger=None))  # type: ignore[arg-type]

    assert [i["metadata"]["labels"] for i in get("/vms")["items"]] == [{"keep/me": "1"}] * 3
    assert all(len(i["metadata"]["labels"]) == 101 for i in get("/ns")["items"])


def test_the_clients_watch_decodes_each_event_once_with_the_decoder() -> None:
    calls: list[str] = []
    lean = lean_decoder(KEPT)

    def decode(text: str) -> Any:
        calls.append(text)
        return lean(text)

    watch = new_watch(decode)
    event = watch.unmarshal_event(_event("LibvirtMachine", rv="12"), object)
    assert len(calls) == 1
    assert event["type"] == "MODIFIED"
    assert event["object"] is event["raw_object"]
    assert event["object"]["metadata"]["labels"] == {"keep/me": "1"}
    assert watch.resource_version == "12"
    assert watch.unmarshal_event("not json", object) is None
    assert watch.unmarshal_event("  ", object) is None
