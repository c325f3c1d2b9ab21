"""Where a /metrics scrape with N machines spends its time, in one process, without the lab.

Why it exists: bench/metrics_bench.py measures that scrapes slow a daemon's reconciles, not
why. This takes a scrape apart on libvirt's test driver (N running domains from a node file,
the daemon's own `LibvirtHypervisor`, collectors and `HealthServer` body) and times each part:
the bulk statistics call (`domain_stats`), naming the records from the machine copies, the
readiness and state series, rendering the exposition text, and a whole body. It then measures
what a body costs other threads: a thread that wakes every millisecond (a stand-in for a
reconcile waiting on I/O) records how late it wakes while bodies are made on another thread,
which is the time it waits for the interpreter's lock (the GIL). Last, cProfile's top entries
of one body.

usage: .venv/bin/python bench/metrics_profile.py [--machines 1000] [--bodies 10] [--seconds 3]
       [--smoke]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from prometheus_client.registry import CollectorRegistry  # noqa: E402

from libvirt_provider.adapters.process.host_metrics import HostStateCollector  # noqa: E402
from libvirt_provider.adapters.process.machine_metrics import (  # noqa: E402
    HostSource,
    MachineStatsCollector,
)
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor  # noqa: E402
from libvirt_provider.metrics.fleet import MachineReadiness, MachineState  # noqa: E402
from libvirt_provider.metrics.machine_stats import (  # noqa: E402
    MachineIdentity,
    MachineIndex,
    machine_samples,
)

HOST = "profile-host-0"


def node_xml(uuids: list[str]) -> str:
    domains = "".join(
        f"<domain type='test'><name>m{i}</name><uuid>{u}</uuid><memory>65536</memory>"
        "<vcpu>1</vcpu><os><type>hvm</type></os></domain>"
        for i, u in enumerate(uuids)
    )
    return f"<node>{domains}</node>"


def timed(what: str, fn: Callable[[], object], times: int) -> float:
    """Median CPU time of `fn` (the process' CPU: other processes on a busy machine do not
    count) in ms, printed with the wall time."""
    cpu, wall = [], []
    for _ in range(times):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    p50 = statistics.median(cpu) * 1000
    print(f"  {what:<44} CPU p50 {p50:6.1f} ms, wall p50 {statistics.median(wall) * 1000:6.1f} ms")
    return p50


def lateness_while(make: Callable[[], object], seconds: float) -> tuple[float, float, int]:
    """A thread sleeping 1 ms at a time for `seconds`, bodies made on another meanwhile: its
    total lateness (s), worst single lateness (ms), and the bodies made."""
    stop = threading.Event()
    made = [0]

    def maker() -> None:
        while not stop.is_set():
            make()
            made[0] += 1

    late, worst = 0.0, 0.0
    thread = threading.Thread(target=maker, daemon=True) if make else None
    if thread is not None:
        thread.start()
    end = time.perf_counter() + seconds
    while (now := time.perf_counter()) < end:
        time.sleep(0.001)
        over = time.perf_counter() - now - 0.001
        late += max(0.0, over)
        worst = max(worst, over)
    stop.set()
    if thread is not None:
        thread.join()
    return late, worst * 1000, made[0]


def measure(hypervisor: LibvirtHypervisor, source: HostSource, bodies: int, seconds: float) -> None:
    stats = MachineStatsCollector(lambda: [source], deadline=5.0)
    state = HostStateCollector(lambda: [source], lambda: True)
    registry = CollectorRegistry()
    registry.register(stats)
    registry.register(state)
    answer = hypervisor.domain_stats()
    identities = source.machines()
    print(f"metrics_profile: {len(answer)} running domains on the test driver, one host")

    def name() -> None:
        index = MachineIndex(identities)
        for record in answer:
            key = index.find(record)
            if key is not None:
                machine_samples(record, host=HOST, namespace=key[0], name=key[1])

    def through_client() -> bytes:
        return generate_latest(registry) + generate_latest(REGISTRY)

    def direct() -> bytes:
        return generate_latest(REGISTRY) + (stats.text() + state.text()).encode()

    timed("bulk call (domain_stats)", hypervisor.domain_stats, bodies)
    timed("naming the records (index, samples)", name, bodies)
    timed("both collectors' samples (gather)", lambda: (stats.gather(), state.gather()), bodies)
    timed("the registry's other families", lambda: generate_latest(REGISTRY), bodies)
    before = timed("whole body, prometheus_client's exposition", through_client, bodies)
    now = timed("whole body, written directly (served)", direct, bodies)
    print(
        f"  body {len(direct()) / 1024:.0f} KiB; the same text both ways: "
        f"{_same(through_client(), direct())}"
    )

    idle_late, idle_worst, _ = lateness_while(lambda: time.sleep(0.01), seconds)
    print(
        f"a thread sleeping 1 ms at a time for {seconds:g} s wakes late by, in all (worst once):\n"
        f"  {idle_late * 1000:5.0f} ms ({idle_worst:4.1f} ms) with no bodies made"
    )
    for what, make, each in (
        ("prometheus_client's", through_client, before),
        ("direct", direct, now),
    ):
        late, worst, made = lateness_while(make, seconds)
        print(
            f"  {late * 1000:5.0f} ms ({worst:4.1f} ms) while {made} bodies were made back to "
            f"back, {what} exposition (about {made * each / 1000:.1f} s of bodies)"
        )

    profile = cProfile.Profile()
    profile.enable()
    direct()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print("cProfile of one body as served, by own time:")
    print("\n".join(out.getvalue().splitlines()[:30]))


def _same(a: bytes, b: bytes) -> bool:
    # The scrape's own duration differs from one body to the next.
    def strip(body: bytes) -> list[bytes]:
        return sorted(line for line in body.splitlines() if b"scrape_seconds{" not in line)

    return strip(a) == strip(b)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--bodies", type=int, default=10, help="timings per part")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="how long the waking thread is watched"
    )
    parser.add_argument("--smoke", action="store_true", help="20 domains, 2 bodies: a quick check")
    args = parser.parse_args()
    if args.smoke:
        args.machines, args.bodies, args.seconds = 20, 2, 0.3
    n = args.machines
    uuids = [str(uuid.uuid4()) for _ in range(n)]
    identities = [MachineIdentity("team", f"m{i}", u) for i, u in enumerate(uuids)]
    states: list[MachineState] = [("PoweredOn", "Running") for _ in range(n)]
    readiness = [MachineReadiness("team", f"m{i}", True, "PoweredOn") for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="metrics-profile-") as tmp:
        node = Path(tmp) / "node.xml"
        node.write_text(node_xml(uuids))
        hypervisor = LibvirtHypervisor(f"test://{node}")
        try:
            source = HostSource(
                HOST,
                hypervisor,
                lambda: list(identities),
                lambda: list(states),
                lambda: None,
                lambda: list(readiness),
            )
            measure(hypervisor, source, args.bodies, args.seconds)
        finally:
            hypervisor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
