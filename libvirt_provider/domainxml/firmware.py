"""Firmware, machine type and platform features.

UEFI is requested with `<os firmware='efi'>` and feature flags, and libvirt picks the matching
OVMF build from the firmware descriptors the host installed (libvirt >= 7.2 understands feature
selection). Hard-coding a loader path would break on every distribution that lays OVMF out
differently, so no path is ever written here.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.resolved import FirmwareKind, OsBoot

__all__ = ["render_features", "render_os"]


def render_os(domain: etree._Element, boot: OsBoot) -> None:
    os_element = etree.SubElement(domain, "os")
    if boot.firmware is FirmwareKind.EFI:
        os_element.set("firmware", "efi")
    os_type = etree.SubElement(os_element, "type", arch=boot.arch, machine=boot.machine_type)
    os_type.text = "hvm"
    if boot.firmware is FirmwareKind.EFI:
        # Say "no" explicitly when secure boot is off: left open, libvirt may pick a secure-boot
        # build that needs SMM, and enrolled keys require secure boot.
        flag = "yes" if boot.secure_boot else "no"
        firmware = etree.SubElement(os_element, "firmware")
        etree.SubElement(firmware, "feature", enabled=flag, name="enrolled-keys")
        etree.SubElement(firmware, "feature", enabled=flag, name="secure-boot")
    # No <boot dev=...>: the boot disk carries <boot order='1'/>, and the two cannot be mixed.


def render_features(domain: etree._Element, boot: OsBoot) -> None:
    features = etree.SubElement(domain, "features")
    # ACPI is what makes a graceful shutdown possible (the guest sees a power button press).
    etree.SubElement(features, "acpi")
    etree.SubElement(features, "apic")
    if boot.secure_boot:
        # Secure-boot OVMF builds refuse to run without System Management Mode.
        etree.SubElement(features, "smm", state="on")
