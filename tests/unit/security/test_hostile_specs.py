"""Fuzz: hostile text in every quantity and name field a tenant writes, through models and resolver.

Whatever a VirtualMachine or LibvirtMachine carries, the resolver returns a machine or problems to
report (never an exception that would fail every pass), and answers quickly: each example is held
to 50 ms of this thread's CPU time (CPU, not wall time, so a busy machine cannot fail it), so no
field can make the daemon spin with the GIL held.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libvirt_provider.resolve import Resolution, resolve_machine
from tests.support import builders as b

BUDGET_SECONDS = 0.05

QUANTITY = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"\A[+-]?\d{0,40}(\.\d{0,20})?([eE][+-]?\d{1,9})?(Ki|Mi|Gi|Ti|Ei|k|M|G)?\Z"),
    st.sampled_from(["1e200000", "1e9999999", "9" * 400, "8Ei", "-1Gi", "0.5", "NaN", "Infinity"]),
)
NAME = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["..", "../x", "a/b", "x\x00y", "<a>", "a&b", " ", "-", "a" * 64, "é"]),
)
COUNT = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=20))

# Each case puts one hostile value into one field of the VM or LibvirtMachine.
Case = tuple[dict[str, Any], dict[str, Any]]


def _vm(**fields: Any) -> Case:
    return b.vm_spec(**fields), {}


def _lm(**fields: Any) -> Case:
    return b.vm_spec(), fields


FIELDS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], Case]]] = {
    "instanceType.resources.memory": (
        QUANTITY,
        lambda v: _vm(instanceType={"resources": {"cpus": 1, "memory": v}}),
    ),
    "instanceType.resources.cpus": (
        COUNT,
        lambda v: _vm(instanceType={"resources": {"cpus": v, "memory": "1Gi"}}),
    ),
    "hotplug.maxMemory": (QUANTITY, lambda v: _lm(hotplug={"maxMemory": v})),
    "hotplug.maxCPUs": (COUNT, lambda v: _lm(hotplug={"maxCPUs": v})),
    "bootDisk.sizeGiB": (
        COUNT,
        lambda v: _vm(bootDisk={"source": {"image": b.ref("LibvirtImage", "tiny")}, "sizeGiB": v}),
    ),
    "disks[].name": (
        NAME,
        lambda v: _vm(disks=[{"name": v, "source": {"blank": True}, "sizeGiB": 1}]),
    ),
    "disks[].sizeGiB": (
        COUNT,
        lambda v: _vm(disks=[{"name": "d", "source": {"blank": True}, "sizeGiB": v}]),
    ),
    "network.interfaces[].name": (NAME, lambda v: _vm(network={"interfaces": [{"name": v}]})),
    "network.hostName": (NAME, lambda v: _vm(network={"hostName": v})),
    "tags": (NAME, lambda v: _vm(tags={v[:128] or "k": v})),
    "sshPublicKeys": (NAME, lambda v: _vm(sshPublicKeys=[v])),
    "failureDomain": (NAME, lambda v: _vm(failureDomain=v)),
    "instanceType.name": (NAME, lambda v: _vm(instanceType={"name": v})),
    "bootstrap.cloudInit.userData.name": (
        NAME,
        lambda v: _vm(bootstrap={"cloudInit": {"userData": {"name": v, "key": "k"}}}),
    ),
    "LibvirtMachine.machineType": (NAME, lambda v: _lm(machineType=v)),
    "LibvirtMachine.host": (NAME, lambda v: _lm(host=v)),
    "LibvirtMachine.gracefulShutdownTimeoutSeconds": (
        COUNT,
        lambda v: _lm(gracefulShutdownTimeoutSeconds=v),
    ),
}


def _resolve_within_budget(vm: dict[str, Any], lm_spec: dict[str, Any]) -> Resolution:
    machine, catalog = b.machine(lm_spec), b.catalog()
    # What is judged is the resolver's own work on hostile input, not the interpreter's cyclic
    # garbage collector: in a full test session a collection of the whole heap can land inside
    # the measured call and take longer than the budget by itself.
    gc.disable()
    try:
        started = time.thread_time()
        resolution = resolve_machine(
            vm_name="web",
            vm_spec=vm,
            machine=machine,
            catalog=catalog,
            secrets={},
            host=b.HOST,
        )
        spent = time.thread_time() - started
    finally:
        gc.enable()
    assert spent < BUDGET_SECONDS, f"{spent * 1000:.0f} ms of CPU"
    return resolution


@settings(
    max_examples=400,
    deadline=None,  # the budget is CPU time, checked above; wall time depends on the machine
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data(), field=st.sampled_from(sorted(FIELDS)))
def test_any_value_in_any_tenant_field_resolves_or_is_reported_quickly(
    data: st.DataObject, field: str
) -> None:
    strategy, place = FIELDS[field]
    vm, lm_spec = place(data.draw(strategy, label=field))
    resolution = _resolve_within_budget(vm, lm_spec)
    if resolution.machine is None:
        assert resolution.problems
        message = resolution.message()
        assert message
        assert len(message) < 20_000  # bounded, whatever the input's size
