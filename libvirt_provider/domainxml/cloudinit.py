"""The cloud-init NoCloud ISO as a read-only CD-ROM.

Which bus carries the CD-ROM is an explicit choice, not libvirt's default: on q35 libvirt would pick
SATA (AHCI), which many minimal guest kernels lack; virtio-scsi works on both machine families, and
IDE remains available for `pc` guests that have only ata_piix. The resolver makes that choice; this
module only writes it.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.resolved import CloudInitMedia

__all__ = ["CLOUD_INIT_ALIAS", "render_cloud_init"]

CLOUD_INIT_ALIAS = "ua-cidata"


def render_cloud_init(devices: etree._Element, media: CloudInitMedia) -> None:
    element = etree.SubElement(devices, "disk", type="volume", device="cdrom")
    etree.SubElement(element, "driver", name="qemu", type="raw")
    etree.SubElement(element, "source", pool=media.pool, volume=media.volume)
    etree.SubElement(element, "target", dev=media.target, bus=media.bus.value)
    etree.SubElement(element, "readonly")
    etree.SubElement(element, "alias", name=CLOUD_INIT_ALIAS)
