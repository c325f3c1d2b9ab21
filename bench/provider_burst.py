"""Benchmark: a burst of machines through the daemon, beside raw libvirt in the same run.

Prints, for N machines (default 10) in the lab:
- raw libvirt: define+start of the same domain XML the daemon renders (overlay creation included),
  issued back to back, as the baseline;
- the daemon: apply of N linked pairs -> each domain running, and the ratio of the burst's
  completion time to the raw baseline's;
- apply -> VM Ready, and how long after the guest's DHCP lease appeared the VM showed Ready;
- the daemon's CPU use and RSS while idle with those machines running.

Bounded: N machines, deadlines on every wait, everything deleted at the end. Traffic goes only to
the lab (loopback and the lab's libvirtd). Needs the lab: `make lab-up` first.

usage: python bench/provider_burst.py [--machines 10] [--idle-seconds 30] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import libvirt
import yaml
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import wait  # noqa: E402
from catalog.image import LibvirtImage  # noqa: E402
from catalog.lookup import Catalog  # noqa: E402
from catalog.machineclass import LibvirtMachineClass  # noqa: E402
from catalog.network import LibvirtNetwork  # noqa: E402
from catalog.storage import LibvirtStorageClass  # noqa: E402
from libvirt_provider import naming  # noqa: E402
from libvirt_provider.domainxml import render_domain_xml  # noqa: E402
from libvirt_provider.driver.base import OverlaySpec  # noqa: E402
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor  # noqa: E402
from libvirt_provider.resolve import resolve_machine  # noqa: E402
from tests.support.daemons import answers, health_base  # noqa: E402
from tests.support.lab_access import read_lab  # noqa: E402
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

HOST = "bench-host"
G, VG, V = "infrastructure.vm-api.io", "vm-api.io", "v1alpha1"


def sample_docs(ns: str, name: str) -> list[dict[str, Any]]:
    vm, lm = yaml.safe_load_all((REPO / "deploy" / "samples" / "vm.yaml").read_text())
    for doc in (vm, lm):
        doc["metadata"].update(namespace=ns, name=name)
    vm["spec"]["infrastructureRef"]["name"] = name
    lm["metadata"]["annotations"]["vm-api.io/virtual-machine"] = name
    lm["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
    return [vm, lm]


def catalog_from_samples() -> Catalog:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "samples" / "catalog.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    return Catalog.of(
        images=[LibvirtImage.model_validate(kinds["LibvirtImage"])],
        machine_classes=[LibvirtMachineClass.model_validate(kinds["LibvirtMachineClass"])],
        networks=[LibvirtNetwork.model_validate(kinds["LibvirtNetwork"])],
        storage_classes=[LibvirtStorageClass.model_validate(kinds["LibvirtStorageClass"])],
    )


def raw_baseline(env: dict[str, str], n: int) -> list[float]:
    """define+start of daemon-identical XML, back to back; seconds from t0 to each running."""
    hv = LibvirtHypervisor(env["LIBVIRT_DEFAULT_URI"])
    facts = hv.host_facts()
    facts = type(facts)(
        hostname=facts.hostname,
        arch=facts.arch,
        domain_types=frozenset({env["VMAPI_LAB_DOMAIN_TYPE"]}),
        pools=facts.pools,
        networks=facts.networks,
    )
    catalog = catalog_from_samples()
    plans = []
    for i in range(n):
        vm, lm = sample_docs("bench-raw", f"raw-{i}")
        lm["metadata"]["uid"] = str(uuid.uuid4())
        resolution = resolve_machine(
            vm_name=vm["metadata"]["name"],
            vm_spec=vm["spec"],
            machine=lm,
            catalog=catalog,
            secrets={},
            host=facts,
        )
        assert resolution.machine is not None, resolution.message()
        plans.append(resolution.machine)
    done: list[float] = []
    t0 = time.monotonic()
    for plan in plans:
        for volume in plan.volumes:
            assert volume.base is not None
            base = hv.find_volume(volume.base.pool, volume.base.volume)
            assert base is not None
            hv.create_overlay(
                OverlaySpec(
                    pool=volume.pool,
                    name=volume.volume,
                    backing_path=base.path,
                    backing_format=volume.base.format.value,
                    capacity_bytes=volume.capacity_bytes,
                )
            )
        ref = hv.define(render_domain_xml(plan.domain))
        hv.start(ref.uuid)
        done.append(time.monotonic() - t0)
    for plan in plans:
        uid = str(plan.domain.uuid)
        hv.destroy(uid)
        hv.undefine(uid)
        for volume in plan.volumes:
            hv.delete_volume(volume.pool, volume.volume)
    hv.close()
    return done


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / float(__import__("os").sysconf("SC_CLK_TCK"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def burst(
    custom: client.CustomObjectsApi, conn: libvirt.virConnect, ns: str, names: list[str]
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Apply the pairs at once; seconds from the first apply to running, leased and Ready."""
    t0 = time.monotonic()
    domains: dict[str, str] = {}
    for name in names:
        for doc in sample_docs(ns, name):
            group, version = doc["apiVersion"].split("/")
            plural = "virtualmachines" if doc["kind"] == "VirtualMachine" else "libvirtmachines"
            made = custom.create_namespaced_custom_object(group, version, ns, plural, doc)
            if plural == "libvirtmachines":
                domains[name] = naming.domain_name(ns, name, made["metadata"]["uid"])
    running: dict[str, float] = {}
    leased: dict[str, float] = {}
    ready: dict[str, float] = {}

    def look() -> bool:
        """Note what each machine reached by now; whether every one is Ready."""
        now = time.monotonic() - t0
        for name in names:
            dname = domains[name]
            try:
                dom = conn.lookupByName(dname)
            except libvirt.libvirtError:
                continue
            if name not in running and dom.isActive():
                running[name] = now
            if name not in leased and dom.isActive():
                addrs = dom.interfaceAddresses(libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE)
                if any(a.get("addrs") for a in addrs.values()):
                    leased[name] = now
        for vm in custom.list_namespaced_custom_object(VG, V, ns, "virtualmachines")["items"]:
            name = vm["metadata"]["name"]
            if name not in ready and (vm.get("status") or {}).get("ready"):
                ready[name] = time.monotonic() - t0
        return len(ready) >= len(names)

    # The caller reports machines that were never Ready.
    with contextlib.suppress(TimedOutError):
        eventually(look, timeout=600, interval=0.05, what="every machine Ready", not_yet=())
    return running, leased, ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--smoke", action="store_true", help="1 machine, 1 s idle: a quick check")
    args = parser.parse_args()
    if args.smoke:
        args.machines, args.idle_seconds = 1, 1.0
    n = args.machines
    env = read_lab().env
    kubectl = [
        str(Path(env["VMAPI_LAB_DIR"]) / "bin" / "kubectl"),
        "--kubeconfig",
        env["KUBECONFIG"],
    ]
    subprocess.run([*kubectl, "apply", "-f", str(REPO / "crds")], check=True, capture_output=True)
    subprocess.run(
        [*kubectl, "apply", "-f", str(REPO / "deploy" / "samples" / "catalog.yaml")],
        check=True,
        capture_output=True,
    )

    raw = raw_baseline(env, n)

    api = config.new_client_from_config(config_file=env["KUBECONFIG"])
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = "bench-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": ns}})
    log = REPO / ".logs" / "bench-daemon.log"
    log.parent.mkdir(exist_ok=True)
    daemon = subprocess.Popen(
        [
            sys.executable, "-m", "libvirt_provider",
            "--kubeconfig", env["KUBECONFIG"],
            "--libvirt-uri", env["LIBVIRT_DEFAULT_URI"],
            "--host", HOST,
            "--domain-types", env["VMAPI_LAB_DOMAIN_TYPE"],
            "--health-address", "127.0.0.1", "--health-port", "0",
            "--lease-namespace", "kube-system",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    conn = libvirt.open(env["LIBVIRT_DEFAULT_URI"])
    try:
        base = health_base(daemon, log)
        wait(lambda: answers(f"{base}/healthz"), 60, "the daemon healthy", interval=0.2)
        names = [f"m{i}" for i in range(n)]
        running, leased, ready = burst(custom, conn, ns, names)
        if len(ready) < n:
            raise SystemExit(f"bench: only {len(ready)} of {n} machines Ready within 600 s")

        burst_daemon = max(running.values())
        burst_raw = max(raw)
        per_machine_raw = [b - a for a, b in zip([0.0, *raw[:-1]], raw, strict=True)]
        lag = [ready[m] - leased[m] for m in names if m in leased]
        print(f"machines: {n}, domain type {env['VMAPI_LAB_DOMAIN_TYPE']}")
        print(
            f"raw libvirt overlay+define+start, back to back: all running after {burst_raw:.2f} s "
            f"(per machine median {statistics.median(per_machine_raw):.3f} s)"
        )
        print(
            f"daemon apply -> domain running: median {statistics.median(running.values()):.2f} s, "
            f"all after {burst_daemon:.2f} s; ratio to raw {burst_daemon / burst_raw:.2f}x"
        )
        print(
            f"daemon apply -> VM Ready: median {statistics.median(ready.values()):.2f} s, "
            f"max {max(ready.values()):.2f} s"
        )
        print(
            f"lease seen -> VM Ready: median {statistics.median(lag):.2f} s, max {max(lag):.2f} s "
            f"(lease sampled every 50 ms by this script)"
        )

        cpu0, t_idle = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(args.idle_seconds)
        cpu1, t_end = cpu_seconds(daemon.pid), time.monotonic()
        print(
            f"daemon idle with {n} machines: CPU {100 * (cpu1 - cpu0) / (t_end - t_idle):.2f}% "
            f"of a core over {t_end - t_idle:.0f} s, RSS {rss_mib(daemon.pid):.0f} MiB"
        )
    finally:
        for vm in custom.list_namespaced_custom_object(VG, V, ns, "virtualmachines")["items"]:
            custom.delete_namespaced_custom_object(
                VG, V, ns, "virtualmachines", vm["metadata"]["name"]
            )
        wait(
            lambda: not custom.list_namespaced_custom_object(G, V, ns, "libvirtmachines")["items"],
            300, "cleanup", interval=0.5,
        )  # fmt: skip
        daemon.terminate()
        daemon.wait(timeout=60)
        core.delete_namespace(ns)
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
