"""What libvirt writes back into a definition on its own is not drift the controller acts on."""

from __future__ import annotations

from lxml import etree

from libvirt_provider.domainxml import differences, render_domain_xml
from libvirt_provider.resolved import DomainType
from tests.unit.domainxml.cases import CASES


def _with_libvirt_default_cpu(xml: str, model: str = "qemu64") -> str:
    root = etree.fromstring(xml.encode())
    for old in root.findall("cpu"):
        root.remove(old)
    cpu = etree.SubElement(root, "cpu", mode="custom", match="exact", check="none")
    etree.SubElement(cpu, "model", fallback="forbid").text = model
    return etree.tostring(root, encoding="unicode")


def _default_cpu_qemu_spec() -> str:
    base = CASES["uefi-qemu-cloudinit"]
    spec = base.model_copy(
        update={
            "domain_type": DomainType.QEMU,
            "cpu": base.cpu.model_copy(update={"mode": None, "model": None, "topology": None}),
        }
    )
    return render_domain_xml(spec)


def test_libvirts_own_cpu_pick_for_a_default_cpu_qemu_domain_is_not_drift() -> None:
    desired = _default_cpu_qemu_spec()
    assert differences(_with_libvirt_default_cpu(desired), desired) == []


def test_a_real_custom_model_left_over_is_still_drift() -> None:
    desired = _default_cpu_qemu_spec()
    changes = differences(_with_libvirt_default_cpu(desired, model="Skylake-Server"), desired)
    assert any("CPU" in change for change in changes)
