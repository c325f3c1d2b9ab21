"""A storage pool that is cheap to fill, on the lab's host or one of its extra hosts: a transient
directory pool over a small tmpfs (16 MiB unless told), for the pool alerts' e2e test and the
snapshots' full pool.

Why a tmpfs in libvirtd's own mount namespace: each lab libvirtd runs in a private mount namespace
(docs/lab.md), so a file system mounted anywhere else is not what it sees; mounted there (with
`nsenter --mount`), it is, and it is the pool's whole file system, so a pool's fullness can be
driven past 95 % by one bounded file that never touches a disk. The mount, the file and the pool
are all gone after `small_pool` exits, whatever happened inside (and with the namespace, at the
latest, when the lab goes down).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import libvirt

from tests.support.lab_access import LabHost, LabInfo

__all__ = ["SmallPool", "small_pool"]

SIZE_BYTES = 16 * 2**20
FILL_NAME = "filler.raw"


def _libvirtd_pid(lab: LabInfo, host: LabHost | None) -> int:
    """The host's running libvirtd (None: the lab's own host), as the lab recorded it (it changes
    when libvirtd restarts)."""
    state = json.loads((lab.dir / "state.json").read_text())
    if host is None:
        return int(state["libvirtd_pid"])
    entry = next(h for h in state["hosts"] if h.get("netns") == host.netns)
    return int(entry["libvirtd_pid"])


def _in_libvirtd_mounts(pid: int, *command: str) -> None:
    """Run `command` in the mount namespace of libvirtd `pid`."""
    subprocess.run(
        ["nsenter", f"--target={pid}", "--mount", "--", *command],
        check=True,
        capture_output=True,
        timeout=30,
    )


@dataclass(frozen=True)
class SmallPool:
    """The pool `name` on the host, over `path` as its libvirtd sees it."""

    name: str
    path: Path
    pid: int
    size: int = SIZE_BYTES

    def fill(self, fraction: float) -> None:
        """Take `fraction` of the pool's file system with one file (fallocate: no bytes written)."""
        size = int(self.size * fraction)
        _in_libvirtd_mounts(self.pid, "fallocate", f"--length={size}", str(self.path / FILL_NAME))

    def leave(self, free: int) -> None:
        """Fill the pool's file system but for about `free` bytes (less what volumes hold)."""
        _in_libvirtd_mounts(
            self.pid, "fallocate", f"--length={self.size - free}", str(self.path / FILL_NAME)
        )

    def empty(self) -> None:
        _in_libvirtd_mounts(self.pid, "rm", "-f", str(self.path / FILL_NAME))


@contextlib.contextmanager
def small_pool(
    lab: LabInfo, host: LabHost | None, name: str, *, size: int = SIZE_BYTES
) -> Iterator[SmallPool]:
    """The pool `name` of `size` bytes, active on `host` (None: the lab's own host) until the
    block ends; then it, its file system and the mount point are removed."""
    pid = _libvirtd_pid(lab, host)
    path = lab.dir / f"small-pool-{host.name if host else 'lab'}-{name}"
    path.mkdir(exist_ok=True)
    conn = libvirt.open(host.uri if host else lab.libvirt_uri)
    pool: libvirt.virStoragePool | None = None
    try:
        _in_libvirtd_mounts(
            pid, "mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", name, str(path)
        )
        # Transient: a libvirtd restarted meanwhile does not bring it back.
        pool = conn.storagePoolCreateXML(
            f"<pool type='dir'><name>{name}</name><target><path>{path}</path></target></pool>", 0
        )
        yield SmallPool(name, path, pid, size)
    finally:
        if pool is not None:
            with contextlib.suppress(libvirt.libvirtError):
                pool.destroy()
        with contextlib.suppress(subprocess.CalledProcessError):
            _in_libvirtd_mounts(pid, "umount", str(path))
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()
        with contextlib.suppress(OSError):
            path.rmdir()
