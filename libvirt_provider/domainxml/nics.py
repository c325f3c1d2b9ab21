"""Network interfaces: a libvirt network, a Linux bridge, or a macvtap (`direct`) device.

The MAC is always written (derived by the resolver), never left to libvirt: a MAC libvirt picks
changes with every redefinition, and addresses are matched to interfaces by MAC. No target device
name is written; libvirt names the tap itself.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.resolved import Interface, InterfaceKind

__all__ = ["interface_alias", "render_interface"]


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
