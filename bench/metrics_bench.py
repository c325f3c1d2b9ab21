"""Benchmark of /metrics with N machines: one daemon on libvirt's test driver, N running pairs.

Why it exists: per-machine metrics cost one bulk statistics call per host per scrape
(docs/metrics.md); this measures what a scrape then takes with N machines on one host, and that
deleting the machines takes their series with them (no stale series).

What it does, bounded in time and stopping by itself:
- writes a test-driver node definition and its LibvirtStorageClasses as bench/scale_bench.py
  does (`tests/support/testdriver.py`), starts one `libvirt-provider` on it (host
  `metrics-host-0`), creates N linked pairs in a fresh namespace with a few threads, and waits
  until the daemon's /metrics names all N machines (`vmapi_machine_stats_machines`);
- scrapes /metrics --scrapes times (a second apart: a body is shared for a second,
  `health.MetricsBody`) and prints the wall time of each whole scrape (p50, max), the
  daemon's own figure for the bulk call (`vmapi_machine_stats_scrape_seconds`), the body's size,
  and the series count: all, and the per-machine ones (`vmapi_machine_*` with a name label);
- then measures whether scrapes slow reconciles: it powers a set of machines off and back on
  (`--cycled` of them, default 100), round after round for a phase (`--phase` seconds, default
  10, and two scrape intervals at least) with nobody scraping, then another set of the same size
  for a phase as long while a thread scrapes /metrics every `--scrape-interval` seconds (several,
  comma-separated: `1,15,30`; 1 is fifteen times Prometheus' default, 0 back to back, the worst
  case; the first scrape at a random point of the first interval, as Prometheus' phase is). For
  each phase it prints the time from a VM's patch to its LibvirtMachine reporting the new power
  state (p95, from a watch) and the daemon's CPU seconds per second; at the end, per interval,
  the p95 of all quiet and all scraped phases side by side and their ratio. `--repeats` runs
  every interval that many times, the intervals in turn, so drift on a busy machine falls on
  all of them alike. Each phase also reads the daemon's own histogram of its reconciles
  (`vmapi_libvirt_machine_reconcile_duration_seconds`) at its start and end, and prints what
  the phase added: the count, the mean and the bucket of the p95, then the quiet and scraped
  phases pooled per interval with the ratio of their means. That figure times each reconcile
  inside the daemon, so the API server's, the generic controller's and this process's delays,
  which move the patch-to-status times between phases by more than a scrape could, are left
  out;
- deletes every VM (the generic controller deletes each LibvirtMachine, the daemon its domain),
  waits until none is left, and prints the same counts again.

The test driver's bulk statistics carry each domain's state only, so each machine has one series
here (`vmapi_machine_domain_state`); a qemu guest has up to 7 for the domain, 6 per disk and 8
per NIC (the e2e test `tests/e2e/provider/test_machine_metrics.py` sees a real guest's). The
scrape time measured is the call, the naming and the exposition of N records.

Whatever happens, the daemon is stopped and everything the run made is deleted. Traffic goes
only to the lab's API server and the daemon on 127.0.0.1. Needs the lab: `make lab-up` first.

usage: .venv/bin/python bench/metrics_bench.py [--machines 1000] [--scrapes 5] [--cycled 100]
       [--scrape-interval 1,15,30] [--repeats 3] [--phase 10] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from libvirt_provider.adapters.process.health import METRICS_MAX_AGE  # noqa: E402
from tests.support.daemons import health_base  # noqa: E402
from tests.support.kube import GROUP, VM_GROUP, V, delete_quietly, install_api  # noqa: E402
from tests.support.lab_access import read_lab  # noqa: E402
from tests.support.testdriver import (  # noqa: E402
    Daemons,
    cpu_seconds,
    disk_pools,
    forget_hosts,
    pair_docs,
    storage_classes,
    write_node_xml,
)
from tests.support.waiting import eventually  # noqa: E402

HOST_PREFIX = "metrics-host-"
HOST = f"{HOST_PREFIX}0"
NS_PREFIX = "metrics-"
VMS, LMS = "virtualmachines", "libvirtmachines"
CREATORS = 8


class Scrape:
    def __init__(self, url: str) -> None:
        started = time.monotonic()
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = resp.read()
        self.seconds = time.monotonic() - started
        self.size = len(body)
        self.samples = [
            s for family in text_string_to_metric_families(body.decode()) for s in family.samples
        ]

    def value(self, name: str) -> float | None:
        for s in self.samples:
            if s.name == name and s.labels.get("host") == HOST:
                return float(s.value)
        return None

    def series(self) -> set[str]:
        """Each sample's name and labels, as text."""
        return {
            s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
            for s in self.samples
        }

    def machine_series(self) -> int:
        return sum(
            1 for s in self.samples if s.name.startswith("vmapi_machine_") and "name" in s.labels
        )


def fresh_scrapes(url: str, count: int) -> list[Scrape]:
    """`count` scrapes, each of a body made for it: the daemon serves a body again to scrapes
    within METRICS_MAX_AGE of it (`health.MetricsBody`), so these come that far apart."""
    scrapes = []
    for index in range(count):
        if index:
            time.sleep(METRICS_MAX_AGE + 0.1)
        scrapes.append(Scrape(url))
    return scrapes


def report(what: str, scrapes: list[Scrape]) -> None:
    walls = sorted(s.seconds for s in scrapes)
    inner = [v for s in scrapes if (v := s.value("vmapi_machine_stats_scrape_seconds")) is not None]
    last = scrapes[-1]
    p50 = statistics.median(walls) * 1000
    print(
        f"{what}: {len(scrapes)} scrapes, whole scrape p50 {p50:.1f} ms,"
        f" max {walls[-1] * 1000:.1f} ms; bulk call and naming (daemon's figure) p50 "
        f"{statistics.median(inner) * 1000:.1f} ms; body {last.size / 1024:.0f} KiB; "
        f"series {len(last.samples)} in all, {last.machine_series()} per-machine; "
        f"machines named {last.value('vmapi_machine_stats_machines'):.0f}, "
        f"partial {last.value('vmapi_machine_stats_partial'):.0f}"
    )


RECONCILE = "vmapi_libvirt_machine_reconcile_duration_seconds"


class Reconciles:
    """The daemon's own histogram of its LibvirtMachine reconciles (`RECONCILE`, host `HOST`)
    as one scrape shows it, or the difference of two: what a phase between them did. It times
    each reconcile inside the daemon, so unlike the patch-to-status times it leaves out the API
    server, the generic controller and this process."""

    def __init__(self, count: float, total: float, buckets: dict[float, float]) -> None:
        self.count, self.total, self.buckets = count, total, buckets

    @classmethod
    def read(cls, url: str, previous: float) -> tuple[Reconciles, float]:
        """A reading from a body made after monotonic time `previous` (the daemon serves one
        body for METRICS_MAX_AGE), and when it was read."""
        time.sleep(max(0.0, previous + METRICS_MAX_AGE + 0.1 - time.monotonic()))
        return cls.of(Scrape(url)), time.monotonic()

    @classmethod
    def of(cls, scrape: Scrape) -> Reconciles:
        count = scrape.value(f"{RECONCILE}_count") or 0.0
        total = scrape.value(f"{RECONCILE}_sum") or 0.0
        buckets = {
            float(s.labels["le"]): float(s.value)
            for s in scrape.samples
            if s.name == f"{RECONCILE}_bucket" and s.labels.get("host") == HOST
        }
        return cls(count, total, buckets)

    def since(self, before: Reconciles) -> Reconciles:
        return Reconciles(
            self.count - before.count,
            self.total - before.total,
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
        )

    def plus(self, other: Reconciles) -> Reconciles:
        return Reconciles(
            self.count + other.count,
            self.total + other.total,
            {le: n + other.buckets.get(le, 0.0) for le, n in self.buckets.items()},
        )

    def mean_ms(self) -> float:
        return 1e3 * self.total / self.count if self.count else 0.0

    def p95_bound_ms(self) -> float:
        """The upper bound of the bucket holding the 95th percentile (the histogram's grain)."""
        for le in sorted(self.buckets):
            if self.count and self.buckets[le] >= 0.95 * self.count:
                return 1e3 * le
        return float("inf")

    def text(self) -> str:
        return (
            f"{self.count:.0f} reconciles, mean {self.mean_ms():.1f} ms, "
            f"p95 <= {self.p95_bound_ms():g} ms"
        )


class Scraper:
    """Scrapes /metrics on a thread of its own every `interval` seconds (start to start, as
    Prometheus does; 0: back to back) until stopped, the first scrape at a random point of the
    first interval (Prometheus' phase is arbitrary too); counts its scrapes."""

    def __init__(self, url: str, interval: float) -> None:
        self._url = url
        self._interval = interval
        self._stop = threading.Event()
        self.count = 0
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic() + random.uniform(0, self._interval)
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at = time.monotonic() + self._interval
            # The body is read, not parsed: parsing 200 KiB in this process would hold its GIL
            # and delay the watch that times the reconciles, measuring the bench, not the daemon.
            with urllib.request.urlopen(self._url, timeout=30) as resp:
                resp.read()
            self.count += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)


def power_round(
    custom: client.CustomObjectsApi, ns: str, names: list[str], state: str, deadline: float
) -> list[float]:
    """Patch each VM's powerState to `state` and return, per machine, the seconds until its
    LibvirtMachine reported it (from one watch, opened before the first patch)."""
    listed = custom.list_namespaced_custom_object(GROUP, V, ns, LMS, limit=1)
    rv = listed["metadata"]["resourceVersion"]
    patched: dict[str, float] = {}
    seen: dict[str, float] = {}
    wanted = set(names)

    def patch_all() -> None:
        for name in names:
            patched[name] = time.monotonic()
            custom.patch_namespaced_custom_object(
                VM_GROUP, V, ns, VMS, name, {"spec": {"powerState": state, "powerOffMode": "Hard"}}
            )

    patcher = threading.Thread(target=patch_all, name="patcher")
    stream = watch.Watch()
    patcher.start()
    try:
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            V,
            ns,
            LMS,
            resource_version=rv,
            timeout_seconds=int(deadline),
        ):
            obj = event["object"]
            name = obj["metadata"]["name"]
            reported = (obj.get("status") or {}).get("powerState")
            if name in wanted and name not in seen and name in patched and reported == state:
                seen[name] = time.monotonic() - patched[name]
            if len(seen) == len(wanted):
                break
    finally:
        stream.stop()
        patcher.join()
    if len(seen) != len(wanted):
        raise SystemExit(f"metrics_bench: {len(wanted) - len(seen)} machines never reached {state}")
    return list(seen.values())


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cycle(
    custom: client.CustomObjectsApi, ns: str, names: list[str], seconds: float, deadline: float
) -> dict[str, list[float]]:
    """Power the machines off and on again, round after round, for at least `seconds` (one off
    and one on at least); each state's times."""
    times: dict[str, list[float]] = {"PoweredOff": [], "PoweredOn": []}
    end = time.monotonic() + seconds
    while True:
        for state in ("PoweredOff", "PoweredOn"):
            times[state].extend(power_round(custom, ns, names, state, deadline))
        if time.monotonic() >= end:
            return times


def compare_reconciles(
    custom: client.CustomObjectsApi,
    ns: str,
    url: str,
    *,
    pid: int,
    machines: int,
    cycled: int,
    intervals: list[float],
    repeats: int,
    phase: float,
) -> None:
    """Power cycles with and without scrapes, for each scrape interval, `repeats` times: a
    quiet phase, then a scraped one as long (`phase` seconds, two intervals at least, so a
    phase sees the interval's share of scrapes, not one at its start). Prints each phase, then
    per interval the p95 of all its quiet and all its scraped phases side by side. Each repeat
    runs every interval in turn, quiet and scraped alternating, so drift on a busy machine
    falls on all of them alike."""
    names = [pair_docs(ns, i, 1, HOST_PREFIX)[0]["metadata"]["name"] for i in range(machines)]
    cycled = min(cycled, machines // 2)
    quiet, scraped = names[:cycled], names[cycled : 2 * cycled]
    deadline = 60 + cycled * 2.0
    states = ("PoweredOff", "PoweredOn")
    times: dict[tuple[float, str, str], list[float]] = {}
    counts: dict[float, int] = {}
    # The daemon's CPU seconds and the phases' wall seconds, quiet and scraped, per interval.
    cpu: dict[tuple[float, str], list[float]] = {}
    # Each repeat's p95 ratio scraped / quiet, per interval and state: their median is less
    # at the mercy of one phase the machine's other work slowed than the pooled p95.
    ratios: dict[tuple[float, str], list[float]] = {}
    # The daemon's own reconcile histogram over each phase, per interval, quiet and scraped.
    inside: dict[tuple[float, str], list[Reconciles]] = {}
    for repeat in range(repeats):
        for interval in intervals:
            pace = f"every {interval:g} s" if interval > 0 else "back to back"
            seconds = max(phase, 2 * interval)
            first, read_at = Reconciles.read(url, -math.inf)
            started, used = time.monotonic(), cpu_seconds(pid)
            calm = cycle(custom, ns, quiet, seconds, deadline)
            calm_cpu = (cpu_seconds(pid) - used) / (time.monotonic() - started)
            between, read_at = Reconciles.read(url, read_at)
            started, used = time.monotonic(), cpu_seconds(pid)
            with Scraper(url, interval) as scraper:
                busy = cycle(custom, ns, scraped, seconds, deadline)
            took = time.monotonic() - started
            busy_cpu = (cpu_seconds(pid) - used) / took
            # One read more at each phase's end, in both: the phases differ only by the scraper.
            last, _ = Reconciles.read(url, read_at)
            calm_in, busy_in = between.since(first), last.since(between)
            inside.setdefault((interval, "quiet"), []).append(calm_in)
            inside.setdefault((interval, "scraped"), []).append(busy_in)
            cpu.setdefault((interval, "quiet"), []).append(calm_cpu)
            cpu.setdefault((interval, "scraped"), []).append(busy_cpu)
            counts[interval] = counts.get(interval, 0) + scraper.count
            for state in states:
                ratios.setdefault((interval, state), []).append(
                    _percentile(busy[state], 0.95) / _percentile(calm[state], 0.95)
                )
                times.setdefault((interval, state, "quiet"), []).extend(calm[state])
                times.setdefault((interval, state, "scraped"), []).extend(busy[state])
            print(
                f"  [{repeat + 1}/{repeats}] scraping {pace}: {scraper.count} scrapes in "
                f"{took:.0f} s; daemon CPU {calm_cpu:.2f} -> {busy_cpu:.2f} s/s; "
                + "; ".join(
                    f"{state} p95 {_percentile(calm[state], 0.95):.2f} -> "
                    f"{_percentile(busy[state], 0.95):.2f} s"
                    for state in states
                )
                + f"; inside the daemon: {calm_in.text()} -> {busy_in.text()}"
            )
    print(f"reconcile p95 over {repeats} repeats, {cycled} machines a round, quiet -> scraped:")
    for interval in intervals:
        pace = f"every {interval:g} s" if interval > 0 else "back to back"
        cells = []
        for state in states:
            calm_p95 = _percentile(times[interval, state, "quiet"], 0.95)
            busy_p95 = _percentile(times[interval, state, "scraped"], 0.95)
            cells.append(
                f"{state} {calm_p95:.2f} -> {busy_p95:.2f} s ({busy_p95 / calm_p95:.2f}x, "
                f"median of repeats {statistics.median(ratios[interval, state]):.2f}x)"
            )
        calm_cpu = statistics.mean(cpu[interval, "quiet"])
        busy_cpu = statistics.mean(cpu[interval, "scraped"])
        cells.append(f"daemon CPU {calm_cpu:.2f} -> {busy_cpu:.2f} s/s")
        print(f"  scraping {pace:>13} ({counts[interval]:4d} scrapes): " + "; ".join(cells))
    print("reconciles timed inside the daemon, all phases pooled, quiet -> scraped:")
    for interval in intervals:
        pace = f"every {interval:g} s" if interval > 0 else "back to back"
        calm_all, busy_all = (
            functools.reduce(Reconciles.plus, inside[interval, which])
            for which in ("quiet", "scraped")
        )
        ratios_in = [
            b.mean_ms() / a.mean_ms()
            for a, b in zip(inside[interval, "quiet"], inside[interval, "scraped"], strict=True)
            if a.mean_ms()
        ]
        print(
            f"  scraping {pace:>13}: {calm_all.text()} -> {busy_all.text()}; mean "
            f"{busy_all.mean_ms() / calm_all.mean_ms() if calm_all.mean_ms() else 0:.2f}x "
            f"(median of repeats {statistics.median(ratios_in) if ratios_in else 0:.2f}x)"
        )


def run(
    machines: int,
    scrapes: int,
    workdir: Path,
    *,
    cycled: int = 100,
    intervals: tuple[float, ...] = (1.0,),
    repeats: int = 1,
    phase: float = 10.0,
) -> int:
    lab = read_lab()
    cfg = client.Configuration()
    config.load_kube_config(config_file=lab.kubeconfig, client_configuration=cfg)
    if urlparse(cfg.host).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"metrics_bench: refusing {cfg.host}: it only talks to the lab")
    cfg.connection_pool_maxsize = CREATORS + 4
    api = client.ApiClient(cfg)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    install_api(lab, api)
    pools = disk_pools(machines, 1)
    storage_classes(custom, pools, create=True)
    uri = write_node_xml(lab, workdir / "node.xml", pools)
    ns = NS_PREFIX + uuid.uuid4().hex[:6]
    daemons = Daemons(lab, uri, 1, host_prefix=HOST_PREFIX, log_prefix="metrics-bench-")
    daemon = daemons.items[0]
    try:
        daemons.wait_started()
        url = f"{health_base(daemon.proc, daemon.log)}/metrics"
        core.create_namespace({"metadata": {"name": ns}})
        print(f"metrics_bench: {machines} machines on {uri}, host {HOST}, namespace {ns}")
        before = fresh_scrapes(url, scrapes)
        report("no machines", before)

        def create(index: int) -> None:
            vm, lm = pair_docs(ns, index, 1, HOST_PREFIX)
            custom.create_namespaced_custom_object(VM_GROUP, V, ns, VMS, vm)
            custom.create_namespaced_custom_object(GROUP, V, ns, LMS, lm)

        started = time.monotonic()
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, range(machines)))
        eventually(
            lambda: Scrape(url).value("vmapi_machine_stats_machines") == machines,
            timeout=120 + machines * 0.6,
            interval=2,
            what=f"all {machines} machines on /metrics",
        )
        print(
            f"  all {machines} running and named on /metrics {time.monotonic() - started:.0f} s "
            "after the first create"
        )
        report(f"{machines} machines", fresh_scrapes(url, scrapes))
        compare_reconciles(
            custom,
            ns,
            url,
            pid=daemon.proc.pid,
            machines=machines,
            cycled=cycled,
            intervals=list(intervals),
            repeats=repeats,
            phase=phase,
        )

        started = time.monotonic()
        custom.delete_collection_namespaced_custom_object(VM_GROUP, V, ns, VMS)
        eventually(
            lambda: not custom.list_namespaced_custom_object(GROUP, V, ns, LMS, limit=1)["items"],
            timeout=120 + machines * 0.6,
            interval=2,
            what="every LibvirtMachine gone",
        )
        print(f"  all deleted {time.monotonic() - started:.0f} s after the delete")
        after = fresh_scrapes(url, scrapes)
        report("after deleting them", after)
        grown = after[-1].series() - before[-1].series()
        print(
            f"  series present after but not before the machines: {len(grown)}"
            + (f" ({', '.join(sorted(grown))})" if grown else "")
        )
        return 0 if after[-1].machine_series() == 0 else 1
    finally:
        clean_up(custom, core, ns, daemons)
        storage_classes(custom, pools, create=False)
        forget_hosts(custom, HOST_PREFIX)
        print(f"daemon log: {daemon.log}")
        api.close()


def clean_up(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str, daemons: Daemons
) -> None:
    """Leave nothing behind, even after a failed run: what is left is deleted, the daemon
    stopped, then any finalizer still held released so the namespace can go."""
    with contextlib.suppress(ApiException):
        for group, plural in ((VM_GROUP, VMS), (GROUP, LMS)):
            for obj in custom.list_namespaced_custom_object(group, V, ns, plural)["items"]:
                delete_quietly(custom, group, ns, plural, obj["metadata"]["name"])
    daemons.stop()
    with contextlib.suppress(ApiException):
        for group, plural in ((VM_GROUP, VMS), (GROUP, LMS)):
            for obj in custom.list_namespaced_custom_object(group, V, ns, plural)["items"]:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000, help="pairs to create (N)")
    parser.add_argument("--scrapes", type=int, default=5, help="scrapes timed per phase")
    parser.add_argument(
        "--cycled", type=int, default=100, help="machines power-cycled per round (at most N/2)"
    )
    parser.add_argument(
        "--scrape-interval",
        type=_intervals,
        default=(1.0,),
        help="seconds between scrapes during the scraped rounds, comma-separated for several "
        "(0: back to back); default 1",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of each interval, off and on (default 1)"
    )
    parser.add_argument(
        "--phase",
        type=float,
        default=10.0,
        help="seconds of power cycles per quiet or scraped phase (two intervals at least)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="4 pairs, 2 scrapes, 2 cycled: a quick check"
    )
    args = parser.parse_args()
    if args.smoke:
        args.machines, args.scrapes, args.cycled, args.repeats = 4, 2, 2, 1
        args.phase = 0.0
        args.scrape_interval = (0.2,)
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        return run(
            args.machines,
            args.scrapes,
            Path(tmp),
            cycled=args.cycled,
            intervals=args.scrape_interval,
            repeats=args.repeats,
            phase=args.phase,
        )


def _intervals(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part.strip())


if __name__ == "__main__":
    sys.exit(main())
