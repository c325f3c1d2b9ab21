"""Benchmark: what a pile of machines that fit nowhere costs placement.

Prints, for --waiting machines that no host can take (they ask for more memory than any host has):
- API writes per capacity change: the host's allocatable memory changes (its reserved memory is
  patched), and every write that follows until the cluster is quiet is counted: LibvirtMachines
  and VirtualMachines whose resourceVersion moved, and Events posted (new ones and repeats);
- the time a newly created machine that fits waits to be placed (create -> spec.host), created
  right after a capacity change, when the placer looks at the pile again.

One daemon (host `pile-host-0`) on libvirt's test driver, its generic controller on, against the
lab's API server; no guest runs. With `--code DIR` the daemon runs the provider from DIR (a
worktree at another commit), so the same script measures before and after: e.g.
`git worktree add --detach /tmp/base main` then `--code /tmp/base`.

Bounded: every wait has a deadline; the namespace, the machine class and the LibvirtHost it made
are deleted and the daemon stopped, whatever happens. Traffic goes only to the lab's API server.
Needs the lab: `make lab-up` first.

usage: .venv/bin/python bench/waiting_pile_bench.py [--waiting 1000] [--changes 3]
                                                   [--code DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import figures  # noqa: E402
from tests.support.factories import unplaced  # noqa: E402
from tests.support.hosts import HOSTS_PLURAL  # noqa: E402
from tests.support.kube import GROUP, VM_GROUP, V, install_api  # noqa: E402
from tests.support.lab_access import read_lab  # noqa: E402
from tests.support.testdriver import Daemons, write_node_xml  # noqa: E402
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

HOST_PREFIX = "pile-host-"
HOST = f"{HOST_PREFIX}0"
HUGE = "pile-huge"
LMS, VMS = "libvirtmachines", "virtualmachines"


def _api(kubeconfig: str) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    if urlparse(cfg.host).hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"waiting_pile_bench: refusing {cfg.host}: it only talks to the lab")
    cfg.connection_pool_maxsize = 16
    return client.ApiClient(cfg)


def _versions(custom: client.CustomObjectsApi, ns: str) -> dict[tuple[str, str], str]:
    found = {}
    for group, plural in ((GROUP, LMS), (VM_GROUP, VMS)):
        for obj in custom.list_namespaced_custom_object(group, V, ns, plural)["items"]:
            found[(plural, obj["metadata"]["name"])] = obj["metadata"]["resourceVersion"]
    return found


def _events(core: client.CoreV1Api, ns: str) -> int:
    """Events posted in the namespace, repeats (an Event's count) included."""
    return sum(e.count or 1 for e in core.list_namespaced_event(ns).items)


def _writes(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str, quiet: float, limit: float
) -> tuple[dict[tuple[str, str], str], int]:
    """Once nothing moved for `quiet` seconds (at most `limit`): the objects' versions, Events."""
    seen = {"at": (_versions(custom, ns), _events(core, ns)), "since": time.monotonic()}

    def settled() -> tuple[dict[tuple[str, str], str], int] | None:
        now = (_versions(custom, ns), _events(core, ns))
        if now != seen["at"]:
            seen["at"], seen["since"] = now, time.monotonic()
            return None
        return now if time.monotonic() - float(seen["since"]) >= quiet else None  # type: ignore[arg-type]

    found: tuple[dict[tuple[str, str], str], int] = eventually(
        settled, timeout=limit, interval=0.5, what=f"no write in {ns} for {quiet:.0f} s"
    )
    return found


def _reserve(custom: client.CustomObjectsApi, memory: str) -> None:
    custom.patch_cluster_custom_object(
        GROUP, V, HOSTS_PLURAL, HOST, {"spec": {"reserved": {"memory": memory}}}
    )


def _allocatable(custom: client.CustomObjectsApi) -> str | None:
    with contextlib.suppress(ApiException):
        host = custom.get_cluster_custom_object(GROUP, V, HOSTS_PLURAL, HOST)
        return str(((host.get("status") or {}).get("allocatable") or {}).get("memory"))
    return None


def _message(custom: client.CustomObjectsApi, ns: str, name: str) -> str:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, V, ns, LMS, name)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "InfrastructureReady":
            return str(cond.get("message"))
    return ""


def _waiting_reported(custom: client.CustomObjectsApi, ns: str) -> int:
    count = 0
    for obj in custom.list_namespaced_custom_object(GROUP, V, ns, LMS)["items"]:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "InfrastructureReady" and cond.get("reason") == (
                "WaitingForCapacity"
            ):
                count += 1
    return count


def _measure(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str, args: argparse.Namespace
) -> None:
    """Capacity changes alone, then each followed at once by a machine that fits."""
    versions, events = _writes(custom, core, ns, args.quiet, args.timeout)
    per_change: list[int] = []
    waits: list[float] = []
    for round_ in range(args.changes):
        # A capacity change alone: what the placer writes because of it.
        _reserve(custom, f"{64 * (2 * round_ + 1)}Mi")  # a new value each time
        after, events_after = _writes(custom, core, ns, args.quiet, args.timeout)
        moved = sum(1 for k, v in after.items() if versions.get(k) != v)
        per_change.append(moved + events_after - events)
        print(
            f"capacity change {round_ + 1}: {per_change[-1]} API writes "
            f"({moved} objects' status, {events_after - events} Events); a waiting machine "
            f"says: {_message(custom, ns, 'w00000')}"
        )
        versions, events = after, events_after
        # A capacity change, then at once a machine that fits.
        _reserve(custom, f"{64 * (2 * round_ + 2)}Mi")
        name = f"new{round_}"
        created = time.monotonic()
        for doc in unplaced(ns, name):
            plural = VMS if doc["kind"] == "VirtualMachine" else LMS
            custom.create_namespaced_custom_object(
                doc["apiVersion"].split("/")[0], V, ns, plural, doc
            )

        def placed(name: str = name) -> bool:
            obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, V, ns, LMS, name)
            return bool((obj.get("spec") or {}).get("host"))

        eventually(placed, timeout=args.timeout, interval=0.05, what=f"{name} placed")
        waits.append(time.monotonic() - created)
        after, events_after = _writes(custom, core, ns, args.quiet, args.timeout)
        moved = sum(1 for k, v in after.items() if versions.get(k) != v)
        print(
            f"newcomer {round_ + 1}: placed {waits[-1] * 1e3:.0f} ms after its create; "
            f"{moved + events_after - events} API writes until quiet (its own included)"
        )
        versions, events = after, events_after
    print(
        f"SUMMARY waiting={args.waiting} writes per capacity change: "
        f"{', '.join(map(str, per_change))}; newcomer create -> placed: {figures(waits)}"
    )


def run(args: argparse.Namespace) -> int:
    lab = read_lab()
    api = _api(lab.kubeconfig)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    install_api(lab, api)
    ns = "pile-" + uuid.uuid4().hex[:6]
    core.create_namespace({"metadata": {"name": ns}})
    with contextlib.suppress(ApiException):
        custom.create_cluster_custom_object(
            GROUP,
            V,
            "libvirtmachineclasses",
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": "LibvirtMachineClass",
                "metadata": {"name": HUGE},
                "spec": {"cpus": 1, "memory": "64Ti"},
            },
        )
    workdir = Path(tempfile.mkdtemp(prefix="waiting-pile-"))
    uri = write_node_xml(lab, workdir / "node.xml", 1)
    here = Path.cwd()
    if args.code:
        # `python -m` puts its working directory first on sys.path, before PYTHONPATH.
        os.environ["PYTHONPATH"] = str(Path(args.code).resolve())
        os.chdir(args.code)
    try:
        daemons = Daemons(
            lab,
            uri,
            1,
            host_prefix=HOST_PREFIX,
            log_prefix="waiting-pile-",
            declare=False,
            # Smoke: a short heartbeat grace shortens the term's startup grace (docs/placement.md),
            # which the first "waiting" report sits out and nothing else here depends on.
            extra_args=("--heartbeat-grace=8",) if args.smoke else (),
        )
    finally:
        os.chdir(here)
    try:
        daemons.wait_started()
        eventually(lambda: _allocatable(custom), timeout=60, what=f"{HOST} reporting allocatable")
        print(f"code: {args.code or REPO}; {args.waiting} waiting machines, host {HOST}")
        t0 = time.monotonic()

        def create_waiting(i: int) -> None:
            vm, lm = unplaced(ns, f"w{i:05d}", vm_spec={"instanceType": {"name": HUGE}})
            custom.create_namespaced_custom_object(VM_GROUP, V, ns, VMS, vm)
            custom.create_namespaced_custom_object(GROUP, V, ns, LMS, lm)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create_waiting, range(args.waiting)))
        eventually(
            lambda: _waiting_reported(custom, ns) == args.waiting,
            timeout=args.timeout,
            interval=1.0,
            what=f"all {args.waiting} machines reported WaitingForCapacity",
        )
        print(
            f"created {args.waiting} waiting pairs; all reported waiting after "
            f"{time.monotonic() - t0:.1f} s"
        )
        _measure(custom, core, ns, args)
        return 0
    except TimedOutError as err:
        print(f"waiting_pile_bench: {err}")
        return 1
    finally:
        # While the daemon runs: it lets the machines go (their finalizers).
        with contextlib.suppress(ApiException):
            core.delete_namespace(ns)
        with contextlib.suppress(TimedOutError):
            eventually(
                lambda: (
                    not any(
                        (n.metadata and n.metadata.name) == ns for n in core.list_namespace().items
                    )
                ),
                timeout=args.timeout,
                interval=1.0,
                what=f"namespace {ns} gone",
            )
        daemons.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, V, "libvirtmachineclasses", HUGE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--code", help="run the daemon from this checkout (before/after)")
    parser.add_argument("--quiet", type=float, default=5.0, help="seconds without a write")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.waiting, args.changes, args.quiet, args.timeout = 5, 1, 2.0, 90.0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
