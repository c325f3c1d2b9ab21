"""Soak: N machines on libvirt's test driver, power-cycled and resized at random, then deleted.

Why it exists: a benchmark of minutes shows speed; slow leaks (memory that grows with every
change, a finalizer that sticks once in a thousand deletions, a domain or volume left behind, an
error Event nobody explains) need many changes over a long time, and faults in the middle of them.

What it does, bounded in time and stopping by itself:
- one daemon (host `soak-host-0`, the generic controller enabled) on libvirt's test driver inside
  the lab's libvirtd (`test+unix:///default`, made up as scale_bench's node file: the lab's pool
  with the image's volume, the lab's network, pools for the boot disks; see `_testdriver.py`), so
  the script sees the daemon's domains and volumes through its own connection;
- creates --machines linked pairs at --rate per second and waits until all are Ready;
- for --minutes, at --ops-per-second, picks a machine at random and either power-cycles it (the
  VM's `powerState` PoweredOn <-> PoweredOff, `powerOffMode: Hard`) or resizes it (the VM's
  `instanceType`: the `small` class or explicit resources); samples the daemon's RSS every
  --sample-seconds;
- with --faults, one third of the way through restarts the lab's kube-apiserver, kept down for
  --outage-seconds (by default longer than kopf's retries of a watch and than the election
  Lease), and two thirds of the way through has libvirtd drop the daemon's connection
  (`virt-admin client-disconnect`; the driver's state lives on, as it would with a real
  libvirtd restarting); --apiserver-restarts N restarts it N times instead, evenly spread before
  the libvirt drop (to tell a leak per restart from a one-off rise);
- then waits until every machine is in the power state last asked for, in libvirt and in the VM's
  status, and Ready; deletes every VM and waits until nothing is left.

It prints: RSS after warm-up vs at the end of the churn (goal: flat within 10 %), the machines
that did not converge, stuck finalizers, domains and volumes left in the test driver, and Warning
Events by reason, those that began during a fault (or within --fault-grace seconds after it) apart
as provoked. Exit status 0 when everything converged, nothing is left and no Warning Event came
unprovoked. Traffic goes only to the lab's API server on 127.0.0.1. Needs the lab: `make lab-up`.

usage: .venv/bin/python bench/soak.py [--machines 200] [--minutes 30] [--faults] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import random
import subprocess
import sys
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

import libvirt
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from libvirt_provider import naming  # noqa: E402
from tests.support.kube import GROUP, VM_GROUP, V, delete_quietly, install_api  # noqa: E402
from tests.support.lab_access import LAB_SCRIPT, LabInfo, read_lab  # noqa: E402
from tests.support.testdriver import (  # noqa: E402
    SHARED_RESOURCES,
    Daemons,
    SharedTestDriver,
    disk_pools,
    forget_hosts,
    pair_docs,
    rss_mib,
    storage_classes,
)
from tests.support.waiting import GiveUp, TimedOutError, eventually  # noqa: E402

HOST_PREFIX = "soak-host-"
NS_PREFIX = "soak-"
VMS, LMS = "virtualmachines", "libvirtmachines"
# What a resize picks from: the sample catalog's class, and explicit resources (more than the
# class's CPUs or memory is applied live up to the boot-time ceiling, the rest at the next
# power-off).
# The first is what a machine is created with: the test driver inside libvirtd has 3 GiB, and
# its host admits new machines against it (tests/support/testdriver.py, SHARED_RESOURCES).
SIZES: tuple[dict[str, Any], ...] = (
    {"name": None, "resources": SHARED_RESOURCES},
    {"name": "small", "resources": None},
    {"name": None, "resources": {"cpus": 1, "memory": "384Mi"}},
    {"name": None, "resources": {"cpus": 2, "memory": "256Mi"}},
    {"name": None, "resources": {"cpus": 2, "memory": "512Mi"}},
)
# What each size defines (vCPUs, memory in KiB); `small` is the sample catalog's class.
SHAPES = ((1, 8 * 1024), (1, 256 * 1024), (1, 384 * 1024), (2, 256 * 1024), (2, 512 * 1024))
POWER_STATES = {"PoweredOn": libvirt.VIR_DOMAIN_RUNNING, "PoweredOff": libvirt.VIR_DOMAIN_SHUTOFF}
REQUEST_TIMEOUT = (5.0, 30.0)


@dataclass(frozen=True)
class Settings:
    machines: int
    rate: float
    minutes: float
    ops_per_second: float
    sample_seconds: float
    warmup_seconds: float
    faults: bool
    apiserver_restarts: int
    outage_seconds: float
    fault_grace: float
    ready_timeout: float
    settle_timeout: float
    delete_timeout: float
    seed: int


@dataclass
class Fault:
    """Something the script did that may rightly cause Warning Events: when (wall clock, to
    compare with the Events' timestamps), what it did, and which reasons it explains (None: any
    reason, for the injected faults)."""

    name: str
    began: dt.datetime
    ended: dt.datetime | None = None
    detail: str = ""
    reasons: frozenset[str] | None = None

    def explains(self, reason: str, at: dt.datetime, grace: dt.timedelta) -> bool:
        # Event timestamps have whole seconds.
        began = self.began.replace(microsecond=0)
        ended = (self.ended or utc_now()) + (grace if self.reasons is None else dt.timedelta(0))
        in_window = began <= at <= ended
        return in_window and (self.reasons is None or reason in self.reasons)


@dataclass
class Churn:
    """What the churn did, and the power state last asked for per machine."""

    desired: dict[str, str] = field(default_factory=dict)
    size: dict[str, int] = field(default_factory=dict)  # index into SIZES
    ops: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds in, RSS MiB)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Soak:
    """One run: the clients, the test driver, the daemon, and the phases."""

    def __init__(self, lab: LabInfo, s: Settings) -> None:
        self.s, self.lab = s, lab
        cfg = client.Configuration()
        config.load_kube_config(config_file=lab.kubeconfig, client_configuration=cfg)
        if urlparse(cfg.host).hostname not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"soak: refusing {cfg.host}: it only talks to the lab")
        cfg.connection_pool_maxsize = 16
        self.api = client.ApiClient(cfg)
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        install_api(lab, self.api)
        self.pools = disk_pools(s.machines, 1)
        storage_classes(self.custom, self.pools, create=True)
        self.driver = SharedTestDriver(lab, self.pools)
        self.ns = NS_PREFIX + uuid.uuid4().hex[:6]
        self.rng = random.Random(s.seed)
        self.names = [f"m{i:05d}" for i in range(s.machines)]
        self.domains: dict[str, str] = {}
        self.faults: list[Fault] = []
        self.provocations: list[Fault] = []  # the faults and the creation
        self.churn = Churn(desired=dict.fromkeys(self.names, "PoweredOn"))
        self.daemons = Daemons(lab, self.driver.uri, 1, host_prefix=HOST_PREFIX, log_prefix="soak-")
        self.churn_started = time.monotonic()
        self.daemon_rss_after_delete = 0.0

    @property
    def pid(self) -> int:
        return self.daemons.items[0].proc.pid

    # -- reading ----------------------------------------------------------------------------

    def _list(self, group: str, plural: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.custom.list_namespaced_custom_object(
            group, V, self.ns, plural, _request_timeout=REQUEST_TIMEOUT
        )["items"]
        return items

    def _quietly(self, read: Callable[[], int]) -> int:
        """A progress count, or -1 while the API server is away (it is restarted on purpose)."""
        try:
            return read()
        except (ApiException, HTTPError, OSError):
            return -1

    def ready_count(self) -> int:
        return sum(bool((vm.get("status") or {}).get("ready")) for vm in self._list(VM_GROUP, VMS))

    def converged(self) -> list[str]:
        """The machines not (yet) where the churn left them: the power state last asked for, in
        libvirt and in the VM's status, and Ready; a machine asked to be off also defined with the
        size last asked for (a running one may wait for its next power cycle to get it)."""
        vms = {vm["metadata"]["name"]: vm.get("status") or {} for vm in self._list(VM_GROUP, VMS)}
        states = self.driver.domains()
        off = []
        for name, want in self.churn.desired.items():
            status = vms.get(name, {})
            domain = self.domains.get(name, "")
            if (
                states.get(domain) != POWER_STATES[want]
                or status.get("powerState") != want
                or not status.get("ready")
                or (
                    want == "PoweredOff"
                    and self.driver.shape(domain) != SHAPES[self.churn.size.get(name, 0)]
                )
            ):
                off.append(name)
        return off

    # -- phases -----------------------------------------------------------------------------

    def wait(self, what: str, progress: Callable[[], int], goal: int, timeout: float) -> bool:
        """Poll `progress` (every second) until it reaches `goal`, `timeout` passes or the daemon
        exits; prints the outcome."""
        started = time.monotonic()
        done = -1

        def reached() -> bool:
            nonlocal done
            if not self.daemons.alive():
                raise GiveUp
            done = self._quietly(progress)
            return done >= goal

        try:
            # Polling the API for progress, not waiting for an effect blindly.
            eventually(reached, timeout=timeout, interval=1.0, what=what, not_yet=())
        except (GiveUp, TimedOutError):
            print(f"{what}: NOT reached, {max(done, 0)} of {goal} after {timeout:.0f} s")
            return False
        print(f"{what}: {goal} of {goal} in {time.monotonic() - started:.1f} s")
        return True

    def create(self) -> bool:
        t0 = time.monotonic()
        # A pair is two POSTs, the VM first: until its LibvirtMachine exists the generic
        # controller rightly warns that it does not.
        creation = Fault(
            "creation (each VM is posted a moment before its LibvirtMachine)",
            utc_now(),
            reasons=frozenset({"NotAdopted"}),
        )
        self.provocations.append(creation)

        def one(index: int) -> None:
            vm, lm = pair_docs(self.ns, index, 1, HOST_PREFIX, shared=True)
            self.custom.create_namespaced_custom_object(VM_GROUP, V, self.ns, VMS, vm)
            self.custom.create_namespaced_custom_object(GROUP, V, self.ns, LMS, lm)

        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = []
            for i in range(self.s.machines):
                delay = t0 + i / self.s.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # pacing of the load generator
                futures.append(pool.submit(one, i))
            for future in futures:
                future.result()
        print(f"created {self.s.machines} pairs in {time.monotonic() - t0:.1f} s")
        ok = self.wait("all Ready", self.ready_count, self.s.machines, self.s.ready_timeout)
        creation.ended = utc_now()
        for lm in self._list(GROUP, LMS):
            meta = lm["metadata"]
            self.domains[meta["name"]] = naming.domain_name(self.ns, meta["name"], meta["uid"])
        return ok

    def _change(self) -> None:
        """One random change to one random machine's VM spec."""
        name = self.rng.choice(self.names)
        if self.rng.random() < 0.5:
            want = "PoweredOff" if self.churn.desired[name] == "PoweredOn" else "PoweredOn"
            spec: dict[str, Any] = {"powerState": want, "powerOffMode": "Hard"}
            op = "power off" if want == "PoweredOff" else "power on"
        else:
            size = self.rng.randrange(len(SIZES))
            spec, want, op = {"instanceType": SIZES[size]}, "", "resize"
        try:
            self.custom.patch_namespaced_custom_object(
                VM_GROUP, V, self.ns, VMS, name, {"spec": spec}, _request_timeout=REQUEST_TIMEOUT
            )
        except (ApiException, HTTPError, OSError):
            self.churn.ops[f"{op} refused (API server away)"] += 1
            return
        self.churn.ops[op] += 1
        if want:
            self.churn.desired[name] = want
        else:
            self.churn.size[name] = size

    def _sample(self) -> None:
        with contextlib.suppress(OSError):
            self.churn.samples.append((time.monotonic() - self.churn_started, rss_mib(self.pid)))

    def churn_for(self) -> None:
        s = self.s
        seconds = s.minutes * 60
        self.churn_started = start = time.monotonic()
        faults: list[tuple[float, Callable[[], threading.Thread]]] = []
        if s.faults:
            parts = s.apiserver_restarts + 2
            faults = [(seconds * k / parts, self.restart_apiserver) for k in range(1, parts - 1)]
            faults.append((seconds * (parts - 1) / parts, self.drop_libvirt))
        threads: list[threading.Thread] = []
        next_op, next_sample = start, start
        while (now := time.monotonic()) < start + seconds and self.daemons.alive():
            if faults and now - start >= faults[0][0]:
                threads.append(faults.pop(0)[1]())
            if now >= next_sample:
                self._sample()
                next_sample += s.sample_seconds
            if now >= next_op:
                self._change()
                next_op += 1 / s.ops_per_second
            time.sleep(max(0.0, min(next_op, next_sample) - time.monotonic()))  # pacing
        self._sample()
        for thread in threads:
            thread.join(timeout=s.outage_seconds + 300)
        done = ", ".join(f"{op} {n}" for op, n in sorted(self.churn.ops.items()))
        print(f"churn: {seconds:.0f} s at {s.ops_per_second:g} changes/s: {done}")

    def restart_apiserver(self) -> threading.Thread:
        fault = Fault(f"kube-apiserver restart {len(self.faults) + 1}", utc_now())
        self.faults.append(fault)
        self.provocations.append(fault)

        def run() -> None:
            done = subprocess.run(
                [
                    sys.executable,
                    str(LAB_SCRIPT),
                    "restart-apiserver",
                    f"--down-seconds={self.s.outage_seconds}",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            fault.ended = utc_now()
            fault.detail = (done.stdout or done.stderr).strip()

        thread = threading.Thread(target=run, name="apiserver-restart", daemon=True)
        thread.start()
        return thread

    def drop_libvirt(self) -> threading.Thread:
        fault = Fault("libvirt connection dropped", utc_now())
        self.faults.append(fault)
        self.provocations.append(fault)
        dropped = self.driver.drop_client(self.pid)
        fault.ended = utc_now()
        fault.detail = f"libvirtd dropped {dropped} connection(s) of the daemon"
        thread = threading.Thread(target=lambda: None)
        thread.start()
        return thread

    def settle(self) -> list[str]:
        started = time.monotonic()
        left = list(self.names)

        def settled() -> bool:
            nonlocal left
            if not self.daemons.alive():
                raise GiveUp
            left = self.converged()
            return not left

        # Polling the API and libvirt for convergence; `left` says how far it got.
        with contextlib.suppress(GiveUp, TimedOutError):
            eventually(
                settled,
                timeout=self.s.settle_timeout,
                interval=1.0,
                what="converged",
                not_yet=(ApiException, HTTPError, OSError),
            )
        took = time.monotonic() - started
        if left:
            print(f"converged: NOT all, {len(left)} machines not as asked after {took:.0f} s")
            for name in left[:10]:
                size = SIZES[self.churn.size.get(name, 0)]
                print(f"  {name}: asked {self.churn.desired[name]} and {size}")
        else:
            off = sum(1 for want in self.churn.desired.values() if want == "PoweredOff")
            print(
                f"converged: all {len(self.names)} as last asked ({off} off) "
                f"{took:.1f} s after the churn ended"
            )
        return left

    def report_rss(self) -> None:
        samples = self.churn.samples
        warm = next((rss for at, rss in samples if at >= self.s.warmup_seconds), samples[-1][1])
        end = samples[-1][1]
        ratio = end / warm if warm else 0.0
        verdict = "goal met" if abs(ratio - 1) <= 0.10 else "goal MISSED"
        print(
            f"daemon RSS: {warm:.0f} MiB after {self.s.warmup_seconds:.0f} s warm-up, "
            f"{end:.0f} MiB at the end of the churn: ratio {ratio:.3f} "
            f"({verdict}: flat within 10 %); peak {max(r for _, r in samples):.0f} MiB"
        )
        step = max(1, len(samples) // 12)
        print(
            "  RSS over the churn (s: MiB): "
            + ", ".join(f"{at:.0f}: {rss:.0f}" for at, rss in samples[::step])
        )

    def delete(self) -> tuple[bool, int, dict[str, int], list[str]]:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            for name in self.names:
                pool.submit(delete_quietly, self.custom, VM_GROUP, self.ns, VMS, name)
        gone = self.wait(
            "deleted",
            lambda: (
                2 * self.s.machines - len(self._list(VM_GROUP, VMS)) - len(self._list(GROUP, LMS))
            ),
            2 * self.s.machines,
            self.s.delete_timeout,
        )
        stuck = sum(
            1
            for group, plural in ((VM_GROUP, VMS), (GROUP, LMS))
            for obj in self._list(group, plural)
            if obj["metadata"].get("finalizers")
        )
        domains, volumes = self.driver.domains(), self.driver.volumes()
        print(
            f"delete all: {time.monotonic() - started:.1f} s; stuck finalizers: {stuck}; "
            f"left in the test driver: {len(domains)} domains, {len(volumes)} volumes"
        )
        for name in list(domains)[:5] + volumes[:5]:
            print(f"  left: {name}")
        self.daemon_rss_after_delete = rss_mib(self.pid)
        return gone, stuck, domains, volumes

    def warnings(self) -> int:
        """Print Warning Events by reason: those that began while the script provoked them (a
        fault, or within --fault-grace seconds after it; the creation, for the reasons it
        explains), by provocation, and the rest; the number of the rest."""
        provoked: dict[str, Counter[str]] = {f.name: Counter() for f in self.provocations}
        unprovoked: Counter[str] = Counter()
        grace = dt.timedelta(seconds=self.s.fault_grace)
        for event in self.core.list_namespaced_event(self.ns, field_selector="type=Warning").items:
            began = event.first_timestamp or event.event_time or event.last_timestamp
            key = f"{event.involved_object.kind}/{event.reason}"
            by = next(
                (f for f in self.provocations if began and f.explains(event.reason, began, grace)),
                None,
            )
            (provoked[by.name] if by else unprovoked)[key] += event.count or 1
        for label, counts in [*provoked.items(), ("unprovoked", unprovoked)]:
            text = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none"
            print(f"Warning Events, {label}: {text}")
        return sum(unprovoked.values())

    def run(self) -> int:
        s = self.s
        print(
            f"soak: {s.machines} machines, {s.minutes:g} min of changes at {s.ops_per_second:g}/s, "
            f"faults {'on' if s.faults else 'off'}, on {self.driver.uri} (namespace {self.ns}); "
            f"{os.cpu_count()} CPUs; seed {s.seed}"
        )
        self.core.create_namespace({"metadata": {"name": self.ns}})
        ok = False
        try:
            self.daemons.wait_started()
            created = self.create()
            self.churn_for()
            for fault in self.faults:
                print(
                    f"fault: {fault.name} at {fault.began:%H:%M:%S}, over at "
                    f"{fault.ended or utc_now():%H:%M:%S}: {fault.detail}"
                )
            left = self.settle()
            self.report_rss()
            gone, stuck, domains, volumes = self.delete()
            print(f"daemon RSS after deleting everything: {self.daemon_rss_after_delete:.0f} MiB")
            unprovoked = self.warnings()
            alive = self.daemons.alive()
            if not alive:
                print("the daemon EXITED during the run")
            ok = (
                created
                and not left
                and gone
                and not stuck
                and not domains
                and not volumes
                and not unprovoked
                and alive
            )
        finally:
            statuses = self.close()
        print(f"daemon exit status {statuses[0]}; log: {self.daemons.items[0].log}")
        return 0 if ok and statuses == [0] else 1

    def close(self) -> list[int | None]:
        with contextlib.suppress(Exception):
            for name in self.names:
                delete_quietly(self.custom, VM_GROUP, self.ns, VMS, name)
        statuses = self.daemons.stop()
        with contextlib.suppress(Exception):
            for group, plural in ((VM_GROUP, VMS), (GROUP, LMS)):
                for obj in self._list(group, plural):
                    self.custom.patch_namespaced_custom_object(
                        group,
                        V,
                        self.ns,
                        plural,
                        obj["metadata"]["name"],
                        {"metadata": {"finalizers": None}},
                    )
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.ns)
        storage_classes(self.custom, self.pools, create=False)
        forget_hosts(self.custom, HOST_PREFIX)
        self.driver.close()
        self.api.close()
        return statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--machines", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0, help="pairs created per second")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the churn lasts")
    parser.add_argument("--ops-per-second", type=float, default=2.0, help="changes per second")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument(
        "--warmup-seconds", type=float, help="RSS baseline this far into the churn (default 20 %%)"
    )
    parser.add_argument("--faults", action="store_true", help="API server restart, libvirt drop")
    parser.add_argument("--apiserver-restarts", type=int, default=1, help="with --faults")
    parser.add_argument(
        "--outage-seconds",
        type=float,
        default=65.0,
        help="how long the API server stays down (default: longer than kopf's watch retries)",
    )
    parser.add_argument(
        "--fault-grace",
        type=float,
        default=120.0,
        help="Events this long after a fault count as provoked",
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--smoke", action="store_true", help="4 machines, 10 s: a quick check")
    args = parser.parse_args()
    if args.smoke:
        args.machines, args.minutes, args.sample_seconds, args.ops_per_second = 4, 1 / 6, 2.0, 2.0
        args.outage_seconds = 0.0
    settings = Settings(
        machines=args.machines,
        rate=args.rate,
        minutes=args.minutes,
        ops_per_second=args.ops_per_second,
        sample_seconds=args.sample_seconds,
        warmup_seconds=(
            args.warmup_seconds if args.warmup_seconds is not None else args.minutes * 60 * 0.2
        ),
        faults=args.faults,
        apiserver_restarts=max(1, args.apiserver_restarts),
        outage_seconds=args.outage_seconds,
        fault_grace=args.fault_grace,
        ready_timeout=120.0 + args.machines,
        settle_timeout=300.0,
        delete_timeout=120.0 + args.machines,
        seed=args.seed,
    )
    return Soak(read_lab(), settings).run()


if __name__ == "__main__":
    sys.exit(main())
