"""The provider acts only on mutually linked pairs."""

from __future__ import annotations

from typing import Any

import pytest

from libvirt_provider.constants import (
    REASON_LINK_MISMATCH,
    REASON_NOT_LINKED,
    REASON_OWNED_BY_ANOTHER,
    REASON_VIRTUAL_MACHINE_NOT_FOUND,
)
from libvirt_provider.machine.linkage import check_link


def machine(**meta: Any) -> dict[str, Any]:
    base = {"name": "web-lm", "namespace": "ns1", "uid": "lm-uid"}
    base["annotations"] = {"vm-api.io/virtual-machine": "web"}
    base.update(meta)
    return {"metadata": base}


def vm(name: str = "web", ref_name: str = "web-lm", **ref: str) -> dict[str, Any]:
    infra = {"apiGroup": "infrastructure.vm-api.io", "kind": "LibvirtMachine", "name": ref_name}
    infra.update(ref)
    return {"metadata": {"name": name, "uid": "vm-uid"}, "spec": {"infrastructureRef": infra}}


def test_a_mutual_link_is_linked() -> None:
    link = check_link(machine(), vm())
    assert link.linked
    assert link.vm_name == "web"


def test_the_controller_owner_may_be_the_linked_vm() -> None:
    owners = [{"kind": "VirtualMachine", "name": "web", "uid": "vm-uid", "controller": True}]
    assert check_link(machine(ownerReferences=owners), vm()).linked


@pytest.mark.parametrize(
    ("lm", "the_vm", "reason", "fragment"),
    [
        (machine(annotations={}), vm(), REASON_NOT_LINKED, "annotation"),
        (machine(), None, REASON_VIRTUAL_MACHINE_NOT_FOUND, "does not exist"),
        (machine(), vm(ref_name="other-lm"), REASON_LINK_MISMATCH, "other-lm"),
        (machine(), vm(kind="KubevirtMachine"), REASON_LINK_MISMATCH, "KubevirtMachine"),
        (machine(), vm(apiGroup="example.com"), REASON_LINK_MISMATCH, "example.com"),
        (
            machine(
                ownerReferences=[
                    {"kind": "VirtualMachine", "name": "db", "uid": "other", "controller": True}
                ]
            ),
            vm(),
            REASON_OWNED_BY_ANOTHER,
            "'db'",
        ),
    ],
)
def test_every_broken_link_says_why(
    lm: dict[str, Any], the_vm: dict[str, Any] | None, reason: str, fragment: str
) -> None:
    link = check_link(lm, the_vm)
    assert not link.linked
    assert link.reason == reason
    assert link.message is not None
    assert fragment in link.message
