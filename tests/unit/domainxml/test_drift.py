"""The parser reads back what the renderer owns, ignores what libvirt adds, and classifies drift."""

from __future__ import annotations

import typing

import libvirt
import pytest
from lxml import etree

from catalog.image import DiskBus, ImageFormat, NicModel
from libvirt_provider.domainxml import (
    diff_owned,
    differences,
    owned_fields,
    owner_marker,
    render_domain,
    render_domain_xml,
)
from libvirt_provider.resolved import Cpu, DomainDisk, DomainSpec, InterfaceKind, Memory, Owner
from tests.unit.domainxml.cases import CASES, machine, nic
from tests.unit.domainxml.fields import leaf_paths, variants

BASE = CASES["uefi-qemu-cloudinit"]


def diff(desired: DomainSpec, observed: DomainSpec | str) -> typing.Any:
    seen = observed if isinstance(observed, str) else render_domain_xml(observed)
    return diff_owned(owned_fields(render_domain_xml(desired)), owned_fields(seen))


class TestLibvirtsAdditionsAreNotDrift:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_a_domain_read_back_from_libvirt_is_up_to_date(
        self, case: str, test_driver: libvirt.virConnect
    ) -> None:
        desired = render_domain_xml(CASES[case])
        domain = test_driver.defineXML(desired)
        observed = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert differences(observed, desired) == []

    def test_qemu_canonicalisation_is_ignored(self) -> None:
        root = render_domain(BASE)
        root.find("os/type").set("machine", "pc-q35-7.2")  # type: ignore[union-attr]
        memory = root.find("memory")
        assert memory is not None
        memory.set("unit", "KiB")
        memory.text = str(1024 * 1024)
        os_element = root.find("os")
        assert os_element is not None
        etree.SubElement(os_element, "loader", readonly="yes", type="pflash").text = "/usr/x.fd"
        etree.SubElement(os_element, "nvram").text = "/var/lib/libvirt/qemu/nvram/x_VARS.fd"
        devices = root.find("devices")
        assert devices is not None
        etree.SubElement(devices, "emulator").text = "/usr/bin/qemu-system-x86_64"
        etree.SubElement(devices, "controller", type="pci", index="0", model="pcie-root")
        etree.SubElement(devices, "memballoon", model="virtio")
        for disk in devices.findall("disk"):
            etree.SubElement(disk, "address", type="drive", controller="0", bus="0", unit="0")
        observed = etree.tostring(root, encoding="unicode")
        assert diff(BASE, observed).up_to_date


class TestDriftIsClassified:
    def test_vcpus_within_the_slots_change_live(self) -> None:
        roomy = machine("roomy", cpu=Cpu(vcpus=1, max_vcpus=4, mode=None))
        change = diff(roomy.model_copy(update={"cpu": Cpu(vcpus=3, max_vcpus=4, mode=None)}), roomy)
        assert change.changes
        assert not change.needs_power_off

    def test_vcpus_beyond_the_slots_need_a_power_off(self) -> None:
        small = machine("small")
        bigger = small.model_copy(update={"cpu": Cpu(vcpus=2, max_vcpus=2, mode=small.cpu.mode)})
        assert diff(bigger, small).needs_power_off

    def test_memory_within_the_ceiling_changes_live_beyond_it_not(self) -> None:
        roomy = machine("mem", memory=Memory(current_mib=512, max_mib=2048))
        within = roomy.model_copy(update={"memory": Memory(current_mib=1024, max_mib=2048)})
        beyond = roomy.model_copy(update={"memory": Memory(current_mib=4096, max_mib=4096)})
        assert not diff(within, roomy).needs_power_off
        assert diff(beyond, roomy).needs_power_off

    def test_nics_added_or_removed_hot_plug_but_a_changed_nic_needs_a_power_off(self) -> None:
        one = machine("nics")
        two = one.model_copy(
            update={"interfaces": (*one.interfaces, nic(one.uuid, 1, InterfaceKind.BRIDGE))}
        )
        assert not diff(two, one).needs_power_off
        assert not diff(one, two).needs_power_off
        remodelled = one.interfaces[0].model_copy(update={"model": NicModel.E1000E})
        assert diff(one.model_copy(update={"interfaces": (remodelled,)}), one).needs_power_off

    def test_data_disks_hot_plug_and_the_boot_disk_does_not(self) -> None:
        base = machine("disks")
        data = DomainDisk(
            name="data-x",
            pool="p",
            volume="x.raw",
            format=ImageFormat.RAW,
            bus=DiskBus.VIRTIO,
            target="vdb",
            serial="x",
        )
        grown = base.model_copy(update={"disks": (*base.disks, data)})
        assert not diff(grown, base).needs_power_off
        moved = base.disks[0].model_copy(update={"volume": "other.qcow2"})
        assert diff(base.model_copy(update={"disks": (moved,)}), base).needs_power_off

    def test_new_cloud_init_data_waits_for_the_next_boot(self) -> None:
        assert BASE.cloud_init is not None
        media = BASE.cloud_init.model_copy(update={"digest": "f" * 64})
        changed = diff(BASE.model_copy(update={"cloud_init": media}), BASE)
        assert [c.what for c in changed.changes] == ["cloud-init data"]
        assert changed.needs_power_off

    def test_tags_change_live(self) -> None:
        owner = BASE.owner.model_copy(update={"tags": {"team": "x"}})
        changed = diff(BASE.model_copy(update={"owner": owner}), BASE)
        assert [c.what for c in changed.changes] == ["tags"]
        assert not changed.needs_power_off

    def test_another_machine_family_is_drift_even_though_aliases_are_not(self) -> None:
        pc = BASE.model_copy(update={"os": BASE.os.model_copy(update={"machine_type": "pc"})})
        assert diff(pc, BASE).needs_power_off


def test_the_parser_notices_every_change_the_renderer_writes() -> None:
    """For each owned field, a variant that renders differently also parses differently."""
    blind = []
    for path in leaf_paths(DomainSpec):
        for spec in CASES.values():
            original = render_domain_xml(spec)
            for variant in variants(spec, path):
                try:
                    rendered = render_domain_xml(typing.cast(DomainSpec, variant))
                except (AssertionError, TypeError, ValueError, AttributeError):
                    continue
                if rendered != original and differences(original, rendered) == []:
                    blind.append(".".join(path))
    assert not blind, f"rendered changes the parser cannot see: {sorted(set(blind))}"


def test_the_ownership_marker_is_read_back_and_absent_on_foreign_domains() -> None:
    marker = owner_marker(render_domain(BASE))
    assert marker is not None
    assert (marker.namespace, marker.uid) == ("default", str(BASE.uuid))
    foreign = etree.fromstring("<domain type='kvm'><name>x</name></domain>")
    assert owner_marker(foreign) is None
    assert owned_fields(foreign).ownership.owner is None


def test_owner_identity_changes_are_reported() -> None:
    other = Owner(namespace="other", name="x", uid=BASE.uuid, virtual_machine="x")
    assert "ownership marker" in [
        c.what for c in diff(BASE.model_copy(update={"owner": other}), BASE).changes
    ]


def test_a_console_log_change_waits_for_a_power_cycle() -> None:
    without = "<domain type='qemu'><name>d</name><devices><serial type='pty'/></devices></domain>"
    logged = (
        "<domain type='qemu'><name>d</name><devices><serial type='pty'>"
        "<log file='/logs/d.serial.log' append='on'/></serial></devices></domain>"
    )
    diff = diff_owned(owned_fields(logged), owned_fields(without))
    assert [(c.what, c.desired, c.live) for c in diff.changes] == [
        ("serial console log", "/logs/d.serial.log", False)
    ]
