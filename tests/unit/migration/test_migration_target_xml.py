"""The definition the target starts the guest with: each disk on the target's volume of the
same name, its backing chain left to the overlay's header; and what a definition needs."""

from __future__ import annotations

import pytest
from lxml import etree

from libvirt_provider.migration.target_xml import (
    UnmappedDiskError,
    domain_needs,
    memory_bytes,
    target_xml,
)

XML = """<domain type='qemu'><name>d</name><devices>
<disk type='volume' device='disk'>
  <source pool='src-pool' volume='d--boot.qcow2'/>
  <backingStore type='file'><format type='qcow2'/><source file='/src/base.qcow2'/></backingStore>
  <target dev='vda'/>
</disk>
<disk type='file' device='disk'>
  <source file='/src/pool/d--data-logs.raw'/><target dev='vdb'/>
</disk>
<disk type='volume' device='cdrom'>
  <source pool='src-pool' volume='d--cidata.iso'/><target dev='sda'/><readonly/>
</disk>
<disk type='file' device='cdrom'><target dev='sdb'/></disk>
<interface type='network'><source network='lab'/><mac address='52:54:00:00:00:01'/></interface>
</devices></domain>"""

VOLUMES = {
    "d--boot.qcow2": ("dst-pool", "/dst/pool/d--boot.qcow2"),
    "d--data-logs.raw": ("dst-pool", "/dst/pool/d--data-logs.raw"),
    "d--cidata.iso": ("dst-pool", "/dst/pool/d--cidata.iso"),
}


def test_every_disk_moves_to_the_targets_volume_and_loses_its_backing_store() -> None:
    root = etree.fromstring(target_xml(XML, VOLUMES, files=False).encode())
    sources = [d.find("source") for d in root.iterfind("devices/disk")]
    assert sources[0] is not None
    assert dict(sources[0].attrib) == {
        "pool": "dst-pool",
        "volume": "d--boot.qcow2",
    }
    assert sources[1] is not None
    assert sources[1].get("file") == "/dst/pool/d--data-logs.raw"
    assert sources[2] is not None
    assert sources[2].get("pool") == "dst-pool"
    assert sources[3] is None  # the empty drive stays empty
    assert root.find("devices/disk/backingStore") is None
    # Nothing else changes: the NIC keeps its MAC.
    mac = root.find("devices/interface/mac")
    assert mac is not None
    assert mac.get("address") == "52:54:00:00:00:01"


def test_for_the_running_guest_every_disk_is_a_file_at_the_targets_path() -> None:
    root = etree.fromstring(target_xml(XML, VOLUMES, files=True).encode())
    disks = list(root.iterfind("devices/disk"))
    assert [d.get("type") for d in disks] == ["file", "file", "file", "file"]
    files = [dict(s.attrib) for d in disks if (s := d.find("source")) is not None]
    assert files == [{"file": path} for _, path in VOLUMES.values()]
    assert root.find("devices/disk/backingStore") is None


def test_a_disk_without_a_prepared_volume_is_refused() -> None:
    with pytest.raises(UnmappedDiskError, match=r"d--data-logs\.raw"):
        target_xml(XML, {k: v for k, v in VOLUMES.items() if "data" not in k}, files=False)


def test_a_definition_needs_its_networks_and_pools() -> None:
    networks, pools = domain_needs(XML)
    assert networks == {"lab"}
    assert pools == {"src-pool"}


def test_the_memory_a_definition_gives_its_guest() -> None:
    sized = (
        "<domain type='qemu'><name>d</name><memory unit='KiB'>786432</memory>"
        "<currentMemory unit='KiB'>524288</currentMemory></domain>"
    )
    assert memory_bytes(sized) == 512 << 20
    assert memory_bytes("<domain><name>d</name><memory unit='MiB'>256</memory></domain>") == (
        256 << 20
    )
    assert memory_bytes(XML) == 0
