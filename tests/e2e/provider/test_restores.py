"""LibvirtRestore on the lab's busybox guest: a running machine rolled back in place to its own
snapshot. The guest writes marker A into its data disk, the snapshot is taken, the guest writes
marker B; the restore powers the machine off, replaces its disks, and starts it again: A is there,
B is not, and the replaced volumes are new files under the same names (the old ones deleted, no
other volume left). Two restores at once: the second waits with a reason, then runs. The snapshot
is then in use by the machine (its deletion waits), deleting the VM removes exactly its volumes,
and the snapshot's copies stay until the snapshot goes. Bad input (a missing snapshot, a snapshot
of another machine) gets a reason and changes nothing.

The guest is reached through its serial console (libvirt's console stream, forced, as `virsh
console --force` would): the test types shell commands; what they print lands in the console log
the daemon keeps. A printed marker is spelled differently in the command that prints it, so the
echo of the command never matches. One guest for the module. Cost: about 50 s on the lab's two
shared cores (a daemon start, three boots, two snapshots, two restores, two VM deletions).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider import constants as c
from libvirt_provider.snapshot.names import snapshot_prefix
from tests.support.daemons import console_log_dir
from tests.support.factories import pair
from tests.support.kube import (
    GROUP,
    V,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    namespace,
    vm_status,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.snapshots import create_restore, create_snapshot, get_restore, get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import TimedOutError, eventually

VM = "rolled"
OTHER = "other"
SNAP = "before"
# What the guest prints as it boots and as it powers off (asked through ACPI), and what its shell
# prints as it starts on the console.
BOOTED = "VMAPI-GUEST-BOOTED"
POWERED_OFF = "VMAPI-GUEST-POWEROFF"
SHELL_BANNER = "built-in shell (ash)"
# Sectors of the data disk the markers are written to.
SECTOR_A, SECTOR_B = 8, 16


@dataclass(frozen=True)
class Guest:
    ns: str
    domain: str
    log: Path


def _echoed(text: str, command: str) -> bool:
    """Whether the console shows `command` echoed whole, its Enter included. The shell's line
    editor wraps a long line at 80 columns with CR CR LF, which is not part of what was typed."""
    return f"{command}\r\n" in text.replace("\r\r\n", "")


def _type(virt: libvirt.virConnect, guest: Guest, command: str) -> None:
    """Type `command` on the guest's serial console; the stream is closed once the console log
    shows the whole command echoed. What qemu has not read from the console's pty when the
    stream closes waits there until the next stream opens: closing at the first byte of output
    (often the end of the previous command's) left a command unanswered until it was typed again."""
    start = guest.log.stat().st_size
    stream = virt.newStream(0)
    virt.lookupByName(guest.domain).openConsole(None, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
    try:
        stream.send(f"\n{command}\n".encode())
        with contextlib.suppress(TimedOutError):
            eventually(
                lambda: _echoed(guest.log.read_bytes()[start:].decode(errors="replace"), command),
                timeout=5,
                interval=0.05,
                what="the guest's console echoing the command",
            )
    finally:
        stream.abort()


def _read_marker(virt: libvirt.virConnect, guest: Guest, sector: int, tag: str) -> str:
    """What the guest reads at `sector` of its data disk, printed after `GOT<tag>-` (the console
    log from its end before the command on)."""
    start = guest.log.stat().st_size

    def printed() -> str | None:
        text = guest.log.read_bytes()[start:].decode(errors="replace")
        # 12 characters once the disk answered (an empty one: asked before it was there).
        answers = re.findall(rf"GOT{tag}-\[([^\]\r\n]{{12}})\]", text)
        return answers[-1] if answers else None

    def ask() -> str | None:
        _type(
            virt,
            guest,
            f"x=$(dd if=/dev/vdb bs=512 skip={sector} count=1 2>/dev/null | head -c 12 | "
            f"tr -c 'A-Z0-9-' '.'); echo \"GOT{tag}\"\"-[$x]\"",
        )
        try:
            return eventually(printed, timeout=5, interval=0.2, what="the guest's answer")
        except TimedOutError:
            return None  # typed before its shell listened: asked again

    try:
        answer: str = eventually(ask, timeout=90, interval=1, what=f"the guest reading {sector}")
    except TimedOutError as err:
        tail = guest.log.read_text(errors="replace")[-1500:]
        raise AssertionError(f"{err}; the console's end:\n{tail}") from err
    return answer


def _write_marker(virt: libvirt.virConnect, guest: Guest, sector: int, word: str) -> None:
    """The guest writes MARK<word> at `sector` of its data disk (the command spells it apart),
    typed again until the guest reads it back (its shell may not listen yet)."""

    def written() -> bool:
        _type(
            virt,
            guest,
            f"printf 'MARK%s' {word} | dd of=/dev/vdb bs=512 seek={sector} conv=notrunc "
            "2>/dev/null; sync",
        )
        return _read_marker(virt, guest, sector, word).startswith(f"MARK{word}")

    eventually(written, timeout=90, interval=1, what=f"marker {word} written")


@pytest.fixture(scope="module")
def guest(api_client: client.ApiClient, daemon: str, lab: LabInfo) -> Iterator[Guest]:
    """A running busybox machine with a blank data disk, marker A written into it."""
    with namespace(api_client) as ns:
        disks = [{"name": "scratch", "source": {"blank": True}, "sizeGiB": 1}]
        create(api_client, pair(ns, VM, vm_spec={"disks": disks}))
        wait_ready(api_client, ns, VM, what="the machine Ready")
        domain = domain_of(api_client, ns, VM)
        log = Path(console_log_dir(lab)) / f"{domain}.serial.log"
        eventually(
            # Printed last before the guest's shell starts on its console.
            lambda: "VMAPI-GUEST-ACPI" in log.read_text(errors="replace"),
            timeout=120,
            what="the guest booted",
        )
        found = Guest(ns, domain, log)
        custom = client.CustomObjectsApi(api_client)
        try:
            yield found
        finally:
            for plural in (c.RESTORE_PLURAL, c.SNAPSHOT_PLURAL):
                for item in custom.list_namespaced_custom_object(GROUP, V, ns, plural)["items"]:
                    custom.delete_namespaced_custom_object(
                        GROUP, V, ns, plural, item["metadata"]["name"]
                    )


def _ready_snapshot(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    snap: dict[str, Any] = eventually(
        lambda: (
            (s := get_snapshot(api, ns, name)) and (s.get("status") or {}).get("readyToUse") and s
        ),
        timeout=90,
        interval=0.5,
        what=f"snapshot {name} ready",
    )
    return snap


def _finished(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    restore: dict[str, Any] = eventually(
        lambda: (
            (r := get_restore(api, ns, name))
            and (r.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            and r
        ),
        timeout=180,
        interval=0.5,
        what=f"restore {name} finished",
    )
    return restore


def _events(api: client.ApiClient, ns: str, kind: str, name: str) -> list[tuple[str, str]]:
    items = client.CoreV1Api(api).list_namespaced_event(ns).items
    return [
        (e.reason, e.message)
        for e in items
        if e.involved_object.kind == kind and e.involved_object.name == name
    ]


def _volume_files(virt: libvirt.virConnect, lab: LabInfo, domain: str) -> dict[str, str | None]:
    """The machine's volumes: name -> the file its qcow2 is an overlay on (None for none)."""
    return {name: _backing(virt, lab, name) for name in machine_volumes(virt, lab, f"{domain}--")}


def _backing(virt: libvirt.virConnect, lab: LabInfo, name: str) -> str | None:
    """The file volume `name` is an overlay on, if any."""
    vol = virt.storagePoolLookupByName(lab.pool).storageVolLookupByName(name)
    return etree.fromstring(vol.XMLDesc(0)).findtext("backingStore/path")


def test_bad_input_is_refused_with_a_reason_and_changes_nothing(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, guest: Guest
) -> None:
    ns = guest.ns
    before = _volume_files(virt, lab, guest.domain)
    # A snapshot that does not exist (a name has no namespace: another one's cannot be named).
    create_restore(api_client, ns, "nowhere", "missing", VM)
    cond = eventually(
        lambda: (
            (cd := condition(get_restore(api_client, ns, "nowhere"), "Succeeded")).get("reason")
            == c.RESTORE_REASON_SNAPSHOT_NOT_FOUND
            and cd
        ),
        timeout=60,
        what="the missing snapshot reported",
    )
    assert f"no {c.SNAPSHOT_KIND} 'missing' in namespace '{ns}'" in cond["message"]
    # A snapshot of another machine (a stopped one: cheap to build and copy).
    create(api_client, pair(ns, OTHER, vm_spec={"powerState": "PoweredOff"}))
    eventually(
        lambda: vm_status(api_client, ns, OTHER).get("powerState") == "PoweredOff",
        timeout=120,
        what="the other machine built",
    )
    create_snapshot(api_client, ns, "theirs", OTHER)
    _ready_snapshot(api_client, ns, "theirs")
    create_restore(api_client, ns, "mixup", "theirs", VM)
    done = _finished(api_client, ns, "mixup")
    assert done["status"]["phase"] == "Failed"
    cond = condition(done, "Succeeded")
    assert cond["reason"] == c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE, cond
    # The Event follows the status write just seen.
    eventually(
        lambda: (
            (c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE, cond["message"])
            in _events(api_client, ns, c.RESTORE_KIND, "mixup")
        ),
        timeout=30,
        what="the restore's Event",
    )
    # Nothing changed: the machine runs on the same files, and was never held.
    assert vm_status(api_client, ns, VM).get("powerState") == "PoweredOn"
    assert _volume_files(virt, lab, guest.domain) == before
    assert "restore" not in ((get(api_client, ns, VM, vm=False) or {}).get("status") or {})
    delete_vm_and_wait(api_client, ns, OTHER, what="the other machine deleted")


def test_a_running_machine_is_rolled_back_in_place(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, guest: Guest
) -> None:
    ns = guest.ns
    _write_marker(virt, guest, SECTOR_A, "ONE")
    create_snapshot(api_client, ns, SNAP, VM)
    snap = _ready_snapshot(api_client, ns, SNAP)
    _write_marker(virt, guest, SECTOR_B, "TWO")
    before = _volume_files(virt, lab, guest.domain)
    boots = guest.log.read_text(errors="replace").count(BOOTED)

    # Two restores at once: the second waits for the first, then runs too.
    create_restore(api_client, ns, "first", SNAP, VM)
    create_restore(api_client, ns, "second", SNAP, VM)
    first = _finished(api_client, ns, "first")
    second = _finished(api_client, ns, "second")
    assert c.RESTORE_REASON_ANOTHER_RESTORE in {
        reason for reason, _ in _events(api_client, ns, c.RESTORE_KIND, "second")
    }
    for done in (first, second):
        status = done["status"]
        assert status["phase"] == "Succeeded", status
        assert condition(done, "Succeeded")["reason"] == c.RESTORE_REASON_RESTORED
        assert {d["name"] for d in status["restoredDisks"]} == {"bootDisk", "scratch"}
        assert status["returnPowerState"] == "Running"
        assert status["startTime"]
        assert status["completionTime"]
    assert first["status"]["powerStateBefore"] == "Running"
    machine_events = {r for r, _ in _events(api_client, ns, "LibvirtMachine", VM)}
    assert {c.EVENT_RESTORE_HOLD, c.EVENT_RESTORED} <= machine_events

    # Running again, and booted anew; the hold is gone.
    wait_ready(api_client, ns, VM, what="the machine Ready again")
    assert "restore" not in ((get(api_client, ns, VM, vm=False) or {}).get("status") or {})
    eventually(
        lambda: guest.log.read_text(errors="replace").count(BOOTED) >= boots + 1,
        timeout=120,
        what="the guest booted again",
    )
    # Each restore powered the guest off and on; typed before the shell of the boot after the
    # last power-off reads its console, a command is lost (and typed again).
    eventually(
        lambda: SHELL_BANNER in guest.log.read_text(errors="replace").rsplit(POWERED_OFF, 1)[-1],
        timeout=60,
        interval=0.1,
        what="the guest's shell started again",
    )
    # The disks hold what they held at the snapshot: A, not B.
    assert _read_marker(virt, guest, SECTOR_A, "A1").startswith("MARKONE")
    assert not _read_marker(virt, guest, SECTOR_B, "B1").startswith("MARKTWO")

    # The same names, no other volume left, and new files: the boot disk was an overlay on the
    # image and the data disk a plain qcow2; both are now overlays on the snapshot's copies.
    after = _volume_files(virt, lab, guest.domain)
    assert set(after) == set(before)
    copies = {d["name"]: d["volume"] for d in snap["status"]["disks"]}
    pool = virt.storagePoolLookupByName(lab.pool)
    boot, data = f"{guest.domain}--boot.qcow2", f"{guest.domain}--data-scratch.qcow2"
    assert before[data] is None
    assert before[boot] is not None
    assert not before[boot].rsplit("/", 1)[-1].startswith(c.SNAPSHOT_VOLUME_PREFIX)
    assert after[boot] == pool.storageVolLookupByName(copies["bootDisk"]).path()
    assert after[data] == pool.storageVolLookupByName(copies["scratch"]).path()

    # The snapshot is in use by the machine: its deletion waits.
    custom = client.CustomObjectsApi(api_client)
    custom.delete_namespaced_custom_object(GROUP, V, ns, c.SNAPSHOT_PLURAL, SNAP)
    cond = eventually(
        lambda: (
            (cd := condition(get_snapshot(api_client, ns, SNAP), "Ready")).get("reason")
            == c.SNAPSHOT_REASON_IN_USE
            and cd
        ),
        timeout=60,
        what="the snapshot's deletion waiting",
    )
    assert f"{guest.domain}--boot.qcow2" in cond["message"]

    # Deleting the machine removes exactly its volumes; then the snapshot goes with its copies.
    uid = snap["metadata"]["uid"]
    delete_vm_and_wait(api_client, ns, VM, what="the restored machine deleted")
    assert machine_volumes(virt, lab, f"{guest.domain}--") == []
    eventually(
        lambda: get_snapshot(api_client, ns, SNAP) is None,
        timeout=60,
        what="the snapshot gone once the machine is",
    )
    assert machine_volumes(virt, lab, snapshot_prefix(uid)) == []
    # The finished restores go at once (nothing to hold any more).
    for name in ("first", "second"):
        custom.delete_namespaced_custom_object(GROUP, V, ns, c.RESTORE_PLURAL, name)
    eventually(
        lambda: (
            not {
                r["metadata"]["name"]
                for r in custom.list_namespaced_custom_object(GROUP, V, ns, c.RESTORE_PLURAL)[
                    "items"
                ]
            }
            & {"first", "second"}
        ),
        timeout=30,
        what="the restores deleted",
    )
