"""Benchmark of the pure core: resolve, render, validate and parse 1,000 varied machines.

Usage: .venv/bin/python bench/render_bench.py [--machines N] [--seed S] [--smoke]

Machines vary in size, firmware, domain type, machine family, NIC kinds and counts (1-4), data
disks (0-4) and cloud-init. Each step runs over all machines and reports milliseconds per machine;
the target is rendering under 1 ms per machine. Validation uses libvirt's own RelaxNG schema and,
as a second step, a define on libvirt's in-process `test:///default` driver.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import libvirt
from lxml import etree

from catalog.image import LibvirtImage
from catalog.lookup import Catalog
from catalog.machineclass import LibvirtMachineClass
from catalog.network import LibvirtNetwork
from catalog.storage import LibvirtStorageClass
from libvirt_provider.domainxml import diff_owned, owned_fields, render_domain, render_domain_xml
from libvirt_provider.resolve import resolve_machine
from libvirt_provider.resolved import DomainSpec

SCHEMA = "/usr/share/libvirt/schemas/domain.rng"
T = TypeVar("T")


class Host:
    hostname = "bench-host"
    domain_types = frozenset({"kvm", "qemu"})
    pools = frozenset({"default", "fast"})
    networks = frozenset({"lab", "prod"})
    # No serial console log: the benchmark measures the domain XML, not the host's folders.
    console_log_dir: str | None = None


def catalog() -> Catalog:
    def obj(kind: type[Any], name: str, spec: dict[str, Any]) -> Any:
        return kind.model_validate({"metadata": {"name": name}, "spec": spec})

    sha = "ab" * 32
    return Catalog.of(
        images=[
            obj(LibvirtImage, "bios", {"source": {"volume": {"pool": "default", "volume": "b"}}}),
            obj(
                LibvirtImage,
                "uefi",
                {
                    "source": {"http": {"url": "https://img.example/u.qcow2", "sha256": sha}},
                    "firmware": {"type": "UEFI"},
                },
            ),
            obj(
                LibvirtImage,
                "legacy",
                {
                    "source": {"volume": {"pool": "default", "volume": "l.raw"}},
                    "format": "raw",
                    "guest": {"machineType": "pc", "cdromBus": "ide", "nicModel": "e1000"},
                },
            ),
        ],
        machine_classes=[
            obj(LibvirtMachineClass, "small", {"cpus": 1, "memory": "512Mi"}),
            obj(
                LibvirtMachineClass,
                "large",
                {
                    "cpus": 8,
                    "memory": "16Gi",
                    "topology": {"sockets": 2, "cores": 2, "threads": 2},
                    "hugepages": {"pageSize": "2Mi"},
                },
            ),
        ],
        networks=[
            obj(LibvirtNetwork, "lab", {"source": {"network": "lab"}, "default": True}),
            obj(LibvirtNetwork, "prod", {"source": {"network": "prod"}}),
            obj(LibvirtNetwork, "br", {"source": {"bridge": "br0"}, "nicModel": "e1000e"}),
            obj(LibvirtNetwork, "mv", {"source": {"direct": {"device": "eth0", "mode": "vepa"}}}),
        ],
        storage_classes=[
            obj(LibvirtStorageClass, "standard", {"pool": "default", "default": True}),
            obj(LibvirtStorageClass, "fast", {"pool": "fast", "volumeFormat": "raw"}),
        ],
    )


def varied_pair(rng: random.Random, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    def ref(kind: str, name: str) -> dict[str, str]:
        return {"apiGroup": "infrastructure.vm-api.io", "kind": kind, "name": name}

    size: dict[str, Any] = (
        {"name": rng.choice(["small", "large"])}
        if rng.random() < 0.5
        else {"resources": {"cpus": rng.randint(1, 16), "memory": f"{rng.randint(1, 64)}Gi"}}
    )
    nics = [
        {
            "name": f"nic{i}",
            "network": ref("LibvirtNetwork", rng.choice(["lab", "prod", "br", "mv"])),
        }
        for i in range(rng.randint(1, 4))
    ]
    disks = [
        {
            "name": f"data{i}",
            "source": {"blank": True}
            if rng.random() < 0.7
            else {"image": ref("LibvirtImage", "bios")},
            "sizeGiB": rng.randint(1, 500),
            **({"storageClassName": "fast"} if rng.random() < 0.3 else {}),
        }
        for i in range(rng.randint(0, 4))
    ]
    vm: dict[str, Any] = {
        "infrastructureRef": ref("LibvirtMachine", f"m{index}"),
        "instanceType": size,
        "bootDisk": {
            "source": {"image": ref("LibvirtImage", rng.choice(["bios", "uefi", "legacy"]))},
            "sizeGiB": rng.randint(1, 100),
        },
        "disks": disks,
        "network": {"interfaces": nics},
        "tags": {"index": str(index), "team": rng.choice(["a&b", "<ops>", "db"])},
    }
    if rng.random() < 0.6:
        vm["sshPublicKeys"] = [f"ssh-ed25519 AAAA{index} user@example"]
        vm["network"]["hostName"] = f"host-{index}"
    machine = {
        "metadata": {
            "name": f"machine-{index}",
            "namespace": f"ns-{index % 7}",
            "uid": str(uuid.UUID(int=rng.getrandbits(128))),
        },
        "spec": {
            "domainType": rng.choice(["kvm", "qemu", "auto"]),
            "console": {"graphics": rng.choice(["None", "VNC", "SPICE"])},
        },
    }
    return vm, machine


def timed(label: str, items: list[Any], step: Callable[[Any], T]) -> list[T]:
    started = time.perf_counter()
    out = [step(item) for item in items]
    elapsed = time.perf_counter() - started
    print(f"{label:<34} {elapsed * 1000 / len(items):8.3f} ms/machine   ({elapsed:6.2f} s total)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument(
        "--smoke", action="store_true", help="20 machines, the target not judged: a quick check"
    )
    args = parser.parse_args()
    if args.smoke:
        args.machines = 20
    rng = random.Random(args.seed)
    cat, host = catalog(), Host()
    pairs = [varied_pair(rng, i) for i in range(args.machines)]

    print(f"{args.machines} varied machines (seed {args.seed})")
    resolutions = timed(
        "resolve (dicts -> ResolvedMachine)",
        pairs,
        lambda p: resolve_machine(
            vm_name=p[1]["metadata"]["name"],
            vm_spec=p[0],
            machine=p[1],
            catalog=cat,
            secrets={},
            host=host,
        ),
    )
    failed = [r for r in resolutions if not r.ok]
    if failed:
        print(f"{len(failed)} did not resolve, first: {failed[0].message()}", file=sys.stderr)
        return 1
    specs: list[DomainSpec] = [r.machine.domain for r in resolutions if r.machine is not None]

    # Render is the step with a target; repeat it to report a stable median.
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        xml = [render_domain_xml(s) for s in specs]
        rounds.append((time.perf_counter() - started) * 1000 / len(specs))
    print(f"{'render (median of 5 rounds)':<34} {statistics.median(rounds):8.3f} ms/machine")
    timed("render to element only", specs, render_domain)

    schema = etree.RelaxNG(etree.parse(SCHEMA))
    valid = timed("validate (libvirt RelaxNG)", xml, lambda x: schema.validate(etree.fromstring(x)))
    if not all(valid):
        print(f"{valid.count(False)} invalid documents", file=sys.stderr)
        return 1

    connection = libvirt.open("test:///default")
    try:
        timed("define on test:///default", xml, connection.defineXML)
    finally:
        for domain in connection.listAllDomains():
            if domain.name() != "test":
                domain.undefine()
        connection.close()

    parsed = timed("parse (owned fields)", xml, owned_fields)
    drift = timed("diff against itself", parsed, lambda f: diff_owned(f, f).up_to_date)
    assert all(drift)
    target = statistics.median(rounds)
    print(f"render target < 1 ms/machine: {'met' if target < 1 else 'MISSED'} ({target:.3f} ms)")
    return 0 if target < 1 or args.smoke else 2


if __name__ == "__main__":
    sys.exit(main())
