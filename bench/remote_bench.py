"""Benchmark: machines on a remote host over ssh beside the same on a local host, in one run.

Prints, for N pairs pinned to the lab's remote host (served by a daemon in remote mode over
qemu+ssh, from the lab's client namespace) and N pinned to a local lab host (served by its own
daemon over the local socket), created interleaved in one burst and powered off:
- create -> built (InfrastructureReady, the domain defined) p50/p95/max for both, and the ratio
  remote/local (goal: at most 1.5);
- the time from the first delete to every machine gone, for both, and its ratio;
- the remote host's call figures from the daemon's /metrics: calls, peak calls in flight and the
  most calls started within a second, against the host's limits (spec.rateLimit,
  spec.maxConcurrentOperations; --qps, --burst, --concurrent set them).

Bounded: every wait has a deadline; it deletes what it created and stops its daemons. Traffic goes
only to loopback and the lab's namespaces. Needs `make lab-up` (with the remote host).

usage: python bench/remote_bench.py [--machines 50] [--qps 100] [--burst 200] [--concurrent 4]
                                    [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import figures, leads, p95, wait  # noqa: E402
from libvirt_provider import constants as c  # noqa: E402
from tests.support.daemons import (  # noqa: E402
    Fleet,
    metric,
    metrics,
    start_remote_daemon,
)
from tests.support.factories import remote_pair  # noqa: E402
from tests.support.hosts import (  # noqa: E402
    delete_secret,
    forget_host,
    put_secret,
    reset_host,
    set_host,
    ssh_data,
)
from tests.support.kube import create, install_api  # noqa: E402
from tests.support.lab_access import read_lab  # noqa: E402
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

G, VG, V = "infrastructure.vm-api.io", "vm-api.io", "v1alpha1"
SECRET = "bench-remote-ssh"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, default=50)
    parser.add_argument("--qps", type=float, default=c.DEFAULT_HOST_QPS)
    parser.add_argument("--burst", type=int, default=c.DEFAULT_HOST_BURST)
    parser.add_argument("--concurrent", type=int, default=c.DEFAULT_MAX_CONCURRENT_OPERATIONS)
    parser.add_argument("--smoke", action="store_true", help="2 machines each: a check it runs")
    args = parser.parse_args()
    if args.smoke:
        args.machines = 2
    info = read_lab()
    remote = info.remote
    if remote is None or not info.hosts:
        raise SystemExit("bench: the lab needs its remote host and one extra host")
    local = info.hosts[0]
    api = config.new_client_from_config(info.kubeconfig)
    custom = client.CustomObjectsApi(api)
    install_api(info, api)
    ns = f"remotebench-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    limits = {
        "rateLimit": {"qps": args.qps, "burst": args.burst},
        "maxConcurrentOperations": args.concurrent,
    }
    put_secret(api, SECRET, ssh_data(remote))
    set_host(api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}}, **limits)
    fleet = Fleet(info, api)
    daemon = None
    try:
        reset_host(api, local.name)
        fleet.start(local)
        daemon = start_remote_daemon(info, remote, "bench-remote", generic=False)
        fleet.wait_hosts_ready([local.name, remote.name])
        wait(lambda: leads(fleet), 60, "the local daemon leading the generic controller")
        _measure(args, api, ns=ns, remote=remote, local=local, daemon=daemon)
    finally:
        for vm in custom.list_namespaced_custom_object(VG, V, ns, "virtualmachines")["items"]:
            custom.delete_namespaced_custom_object(
                VG, V, ns, "virtualmachines", vm["metadata"]["name"]
            )
        wait(
            lambda: not custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"],
            120 + args.machines * 4,
            "every machine deleted",
        )
        if daemon is not None:
            daemon.stop()
        fleet.stop_all()
        client.CoreV1Api(api).delete_namespace(ns)
        forget_host(api, remote)
        delete_secret(api, SECRET)
        reset_host(api, local.name)


def _measure(
    args: argparse.Namespace,
    api: client.ApiClient,
    *,
    ns: str,
    remote: Any,
    local: Any,
    daemon: Any,
) -> None:
    """The burst, the deletion, and the figures."""
    custom = client.CustomObjectsApi(api)
    created: dict[str, float] = {}
    built: dict[str, float] = {}
    total = 2 * args.machines
    observer = threading.Thread(
        target=_observe,
        args=(custom, ns, built, total, 120 + args.machines * 6),
        daemon=True,
    )
    observer.start()
    for i in range(args.machines):
        for kind, host in (("remote", remote.name), ("local", local.name)):
            name = f"{kind}-{i}"
            docs = remote_pair(ns, name, remote, powerState="PoweredOff")
            docs[1]["metadata"]["labels"][c.HOST_LABEL] = host
            docs[1]["spec"]["host"] = host
            created[name] = time.monotonic()
            create(api, docs)
    observer.join()
    if len(built) < total:
        raise SystemExit(f"bench: {total - len(built)} machines never built")
    remote_lat = [built[n] - created[n] for n in created if n.startswith("remote")]
    local_lat = [built[n] - created[n] for n in created if n.startswith("local")]
    gone = _delete_all(custom, ns, args.machines)
    scraped = metrics(daemon, remote)
    print(f"remote bench: {args.machines} machines over qemu+ssh and {args.machines} local,")
    print("  created interleaved in one burst, powered off")
    print(f"  create -> built, remote: {figures(remote_lat)}")
    print(f"  create -> built, local:  {figures(local_lat)}")
    p50_ratio = statistics.median(remote_lat) / statistics.median(local_lat)
    print(
        f"  ratio remote/local: p50 {p50_ratio:.2f}, "
        f"p95 {p95(remote_lat) / p95(local_lat):.2f} (goal <= 1.5)"
    )
    print(
        f"  delete -> gone: remote {gone['remote']:.1f} s, local {gone['local']:.1f} s, "
        f"ratio {gone['remote'] / gone['local']:.2f}"
    )
    host = remote.name
    print(
        f"  remote calls: {metric(scraped, 'vmapi_libvirt_calls_total', host=host):.0f}; "
        f"peak in flight {metric(scraped, 'vmapi_libvirt_calls_in_flight_peak', host=host):.0f}"
        f" (limit {args.concurrent}); most started in one second "
        f"{metric(scraped, 'vmapi_libvirt_calls_peak_per_second', host=host):.0f} "
        f"(limit burst {args.burst} + qps {args.qps:g}); refused "
        f"{metric(scraped, 'vmapi_libvirt_calls_refused_total', host=host):.0f}"
    )


def _observe(
    custom: client.CustomObjectsApi, ns: str, built: dict[str, float], total: int, timeout: float
) -> None:
    def look() -> bool:
        now = time.monotonic()
        for obj in custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"]:
            name = obj["metadata"]["name"]
            conditions = (obj.get("status") or {}).get("conditions") or []
            ready = [x for x in conditions if x.get("type") == "InfrastructureReady"]
            if name not in built and ready and ready[0].get("status") == "True":
                built[name] = now
        return len(built) >= total

    # The caller reports the machines never built.
    with contextlib.suppress(TimedOutError):
        eventually(look, timeout=timeout, interval=0.05, what="every machine built", not_yet=())


def _delete_all(custom: client.CustomObjectsApi, ns: str, machines: int) -> dict[str, float]:
    """Delete every VM at once; seconds until each kind's last machine was gone."""
    start = time.monotonic()
    for vm in custom.list_namespaced_custom_object(VG, V, ns, "virtualmachines")["items"]:
        custom.delete_namespaced_custom_object(VG, V, ns, "virtualmachines", vm["metadata"]["name"])
    gone: dict[str, float] = {}

    def look() -> bool:
        names = {
            o["metadata"]["name"]
            for o in custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"]
        }
        for kind in ("remote", "local"):
            if kind not in gone and not any(n.startswith(kind) for n in names):
                gone[kind] = time.monotonic() - start
        return len(gone) >= 2

    # The deadline counts from the first delete, as the figures do.
    left = start + 120 + machines * 4 - time.monotonic()
    with contextlib.suppress(TimedOutError):
        eventually(look, timeout=left, interval=0.05, what="every machine gone", not_yet=())
    if len(gone) < 2:
        raise SystemExit("bench: machines were not all deleted in time")
    return gone


if __name__ == "__main__":
    main()
