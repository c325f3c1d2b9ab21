"""Host and machine-state samples from the daemon's own copies: the LibvirtHost's status, the
machines' power state and InfrastructureReady reason, and each machine's readiness with the
power state its VirtualMachine asks for."""

from __future__ import annotations

from typing import Any

from libvirt_provider.metrics.fleet import (
    NONE,
    host_samples,
    machine_readiness,
    machine_state,
    readiness_samples,
    state_samples,
    vm_desired_power,
)

HOST_STATUS: dict[str, Any] = {
    "capacity": {
        "cpus": 8,
        "memory": "16Gi",
        "pools": [
            {"name": "default", "capacity": "100Gi", "available": "40Gi"},
            {"name": "fast", "capacity": "1000000000", "available": "not-a-quantity"},
        ],
    },
    "allocatable": {"cpus": 32, "memory": "15Gi"},
    "allocated": {"cpus": 3, "memory": "768Mi", "machines": 3},
    "conditions": [{"type": "Ready", "status": "True", "reason": "HostReady"}],
}


def _by_name(samples: list[Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.family.exposed, s.labels): s.value for s in samples}


def test_a_hosts_status_becomes_its_figures_in_bytes_and_counts() -> None:
    got = _by_name(host_samples("h1", {"status": HOST_STATUS}))
    h = ("h1",)
    assert got == {
        ("vmapi_host_status_known", h): 1.0,
        ("vmapi_host_ready", h): 1.0,
        ("vmapi_host_capacity_cpus", h): 8.0,
        ("vmapi_host_capacity_memory_bytes", h): 16 * 2.0**30,
        ("vmapi_host_allocatable_cpus", h): 32.0,
        ("vmapi_host_allocatable_memory_bytes", h): 15 * 2.0**30,
        ("vmapi_host_allocated_cpus", h): 3.0,
        ("vmapi_host_allocated_memory_bytes", h): 768 * 2.0**20,
        ("vmapi_host_allocated_machines", h): 3.0,
        ("vmapi_host_pool_capacity_bytes", ("h1", "default")): 100 * 2.0**30,
        ("vmapi_host_pool_available_bytes", ("h1", "default")): 40 * 2.0**30,
        # A figure that is not a quantity is left out, not read as 0.
        ("vmapi_host_pool_capacity_bytes", ("h1", "fast")): 1e9,
    }


def test_a_host_not_ready_or_not_known_says_so() -> None:
    status = {**HOST_STATUS, "conditions": [{"type": "Ready", "status": "False"}]}
    assert _by_name(host_samples("h1", {"status": status}))[("vmapi_host_ready", ("h1",))] == 0
    no_condition = {k: v for k, v in HOST_STATUS.items() if k != "conditions"}
    assert (
        _by_name(host_samples("h1", {"status": no_condition}))[("vmapi_host_ready", ("h1",))] == 0
    )
    for unknown in (None, {}, {"status": {}}, {"status": "garbage"}):
        assert _by_name(host_samples("h1", unknown)) == {("vmapi_host_status_known", ("h1",)): 0}


def test_machines_are_counted_by_power_state_and_reason() -> None:
    def machine(power: str | None, reason: str | None) -> dict[str, Any]:
        status: dict[str, Any] = {}
        if power:
            status["powerState"] = power
        if reason:
            status["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "Other"},
                {"type": "InfrastructureReady", "status": "False", "reason": reason},
            ]
        return {"metadata": {"name": "m"}, "status": status}

    machines = [
        machine("PoweredOn", "Running"),
        machine("PoweredOn", "Running"),
        machine(None, "ImportingImage"),
        machine(None, None),
        {"metadata": {"name": "fresh"}},
    ]
    states = [machine_state(m) for m in machines]
    assert _by_name(state_samples("h1", states)) == {
        ("vmapi_host_machines", ("h1", "PoweredOn", "Running")): 2.0,
        ("vmapi_host_machines", ("h1", NONE, "ImportingImage")): 1.0,
        ("vmapi_host_machines", ("h1", NONE, NONE)): 2.0,
    }
    # No machines: no series (a state nobody is in is not kept).
    assert state_samples("h1", []) == []


def _linked(name: str, vm: str | None, ready: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "team", "name": name}
    if vm is not None:
        meta["annotations"] = {"vm-api.io/virtual-machine": vm}
    status: dict[str, Any] = {}
    if ready is not None:
        status["conditions"] = [
            {"type": "UpToDate", "status": "True", "reason": "UpToDate"},
            {"type": "InfrastructureReady", "status": ready, "reason": "Whatever"},
        ]
    return {"metadata": meta, "status": status}


def test_each_machine_is_ready_or_not_with_the_power_state_its_vm_asks_for() -> None:
    vms = [
        {"metadata": {"namespace": "team", "name": "web"}, "spec": {"powerState": "PoweredOn"}},
        {"metadata": {"namespace": "team", "name": "db"}, "spec": {"powerState": "PoweredOff"}},
        # No powerState (or one the API does not know): PoweredOn, as the reconcile reads it.
        {"metadata": {"namespace": "team", "name": "bare"}, "spec": {}},
        {"metadata": {"namespace": "team", "name": "odd"}, "spec": {"powerState": "Exploded"}},
    ]
    desired = dict(vm_desired_power(vm) for vm in vms)
    machines = [
        _linked("web-m", "web", "True"),
        _linked("db-m", "db", "False"),
        _linked("bare-m", "bare", "Unknown"),
        _linked("odd-m", "odd", None),
        # Not linked, or linked to a VM the daemon does not hold: no desired state known.
        _linked("lone", None, "False"),
        _linked("orphan", "gone", "False"),
    ]
    got = _by_name(readiness_samples("h1", [machine_readiness(m, desired) for m in machines]))
    assert got == {
        ("vmapi_machine_ready", ("team", "web-m", "h1", "PoweredOn")): 1.0,
        ("vmapi_machine_ready", ("team", "db-m", "h1", "PoweredOff")): 0.0,
        ("vmapi_machine_ready", ("team", "bare-m", "h1", "PoweredOn")): 0.0,
        ("vmapi_machine_ready", ("team", "odd-m", "h1", "PoweredOn")): 0.0,
        ("vmapi_machine_ready", ("team", "lone", "h1", NONE)): 0.0,
        ("vmapi_machine_ready", ("team", "orphan", "h1", NONE)): 0.0,
    }
    # A VM in another namespace with the same name is not this machine's.
    other = dict([vm_desired_power({"metadata": {"namespace": "x", "name": "web"}, "spec": {}})])
    assert machine_readiness(_linked("web-m", "web", "True"), other).desired == NONE
    assert readiness_samples("h1", []) == []
