"""The cloud-init NoCloud ISO as a read-only CD-ROM.

Which bus carries the CD-ROM is an explicit choice, not libvirt's default: on q35 libvirt would pick
SATA (AHCI), which many minimal guest kernels lack; virtio-scsi works on both machine families, and
IDE remains available for `pc` guests that have only ata_piix. The resolver makes that choice; this
module only writes it.

Read back, the media is the CD-ROM with this module's alias, else the first CD-ROM there is.
Changed media waits for the next power cycle: the guest reads its seed only at boot.
"""

from __future__ import annotations

from typing import Any

from lxml import etree

from libvirt_provider.domainxml.changes import Change, Setting
from libvirt_provider.domainxml.disks import DiskFacts, disk_facts
from libvirt_provider.resolved import CloudInitMedia

__all__ = [
    "CLOUD_INIT_ALIAS",
    "compare_cloud_init_media",
    "parse_cloud_init_media",
    "render_cloud_init",
]

CLOUD_INIT_ALIAS = "ua-cidata"


def render_cloud_init(devices: etree._Element, media: CloudInitMedia) -> None:
    element = etree.SubElement(devices, "disk", type="volume", device="cdrom")
    etree.SubElement(element, "driver", name="qemu", type="raw")
    etree.SubElement(element, "source", pool=media.pool, volume=media.volume)
    etree.SubElement(element, "target", dev=media.target, bus=media.bus.value)
    etree.SubElement(element, "readonly")
    etree.SubElement(element, "alias", name=CLOUD_INIT_ALIAS)


def parse_cloud_init_media(root: etree._Element) -> DiskFacts | None:
    cdroms = [disk_facts(e) for e in root.findall("devices/disk") if e.get("device") == "cdrom"]
    marked = [c for c in cdroms if c.key == CLOUD_INIT_ALIAS]
    if marked:
        return marked[-1]
    return cdroms[0] if cdroms else None


def _view(media: DiskFacts | None) -> tuple[Any, ...] | None:
    return None if media is None else (media.pool, media.volume, media.bus, media.target)


def compare_cloud_init_media(desired: DiskFacts | None, observed: DiskFacts | None) -> list[Change]:
    want, have = _view(desired), _view(observed)
    if want == have:
        return []
    return [Change(Setting.CLOUD_INIT_MEDIA, want, have, live=False)]
