"""Network interfaces: a libvirt network, a Linux bridge, or a macvtap (`direct`) device.

The MAC is always written (derived by the resolver), never left to libvirt: a MAC libvirt picks
changes with every redefinition, and addresses are matched to interfaces by MAC. No target device
name is written; libvirt names the tap itself.

Read back, an interface is known by its MAC. Interfaces are attached and detached on a running
domain; one whose settings changed waits for the next power cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import Change, DeviceKind, compare_devices
from libvirt_provider.resolved import Interface, InterfaceKind

__all__ = [
    "NicFacts",
    "compare_interfaces",
    "find_interface",
    "interface_alias",
    "interface_macs",
    "nic_facts",
    "parse_interfaces",
    "render_interface",
]


def interface_alias(name: str) -> str:
    return f"ua-nic-{name}"


def render_interface(devices: etree._Element, nic: Interface) -> None:
    element = etree.SubElement(devices, "interface", type=nic.kind.value)
    etree.SubElement(element, "mac", address=nic.mac)
    if nic.kind is InterfaceKind.NETWORK:
        etree.SubElement(element, "source", network=nic.source)
    elif nic.kind is InterfaceKind.BRIDGE:
        etree.SubElement(element, "source", bridge=nic.source)
    else:
        assert nic.direct_mode is not None  # guaranteed by the model
        etree.SubElement(element, "source", dev=nic.source, mode=nic.direct_mode.value)
    etree.SubElement(element, "model", type=nic.model.value)
    etree.SubElement(element, "alias", name=interface_alias(nic.name))


@dataclass(frozen=True)
class NicFacts:
    mac: str
    alias: str | None
    kind: str | None
    source: str | None
    mode: str | None
    model: str | None


def nic_facts(element: etree._Element) -> NicFacts | None:
    """The `<interface>` element as read back; None without a MAC to know it by."""
    mac = element.find("mac")
    if mac is None or mac.get("address") is None:
        return None
    source = element.find("source")
    model = element.find("model")
    kind = element.get("type")
    device = None
    if source is not None:
        device = source.get({"network": "network", "bridge": "bridge"}.get(kind or "", "dev"))
    alias = element.find("alias")
    return NicFacts(
        mac=str(mac.get("address")).lower(),
        alias=alias.get("name") if alias is not None else None,
        kind=kind,
        source=device,
        mode=source.get("mode") if source is not None and kind == "direct" else None,
        model=model.get("type") if model is not None else None,
    )


def interface_macs(xml: str | bytes) -> frozenset[str]:
    """The MACs (lower case) of every interface a domain definition holds."""
    return frozenset(parse_interfaces(etree.fromstring(xml)))


def parse_interfaces(root: etree._Element) -> Mapping[str, NicFacts]:
    """The interfaces by MAC."""
    found = map(nic_facts, root.findall("devices/interface"))
    return {nic.mac: nic for nic in found if nic is not None}


def find_interface(root: etree._Element, mac: str) -> etree._Element | None:
    """The `<interface>` element a change names by its MAC."""
    for element in root.findall("devices/interface"):
        facts = nic_facts(element)
        if facts is not None and facts.mac == mac:
            return element
    return None


def compare_interfaces(
    desired: Mapping[str, NicFacts], observed: Mapping[str, NicFacts]
) -> list[Change]:
    return compare_devices(
        DeviceKind.INTERFACE, desired, observed, view=astuple, hotplug=lambda _: True
    )
