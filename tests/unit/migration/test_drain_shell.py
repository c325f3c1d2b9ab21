"""The drain's shell over an in-memory store: it writes the plan before it acts, writes nothing
when nothing changed, and turns the core's actions into the store's calls."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from libvirt_provider import constants as c
from libvirt_provider.adapters.host.drain import DrainController
from libvirt_provider.adapters.kube.drains import DrainApi
from libvirt_provider.migration.target_choice import Choice

NOW = dt.datetime(2026, 12, 4, 19, 0, tzinfo=dt.UTC)


class Store:
    def __init__(self, host: dict[str, Any], machines: list[dict[str, Any]]) -> None:
        self.host = host
        self.machines = machines
        self.migrations: list[dict[str, Any]] = []
        self.calls: list[tuple[Any, ...]] = []

    def get_host(self, name: str) -> dict[str, Any] | None:
        return self.host

    def machines_on_host(self) -> list[dict[str, Any]]:
        return self.machines

    def drain_migrations(self) -> list[dict[str, Any]]:
        return self.migrations

    def patch_host_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        self.calls.append(("status",))
        meta = obj["metadata"]
        version = str(int(meta["resourceVersion"]) + 1)
        self.host = {
            **obj,
            "metadata": {**meta, "resourceVersion": version},
            "status": {**(obj.get("status") or {}), **status},
        }

    def host_event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.calls.append(("event", reason))

    def create_migration(self, namespace: str, name: str, machine: str) -> None:
        self.calls.append(("create", namespace, name, machine))

    def delete_migration(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", namespace, name))

    def power_off(self, namespace: str, vm: str) -> None:
        self.calls.append(("power_off", namespace, vm))


def _machine(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "annotations": {"vm-api.io/virtual-machine": f"vm-{name}"},
        },
        "spec": {"host": "h1", **spec},
        "status": {"powerState": "PoweredOn", "providerID": f"libvirt://h1/{name}"},
    }


def _controller(store: Store) -> DrainController:
    return DrainController(
        store=cast(DrainApi, store),
        host="h1",
        choose=lambda _m: Choice("h2"),
        clock=lambda: NOW,
    )


def _host(drain: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"unschedulable": True}
    if drain is not None:
        spec["drain"] = drain
    return {
        "metadata": {"name": "h1", "generation": 4, "resourceVersion": "1"},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_plan_is_written_first_then_the_moves_then_nothing_more() -> None:
    store = Store(_host({}), [_machine("a"), _machine("p", evictionStrategy="PowerOff")])
    controller = _controller(store)
    assert controller.run_pass()
    assert store.calls == [("status",), ("event", c.DRAIN_REASON_PLANNING)]
    conditions = store.host["status"]["conditions"]
    assert [x["type"] for x in conditions] == ["Ready", c.HOST_CONDITION_DRAINED]
    store.calls.clear()
    assert controller.run_pass()
    assert store.calls[0] == ("status",)
    assert ("create", "ns", "drain-4-1-a", "a") in store.calls
    assert ("power_off", "ns", "vm-p") in store.calls
    store.calls.clear()
    controller.run_pass()
    assert ("status",) not in store.calls


def test_no_drain_asked_reads_nothing_more_and_writes_nothing() -> None:
    store = Store(_host(None), [_machine("a")])
    assert not _controller(store).run_pass()
    assert store.calls == []


def test_a_cleared_drain_with_abort_deletes_its_running_migration() -> None:
    store = Store(_host({"onCancel": "Abort"}), [_machine("a")])
    controller = _controller(store)
    controller.run_pass()
    controller.run_pass()
    store.migrations = [
        {"metadata": {"namespace": "ns", "name": "drain-4-1-a"}, "status": {"phase": "Migrating"}}
    ]
    store.host = {**store.host, "spec": {"unschedulable": True}}
    store.calls.clear()
    assert not controller.run_pass()
    assert ("delete", "ns", "drain-4-1-a") in store.calls
    assert store.host["status"]["drain"] is None
    assert [x["type"] for x in store.host["status"]["conditions"]] == ["Ready"]


def test_machines_being_deleted_or_never_built_here_are_not_moved() -> None:
    leaving = _machine("gone")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-04T18:00:00Z"
    unbuilt = _machine("pinned")
    unbuilt["status"] = {}
    store = Store(_host({}), [leaving, unbuilt])
    controller = _controller(store)
    controller.run_pass()
    controller.run_pass()
    assert not [call for call in store.calls if call[0] == "create"]
    drain = store.host["status"]["drain"]
    assert [(m["name"], m["state"]) for m in drain["machines"]] == [("pinned", "Stopped")]
    assert drain["phase"] == c.DRAIN_PHASE_DRAINED


def test_a_stale_copy_of_the_host_starts_nothing() -> None:
    store = Store(_host({}), [_machine("p", evictionStrategy="PowerOff")])
    first = _controller(store)
    first.run_pass()
    first.run_pass()
    assert ("power_off", "ns", "vm-p") in store.calls
    seen = store.host
    store.host = {**seen, "metadata": {**seen["metadata"], "resourceVersion": "99"}}
    stale = DrainController(
        store=cast(DrainApi, store),
        host="h1",
        choose=lambda _m: Choice("h2"),
        read_host=lambda: seen,
        clock=lambda: NOW,
    )
    store.calls.clear()
    assert stale.run_pass()
    assert store.calls == []
    store.calls.clear()
    assert first.run_pass()
    assert store.calls == [("power_off", "ns", "vm-p")]
