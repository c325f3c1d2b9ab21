"""Benchmark: what a snapshot of a running machine costs, as the image grows and the writes don't.

Usage: .venv/bin/python bench/snapshot_bench.py [--sizes 1,4] [--written-mib 100] [--smoke]

For each image size (GiB), on the lab's libvirtd: a qcow2 base filled with data, a machine's disk
as an overlay on it into which `--written-mib` MiB are written (with qemu-io before the domain
starts: what the machine "wrote"), and a busybox guest booting from the lab's test image with that
disk attached. The snapshot is then taken with the driver's own calls, as the daemon takes it
(docs/snapshots.md): a pending overlay, the writes diverted, the disk copied through libvirt's
streams, the writes merged back. Printed per size: the copy's bytes, the time of each step, how
often the domain was seen not running (its state polled every millisecond on a second
connection), and whether the copy is identical to the disk (`qemu-img compare`); then the
4 GiB / 1 GiB ratios of the copy's bytes and time (the goal: at most 1.2). Then a clone's disk is
made from the copy as the daemon makes it for `source.snapshot` (`machine.update.create_volume`:
the copy looked up, a qcow2 overlay on it grown 1 GiB beyond it) and its creation timed (the goal:
under 100 ms at every size).

Needs the lab (`make lab-up`) and qemu-utils. Everything it makes is deleted at the end.
--smoke: one 64 MiB image with 8 MiB written; no figure judged.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import libvirt
from lxml import etree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from catalog.image import ImageFormat  # noqa: E402
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor  # noqa: E402
from libvirt_provider.driver.types import OverlaySpec, PendingOverlay  # noqa: E402
from libvirt_provider.machine.update import create_volume  # noqa: E402
from libvirt_provider.resolved import BaseImage, VolumePlan  # noqa: E402
from tests.support.lab_access import LabInfo, read_lab  # noqa: E402
from tests.support.virt import guest_domain_xml, overlay_volume_xml  # noqa: E402

MIB = 1 << 20
CHUNK = 512 * MIB


def _qemu_io(path: str, *writes: str) -> None:
    args = [a for w in writes for a in ("-c", w)]
    subprocess.run(["qemu-io", "-f", "qcow2", *args, path], check=True, capture_output=True)


def _volume(pool: libvirt.virStoragePool, name: str, size: int, backing: str | None) -> str:
    back = (
        f"<backingStore><path>{backing}</path><format type='qcow2'/></backingStore>"
        if backing
        else ""
    )
    xml = (
        f"<volume><name>{name}</name><capacity unit='bytes'>{size}</capacity>"
        f"<target><format type='qcow2'/></target>{back}</volume>"
    )
    return str(pool.createXML(xml, 0).path())


class _Watcher:
    """Polls the domain's state every millisecond on a connection of its own."""

    def __init__(self, lab: LabInfo, uid: str) -> None:
        self.stopped = 0
        self.polls = 0
        self._done = threading.Event()
        self._lab = lab
        self._uid = uid
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        watcher = libvirt.open(self._lab.libvirt_uri)
        try:
            dom = watcher.lookupByUUIDString(self._uid)
            while not self._done.is_set():
                self.polls += 1
                if dom.state()[0] != libvirt.VIR_DOMAIN_RUNNING:
                    self.stopped += 1
                time.sleep(0.001)
        finally:
            watcher.close()


def _machine(
    lab: LabInfo, conn: libvirt.virConnect, names: list[str], size: int, written: int
) -> libvirt.virDomain:
    """The base filled, the disk written, the guest running with the disk as vdb."""
    pool = conn.storagePoolLookupByName(lab.pool)
    base_name, disk_name, root_name = names[:3]
    base = _volume(pool, base_name, size, None)
    _qemu_io(base, *(f"write -P 0x11 {o} {min(CHUNK, size - o)}" for o in range(0, size, CHUNK)))
    disk = _volume(pool, disk_name, size, base)
    _qemu_io(disk, f"write -P 0x22 {size // 16} {written}")
    guest = pool.storageVolLookupByName(lab.guest_volume).path()
    root = pool.createXML(overlay_volume_xml(root_name, guest), 0).path()
    pool.refresh(0)
    xml = etree.fromstring(
        guest_domain_xml(lab, name=f"{base_name}-vm", dom_uuid=str(uuid.uuid4()), disk=root)
    )
    extra = etree.SubElement(xml.find("devices"), "disk", type="volume", device="disk")
    etree.SubElement(extra, "driver", name="qemu", type="qcow2")
    etree.SubElement(extra, "source", pool=lab.pool, volume=disk_name)
    etree.SubElement(extra, "target", dev="vdb", bus="virtio")
    return conn.createXML(etree.tostring(xml, encoding="unicode"), 0)


def measure(lab: LabInfo, size: int, written: int, tag: str) -> dict[str, float]:
    conn = libvirt.open(lab.libvirt_uri)
    hv = LibvirtHypervisor(lab.libvirt_uri)
    kinds = ("base", "disk", "root", "pending", "copy", "clone")
    names = [f"bench-snap-{tag}-{n}" for n in kinds]
    disk_name, pending_name, copy_name, clone_name = names[1], names[3], names[4], names[5]
    dom = None
    try:
        dom = _machine(lab, conn, names, size, written)
        source = hv.find_volume(lab.pool, disk_name)
        assert source is not None
        with _Watcher(lab, dom.UUIDString()) as watch:
            t0 = time.monotonic()
            pending = hv.create_overlay(
                OverlaySpec(
                    pool=lab.pool,
                    name=pending_name,
                    backing_path=source.path,
                    backing_format="qcow2",
                    capacity_bytes=source.capacity_bytes,
                )
            )
            t1 = time.monotonic()
            hv.divert_writes(dom.UUIDString(), [PendingOverlay("vdb", pending.path)], quiesce=False)
            t2 = time.monotonic()
            copy = hv.copy_volume(pool=lab.pool, source=disk_name, target=copy_name)
            t3 = time.monotonic()
            hv.merge_writes(dom.UUIDString(), "vdb", timeout=120)
            t4 = time.monotonic()
            hv.delete_volume(lab.pool, pending_name)
        clone = VolumePlan(
            disk="clone",
            pool=lab.pool,
            volume=clone_name,
            format=ImageFormat.QCOW2,
            capacity_bytes=copy.capacity_bytes + (1 << 30),
            base=BaseImage(
                image=copy_name,
                pool=lab.pool,
                volume=copy_name,
                format=ImageFormat.QCOW2,
                snapshot=True,
            ),
        )
        t5 = time.monotonic()
        create_volume(hv, clone)
        t6 = time.monotonic()
        made = hv.find_volume(lab.pool, clone_name)
        assert made is not None
        assert made.backing_path == copy.path
        same = subprocess.run(
            ["qemu-img", "compare", "-U", source.path, copy.path],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        print(
            f"image {size / (1 << 30):.2f} GiB, {written // MIB} MiB written (the disk's volume "
            f"allocates {source.allocation_bytes} B): copy {copy.allocation_bytes} B on "
            f"{(copy.backing_path or '-').rsplit('/', 1)[-1]}; divert {t2 - t1:.3f} s, copy "
            f"{t3 - t2:.3f} s, merge back {t4 - t3:.3f} s, snapshot {t4 - t0:.3f} s; domain seen "
            f"not running in {watch.stopped} of {watch.polls} polls; {same}; a clone's disk "
            f"(overlay on the copy, {made.capacity_bytes >> 20} MiB) made in {t6 - t5:.3f} s "
            "(goal: under 0.1 s)",
            flush=True,
        )
        return {"bytes": float(copy.allocation_bytes), "seconds": t4 - t0, "clone": t6 - t5}
    finally:
        hv.close()
        if dom is not None:
            dom.destroy()
        pool = conn.storagePoolLookupByName(lab.pool)
        pool.refresh(0)
        for name in reversed(names):
            with contextlib.suppress(libvirt.libvirtError):
                pool.storageVolLookupByName(name).delete(0)
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,4", help="image sizes in GiB, comma-separated")
    parser.add_argument("--written-mib", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="one 64 MiB image, 8 MiB written")
    args = parser.parse_args()
    lab = read_lab()
    tag = uuid.uuid4().hex[:6]
    if args.smoke:
        measure(lab, 64 * MIB, 8 * MIB, tag)
        return 0
    sizes = [float(s) for s in args.sizes.split(",")]
    results = [
        measure(lab, int(s * (1 << 30)), args.written_mib * MIB, f"{tag}-{i}")
        for i, s in enumerate(sizes)
    ]
    if len(results) >= 2:
        first, last = results[0], results[-1]
        bytes_ratio = last["bytes"] / first["bytes"]
        time_ratio = last["seconds"] / first["seconds"]
        print(
            f"ratio {sizes[-1]:g} GiB / {sizes[0]:g} GiB: bytes {bytes_ratio:.2f}, "
            f"time {time_ratio:.2f} (goal: at most 1.2)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
