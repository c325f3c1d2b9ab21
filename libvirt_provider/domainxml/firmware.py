"""Firmware, machine type and platform features.

UEFI is requested with `<os firmware='efi'>` and feature flags, and libvirt picks the matching
OVMF build from the firmware descriptors the host installed (libvirt >= 7.2 understands feature
selection). Hard-coding a loader path would break on every distribution that lays OVMF out
differently, so no path is ever written here. Read back, a pflash loader libvirt filled in means
EFI all the same, and a machine type libvirt expanded to a version (`q35` to `pc-q35-7.2`) is the
same machine type. Nothing here changes on a running domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import Change, Compared, Setting, compare
from libvirt_provider.resolved import FirmwareKind, OsBoot

__all__ = ["FirmwareFacts", "compare_firmware", "parse_firmware", "render_features", "render_os"]


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


@dataclass(frozen=True)
class FirmwareFacts:
    arch: str | None
    machine_type: str | None
    firmware: str
    secure_boot: bool
    smm: bool


def _firmware_kind(os_element: etree._Element | None) -> str:
    if os_element is None:
        return FirmwareKind.BIOS.value
    firmware = os_element.get("firmware")
    loader = os_element.find("loader")
    if firmware is None and loader is not None and loader.get("type") == "pflash":
        return FirmwareKind.EFI.value  # libvirt may resolve autoselection into an explicit loader
    return firmware or FirmwareKind.BIOS.value


def _secure_boot(os_element: etree._Element | None) -> bool:
    if os_element is None:
        return False
    enabled = False
    for feature in os_element.findall("firmware/feature"):
        if feature.get("name") == "secure-boot":
            enabled = feature.get("enabled") == "yes"
    loader = os_element.find("loader")
    return enabled or (loader is not None and loader.get("secure") == "yes")


def parse_firmware(root: etree._Element) -> FirmwareFacts:
    os_element = root.find("os")
    os_type = os_element.find("type") if os_element is not None else None
    return FirmwareFacts(
        arch=os_type.get("arch") if os_type is not None else None,
        machine_type=os_type.get("machine") if os_type is not None else None,
        firmware=_firmware_kind(os_element),
        secure_boot=_secure_boot(os_element),
        smm=root.find("features/smm[@state='on']") is not None,
    )


def _machine_types_match(desired: str | None, observed: str | None) -> bool:
    # libvirt pins an alias to the newest versioned type at define time; that is not drift.
    if desired == observed or desired is None or observed is None:
        return desired == observed
    if desired == "q35":
        return observed.startswith("pc-q35-")
    if desired == "pc":
        return observed.startswith("pc-i440fx-") or observed == "pc"
    return False


_COMPARED: tuple[Compared[FirmwareFacts], ...] = (
    Compared(Setting.ARCHITECTURE, lambda f: f.arch),
    Compared(Setting.FIRMWARE, lambda f: f.firmware),
    Compared(Setting.SECURE_BOOT, lambda f: f.secure_boot),
    Compared(Setting.SYSTEM_MANAGEMENT_MODE, lambda f: f.smm),
)


def compare_firmware(desired: FirmwareFacts, observed: FirmwareFacts) -> list[Change]:
    changes = compare(desired, observed, _COMPARED)
    if not _machine_types_match(desired.machine_type, observed.machine_type):
        changes.append(
            Change(Setting.MACHINE_TYPE, desired.machine_type, observed.machine_type, live=False)
        )
    return changes
