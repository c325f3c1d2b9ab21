"""Benchmark: placement decisions in the pure core, and what placement adds in the lab.

Prints:
- core: decisions per second for a machine onto H hosts (of three shapes) already holding M
  placed machines, (a) the filters and scoring alone and (b) a whole decision for a new machine,
  its resolution against each host shape included (goal: a decision under 1 ms);
- lab (skipped with --core-only): one daemon per lab host; N unplaced pairs and N pairs pinned
  round-robin by spec.host, created interleaved in one burst, powered off; create -> built
  (InfrastructureReady, the domain defined) p50/p95 for both sets and create -> placed for the
  unplaced ones. Placement's cost is the difference of the two (goal: under 100 ms at p95).

Bounded: every wait has a deadline; the lab part deletes what it created and stops its daemons.
Traffic goes only to loopback and the lab's libvirtds. The lab part needs `make lab-up`.

usage: python bench/placement_bench.py [--hosts 100] [--placed 10000] [--decisions 2000]
                                       [--machines 30] [--core-only] [--smoke]
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

from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import figures, leads, p95, wait  # noqa: E402
from catalog.image import LibvirtImage  # noqa: E402
from catalog.lookup import Catalog  # noqa: E402
from catalog.machineclass import LibvirtMachineClass  # noqa: E402
from catalog.network import LibvirtNetwork  # noqa: E402
from catalog.storage import LibvirtStorageClass  # noqa: E402
from generic.api import VirtualMachineSpec  # noqa: E402
from libvirt_provider.api import LibvirtMachine  # noqa: E402
from libvirt_provider.hosts.fit import ResolverFit  # noqa: E402
from libvirt_provider.hosts.inventory import Demand  # noqa: E402
from libvirt_provider.hosts.placement import (  # noqa: E402
    ZONE_LABEL,
    HostView,
    Ledger,
    Request,
    decide,
)
from tests.support.daemons import Fleet  # noqa: E402
from tests.support.factories import unplaced  # noqa: E402
from tests.support.hosts import patch_host, reset_host  # noqa: E402
from tests.support.kube import create, install_api  # noqa: E402
from tests.support.lab_access import read_lab  # noqa: E402
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

GIB = 2**30
G, VG, V = "infrastructure.vm-api.io", "vm-api.io", "v1alpha1"


def _catalog() -> Catalog:
    meta = {"metadata": {"name": "small"}}
    return Catalog.of(
        images=[
            LibvirtImage.model_validate(
                {
                    "metadata": {"name": "guest"},
                    "spec": {"source": {"volume": {"pool": "pool", "volume": "guest.qcow2"}}},
                }
            )
        ],
        machine_classes=[
            LibvirtMachineClass.model_validate({**meta, "spec": {"cpus": 2, "memory": "2Gi"}})
        ],
        networks=[
            LibvirtNetwork.model_validate(
                {
                    "metadata": {"name": "lan"},
                    "spec": {"source": {"network": "lan"}, "default": True},
                }
            )
        ],
        storage_classes=[
            LibvirtStorageClass.model_validate(
                {"metadata": {"name": "std"}, "spec": {"pool": "pool", "default": True}}
            )
        ],
    )


def _vm() -> VirtualMachineSpec:
    return VirtualMachineSpec.model_validate(
        {
            "infrastructureRef": {"apiGroup": G, "kind": "LibvirtMachine", "name": "m"},
            "instanceType": {"name": "small"},
            "bootDisk": {
                "source": {"image": {"apiGroup": G, "kind": "LibvirtImage", "name": "guest"}},
                "sizeGiB": 10,
            },
        }
    )


def _machine(i: int) -> LibvirtMachine:
    return LibvirtMachine.model_validate(
        {
            "metadata": {
                "name": f"m{i}",
                "namespace": "bench",
                "uid": str(uuid.UUID(int=i)),
                "annotations": {"vm-api.io/virtual-machine": f"m{i}"},
            }
        }
    )


def _hosts(count: int) -> list[HostView]:
    hosts = []
    for i in range(count):
        shape = i % 3
        hosts.append(
            HostView(
                name=f"host-{i:03d}",
                labels={ZONE_LABEL: f"zone-{i % 4}"},
                ready=True,
                unschedulable=False,
                cpus=256,
                memory=1024 * GIB,
                pools={"pool": 20_000 * GIB, **({"extra": GIB} if shape == 1 else {})},
                domain_types=frozenset({"kvm", "qemu"}),
                networks=frozenset({"lan", *(["storage"] if shape == 2 else [])}),
            )
        )
    return hosts


def core(hosts_count: int, placed: int, decisions: int) -> None:
    hosts = _hosts(hosts_count)
    ledger = Ledger()
    demand = Demand(cpus=2, memory=2 * GIB, pools=(("pool", 10 * GIB),))
    for i in range(placed):
        ledger.put(f"bench/p{i}", hosts[i % hosts_count].name, demand)
    catalog, vm = _catalog(), _vm()
    request = Request(namespace="bench", spread_group="web")

    def fixed(_host: HostView) -> Demand:
        return demand

    started = time.perf_counter()
    for i in range(decisions):
        decision = decide(request, hosts, fixed, ledger)
        assert decision.host is not None, decision.message
        ledger.put(f"bench/f{i}", decision.host, demand, group=("bench", "web"))
    filters = (time.perf_counter() - started) / decisions
    for i in range(decisions):
        ledger.drop(f"bench/f{i}")

    samples = []
    for i in range(decisions):
        fit = ResolverFit(vm_name=f"m{i}", vm=vm, machine=_machine(i), catalog=catalog)
        begun = time.perf_counter()
        decision = decide(request, hosts, fit, ledger)
        samples.append(time.perf_counter() - begun)
        assert decision.host is not None, decision.message
        ledger.put(f"bench/w{i}", decision.host, demand, group=("bench", "web"))
    whole = statistics.fmean(samples)
    p95 = statistics.quantiles(samples, n=20)[18] if len(samples) >= 20 else max(samples)
    print(f"core: {hosts_count} hosts (3 shapes), {placed} machines placed, {decisions} decisions")
    print(
        f"  filters and scoring only:         {filters * 1e3:7.3f} ms/decision "
        f"({1 / filters:,.0f}/s)"
    )
    print(
        f"  whole decision, resolution incl.: {whole * 1e3:7.3f} ms/decision mean, "
        f"{p95 * 1e3:.3f} ms p95 ({1 / whole:,.0f}/s)"
    )


# -- the lab ----------------------------------------------------------------------------------


def lab(machines: int) -> None:
    info = read_lab()
    if len(info.hosts) < 2:
        raise SystemExit("bench: the lab has fewer than two hosts (VMAPI_LAB_HOST_COUNT)")
    api = config.new_client_from_config(info.kubeconfig)
    custom = client.CustomObjectsApi(api)
    install_api(info, api)
    ns = f"placebench-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    fleet = Fleet(info, api)
    try:
        for host in info.hosts:
            reset_host(api, host.name)
            fleet.start(host)
        # Each daemon creates its host's object (on a fresh lab there is none before).
        fleet.wait_hosts_ready()
        for host in info.hosts:
            # Room for every machine of the run (the lab's hosts have 2 CPUs each): what is
            # measured is the time placement takes, not what happens when hosts are full.
            patch_host(api, host.name, {"spec": {"overcommit": {"cpu": 64.0}}})
        _wait_allocatable(api, [h.name for h in info.hosts], cpus=2 * 64)
        wait(lambda: leads(fleet), 60, "a daemon leading")
        names = [h.name for h in info.hosts]
        created: dict[str, float] = {}
        placed: dict[str, float] = {}
        built: dict[str, float] = {}
        # From before the first create, so that no latency includes the rest of the burst.
        observer = threading.Thread(
            target=_observe,
            args=(custom, ns),
            kwargs={
                "placed": placed,
                "built": built,
                "total": 2 * machines,
                "timeout": 120 + machines * 4,
            },
            daemon=True,
        )
        observer.start()
        for i in range(machines):
            for kind in ("free", "pinned"):
                name = f"{kind}-{i}"
                spec = {"host": names[i % len(names)]} if kind == "pinned" else {}
                created[name] = time.monotonic()
                create(api, unplaced(ns, name, lm_spec=spec))
        observer.join()
        if len(built) < len(created):
            raise SystemExit(
                f"bench: {len(created) - len(built)} machines never built:\n"
                + _why_not_built(custom, ns, [n for n in created if n not in built])
            )

        def latencies(prefix: str, when: dict[str, float]) -> list[float]:
            return [when[n] - created[n] for n in created if n.startswith(prefix)]

        free, pinned = latencies("free", built), latencies("pinned", built)
        to_place = latencies("free", placed)
        print(f"lab: {len(names)} hosts, {machines} unplaced + {machines} pinned, powered off")
        print(f"  create -> placed (unplaced):  {figures(to_place)}")
        print(f"  create -> built  (unplaced):  {figures(free)}")
        print(f"  create -> built  (pinned):    {figures(pinned)}")
        print(
            f"  placement adds at p95: {(p95(free) - p95(pinned)) * 1e3:+.0f} ms, "
            f"at p50: {(statistics.median(free) - statistics.median(pinned)) * 1e3:+.0f} ms"
        )
    finally:
        for vm in custom.list_namespaced_custom_object(VG, V, ns, "virtualmachines")["items"]:
            custom.delete_namespaced_custom_object(
                VG, V, ns, "virtualmachines", vm["metadata"]["name"]
            )
        wait(
            lambda: not custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"],
            120 + machines * 2,
            "every machine deleted",
        )
        fleet.stop_all()
        client.CoreV1Api(api).delete_namespace(ns)
        for host in info.hosts:
            reset_host(api, host.name)


def _wait_allocatable(api: client.ApiClient, names: list[str], *, cpus: int) -> None:
    """Until each host's status shows the raised overcommit (its agent saw the patch)."""
    custom = client.CustomObjectsApi(api)

    def raised() -> bool:
        for name in names:
            obj = custom.get_cluster_custom_object(G, V, "libvirthosts", name)
            room = (obj.get("status") or {}).get("allocatable") or {}
            if int(room.get("cpus") or 0) < cpus:
                return False
        return True

    wait(raised, 60, "the hosts' raised allocatable")


def _why_not_built(custom: client.CustomObjectsApi, ns: str, names: list[str]) -> str:
    """A line per machine: its host and the conditions that are not True, as it reports them."""
    lines = []
    for name in names:
        obj = custom.get_namespaced_custom_object(G, V, ns, "libvirtmachines", name)
        conditions = [
            f"{x.get('type')}={x.get('status')} {x.get('reason')}: {x.get('message')}"
            for x in (obj.get("status") or {}).get("conditions") or []
            if x.get("status") != "True"
        ]
        host = (obj.get("spec") or {}).get("host")
        lines.append(f"  {name} on {host}: {'; '.join(conditions) or 'no conditions'}")
    return "\n".join(lines)


def _observe(
    custom: client.CustomObjectsApi,
    ns: str,
    *,
    placed: dict[str, float],
    built: dict[str, float],
    total: int,
    timeout: float,
) -> None:
    """Record when each machine of `ns` was first seen placed and built, until all `total` are
    built or `timeout` passes."""

    def look() -> bool:
        now = time.monotonic()
        for obj in custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"]:
            name = obj["metadata"]["name"]
            if name not in placed and (obj.get("spec") or {}).get("host"):
                placed[name] = now
            conditions = (obj.get("status") or {}).get("conditions") or []
            ready = [x for x in conditions if x.get("type") == "InfrastructureReady"]
            if name not in built and ready and ready[0].get("status") == "True":
                built[name] = now
        return len(built) >= total

    # The caller reports the machines never built.
    with contextlib.suppress(TimedOutError):
        eventually(look, timeout=timeout, interval=0.02, what="every machine built", not_yet=())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--placed", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--machines", type=int, default=30)
    parser.add_argument("--core-only", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: a check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.hosts, args.placed, args.decisions, args.machines = 6, 60, 20, 2
    core(args.hosts, args.placed, args.decisions)
    if not args.core_only:
        lab(args.machines)


if __name__ == "__main__":
    main()
