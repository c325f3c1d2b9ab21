"""What of a LibvirtHost wakes the machines it refused: a change that could turn a refusal into an
admission, and nothing that moves with every heartbeat."""

from __future__ import annotations

from typing import Any

from libvirt_provider.adapters.host.agent import admission_terms


def _host(ready: str = "True", allocated_cpus: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": "h1", "labels": {"zone": "a"}},
        "spec": {"unschedulable": False},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "allocatable": {"cpus": 8, "memory": "8Gi"},
            "allocated": {"cpus": allocated_cpus},
            "capacity": {"pools": [{"name": "p", "available": "10Gi"}]},
        },
    }


def test_the_host_turning_ready_wakes_the_machines_it_refused_as_not_ready() -> None:
    """After a libvirtd outage only the Ready condition changes; a machine refused meanwhile
    ("the host is not ready") must not wait out its backoff."""
    assert admission_terms(_host(ready="False")) != admission_terms(_host(ready="True"))


def test_what_every_machine_built_changes_is_not_a_term() -> None:
    assert admission_terms(_host(allocated_cpus=1)) == admission_terms(_host(allocated_cpus=2))
