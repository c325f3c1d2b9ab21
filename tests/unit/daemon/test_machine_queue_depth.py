"""The LibvirtMachine controller's queue depth is exported per host, and gone with the host.

Why: the "reconcile queue growing" alert needs the provider's own queues, not only the generic
controller's; a remote host whose Lease this daemon lost must not leave a frozen series behind.
"""

from __future__ import annotations

from typing import cast

from prometheus_client import REGISTRY

from libvirt_provider.adapters.host.controller import MachineController
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler

METRIC = "vmapi_libvirt_machine_queue_depth"


def _depth(host: str) -> float | None:
    return REGISTRY.get_sample_value(METRIC, {"host": host})


def test_the_depth_counts_waiting_machines_and_its_series_goes_with_the_controller() -> None:
    controller = MachineController(
        cast(MachineReconciler, object()), workers=1, host="queue-depth-host"
    )
    # Waiting out a backoff: queued, not yet handed to a worker (none runs the reconciler here).
    for name in ("a", "b", "c"):
        controller.queue.add_after(MachineKey("team", name), 3600)
    assert _depth("queue-depth-host") is None
    controller.start()
    try:
        assert _depth("queue-depth-host") == 3
        controller.queue.add_after(MachineKey("team", "d"), 3600)
        assert _depth("queue-depth-host") == 4
    finally:
        controller.stop()
    assert _depth("queue-depth-host") is None
