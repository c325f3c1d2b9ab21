"""Assembly of the areas into one `<domain>` element, in the order `virsh dumpxml` shows them.

It owns the element tree; each area module only appends its own elements to the parent it is
given, so no area can reach into another's part of the document.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.domainxml.cloudinit import render_cloud_init
from libvirt_provider.domainxml.compute import render_cpu, render_memory
from libvirt_provider.domainxml.console import render_console, render_guest_agent
from libvirt_provider.domainxml.disks import (
    needs_scsi_controller,
    render_disk,
    render_scsi_controller,
)
from libvirt_provider.domainxml.firmware import render_features, render_os
from libvirt_provider.domainxml.metadata import render_metadata
from libvirt_provider.domainxml.nics import render_interface
from libvirt_provider.resolved import DomainSpec

__all__ = ["render_domain", "render_domain_xml"]


def render_domain(spec: DomainSpec) -> etree._Element:
    """The `<domain>` element for `spec`; a pure function of its input."""
    domain = etree.Element("domain", type=spec.domain_type.value)
    etree.SubElement(domain, "name").text = spec.name
    etree.SubElement(domain, "uuid").text = str(spec.uuid)
    render_metadata(domain, spec)
    render_memory(domain, spec.memory)
    render_cpu(domain, spec.cpu)
    render_os(domain, spec.os)
    render_features(domain, spec.os)
    etree.SubElement(domain, "clock", offset="utc")
    # Power-off and crash end the domain; the controller decides what happens next, not libvirt.
    etree.SubElement(domain, "on_poweroff").text = "destroy"
    etree.SubElement(domain, "on_reboot").text = "restart"
    etree.SubElement(domain, "on_crash").text = "destroy"

    devices = etree.SubElement(domain, "devices")
    for disk in spec.disks:
        render_disk(devices, disk)
    if spec.cloud_init is not None:
        render_cloud_init(devices, spec.cloud_init)
    if needs_scsi_controller(spec):
        render_scsi_controller(devices)
    for nic in spec.interfaces:
        render_interface(devices, nic)
    render_console(devices, spec.console)
    if spec.needs_guest_agent:
        render_guest_agent(devices)
    return domain


def render_domain_xml(spec: DomainSpec) -> str:
    """`render_domain` serialised, indented for humans and golden-file diffs."""
    element = render_domain(spec)
    etree.indent(element, space="  ")
    return etree.tostring(element, encoding="unicode") + "\n"
