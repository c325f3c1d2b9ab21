"""Daemons on libvirt's test driver: the node they run on, the daemons, sampling.

Why a module of its own: `bench/scale_bench.py`, `bench/soak.py` and the API-server-restart e2e
test all run daemons on libvirt's test driver (domains start at once, so only the control plane is
measured) against the lab's kube-apiserver; one copy of the node's make-up (the lab's pool holding
the image's volume, the lab's network, pools for boot disks behind LibvirtStorageClasses), of the
daemon start and of the RSS/CPU sampling keeps them measuring the same thing. It lives in
tests/support so that the e2e test does not import bench/ (bench/ imports tests/support, never the
other way round).

Two ways to run the test driver:

- in the daemon's process, from a node file (`write_node_xml`, URI `test:///<file>.xml`): the
  cheapest, but nothing else can see the daemon's domains, and a reconnect starts afresh from the
  file, so a lost connection cannot be simulated;
- inside the lab's libvirtd (`SharedTestDriver`, URI `test+unix:///default?socket=...`): the
  daemon's calls cross libvirt's RPC as in production, the script sees the same domains and
  volumes through its own connection (leak checks, states), and the daemon's connection can be
  dropped by libvirtd (`drop_client`) while the driver's state lives on. libvirtd frees
  `test:///default` when its last connection closes: the script's connection keeps it alive.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import libvirt
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from lxml import etree
from lxml.builder import E

from libvirt_provider.constants import HOST_LABEL
from tests.support.daemons import answers, health_base, start_daemon
from tests.support.factories import pair
from tests.support.hosts import HOSTS_PLURAL, host_object
from tests.support.kube import GROUP, V
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

POOL_PREFIX = "scale-bench-"
# The test driver's pools hold 100 GiB whatever the node file says; a boot disk counts its
# capacity (1 GiB for the sample pair) against it.
MACHINES_PER_POOL = 90
STORAGE_CLASSES = "libvirtstorageclasses"
# The test driver's own objects in `test:///default` (not the benchmark's, never leaks).
DEFAULT_DOMAINS = frozenset({"test"})
DEFAULT_POOLS = frozenset({"default-pool"})


# -- the node -----------------------------------------------------------------------------------


def disk_pools(machines: int, hosts: int) -> int:
    """Pools one host needs for its share of the boot disks."""
    return max(1, math.ceil(math.ceil(machines / hosts) / MACHINES_PER_POOL))


def _network(lab: LabInfo) -> Any:
    return E.network(
        E.name(lab.network),
        E.uuid(str(uuid.uuid5(uuid.NAMESPACE_URL, "scale-bench-network"))),
        E.bridge(name="scalebr0"),
        E.ip(
            E.dhcp(E.range(start="10.250.0.2", end="10.250.255.254")),
            address="10.250.0.1",
            netmask="255.255.0.0",
        ),
    )


def _image_pool(lab: LabInfo, *, with_volume: bool) -> Any:
    pool_dir = "/scale-bench-pool"
    volume = [_image_volume(lab, pool_dir)] if with_volume else []
    return E.pool(
        E.name(lab.pool),
        E.uuid(str(uuid.uuid5(uuid.NAMESPACE_URL, "scale-bench-pool"))),
        E.target(E.path(pool_dir)),
        *volume,
        type="dir",
    )


def _image_volume(lab: LabInfo, pool_dir: str) -> Any:
    return E.volume(
        E.name(lab.guest_volume),
        E.capacity("64", unit="MiB"),
        E.allocation("16", unit="MiB"),
        E.target(E.path(f"{pool_dir}/{lab.guest_volume}"), E.format(type="qcow2")),
        type="file",
    )


def _disk_pool(k: int) -> Any:
    return E.pool(
        E.name(f"{POOL_PREFIX}{k}"),
        E.uuid(str(uuid.uuid5(uuid.NAMESPACE_URL, f"scale-bench-pool-{k}"))),
        E.target(E.path(f"/{POOL_PREFIX}{k}")),
        type="dir",
    )


def write_node_xml(lab: LabInfo, path: Path, pools: int) -> str:
    """A test-driver node with the lab's pool (the guest image's volume in it), the lab's network
    and `pools` pools for boot disks; the URI that opens it. Each daemon that opens it gets a
    private copy in its own process."""
    node = E.node(
        E.cpu(
            E.mhz("2000"),
            E.model("x86_64"),
            E.nodes("1"),
            E.sockets("4"),
            E.cores(str(NODE_CPUS // 8)),
            E.threads("2"),
            E.active(str(NODE_CPUS)),
        ),
        E.memory(str(NODE_MEMORY_KIB)),
        _network(lab),
        _image_pool(lab, with_volume=True),
        *(_disk_pool(k) for k in range(pools)),
    )
    path.write_bytes(etree.tostring(node, pretty_print=True))
    return f"test://{path.resolve()}"


def _libvirtd_socket(lab: LabInfo) -> str:
    found = parse_qs(urlsplit(lab.libvirt_uri).query).get("socket")
    if not found:
        raise SystemExit(f"the lab's libvirt URI {lab.libvirt_uri} names no socket")
    return found[0]


class SharedTestDriver:
    """`test:///default` inside the lab's libvirtd, made up as the node file would be, held open
    (so libvirtd keeps it) and looked into by the script."""

    def __init__(self, lab: LabInfo, pools: int) -> None:
        self.lab, self.pools = lab, pools
        self.socket = _libvirtd_socket(lab)
        self.uri = f"test+unix:///default?socket={self.socket}"
        self.conn = libvirt.open(self.uri)
        self._define()

    def _define(self) -> None:
        conn = self.conn
        if self.lab.network not in conn.listNetworks() + conn.listDefinedNetworks():
            conn.networkDefineXML(etree.tostring(_network(self.lab), encoding="unicode")).create()
        pools = [_image_pool(self.lab, with_volume=False)] + [
            _disk_pool(k) for k in range(self.pools)
        ]
        existing = set(conn.listStoragePools() + conn.listDefinedStoragePools())
        for element in pools:
            if element.findtext("name") not in existing:
                conn.storagePoolDefineXML(etree.tostring(element, encoding="unicode")).create()
        image_pool = conn.storagePoolLookupByName(self.lab.pool)
        if self.lab.guest_volume not in image_pool.listVolumes():
            volume = _image_volume(self.lab, "/scale-bench-pool")
            image_pool.createXML(etree.tostring(volume, encoding="unicode"), 0)

    def domains(self) -> dict[str, int]:
        """Every domain the benchmark's daemons made: name -> libvirt state."""
        return {
            d.name(): d.state()[0]
            for d in self.conn.listAllDomains(0)
            if d.name() not in DEFAULT_DOMAINS
        }

    def shape(self, domain: str) -> tuple[int, int] | None:
        """A domain's vCPUs and memory (KiB) as defined, or None when it does not exist."""
        try:
            info = self.conn.lookupByName(domain).info()
        except libvirt.libvirtError:
            return None
        return int(info[3]), int(info[1])

    def volumes(self) -> list[str]:
        """Every volume in the benchmark's pools but the image's: `pool/volume`."""
        found = []
        for pool in self.conn.listAllStoragePools(0):
            if pool.name() in DEFAULT_POOLS:
                continue
            for name in pool.listVolumes():
                if not (pool.name() == self.lab.pool and name == self.lab.guest_volume):
                    found.append(f"{pool.name()}/{name}")
        return found

    def close(self) -> None:
        """Let go of the driver: with the daemons gone, libvirtd frees it and all it held."""
        with contextlib.suppress(libvirt.libvirtError):
            self.conn.close()

    def drop_client(self, pid: int) -> int:
        """Make libvirtd drop the connections of process `pid` (what a libvirtd restart does to a
        client, without losing the driver's state); how many it dropped."""
        admin = ["virt-admin", "-c", f"libvirtd:///system?socket={self._admin_socket()}"]
        listing = _run([*admin, "srv-clients-list", "libvirtd"])
        dropped = 0
        for client_id in re.findall(r"^\s*(\d+)\s", listing, flags=re.MULTILINE):
            info = _run([*admin, "client-info", "libvirtd", client_id], check=False)
            if re.search(rf"unix_process_id\s*:\s*{pid}\b", info):
                _run([*admin, "client-disconnect", "libvirtd", client_id])
                dropped += 1
        return dropped

    def _admin_socket(self) -> str:
        return str(Path(self.socket).with_name("libvirt-admin-sock"))


def _run(cmd: list[str], *, check: bool = True) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


# -- the catalog --------------------------------------------------------------------------------


def storage_classes(custom: client.CustomObjectsApi, pools: int, *, create: bool) -> None:
    """The benchmark's LibvirtStorageClasses, one per disk pool (never the default)."""
    for k in range(pools):
        name = f"{POOL_PREFIX}{k}"
        if create:
            body = {
                "apiVersion": f"{GROUP}/{V}",
                "kind": "LibvirtStorageClass",
                "metadata": {"name": name},
                "spec": {"pool": name},
            }
            with contextlib.suppress(ApiException):  # left by an interrupted run: the same
                custom.create_cluster_custom_object(GROUP, V, STORAGE_CLASSES, body)
        else:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, V, STORAGE_CLASSES, name)


def pair_docs(
    ns: str, index: int, hosts: int, host_prefix: str, *, shared: bool = False
) -> list[dict[str, Any]]:
    """The sample pair, on host index % hosts, its boot disk in that host's next pool; with
    `shared` (the test driver inside libvirtd) sized `SHARED_RESOURCES`."""
    docs = pair(ns, f"m{index:05d}")
    if shared:
        docs[0]["spec"]["instanceType"] = {"resources": dict(SHARED_RESOURCES)}
    docs[0]["spec"]["bootDisk"]["storageClassName"] = (
        f"{POOL_PREFIX}{index // hosts // MACHINES_PER_POOL}"
    )
    docs[1]["metadata"].setdefault("labels", {})[HOST_LABEL] = f"{host_prefix}{index % hosts}"
    docs[1]["spec"]["host"] = f"{host_prefix}{index % hosts}"
    return docs


def forget_hosts(custom: client.CustomObjectsApi, host_prefix: str) -> None:
    """Take the benchmark hosts' entries out of every LibvirtImage's status.hosts (each daemon
    wrote its own; once stopped, nobody else would), with the object's resourceVersion, so a
    concurrent writer's entry is never lost: a conflict reads again."""
    for _ in range(5):
        conflict = False
        for image in custom.list_cluster_custom_object(GROUP, V, "libvirtimages")["items"]:
            hosts = (image.get("status") or {}).get("hosts") or []
            kept = [h for h in hosts if not str(h.get("host", "")).startswith(host_prefix)]
            if kept == hosts:
                continue
            image["status"]["hosts"] = kept
            try:
                custom.replace_cluster_custom_object_status(
                    GROUP, V, "libvirtimages", image["metadata"]["name"], image
                )
            except ApiException as err:
                if err.status != 409:
                    raise
                conflict = True
        if not conflict:
            return


# -- the daemons --------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Daemon:
    host: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    peak_rss: float = 0.0
    # Seconds from the process's start to its first 200 on /readyz, and its RSS then.
    ready_after: float | None = None
    rss_at_ready: float | None = None


# The node the benchmarks' daemons run on: big enough, at overcommit 16, for what they pin there
# (5,000 machines of 1 vCPU and 256 MiB over 5 hosts), since each host admits what it is given
# against its allocatable. The test driver's domains take nothing real.
NODE_CPUS = 128
NODE_MEMORY_KIB = 2**30
PROCESS_HOST_SPEC: dict[str, Any] = {"overcommit": {"cpu": 16.0}}
# `test:///default` inside libvirtd has a fixed node (16 CPUs, 3 GiB): at the API's highest
# overcommit (64 and 4) it admits 48 sample machines of 256 MiB, so the machines pinned there are
# created with these resources instead (1,536 fit).
SHARED_HOST_SPEC: dict[str, Any] = {"overcommit": {"cpu": 64.0, "memory": 4.0}}
SHARED_RESOURCES: dict[str, Any] = {"cpus": 1, "memory": "8Mi"}


class Daemons:
    """Daemons on a test-driver URI (hosts `<host_prefix><i>`, their LibvirtHosts declared with
    the overcommit that node needs unless not `declare`), their RSS sampled twice a second for
    the peaks."""

    def __init__(
        self,
        lab: LabInfo,
        uri: str,
        count: int,
        *,
        host_prefix: str,
        log_prefix: str,
        declare: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        shared = urlsplit(uri).scheme != "test"
        host_spec = (SHARED_HOST_SPEC if shared else PROCESS_HOST_SPEC) if declare else None
        test_lab = LabInfo(
            env={**lab.env, "LIBVIRT_DEFAULT_URI": uri, "VMAPI_LAB_DOMAIN_TYPE": "test"}
        )
        self.items: list[Daemon] = []
        self._kubeconfig = lab.kubeconfig
        for i in range(count):
            host = f"{host_prefix}{i}"
            started = time.monotonic()
            proc, log = start_daemon(
                test_lab,
                host=host,
                log_name=f"{log_prefix}{host}.log",
                host_spec=host_spec,
                extra_args=extra_args,
            )
            self.items.append(Daemon(host, proc, log, started))
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def wait_started(self) -> None:
        for d in self.items:
            base = health_base(d.proc, d.log)
            # Polled often: the time to ready is one of the figures the benchmarks print.
            eventually(
                lambda base=base: answers(f"{base}/readyz"), timeout=60, interval=0.05, what="ready"
            )
            d.ready_after = time.monotonic() - d.started
            d.rss_at_ready = rss_mib(d.proc.pid)
        # Machines are admitted against the host's own status: the first is there.
        with config.new_client_from_config(self._kubeconfig) as api:
            for d in self.items:
                eventually(
                    lambda host=d.host: ((host_object(api, host) or {}).get("status") or {}).get(
                        "allocatable"
                    ),
                    timeout=60,
                    what=f"{d.host}'s first status",
                )
        eventually(
            lambda: any(
                "leads: starting the generic controller" in d.log.read_text() for d in self.items
            ),
            timeout=60,
            what="a daemon leading the generic controller",
        )
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            for d in self.items:
                with contextlib.suppress(OSError):
                    d.peak_rss = max(d.peak_rss, rss_mib(d.proc.pid))

    def reset_peaks(self) -> None:
        for d in self.items:
            d.peak_rss = rss_mib(d.proc.pid)

    def cpu(self) -> list[float]:
        return [cpu_seconds(d.proc.pid) for d in self.items]

    def rss(self) -> list[float]:
        return [rss_mib(d.proc.pid) for d in self.items]

    def alive(self) -> bool:
        return all(d.proc.poll() is None for d in self.items)

    def stop(self) -> list[int | None]:
        """Stop every daemon (SIGTERM, then SIGKILL after 60 s) and delete its LibvirtHost; their
        exit statuses. A stopped daemon's host stays Ready until its heartbeat goes stale (40 s),
        and placement would put the next test's unplaced machines there meanwhile."""
        self._stop.set()
        for d in self.items:
            if d.proc.poll() is None:
                d.proc.terminate()
        for d in self.items:
            try:
                d.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait(timeout=10)
        with config.new_client_from_config(self._kubeconfig) as api:
            custom = client.CustomObjectsApi(api)
            for d in self.items:
                try:
                    custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, d.host)
                except ApiException as err:
                    if err.status != 404:
                        raise
        return [d.proc.returncode for d in self.items]
