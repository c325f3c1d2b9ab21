"""After a long API server outage kopf lists every object again; a machine whose passes failed
meanwhile is retried then, not when its grown backoff (up to five minutes) runs out."""

from __future__ import annotations

from typing import cast

from generic.workqueue import Outcome
from libvirt_provider.adapters.host.controller import MachineController
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler

KEY = MachineKey("ns", "web")
OTHER = MachineKey("ns", "db")


def _controller() -> MachineController:
    # The reconciler is never called: nothing here starts the workers.
    controller = MachineController(cast(MachineReconciler, object()))
    controller.on_machine(KEY.namespace, KEY.name, "uid-web", deleted=False)
    controller.on_machine(OTHER.namespace, OTHER.name, "uid-db", deleted=False)
    for key in (KEY, OTHER):
        assert controller.queue.get(timeout=0) == key
    return controller


def _backing_off(controller: MachineController, key: MachineKey, failures: int) -> None:
    for _ in range(failures):
        controller.queue.settle(key, Outcome(retry=True))
    controller.queue.done(key)


def test_a_failing_machine_is_retried_when_a_relist_shows_it() -> None:
    controller = _controller()
    _backing_off(controller, KEY, failures=9)  # the next retry is minutes away
    assert controller.queue.get(timeout=0) is None
    controller.on_relisted(KEY)
    assert controller.queue.get(timeout=0) == KEY


def test_a_relist_of_a_healthy_machine_starts_no_pass() -> None:
    controller = _controller()
    controller.queue.settle(OTHER, Outcome())
    controller.queue.done(OTHER)
    controller.on_relisted(OTHER)
    controller.on_relisted(MachineKey("ns", "not-this-hosts"))
    assert controller.queue.get(timeout=0) is None
