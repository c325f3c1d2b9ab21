"""Benchmark of the control plane at scale: daemons on libvirt's test driver, N linked pairs.

Why it exists: on libvirt's in-process test driver domains define and start in microseconds, so
every second measured here is the control plane's own (the daemon, its API traffic, the generic
controller), not a guest's.

What it does, bounded in time and stopping by itself:
- writes a test-driver node definition (`test:///<file>.xml`) with the lab's pool (holding the
  sample image's volume) and the lab's network, so the sample catalog resolves unchanged, plus
  pools for the boot disks: the test driver fixes every pool at 100 GiB, so machines are spread
  over pools of MACHINES_PER_POOL 1 GiB disks each, through LibvirtStorageClasses `scale-bench-<k>`
  the script creates (and deletes at the end);
- starts --daemons `libvirt-provider` processes on it (hosts `scale-host-<i>`, the generic
  controller enabled; one of them leads it), against the lab's real kube-apiserver;
- creates N linked VirtualMachine + LibvirtMachine pairs (the sample pair) at --rate pairs per
  second, spread over the hosts, in a fresh namespace;
- prints create -> domain running (the LibvirtMachine's status first reports `PoweredOn`) and
  create -> VM Ready, p50/p95/max, from the script's own watches; the time until all are Ready;
  daemon RSS and CPU during creation and over an --idle-seconds window; API requests per machine
  by verb and resource, from the kube-apiserver's `apiserver_request_total` deltas minus the
  script's own requests; the time to delete every VM (the generic controller deletes each
  LibvirtMachine, the daemon its domain), and a check that nothing is left.

With `--driver libvirtd` the one daemon uses the test driver inside the lab's libvirtd instead
(`test+unix:///default`), as a daemon in production uses qemu's: its RSS then holds none of
libvirt's own state (about 17 MiB for 1,000 running test domains in-process), and "nothing
left" also counts the domains and volumes left in that driver.

"create" is the moment the script starts the pair's first POST. What the in-process test driver
holds lives inside each daemon's process, so "nothing left" is checked from the API: no
VirtualMachine or LibvirtMachine remains (a LibvirtMachine's finalizer goes only after its
domain and volumes are gone) and the Warning Events of the run are listed.

Bounded: the creation takes N / rate seconds; the waits for Ready (--ready-timeout after the last
create) and for deletion (--delete-timeout) give up earlier when nothing moves for
--stall-seconds; whatever happens, the daemons are stopped and everything the run made is
deleted. Traffic goes only to the lab's API server on 127.0.0.1 (anything else is refused).
Needs the lab: `make lab-up` first.

usage: .venv/bin/python bench/scale_bench.py [--machines 1000] [--rate 10] [--idle-seconds 60]
                                             [--daemons 1] [--driver process|libvirtd]
                                             [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.kube import GROUP, VM_GROUP, V, delete_quietly, install_api  # noqa: E402
from tests.support.lab_access import LabInfo, read_lab  # noqa: E402
from tests.support.testdriver import (  # noqa: E402
    Daemons,
    SharedTestDriver,
    cpu_seconds,
    disk_pools,
    forget_hosts,
    pair_docs,
    storage_classes,
    write_node_xml,
)
from tests.support.waiting import GiveUp, TimedOutError, eventually  # noqa: E402

HOST_PREFIX = "scale-host-"
NS_PREFIX = "scale-"
READS = ("GET", "LIST", "WATCH")
WRITES = ("POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY")
EVENTS = "events"
VMS, LMS = "virtualmachines", "libvirtmachines"
Key = tuple[str, str]  # (verb, resource[/subresource])
# What the daemons call: their own groups, Events, Leases, Secrets. Everything else (the lab's
# controller-manager restarting its watches, the API server's own endpoints) is summed as OTHER.
DAEMON_GROUPS = frozenset({"vm-api.io", "infrastructure.vm-api.io"})
DAEMON_RESOURCES = frozenset({"events", "leases", "secrets"})
OTHER = "(other clients)"


# -- counting -----------------------------------------------------------------------------------


class Requests:
    """The script's own API requests, by (verb, resource), so they can be taken off the server's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[Key] = Counter()

    def add(self, verb: str, resource: str, n: int = 1) -> None:
        with self._lock:
            self._counts[(verb, resource)] += n

    def snapshot(self) -> Counter[Key]:
        with self._lock:
            return Counter(self._counts)


def server_requests(api: client.ApiClient) -> Counter[Key]:
    """apiserver_request_total summed by (verb, resource[/subresource]); resource requests only
    (discovery and /metrics itself have no resource)."""
    resp = api.rest_client.pool_manager.request(
        "GET", f"{api.configuration.host}/metrics", timeout=30
    )
    if resp.status != 200:
        raise SystemExit(f"scale_bench: the API server's /metrics answered {resp.status}")
    counts: Counter[Key] = Counter()
    for line in resp.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
        labels = dict(part.split("=", 1) for part in labels_text.split(",") if "=" in part)
        labels = {k: v.strip('"') for k, v in labels.items()}
        resource = labels.get("resource", "")
        if not resource:
            continue
        if labels.get("group") not in DAEMON_GROUPS and resource not in DAEMON_RESOURCES:
            resource = OTHER
        elif labels.get("subresource"):
            resource += "/" + labels["subresource"]
        counts[(labels.get("verb", "?"), resource)] += round(float(value))
    return counts


@dataclass
class Phase:
    """API requests made by everyone but this script between two points."""

    name: str
    counts: Counter[Key]
    seconds: float

    @classmethod
    def between(
        cls,
        name: str,
        start: tuple[float, Counter[Key], Counter[Key]],
        end: tuple[float, Counter[Key], Counter[Key]],
    ) -> Phase:
        counts: Counter[Key] = Counter()
        for key in set(end[1]) | set(start[1]):
            n = (end[1][key] - start[1][key]) - (end[2][key] - start[2][key])
            if n > 0:
                counts[key] = n
        return cls(name, counts, end[0] - start[0])

    def total(self, verbs: tuple[str, ...], *, events: bool = True) -> int:
        return sum(
            n
            for (verb, resource), n in self.counts.items()
            if verb in verbs and resource != OTHER and (events or resource != EVENTS)
        )


# -- the daemons --------------------------------------------------------------------------------


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (every process, this lab's or not)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / float(os.sysconf("SC_CLK_TCK"))


def other_cpu(lab: LabInfo) -> dict[str, float]:
    """CPU seconds of what shares the machine with the daemons: the lab's kube-apiserver (etcd
    runs inside it), this script, and the whole machine (other work there skews the figures)."""
    found = {"this script": time.process_time(), "whole machine": machine_busy_seconds()}
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = int(json.loads((lab.dir / "state.json").read_text())["apiserver_pid"])
        found["kube-apiserver"] = cpu_seconds(pid)
    return found


def print_other_cpu(before: dict[str, float], after: dict[str, float], seconds: float) -> None:
    print(
        "  beside them: "
        + ", ".join(
            f"{name} {100 * (after[name] - before[name]) / seconds:.1f}%"
            for name in before
            if name in after
        )
        + " of a core"
    )


# -- watching the namespace ---------------------------------------------------------------------


@dataclass
class Seen:
    """When each object first met the predicate, and which are gone (monotonic seconds)."""

    first: dict[str, float] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)


class Watcher:
    """One kind in the namespace, list-then-watch with resume, recording when each object first
    meets `predicate` and when it is deleted."""

    def __init__(
        self,
        custom: client.CustomObjectsApi,
        own: Requests,
        *,
        ns: str,
        group: str,
        plural: str,
        predicate: Callable[[dict[str, Any]], bool],
    ) -> None:
        self.custom, self.own, self.ns = custom, own, ns
        self.group, self.plural, self.predicate = group, plural, predicate
        self.seen = Seen()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{plural}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self.seen.first), len(self.seen.deleted)

    def first(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seen.first)

    def _note(self, kind: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self.seen.deleted.add(name)
            elif name not in self.seen.first and self.predicate(obj):
                self.seen.first[name] = now

    def _run(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    self.own.add("LIST", self.plural)
                    listed = self.custom.list_namespaced_custom_object(
                        self.group, V, self.ns, self.plural
                    )
                    for obj in listed["items"]:
                        self._note("ADDED", obj)
                    rv = listed["metadata"]["resourceVersion"]
                self.own.add("WATCH", self.plural)
                stream = watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    self.group,
                    V,
                    self.ns,
                    self.plural,
                    resource_version=rv,
                    timeout_seconds=5,
                )
                for event in stream:
                    if event["type"] == "ERROR":
                        rv = None  # 410 Gone: list again
                        break
                    obj = event["object"]
                    self._note(event["type"], obj)
                    rv = obj["metadata"]["resourceVersion"]
            except ApiException as err:
                if err.status == 410:
                    rv = None
                elif not self._stop.wait(0.5):  # the API server is busy; the next try resumes
                    continue


# -- figures ------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def spread(label: str, values: list[float], n: int) -> str:
    if not values:
        return f"{label:<30} none of {n}"
    return (
        f"{label:<30} p50 {percentile(values, 50):7.2f} s   p95 {percentile(values, 95):7.2f} s"
        f"   max {max(values):7.2f} s   ({len(values)} of {n})"
    )


def print_phase(phase: Phase, *, per: int | None) -> None:
    """The phase's requests by verb and resource, per machine (`per`) or per second."""
    unit = "per machine" if per else "per second"
    div = per or max(phase.seconds, 1e-9)
    print(f"  {phase.name} ({phase.seconds:.1f} s), {unit}:")
    for verb, resource in sorted(phase.counts, key=lambda k: (k[1] == OTHER, k[0] not in READS, k)):
        n = phase.counts[(verb, resource)]
        print(f"    {verb:<7} {resource:<34} {n / div:9.2f}   ({n})")
    reads = phase.total(READS)
    writes = phase.total(WRITES, events=False)
    events = phase.total(WRITES) - writes
    print(
        "    (other clients: the lab's controller-manager and the API server itself; Lease "
        "writes include the API server's identity Lease, one every 10 s)"
    )
    print(
        f"    reads {reads / div:.2f}, writes {writes / div:.2f} (Events excluded), "
        f"Event writes {events / div:.2f} {unit}"
    )


# -- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    machines: int
    rate: float
    idle: float
    daemons: int
    ready_timeout: float
    delete_timeout: float
    stall: float
    creators: int
    in_libvirtd: bool = False


def create_paced(
    custom: client.CustomObjectsApi, own: Requests, ns: str, s: Settings
) -> dict[str, float]:
    """Create the pairs at `rate` per second from a pool of threads; when each pair started."""
    started: dict[str, float] = {}
    lock = threading.Lock()

    def create_one(index: int) -> None:
        vm, lm = pair_docs(ns, index, s.daemons, HOST_PREFIX, shared=s.in_libvirtd)
        with lock:
            started[vm["metadata"]["name"]] = time.monotonic()
        own.add("POST", VMS)
        custom.create_namespaced_custom_object(VM_GROUP, V, ns, VMS, vm)
        own.add("POST", LMS)
        custom.create_namespaced_custom_object(GROUP, V, ns, LMS, lm)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=s.creators) as pool:
        futures = []
        for i in range(s.machines):
            # Pacing of the load generator, not a wait for an effect.
            delay = t0 + i / s.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(create_one, i))
        for future in futures:
            future.result()
    return started


def wait_until(
    progress: Callable[[], int], goal: int, timeout: float, check: Callable[[], bool], stall: float
) -> bool:
    """Whether `progress` reached `goal` within `timeout`; gives up early when `check` (the
    daemons are alive) fails or `progress` stays the same for `stall` seconds."""
    last, moved = -1, time.monotonic()

    def reached() -> bool:
        nonlocal last, moved
        now, done = time.monotonic(), progress()
        if done >= goal:
            return True
        if done != last:
            last, moved = done, now
        if not check() or now - moved > stall:
            raise GiveUp
        return False

    try:
        # Polling the watchers' in-memory tallies.
        eventually(reached, timeout=timeout, interval=0.05, what="the goal", not_yet=())
    except GiveUp:
        return False
    except TimedOutError:
        return progress() >= goal
    return True


def warnings_in(core: client.CoreV1Api, own: Requests, ns: str) -> Counter[str]:
    own.add("LIST", EVENTS)
    items = core.list_namespaced_event(ns, field_selector="type=Warning").items
    return Counter(f"{e.involved_object.kind}/{e.reason}" for e in items)


def clean_up(custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str) -> None:
    """Leave no object behind, even after a failed run: delete what is left, and once the
    daemons are stopped, release any finalizer still held so the namespace can go."""
    for group, plural in ((VM_GROUP, VMS), (GROUP, LMS)):
        for obj in custom.list_namespaced_custom_object(group, V, ns, plural)["items"]:
            delete_quietly(custom, group, ns, plural, obj["metadata"]["name"])
            with contextlib.suppress(ApiException):
                custom.patch_namespaced_custom_object(
                    group,
                    V,
                    ns,
                    plural,
                    obj["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
    with contextlib.suppress(ApiException):
        core.delete_namespace(ns)


Point = tuple[float, Counter[Key], Counter[Key]]


class Bench:
    """One run: the API clients, the daemons, the watches, and the three phases."""

    def __init__(self, lab: LabInfo, s: Settings, workdir: Path) -> None:
        self.s, self.lab = s, lab
        cfg = client.Configuration()
        config.load_kube_config(config_file=lab.kubeconfig, client_configuration=cfg)
        if urlparse(cfg.host).hostname not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"scale_bench: refusing {cfg.host}: it only talks to the lab")
        cfg.connection_pool_maxsize = s.creators + 8
        self.api = client.ApiClient(cfg)
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        install_api(lab, self.api)
        self.pools = disk_pools(s.machines, s.daemons)
        storage_classes(self.custom, self.pools, create=True)
        self.driver: SharedTestDriver | None = None
        if s.in_libvirtd:
            self.driver = SharedTestDriver(lab, self.pools)
            self.uri = self.driver.uri
        else:
            self.uri = write_node_xml(lab, workdir / "node.xml", self.pools)
        self.own = Requests()
        self.ns = NS_PREFIX + uuid.uuid4().hex[:6]
        self.daemons = Daemons(
            lab, self.uri, s.daemons, host_prefix=HOST_PREFIX, log_prefix="scale-bench-"
        )
        self.running = Watcher(
            self.custom,
            self.own,
            ns=self.ns,
            group=GROUP,
            plural=LMS,
            predicate=lambda o: (o.get("status") or {}).get("powerState") == "PoweredOn",
        )
        self.ready = Watcher(
            self.custom,
            self.own,
            ns=self.ns,
            group=VM_GROUP,
            plural=VMS,
            predicate=lambda o: bool((o.get("status") or {}).get("ready")),
        )
        self.started: dict[str, float] = {}

    def point(self) -> Point:
        return time.monotonic(), server_requests(self.api), self.own.snapshot()

    def create(self) -> tuple[Phase, bool]:
        s, n, daemons = self.s, self.s.machines, self.daemons
        p0 = self.point()
        cpu0, others0 = daemons.cpu(), other_cpu(self.lab)
        daemons.reset_peaks()
        self.started = create_paced(self.custom, self.own, self.ns, s)
        created_in = time.monotonic() - p0[0]
        all_ready = wait_until(
            lambda: self.ready.counts()[0], n, s.ready_timeout, daemons.alive, s.stall
        )
        p1 = self.point()
        cpu1, others1 = daemons.cpu(), other_cpu(self.lab)
        phase = Phase.between("creation, first create to all Ready", p0, p1)
        runs, readies = self.running.first(), self.ready.first()
        print(f"created {n} pairs in {created_in:.1f} s ({n / created_in:.1f} pairs/s)")
        print(spread("create -> domain running", [runs[k] - self.started[k] for k in runs], n))
        print(spread("create -> VM Ready", [readies[k] - self.started[k] for k in readies], n))
        if all_ready:
            print(f"all {n} Ready {max(readies.values()) - p0[0]:.1f} s after the first create")
        else:
            print(f"NOT all Ready: {len(readies)} of {n} (gave up after {phase.seconds:.0f} s)")
        for d, c0, c1 in zip(daemons.items, cpu0, cpu1, strict=True):
            print(
                f"daemon {d.host} during creation: CPU {100 * (c1 - c0) / phase.seconds:.1f}% "
                f"of a core, RSS peak {d.peak_rss:.0f} MiB"
            )
        print_other_cpu(others0, others1, phase.seconds)
        return phase, all_ready

    def idle(self) -> Phase:
        daemons = self.daemons
        p1, cpu1, others1 = self.point(), daemons.cpu(), other_cpu(self.lab)
        daemons.reset_peaks()
        if self.s.idle > 0:
            time.sleep(self.s.idle)  # the idle window is the measurement itself
        p2, cpu2, others2 = self.point(), daemons.cpu(), other_cpu(self.lab)
        phase = Phase.between("idle, nothing changing", p1, p2)
        hosts = self.s.daemons
        for i, (d, c1, c2, rss) in enumerate(
            zip(daemons.items, cpu1, cpu2, daemons.rss(), strict=True)
        ):
            machines = len(range(i, len(self.started), hosts))
            print(
                f"daemon {d.host} idle with {machines} machines: CPU "
                f"{100 * (c2 - c1) / phase.seconds:.2f}% of a core over {phase.seconds:.0f} s, "
                f"RSS {rss:.0f} MiB (peak {d.peak_rss:.0f})"
            )
        print_other_cpu(others1, others2, phase.seconds)
        return phase

    def delete(self) -> tuple[Phase, bool]:
        n, custom, ns = self.s.machines, self.custom, self.ns
        p2, cpu2, others2 = self.point(), self.daemons.cpu(), other_cpu(self.lab)
        with ThreadPoolExecutor(max_workers=self.s.creators) as pool:
            for name in self.started:
                self.own.add("DELETE", VMS)
                pool.submit(delete_quietly, custom, VM_GROUP, ns, VMS, name)
        all_gone = wait_until(
            lambda: self.ready.counts()[1] + self.running.counts()[1],
            2 * n,
            self.s.delete_timeout,
            self.daemons.alive,
            self.s.stall,
        )
        p3, cpu3, others3 = self.point(), self.daemons.cpu(), other_cpu(self.lab)
        phase = Phase.between("deletion, first delete to all gone", p2, p3)
        self.own.add("LIST", VMS)
        self.own.add("LIST", LMS)
        left = len(custom.list_namespaced_custom_object(VM_GROUP, V, ns, VMS)["items"]) + len(
            custom.list_namespaced_custom_object(GROUP, V, ns, LMS)["items"]
        )
        in_libvirt: list[str] = []
        if self.driver is not None:
            in_libvirt = list(self.driver.domains()) + self.driver.volumes()
            print(f"left in libvirtd's test driver: {len(in_libvirt)} domains and volumes")
        clean = all_gone and not left and not in_libvirt
        print(
            f"delete all: {phase.seconds:.1f} s; "
            + (
                f"nothing left ({n} VMs and {n} LibvirtMachines gone)"
                if clean
                else f"NOT all gone: {left} objects left (gave up after {phase.seconds:.0f} s)"
            )
        )
        for d, c2, c3, rss in zip(self.daemons.items, cpu2, cpu3, self.daemons.rss(), strict=True):
            print(
                f"daemon {d.host} during deletion: CPU {100 * (c3 - c2) / phase.seconds:.1f}% "
                f"of a core; RSS after it {rss:.0f} MiB"
            )
        print_other_cpu(others2, others3, phase.seconds)
        warnings = warnings_in(self.core, self.own, ns)
        print(
            "Warning Events in the namespace: "
            + (", ".join(f"{k} x{v}" for k, v in sorted(warnings.items())) or "none")
        )
        return phase, clean

    def run(self) -> int:
        s = self.s
        print(
            f"scale_bench: {s.machines} pairs at {s.rate:g}/s over {s.daemons} daemon(s) on "
            f"{self.uri} (namespace {self.ns}); idle window {s.idle:g} s; {os.cpu_count()} CPUs"
        )
        self.own.add("POST", "namespaces")
        self.core.create_namespace({"metadata": {"name": self.ns}})
        try:
            self.daemons.wait_started()
            for d in self.daemons.items:
                print(
                    f"daemon {d.host}: start -> ready (/readyz 200) {d.ready_after:.2f} s, "
                    f"RSS then {d.rss_at_ready:.0f} MiB"
                )
            self.running.start()
            self.ready.start()
            creation, all_ready = self.create()
            idle = self.idle()
            deletion, clean = self.delete()
            print("API requests (kube-apiserver apiserver_request_total, this script's own off):")
            print_phase(creation, per=s.machines)
            print_phase(idle, per=None)
            print_phase(deletion, per=s.machines)
        finally:
            self.close()
        print(f"daemon logs: {', '.join(str(d.log) for d in self.daemons.items)}")
        return 0 if all_ready and clean else 1

    def close(self) -> None:
        self.running.stop()
        self.ready.stop()
        with contextlib.suppress(Exception):
            for group, plural in ((VM_GROUP, VMS), (GROUP, LMS)):
                for obj in self.custom.list_namespaced_custom_object(group, V, self.ns, plural)[
                    "items"
                ]:
                    delete_quietly(self.custom, group, self.ns, plural, obj["metadata"]["name"])
        self.daemons.stop()
        if self.driver is not None:
            self.driver.close()
        clean_up(self.custom, self.core, self.ns)
        storage_classes(self.custom, self.pools, create=False)
        forget_hosts(self.custom, HOST_PREFIX)
        self.api.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000, help="pairs to create (N)")
    parser.add_argument("--rate", type=float, default=10.0, help="pairs created per second")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle window")
    parser.add_argument("--daemons", type=int, default=1, help="daemons (hosts) on the test driver")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="after the last create")
    parser.add_argument("--delete-timeout", type=float, default=900.0)
    parser.add_argument(
        "--stall-seconds", type=float, default=120.0, help="give up when nothing moves this long"
    )
    parser.add_argument(
        "--driver",
        choices=("process", "libvirtd"),
        default="process",
        help="the test driver inside each daemon (default), or one inside the lab's libvirtd "
        "(one daemon only): then the daemon's RSS holds none of libvirt's domains and volumes",
    )
    parser.add_argument("--smoke", action="store_true", help="3 pairs, 1 s idle: a quick check")
    args = parser.parse_args()
    if args.driver == "libvirtd" and args.daemons != 1:
        parser.error("--driver libvirtd runs one daemon: daemons sharing it would see each other")
    if args.smoke:
        args.machines, args.rate, args.idle_seconds = 3, 20.0, 1.0
        args.ready_timeout, args.delete_timeout, args.stall_seconds = 60.0, 60.0, 30.0
    settings = Settings(
        machines=args.machines,
        rate=args.rate,
        idle=args.idle_seconds,
        daemons=args.daemons,
        ready_timeout=args.ready_timeout,
        delete_timeout=args.delete_timeout,
        stall=args.stall_seconds,
        creators=max(4, math.ceil(args.rate / 10)),
        in_libvirtd=args.driver == "libvirtd",
    )
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        return Bench(read_lab(), settings, Path(tmp)).run()


if __name__ == "__main__":
    sys.exit(main())
