"""A host daemon's footprint: import time and RSS, then RSS after its adapters' first API calls.

Usage: .venv/bin/python bench/footprint.py [--runs N] [--tree PATH] [--smoke]

Each run is a fresh Python process that imports what `libvirt-provider` imports (timed, RSS
after), then makes each shell's API calls once: the machine adapter's reads and writes and its
Events, the Lease elector's term, the host agent's heartbeat and LibvirtHost, a remote host's
credentials, the generic controller's gateway (discovery included) and one list-then-watch. RSS
is read after a garbage collection, and the generated kubernetes model and API modules loaded
are counted (kopf imports three models, V1ObjectMeta's, itself). The calls go to a stub API
server this script runs on 127.0.0.1 (it needs no lab, and ignores $KUBECONFIG): the figures are
the client side's. The placer is left out (the elected daemon's, not every host's).

`--tree PATH` measures another checkout of the project (say, `git archive` of an older commit)
with this script and this stub, for a before/after comparison. Medians of `--runs` runs, after
one run that is not counted (it writes the checkout's bytecode); `--smoke` is one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.apiserver import StubApiServer  # noqa: E402

MACHINE_GROUP, MACHINE_VERSION = "infrastructure.vm-api.io", "v1alpha1"
VM_GROUP, VM_VERSION = "vm-api.io", "v1alpha1"
CRD_LABEL = "vm-api.io/v1alpha1"  # generic.constants.PROVIDER_CRD_LABEL (and its value)


def seed(server: StubApiServer) -> None:
    """The objects the calls read: a machine and its VM, an image, Secrets, a provider kind."""
    machines = f"/apis/{MACHINE_GROUP}/{MACHINE_VERSION}/namespaces/ns/libvirtmachines"
    server.put(f"{machines}/m", {"metadata": {"labels": {}}, "spec": {"host": "h1"}})
    server.put(f"{machines}/doomed", {"spec": {"host": "h1"}})
    server.put(
        f"/apis/{VM_GROUP}/{VM_VERSION}/namespaces/ns/virtualmachines/vm",
        {"metadata": {"finalizers": []}, "spec": {}},
    )
    server.put(
        f"/apis/{MACHINE_GROUP}/{MACHINE_VERSION}/libvirtimages/img", {"status": {"hosts": []}}
    )
    server.put("/api/v1/namespaces/ns/secrets/boot", {"data": {"userdata": "I2Nsb3VkLWNvbmZpZw=="}})
    server.put("/api/v1/namespaces/sys/secrets/r1-creds", {"data": {"ca.crt": "Q0E="}})
    served = {"groupVersion": f"{MACHINE_GROUP}/{MACHINE_VERSION}", "version": MACHINE_VERSION}
    server.set_discovery(
        "/apis/",
        {
            "kind": "APIGroupList",
            "groups": [{"name": MACHINE_GROUP, "versions": [served], "preferredVersion": served}],
        },
    )
    server.set_discovery(
        f"/apis/{MACHINE_GROUP}/{MACHINE_VERSION}",
        {
            "kind": "APIResourceList",
            "groupVersion": f"{MACHINE_GROUP}/{MACHINE_VERSION}",
            "resources": [
                {"name": "libvirtmachines", "singularName": "libvirtmachine",
                 "kind": "LibvirtMachine", "namespaced": True, "verbs": ["get"]},
            ],
        },
    )  # fmt: skip
    server.put(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/libvirtmachines.{MACHINE_GROUP}",
        {
            "metadata": {"labels": {CRD_LABEL: "v1alpha1"}},
            "spec": {
                "group": MACHINE_GROUP,
                "names": {"kind": "LibvirtMachine", "plural": "libvirtmachines"},
                "scope": "Namespaced",
                "versions": [{"name": "v1alpha1", "served": True, "storage": True}],
            },
        },
    )


# The child: one measured process. It uses only what both this tree and an older one offer.
CHILD = r"""
import gc, json, sys, threading, time

def rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

kubeconfig, work = sys.argv[1], sys.argv[2]
bare = rss()
start = time.perf_counter()
import libvirt_provider.__main__  # what the daemon's entry point imports
imported_ms = (time.perf_counter() - start) * 1000
imported = rss()

start = time.perf_counter()
from pathlib import Path
from generic.adapters.kube import KubeGateway
from generic.adapters.kubeclient import load_kube_config
from generic.adapters.lease import LeaseElector
from generic.adapters.listwatch import ListWatch
from generic.gateway import ProviderKind
from libvirt_provider.adapters.host.agent import HostAgent
from libvirt_provider.adapters.host.credentials import HostCredentials
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.host_api import HostConnection, SecretReference

api = load_kube_config(kubeconfig)
G, V = "infrastructure.vm-api.io", "v1alpha1"

adapter = KubeAdapter(api, host="h1")
machine = adapter.get_machine("ns", "m", fresh=True)
adapter.get_virtual_machine("ns", "vm")
adapter.get_image("img")
adapter.list_cluster("libvirtimages")
assert adapter.access_problem() is None
assert adapter.get_secret_data("ns", "boot")
assert adapter.get_secret_data("ns", "absent") is None
adapter.patch_machine_status("ns", "m", {"phase": "x"})
adapter.set_finalizers(adapter.get_machine("ns", "m", fresh=True), ["f"])
adapter.update_image_hosts("img", lambda obj: [{"host": "h1"}])
adapter.event(machine, reason="Bench", message="once")
adapter.event(machine, reason="Bench", message="once")  # counted on the first

started = threading.Event()
elector = LeaseElector(api, name="lead", namespace="sys", identity="h1",
                       on_start=started.set, on_stop=lambda: None, retry_period=60.0)
elector.start()
assert started.wait(10), "no term"
elector.stop()

agent = HostAgent(api, hypervisor=None, host="h1", lease_namespace="sys",
                  allocations=lambda: (None, 0))
agent._beat()
agent._beat()
agent._create()

creds = HostCredentials(api, host="r1", namespace="sys", root=Path(work))
creds.set_connection(HostConnection(uri="qemu+tls://r1.example/system",
                                    secret_ref=SecretReference(name="r1-creds")))
assert creds.secret_version()

gateway = KubeGateway(api)
vm = gateway.get_vm("ns", "vm", fresh=True)
kind = gateway.resolve_kind(G, "LibvirtMachine")
vm = gateway.patch_vm_status(vm, {"phase": "Running"})
gateway.set_vm_finalizers(vm, ["vm-api.io/virtualmachine"])
doomed = gateway.get_provider(kind, "ns", "doomed", fresh=True)
gateway.delete_provider(kind, doomed)
gateway.post_event(vm, type_="Normal", reason="Bench", message="once")

events = threading.Event()
loop = ListWatch(api, name="bench-loop", target=lambda: (G, V, "libvirtmachines"),
                 on_list=lambda objs: None, on_event=lambda kind, obj: events.set())
loop.start()
assert events.wait(10), "no watch event"
loop.stop(timeout=10)
called_ms = (time.perf_counter() - start) * 1000

gc.collect()
import generic
print(json.dumps({
    "tree": str(Path(generic.__file__).resolve().parents[1]),
    "kubernetes": __import__("kubernetes").__version__,
    "bare": bare, "import_ms": imported_ms, "imported": imported,
    "calls_ms": called_ms, "called": rss(),
    "models": sum(m.startswith("kubernetes.client.models.") for m in sys.modules),
    "apis": sum(m.startswith("kubernetes.client.api.") for m in sys.modules),
    "modules": len(sys.modules),
}))
"""


def run_child(tree: Path | None) -> dict[str, Any]:
    """One measured process, against a freshly seeded stub API server of its own."""
    with (
        StubApiServer(watch_hold=1.0) as server,
        tempfile.TemporaryDirectory(prefix="footprint-") as work,
    ):
        seed(server)
        kubeconfig = Path(work) / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "stub",
                    "clusters": [{"name": "stub", "cluster": {"server": server.url}}],
                    "users": [{"name": "stub", "user": {"token": "stub-token"}}],
                    "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                }
            )
        )
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        creds = Path(work) / "credentials"
        creds.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(kubeconfig), str(creds)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"footprint: the measured process failed:\n{done.stderr}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs (median reported)")
    parser.add_argument("--tree", type=Path, help="another checkout of the project to measure")
    parser.add_argument("--smoke", action="store_true", help="one run: a quick check")
    args = parser.parse_args()
    tree = args.tree.resolve() if args.tree else None
    runs = 1 if args.smoke else max(1, args.runs)
    if not args.smoke:
        run_child(tree)  # writes the tree's bytecode; not counted
    results = [run_child(tree) for _ in range(runs)]

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in results))

    first = results[0]
    if tree is not None and Path(first["tree"]) != tree:
        raise SystemExit(f"footprint: measured {first['tree']}, not {tree}")
    bare, imported, called = median("bare"), median("imported"), median("called")
    print(
        f"footprint of {first['tree']} (kubernetes {first['kubernetes']}, "
        f"median of {runs} run{'s' * (runs > 1)})"
    )
    print(
        f"  import libvirt_provider.__main__  {median('import_ms'):6.0f} ms  "
        f"RSS {imported:6.1f} MiB (+{imported - bare:.1f} over the bare interpreter)"
    )
    print(
        f"  after the adapters' first calls   {median('calls_ms'):6.0f} ms  "
        f"RSS {called:6.1f} MiB (+{called - imported:.1f})"
    )
    print(
        f"  generated kubernetes modules loaded: {first['models']} models, "
        f"{first['apis']} APIs; {first['modules']} modules in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
