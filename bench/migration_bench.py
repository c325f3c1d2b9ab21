"""Benchmark: what a live migration sends and costs, and what a drain gains over moving one by one.

Usage: .venv/bin/python bench/migration_bench.py [--repeats 10] [--drain-machines 10]
                                                [--own-mib 50] [--fill-ram-mib 128] [--smoke]

Against the lab (KUBECONFIG from the environment), with a daemon for each of the lab's first two
extra hosts set up to migrate between them, as tests/e2e/migration's fleet runs them:

1. One machine (256 MiB of RAM) on a 1 GiB image: the lab's busybox image grown to 1 GiB, the
   grown part filled with pseudo-random bytes (so that sending the image would show), built once
   into the lab's cache outside the clone and served over HTTP on loopback with its sha256, so
   each host imports it as any http image (docs/catalog.md). Before the guest first boots, 50 MiB
   are written into its overlay with qemu-io (as tests/e2e/test_lab_migration.py writes its
   8 MiB): the machine's own data, at an offset its busybox system never touches. The machine is
   created powered off (the daemon builds its volumes and defines the domain), written, then
   powered on; once booted, the guest fills `--fill-ram-mib` of its RAM with random bytes
   (typed on its serial console), since an idle guest's untouched pages are zero pages that qemu
   barely sends. It is migrated back and forth between the two hosts: the first move (the target
   imports the 1 GiB image then) is printed apart, then `--repeats` moves give p50/p95 of the
   bytes libvirt sent (memory and disk, from the LibvirtMigration's `status.result`) against
   (own data + RAM) (goal: at most 1.2; the image is not sent), the total time (create -> the
   migration Succeeded, as seen by polling it) and libvirt's measured downtime (goal: p95 under
   1 s in the lab).
2. `--drain-machines` busybox machines running on the first host: the host drained (cordon and
   spec.drain, as `kubectl vm drain` writes them) until `Drained`, timed; then the same machines
   moved back one by one, each LibvirtMigration created once the previous ended; the ratio of
   the two times.

Bounded: every wait has a deadline; it deletes what it created (machines, migrations, the
LibvirtImage and the hosts' cached copies of it) and stops its daemons. Traffic goes only to
loopback and the lab's namespaces (the migration links between its hosts).
--smoke: the busybox image itself, 8 MiB written, RAM not filled, one move, a drain of 1 (its
guest booted beside the first machine) and no one-by-one moves; no figure judged.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
from kubernetes import client, config
from lxml import etree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import figures, leads, p95, wait  # noqa: E402
from libvirt_provider import constants as c  # noqa: E402
from tests.support.daemons import Fleet, console_log_dir  # noqa: E402
from tests.support.factories import pair  # noqa: E402
from tests.support.hosts import (  # noqa: E402
    HOSTS_PLURAL,
    LAB_HOST_SPEC,
    host_object,
    patch_host,
    reset_host,
)
from tests.support.images import Server, create_image, delete_image, drop_base  # noqa: E402
from tests.support.kube import (  # noqa: E402
    GROUP,
    V,
    create,
    domain_of,
    get,
    install_api,
    namespace,
    wait_ready,
)
from tests.support.lab_access import LabHost, LabInfo, read_lab  # noqa: E402
from tests.support.migrations import (  # noqa: E402
    create_migration,
    delete_migrations,
    migration,
    read_migration,
)
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
# The bench's image: changing how it is made changes its cache key.
RECIPE = b"migration-bench image v1: busybox guest, grown to 1 GiB, Random(27) bytes after it"
IMAGE_SIZE = GIB
# Where the machine's own data goes: past the end of the busybox disk (64 MiB), which the guest
# never reads or writes, and inside the 1 GiB overlay.
OWN_DATA_OFFSET = 512 * MIB
SMOKE_OWN_DATA_OFFSET = 40 * MIB  # the busybox image's own disk is 64 MiB
RESULT_FIELDS = ("elapsedMilliseconds", "downtimeMilliseconds", "memoryProcessed", "memoryTotal")
DISK_FIELDS = ("diskProcessed", "diskTotal")
ENDS = {c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED}


# -- the 1 GiB image --------------------------------------------------------------------------


def _cache_dir() -> Path:
    """The lab's cache (tests/lab/lab.py's rule), shared by every lab on the machine."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("VMAPI_LAB_CACHE") or home / "vm-api-lab")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MIB):
            digest.update(chunk)
    return digest.hexdigest()


def _virtual_size(path: Path) -> int:
    info = subprocess.run(
        ["qemu-img", "info", "-U", "--output=json", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(json.loads(info.stdout)["virtual-size"])


def bench_image(lab: LabInfo) -> tuple[Path, str]:
    """The 1 GiB image and its sha256, built on first use and cached by the busybox image's
    content and the recipe."""
    guest = Path(lab.dir) / "pool" / lab.guest_volume
    key = hashlib.sha256(bytes.fromhex(_sha256(guest)) + RECIPE).hexdigest()[:16]
    folder = _cache_dir() / f"bench-migration-1g-{key}"
    image, digest = folder / "image.qcow2", folder / "image.qcow2.sha256"
    if image.exists() and digest.exists():
        return image, digest.read_text().strip()
    started = time.monotonic()
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=folder.parent))
    try:
        raw = work / "image.raw"
        subprocess.run(
            ["qemu-img", "convert", "-O", "raw", str(guest), str(raw)],
            check=True,
            capture_output=True,
        )
        rng = random.Random(27)
        with raw.open("r+b") as f:
            f.seek(0, os.SEEK_END)
            while (at := f.tell()) < IMAGE_SIZE:
                f.write(rng.randbytes(min(64 * MIB, IMAGE_SIZE - at)))
        subprocess.run(
            ["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "image.qcow2")],
            check=True,
            capture_output=True,
        )
        raw.unlink()
        (work / "image.qcow2.sha256").write_text(_sha256(work / "image.qcow2") + "\n")
        # Another lab may have built the same key meanwhile: its copy is the same bytes.
        with contextlib.suppress(OSError):
            work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"built {image} in {time.monotonic() - started:.1f} s", flush=True)
    return image, digest.read_text().strip()


# -- machines and migrations ------------------------------------------------------------------


def _pinned(ns: str, name: str, host: str, **vm_spec: Any) -> list[dict[str, Any]]:
    vm, lm = pair(ns, name, vm_spec=vm_spec or None)
    lm["metadata"]["labels"][c.HOST_LABEL] = host
    lm["spec"]["host"] = host
    return [vm, lm]


def _running(api: client.ApiClient, ns: str, name: str) -> bool:
    """The VM reports itself Ready and PoweredOn for its current generation."""
    vm = get(api, ns, name, vm=True) or {}
    status = vm.get("status") or {}
    return bool(
        status.get("ready")
        and status.get("powerState") == "PoweredOn"
        and (status.get("observedGeneration") or 0) >= vm["metadata"].get("generation", 0)
    )


def _host_of(api: client.ApiClient, ns: str, name: str) -> str | None:
    return ((get(api, ns, name, vm=False) or {}).get("spec") or {}).get("host")


def _overlay_path(conn: libvirt.virConnect, domain: str) -> str:
    """The file of the domain's first disk (its boot disk's overlay)."""
    xml = etree.fromstring(conn.lookupByName(domain).XMLDesc(0))
    source = xml.find("devices/disk[@device='disk']/source")
    assert source is not None, f"domain {domain} has no disk"
    if source.get("file"):
        return str(source.get("file"))
    pool = conn.storagePoolLookupByName(source.get("pool"))
    return str(pool.storageVolLookupByName(source.get("volume")).path())


def _defined(conn: libvirt.virConnect, domain: str) -> bool:
    try:
        conn.lookupByName(domain)
    except libvirt.libvirtError:
        return False
    return True


def _write_own_data(
    api: client.ApiClient, ns: str, name: str, host: LabHost, *, offset: int, size: int
) -> None:
    """`size` bytes of a non-zero pattern into the powered-off machine's overlay."""
    domain = domain_of(api, ns, name)
    conn = libvirt.open(host.uri)
    try:
        wait(lambda: _defined(conn, domain), 300, f"{name}'s domain defined on {host.name}", 0.5)
        path = _overlay_path(conn, domain)
    finally:
        conn.close()
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", f"write -P 0xa5 {offset} {size}", path],
        check=True,
        capture_output=True,
    )


def _fill_ram(
    lab: LabInfo, api: client.ApiClient, ns: str, name: str, *, host: LabHost, mib: int
) -> None:
    """The running guest writes `mib` MiB of random bytes into a file of its root file system,
    which lives in its RAM: pages an idle guest leaves zero (and qemu sends as such) then hold
    data, so that the RAM term of the ratio is really sent. Typed on its serial console, again
    until its console log shows it done (its shell may not listen yet)."""
    domain = domain_of(api, ns, name)
    log = console_log_dir(lab) / f"{domain}.serial.log"
    tag = uuid.uuid4().hex[:6]
    conn = libvirt.open(host.uri)

    def done() -> bool:
        # The echo of the typed command spells the mark apart, so only its output matches.
        return f"FILLED-{tag}" in log.read_text(errors="replace")

    def typed() -> bool:
        start = log.stat().st_size
        stream = conn.newStream(0)
        conn.lookupByName(domain).openConsole(None, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
        try:
            command = f"dd if=/dev/urandom of=/fill bs=1M count={mib} 2>/dev/null; "
            stream.send(f'\n{command}echo FILLED""-{tag}\n'.encode())
            # Closing the stream before the guest took the bytes may drop them.
            with contextlib.suppress(TimedOutError):
                eventually(lambda: log.stat().st_size > start, timeout=5, interval=0.05)
        finally:
            stream.abort()
        with contextlib.suppress(TimedOutError):
            eventually(done, timeout=120, interval=0.5)
        return done()

    try:
        wait(typed, 400, f"{name} filling {mib} MiB of its RAM", 1)
    finally:
        conn.close()


@dataclass(frozen=True)
class Move:
    source: str
    target: str
    wall: float  # created -> Succeeded seen
    elapsed: float  # libvirt's
    downtime: float
    memory_processed: int
    memory_total: int
    disk_processed: int
    disk_total: int

    @property
    def sent(self) -> int:
        return self.memory_processed + self.disk_processed


def _ended(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    obj = read_migration(api, ns, name)
    return obj if obj and (obj.get("status") or {}).get("phase") in ENDS else None


def _move(obj: dict[str, Any], wall: float, *, disk: bool) -> Move:
    """The figures of an ended migration; `disk`: its disk figures must be there too (a machine
    with nothing of its own in its overlay may have none)."""
    status = obj["status"]
    if status["phase"] != c.MIGRATION_PHASE_SUCCEEDED:
        cond = [x for x in status.get("conditions") or [] if x.get("status") != "True"]
        raise SystemExit(
            f"bench: migration {obj['metadata']['name']} ended {status['phase']}: "
            + "; ".join(f"{x.get('reason')}: {x.get('message')}" for x in cond)
        )
    result = status.get("result") or {}
    # A figure the status lacks must not pass for a zero: it would flatter the ratio.
    missing = [k for k in RESULT_FIELDS + (DISK_FIELDS if disk else ()) if k not in result]
    if missing:
        raise SystemExit(
            f"bench: migration {obj['metadata']['name']} has no {', '.join(missing)} in its "
            f"result: {result}"
        )
    return Move(
        source=status["source"],
        target=status["target"],
        wall=wall,
        elapsed=int(result["elapsedMilliseconds"]) / 1e3,
        downtime=int(result["downtimeMilliseconds"]) / 1e3,
        memory_processed=int(result["memoryProcessed"]),
        memory_total=int(result["memoryTotal"]),
        disk_processed=int(result.get("diskProcessed") or 0),
        disk_total=int(result.get("diskTotal") or 0),
    )


def migrate(
    api: client.ApiClient,
    ns: str,
    machine: str,
    target: str | None,
    timeout: float,
    *,
    disk: bool = False,
) -> Move:
    """One LibvirtMigration of `machine` (no target: the source chooses), until it ends."""
    name = f"{machine}-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    create_migration(api, migration(ns, name, machine, target))
    done = wait(lambda: _ended(api, ns, name), timeout, f"migration {name} ended")
    return _move(done, time.monotonic() - started, disk=disk)


def _line(i: str, m: Move, own: int, ram: int) -> str:
    return (
        f"  {i:>5} {m.source[-2:]}->{m.target[-2:]}: total {m.wall:6.2f} s, libvirt "
        f"{m.elapsed:6.2f} s, downtime {m.downtime * 1e3:5.0f} ms; sent memory "
        f"{m.memory_processed / MIB:6.1f} of {m.memory_total / MIB:5.1f} MiB, disk "
        f"{m.disk_processed / MIB:6.1f} of {m.disk_total / MIB:5.1f} MiB; ratio "
        f"{m.sent / (own + ram):.2f}"
    )


# -- 1: one machine, back and forth ----------------------------------------------------------


def one_machine(
    lab: LabInfo,
    api: client.ApiClient,
    ns: str,
    hosts: list[LabHost],
    *,
    image: str,
    image_bytes: int,
    own: int,
    offset: int,
    fill: int,
    repeats: int,
    warm_up: bool,
) -> None:
    ram = 256 * MIB  # the sample catalog's `small` class
    name = "big"
    create(
        api,
        _pinned(
            ns,
            name,
            hosts[0].name,
            powerState="PoweredOff",
            bootDisk={
                "source": {"image": {"apiGroup": GROUP, "kind": "LibvirtImage", "name": image}},
                "sizeGiB": 1,
            },
        ),
    )
    started = time.monotonic()
    _write_own_data(api, ns, name, hosts[0], offset=offset, size=own)
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "vm-api.io", V, ns, "virtualmachines", name, {"spec": {"powerState": "PoweredOn"}}
    )
    wait(lambda: _running(api, ns, name), 600, f"{name} running on {hosts[0].name}", 0.5)
    # Booted to its lease: a guest still booting would have less memory to send.
    wait_ready(api, ns, name, what=f"{name}'s address", timeout=300, addresses=True)
    if fill:
        _fill_ram(lab, api, ns, name, host=hosts[0], mib=fill // MIB)
    print(
        f"1. one machine: image {image} ({image_bytes / MIB:.0f} MiB virtual), {own // MIB} "
        f"MiB of own data in its overlay, {ram // MIB} MiB of RAM ({fill // MIB} MiB of it filled "
        "by the guest); built, "
        f"written and booted in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    moves: list[Move] = []
    at = 0
    for i in range(repeats + (1 if warm_up else 0)):
        target = hosts[1 - at]
        move = migrate(api, ns, name, target.name, 900, disk=True)
        at = 1 - at
        wait_ready(api, ns, name, what=f"{name} Ready on {target.name}")
        first = warm_up and i == 0
        label = "first" if first else str(len(moves) + 1)
        print(_line(label, move, own, ram) + ("  (the target imports the image)" if first else ""))
        if not first:
            moves.append(move)
    ratios = [m.sent / (own + ram) for m in moves]
    disks = [m.disk_processed / MIB for m in moves]
    print(f"  over {len(moves)} moves (own data + RAM = {(own + ram) / MIB:.0f} MiB)")
    print(
        f"    ratio: p50 {statistics.median(ratios):.2f}, p95 {p95(ratios):.2f}, max "
        f"{max(ratios):.2f} (goal: at most 1.2: "
        f"{'met' if p95(ratios) <= 1.2 else 'MISSED'}); disk sent p50 "
        f"{statistics.median(disks):.1f} MiB for {own / MIB:.0f} MiB written, the image "
        f"({image_bytes / MIB:.0f} MiB) not sent"
    )
    print(f"    total time:   {figures([m.wall for m in moves])}")
    print(f"    libvirt time: {figures([m.elapsed for m in moves])}")
    downtimes = [m.downtime for m in moves]
    print(
        f"    downtime:     {figures(downtimes)} (goal: p95 under 1 s: "
        f"{'met' if p95(downtimes) < 1 else 'MISSED'})",
        flush=True,
    )
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object("vm-api.io", V, ns, "virtualmachines", name)
    custom.delete_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", name)
    wait(lambda: get(api, ns, name, vm=False) is None, 120, f"{name} deleted")


# -- 2: a drain against one by one ------------------------------------------------------------


def _drain_status(api: client.ApiClient, host: str) -> dict[str, Any]:
    return dict(((host_object(api, host) or {}).get("status") or {}).get("drain") or {})


def _drain_ended(api: client.ApiClient, host: str) -> dict[str, Any] | None:
    drain = _drain_status(api, host)
    ended = {c.DRAIN_PHASE_DRAINED, c.DRAIN_PHASE_BLOCKED}
    return drain if drain.get("phase") in ended else None


def drain_machines(api: client.ApiClient, ns: str, host: LabHost, count: int) -> list[str]:
    """`count` busybox machines pinned to `host`, created at once (their boot is waited for by
    `drain_against_one_by_one`)."""
    names = [f"d{i}" for i in range(count)]
    create(api, [doc for n in names for doc in _pinned(ns, n, host.name)])
    return names


def drain_against_one_by_one(
    api: client.ApiClient, ns: str, hosts: list[LabHost], names: list[str], *, one_by_one: bool
) -> None:
    first, second = hosts[0].name, hosts[1].name
    started = time.monotonic()
    for n in names:
        # Booted to its lease: a guest still booting would have less memory to send.
        wait_ready(api, ns, n, what=f"{n} Ready on {first}", timeout=300, addresses=True)
    print(
        f"2. {len(names)} busybox machines running on {first} (waited "
        f"{time.monotonic() - started:.1f} s for their boot)",
        flush=True,
    )
    started = time.monotonic()
    patch_host(api, first, {"spec": {"unschedulable": True, "drain": {"dryRun": False}}})
    drain: dict[str, Any] = wait(
        lambda: _drain_ended(api, first), 120 + 60 * len(names), f"{first} drained", 0.5
    )
    drained = time.monotonic() - started
    if drain["phase"] != c.DRAIN_PHASE_DRAINED:
        raise SystemExit(f"bench: the drain of {first} ended {drain['phase']}: {drain['message']}")
    listing = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, V, ns, c.MIGRATION_PLURAL, label_selector=f"{c.DRAIN_HOST_LABEL}={first}"
    )
    drain_moves = [_move(obj, 0.0, disk=False) for obj in listing["items"]]
    patch_host(api, first, {"spec": {"drain": None}})
    patch_host(api, first, {"spec": {"unschedulable": False}})
    wait(lambda: not _drain_status(api, first), 60, f"{first}'s drain cleared")
    assert all(_host_of(api, ns, n) == second for n in names)
    print(
        f"  drain of {first}: {drain['message']} in {drained:.1f} s (libvirt per move: "
        f"{figures([m.elapsed for m in drain_moves])})",
        flush=True,
    )
    if not one_by_one:
        return
    started = time.monotonic()
    moves = [migrate(api, ns, n, None, 300) for n in names]
    sequential = time.monotonic() - started
    assert all(_host_of(api, ns, n) == first for n in names)
    print(
        f"  one by one back to {first}: {sequential:.1f} s (total per move: "
        f"{figures([m.wall for m in moves])}; libvirt per move: "
        f"{figures([m.elapsed for m in moves])})"
    )
    print(
        f"  drain / one by one: {drained / sequential:.2f} "
        f"({drained:.1f} s against {sequential:.1f} s)",
        flush=True,
    )


# -- the run ----------------------------------------------------------------------------------


@contextlib.contextmanager
def fleet_of_two(lab: LabInfo, api: client.ApiClient) -> Iterator[list[LabHost]]:
    """A daemon for each of the lab's first two hosts, with their migration address and
    credentials (tests/e2e/migration/conftest.py's fleet), the hosts reset and roomy enough."""
    if len(lab.hosts) < 2 or lab.hosts[0].migration_pkipath is None:
        raise SystemExit("bench: the lab has no two extra hosts with migration links")
    hosts = lab.hosts[:2]
    custom = client.CustomObjectsApi(api)
    # A LibvirtHost left by another run, with no daemon, must not be a candidate target.
    for obj in custom.list_cluster_custom_object(GROUP, V, HOSTS_PLURAL)["items"]:
        if obj["metadata"]["name"] not in {h.name for h in hosts}:
            custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, obj["metadata"]["name"])
    fleet = Fleet(
        lab,
        api,
        host_args=lambda h: (
            f"--migration-uri={h.migration_uri}",
            f"--migration-pkipath={h.migration_pkipath}",
        ),
    )
    try:
        for host in hosts:
            reset_host(api, host.name)
        fleet.start_together(hosts)
        fleet.wait_hosts_ready([h.name for h in hosts])
        for host in hosts:
            # Ten one-vCPU guests on a 2-CPU lab host (the default overcommit admits 8).
            patch_host(api, host.name, {"spec": LAB_HOST_SPEC})
        wait(lambda: leads(fleet), 60, "a daemon leading")
        yield hosts
    finally:
        fleet.stop_all()
        for host in hosts:
            reset_host(api, host.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="moves of the 1 GiB machine")
    parser.add_argument("--drain-machines", type=int, default=10)
    parser.add_argument("--own-mib", type=int, default=50, help="own data in the overlay")
    parser.add_argument(
        "--fill-ram-mib", type=int, default=128, help="random data the guest keeps in its RAM"
    )
    parser.add_argument("--smoke", action="store_true", help="busybox image, 1 move, drain of 1")
    args = parser.parse_args()
    lab = read_lab()
    # A domain looked up before it is defined is an expected miss, not something to print.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    api = config.new_client_from_config(lab.kubeconfig)
    install_api(lab, api)
    started = time.monotonic()
    server: Server | None = None
    sha = ""
    image = "test-guest"  # the sample catalog's, a pool volume on every lab host
    path = Path(lab.dir) / "pool" / lab.guest_volume
    if not args.smoke:
        path, sha = bench_image(lab)
        server = Server(path.parent)
        image = f"bench-migration-{sha[:8]}"
        create_image(api, image, f"{server.url}/{path.name}", sha)
    try:
        with fleet_of_two(lab, api) as hosts, namespace(api) as ns:
            try:
                print(
                    f"daemons for {hosts[0].name} and {hosts[1].name} up in "
                    f"{time.monotonic() - started:.1f} s",
                    flush=True,
                )
                # The smoke run boots the drain's guests beside the first machine's, to be short;
                # the full run boots them only once the first machine is gone, so that ten idle
                # guests under TCG do not share its hosts' CPUs while it is measured.
                count = 1 if args.smoke else args.drain_machines
                names = drain_machines(api, ns, hosts[0], count) if args.smoke else []
                one_machine(
                    lab,
                    api,
                    ns,
                    hosts,
                    image=image,
                    image_bytes=_virtual_size(path),
                    own=(8 if args.smoke else args.own_mib) * MIB,
                    offset=SMOKE_OWN_DATA_OFFSET if args.smoke else OWN_DATA_OFFSET,
                    fill=0 if args.smoke else args.fill_ram_mib * MIB,
                    repeats=1 if args.smoke else args.repeats,
                    warm_up=not args.smoke,
                )
                names = names or drain_machines(api, ns, hosts[0], count)
                drain_against_one_by_one(api, ns, hosts, names, one_by_one=not args.smoke)
            finally:
                delete_migrations(api, ns)
    finally:
        if server is not None:
            server.httpd.shutdown()
            delete_image(api, image)
            for host in lab.hosts[:2]:
                conn = libvirt.open(host.uri)
                try:
                    drop_base(conn, lab, sha)
                finally:
                    conn.close()
    print(f"bench: {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
