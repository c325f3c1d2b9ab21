"""Benchmark of the generic controller in the lab: status propagation latency and idle API load.

Run (the lab must be up; only 127.0.0.1 is contacted):

    .venv/bin/python bench/generic_status_latency.py [--pairs 200] [--idle 30] [--smoke]

It creates a stub provider kind (labelled CRD) and N linked VirtualMachine/provider pairs in a
fresh namespace, runs the generic controller in this process (kopf in a thread, its Kubernetes
client counted), then measures:

- latency from a provider status write to a VM watch event carrying the written value, for
  paced writes (one every 20 ms) and for a burst (all N at once): p50, p95, max;
- API requests per second the controller makes while nothing changes, first with a tenth of
  the pairs, then with all of them (it should not grow with the number of objects).

Everything it created is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp
import kopf
import yaml
from kubernetes import client, config, watch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generic import constants as c  # noqa: E402
from generic.adapters.operator import configure_settings, register, register_login  # noqa: E402
from generic.crd import CRD_PATH  # noqa: E402
from tests.support.factories import stub_crd  # noqa: E402
from tests.support.kube import install_crd  # noqa: E402
from tests.support.waiting import eventually  # noqa: E402


def lab_kubeconfig() -> str:
    out = subprocess.run(
        [sys.executable, str(REPO / "tests/lab/lab.py"), "env"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("export KUBECONFIG="):
            return line.split("=", 1)[1].strip("'\"")
    raise SystemExit("lab.py env printed no KUBECONFIG; is the lab up?")


class CountingClient:
    """Counts every request the controller's Kubernetes client sends, by HTTP method."""

    def __init__(self, api: client.ApiClient) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        original = api.rest_client.request

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[method] += 1
            return original(method, url, *args, **kwargs)

        api.rest_client.request = counted

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())


class CountingKopf:
    """Counts the requests kopf sends with its own aiohttp client (VM, CRD, namespace watches)."""

    def __init__(self) -> None:
        self.count = 0
        original = aiohttp.ClientSession._request

        async def counted(session: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await original(session, *args, **kwargs)

        aiohttp.ClientSession._request = counted  # type: ignore[method-assign]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Bench:
    """The lab objects of one run, the in-process controller and what it observes."""

    def __init__(self, kubeconfig: str, *, idle: float) -> None:
        self.kubeconfig = kubeconfig
        self.api = config.new_client_from_config(config_file=kubeconfig)
        host = urlparse(self.api.configuration.host).hostname
        if host != "127.0.0.1":
            raise SystemExit(f"refusing to run against {host}: the benchmark only talks to the lab")
        self.custom = client.CustomObjectsApi(self.api)
        self.idle = idle
        tag = uuid.uuid4().hex[:6]
        self.group = f"bench-{tag}.generic.e2e.test"
        self.namespace = f"bench-generic-{tag}"
        self.controller_api = config.new_client_from_config(config_file=kubeconfig)
        self.counter = CountingClient(self.controller_api)
        self.kopf_counter = CountingKopf()
        self.stop = threading.Event()
        self.seen: dict[tuple[str, str], float] = {}
        self.seen_lock = threading.Lock()
        self.vm_watch = watch.Watch()
        self.operator = threading.Thread(target=self._run_operator, name="kopf", daemon=True)

    def set_up(self) -> None:
        install_crd(self.api, yaml.safe_load(CRD_PATH.read_text()))
        install_crd(self.api, stub_crd(self.group))
        client.CoreV1Api(self.api).create_namespace({"metadata": {"name": self.namespace}})
        self.operator.start()
        threading.Thread(target=self._follow_vms, name="vm-watch", daemon=True).start()
        eventually(lambda: self.counter.total() > 0, timeout=30, what="controller started")

    def _run_operator(self) -> None:
        registry = kopf.OperatorRegistry()
        register_login(registry, kubeconfig=self.kubeconfig)
        register(registry, api_client=self.controller_api, namespaces=[self.namespace])
        settings = kopf.OperatorSettings()
        configure_settings(settings)
        asyncio.run(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                namespaces=[self.namespace],
                stop_flag=self.stop,
            )
        )

    def _follow_vms(self) -> None:
        with contextlib.suppress(Exception):
            for event in self.vm_watch.stream(
                self.custom.list_namespaced_custom_object,
                c.GROUP,
                c.VERSION,
                self.namespace,
                c.PLURAL,
                timeout_seconds=3600,
            ):
                obj = event["object"]
                stamp = ((obj.get("status") or {}).get("providerMetadata") or {}).get("bench")
                if stamp:
                    with self.seen_lock:
                        self.seen.setdefault((obj["metadata"]["name"], stamp), time.monotonic())

    def create_pairs(self, names: list[str]) -> None:
        for name in names:
            ref = {"apiGroup": self.group, "kind": "StubMachine", "name": name}
            vm = {
                "apiVersion": c.API_VERSION,
                "kind": c.KIND,
                "metadata": {"name": name},
                "spec": {"infrastructureRef": ref},
            }
            self.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, c.PLURAL, vm
            )
            provider = {
                "apiVersion": f"{self.group}/v1",
                "kind": "StubMachine",
                "metadata": {"name": name, "annotations": {c.LINK_ANNOTATION: name}},
            }
            self.custom.create_namespaced_custom_object(
                self.group, "v1", self.namespace, "stubmachines", provider
            )

    def adopted_count(self) -> int:
        listing = self.custom.list_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL
        )
        return sum(
            1
            for vm in listing["items"]
            for cond in (vm.get("status") or {}).get("conditions", [])
            if cond["type"] == c.CONDITION_READY and cond["reason"] == c.REASON_WAITING
        )

    def idle_rate(self) -> tuple[float, float]:
        """Requests/s of the controller's client and of kopf's, over one idle window."""
        before, kopf_before = self.counter.total(), self.kopf_counter.count
        time.sleep(self.idle)  # the measurement window itself, not a wait for an effect
        return (
            (self.counter.total() - before) / self.idle,
            (self.kopf_counter.count - kopf_before) / self.idle,
        )

    def latencies(self, names: list[str], round_: str, pace: float | None) -> list[float]:
        started: dict[tuple[str, str], float] = {}
        for name in names:
            key = (name, f"{round_}-{name}")
            started[key] = time.monotonic()
            self.custom.patch_namespaced_custom_object_status(
                self.group,
                "v1",
                self.namespace,
                "stubmachines",
                name,
                {"status": {"powerState": "PoweredOn", "providerMetadata": {"bench": key[1]}}},
            )
            if pace:
                time.sleep(pace)  # pacing of the load generator, not a wait for an effect

        def all_seen() -> bool:
            with self.seen_lock:
                return all(k in self.seen for k in started)

        eventually(all_seen, timeout=120, what=f"{round_}: every VM shows its write")
        with self.seen_lock:
            return [self.seen[k] - t for k, t in started.items()]

    def tear_down(self) -> None:
        self.vm_watch.stop()
        self.stop.set()
        self.operator.join(timeout=60)
        # With the controller gone, nothing would release the VMs' finalizers: drop them here.
        listing = self.custom.list_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL
        )
        for vm in listing["items"]:
            with contextlib.suppress(client.ApiException):
                self.custom.patch_namespaced_custom_object(
                    c.GROUP,
                    c.VERSION,
                    self.namespace,
                    c.PLURAL,
                    vm["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
        # Delete the objects themselves rather than rely on namespace deletion to do it.
        self.custom.delete_collection_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL
        )
        client.CoreV1Api(self.api).delete_namespace(self.namespace)
        client.ApiextensionsV1Api(self.api).delete_custom_resource_definition(
            f"stubmachines.{self.group}"
        )


def report(label: str, latencies: list[float]) -> None:
    ms = [x * 1000 for x in latencies]
    print(
        f"{label}: n={len(ms)} p50={statistics.median(ms):.0f} ms "
        f"p95={percentile(ms, 0.95):.0f} ms max={max(ms):.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--idle", type=float, default=30.0, help="idle window in seconds")
    parser.add_argument(
        "--smoke", action="store_true", help="10 pairs, 1 s idle: a quick check that it runs"
    )
    args = parser.parse_args()
    if args.smoke:
        args.pairs, args.idle = 10, 1.0
    if not 10 <= args.pairs <= 500:
        raise SystemExit("--pairs must be between 10 and 500")
    kubeconfig = os.environ.get("KUBECONFIG") or lab_kubeconfig()
    bench = Bench(kubeconfig, idle=args.idle)
    names = [f"vm-{i:03d}" for i in range(args.pairs)]
    tenth = names[: args.pairs // 10]
    try:
        bench.set_up()
        bench.create_pairs(tenth)
        eventually(lambda: bench.adopted_count() == len(tenth), timeout=120, what="adopted")
        small, small_kopf = bench.idle_rate()
        print(
            f"idle API requests/s with {len(tenth)} pairs: controller {small:.3f}, "
            f"kopf {small_kopf:.3f}"
        )
        started = time.monotonic()
        bench.create_pairs(names[len(tenth) :])
        eventually(lambda: bench.adopted_count() == len(names), timeout=300, what="adopted")
        took = time.monotonic() - started
        print(f"{len(names) - len(tenth)} more pairs created and adopted in {took:.1f} s")
        large, large_kopf = bench.idle_rate()
        print(
            f"idle API requests/s with {len(names)} pairs: controller {large:.3f}, "
            f"kopf {large_kopf:.3f}"
        )
        report(
            "status write -> VM shows it, paced (50 writes/s)",
            bench.latencies(names, "paced", 0.02),
        )
        report("status write -> VM shows it, burst", bench.latencies(names, "burst", None))
        print(f"controller requests by method over the run: {dict(bench.counter.counts)}")
        print(f"kopf requests over the run: {bench.kopf_counter.count}")
    finally:
        bench.tear_down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
