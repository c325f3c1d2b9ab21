"""A LibvirtHost object and its heartbeat, as placement compares them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from libvirt_provider.hosts.view import host_view, host_views

GIB = 2**30
NOW = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.UTC)
BEAT = NOW - dt.timedelta(seconds=5)
STALE = NOW - dt.timedelta(seconds=41)


def lvh(name: str = "kvm-a", *, ready: str = "True", **over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {},
        "status": {
            "allocatable": {"cpus": 32, "memory": "62Gi"},
            "capacity": {
                "cpus": 8,
                "memory": "64Gi",
                "pools": [
                    {"name": "default", "capacity": "500Gi", "available": "200Gi"},
                    {"name": "fast", "capacity": "1Ti", "available": "junk"},
                ],
            },
            "offers": {
                "domainTypes": ["kvm", "qemu"],
                "machineTypes": ["q35"],
                "networks": ["default"],
                "pools": ["default", "fast"],
                "uefi": True,
            },
            "conditions": [{"type": "Ready", "status": ready, "reason": "HostReady"}],
        },
    }
    obj.update(over)
    return obj


class TestHostView:
    def test_a_ready_host_with_a_fresh_heartbeat(self) -> None:
        view = host_view(lvh(), BEAT, NOW)
        assert view is not None
        assert view.name == "kvm-a"
        assert view.ready
        assert not view.heartbeat_lost
        assert not view.unschedulable
        assert (view.cpus, view.memory) == (32, 62 * GIB)
        assert view.pools == {"default": 200 * GIB, "fast": 0}  # a malformed size counts as 0
        assert view.domain_types == {"kvm", "qemu"}
        assert view.machine_types == {"q35"}
        assert view.networks == {"default"}
        assert view.uefi
        assert view.zone == "z1"

    def test_no_inventory_yet_is_no_view(self) -> None:
        bare = lvh()
        del bare["status"]["offers"]
        assert host_view(bare, BEAT, NOW) is None
        edited = lvh()
        edited["status"]["allocatable"] = {"cpus": "many"}
        assert host_view(edited, BEAT, NOW) is None
        assert host_view({"metadata": {"name": "new"}}, BEAT, NOW) is None

    def test_a_stale_or_missing_heartbeat_is_not_ready_and_lost(self) -> None:
        for beat in (STALE, None):
            view = host_view(lvh(), beat, NOW)
            assert view is not None
            assert not view.ready
            assert view.heartbeat_lost

    def test_ready_false_with_a_fresh_heartbeat_is_not_ready_but_not_lost(self) -> None:
        view = host_view(lvh(ready="False"), BEAT, NOW)
        assert view is not None
        assert not view.ready
        assert not view.heartbeat_lost

    def test_no_ready_condition_is_not_ready(self) -> None:
        obj = lvh()
        obj["status"]["conditions"] = "garbage"
        view = host_view(obj, BEAT, NOW)
        assert view is not None
        assert not view.ready

    def test_cordoned_and_a_spec_that_does_not_parse(self) -> None:
        cordoned = host_view(lvh(spec={"unschedulable": True}), BEAT, NOW)
        assert cordoned is not None
        assert cordoned.unschedulable
        edited = host_view(lvh(spec={"unschedulable": "sometimes"}), BEAT, NOW)
        assert edited is not None
        assert not edited.unschedulable


class TestHostViews:
    def test_by_name_each_with_its_own_heartbeat_and_only_with_an_inventory(self) -> None:
        views = host_views(
            [lvh("kvm-c"), lvh("kvm-a"), {"metadata": {"name": "kvm-b"}}],
            {"kvm-a": BEAT, "kvm-c": STALE},
            NOW,
        )
        assert [(v.name, v.ready) for v in views] == [("kvm-a", True), ("kvm-c", False)]
