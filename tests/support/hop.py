"""The console's hop between daemons as the lab sets it up (docs/console.md, "Routing"): a PKI
from the lab's console CA (every daemon's serving and hop certificate, for server and client
use; a rogue CA's look-alike) and two daemons on two of the lab's extra hosts taking hops, each
publishing its hop address in its host's heartbeat Lease, the APIService naming the first one's
console port. Shared by tests/e2e/console/test_hop.py and bench/console_bench.py's hop figure."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.console import lab_pki, register_apiservice, unregister_apiservice
from tests.support.daemons import answers, free_port, health_base, start_daemon, stop_daemon
from tests.support.hosts import reset_host
from tests.support.kube import NS_PREFIX, apply, install_api, service_account_kubeconfig
from tests.support.lab_access import REPO, LabHost, LabInfo
from tests.support.tls import openssl_cert
from tests.support.waiting import eventually

__all__ = ["LEASES", "HopDaemon", "Hops", "Pki", "hop_daemons", "hop_lease", "hop_pki"]

LEASES = "vm-api-system"
EXTENSIONS = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
[hop]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = DNS:{name},DNS:localhost,IP:127.0.0.1
"""


@dataclass
class Pki:
    ca: Path  # the lab's console CA: the APIService's caBundle and --console-hop-ca-file
    hop: tuple[Path, Path]  # every daemon's serving and hop certificate, from that CA
    rogue: tuple[Path, Path]  # the same names, from a CA nobody trusts
    front_proxy: tuple[Path, Path]  # the API server's front-proxy client certificate


@dataclass
class HopDaemon:
    host: LabHost
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    hop_port: int


@dataclass
class Hops:
    a: HopDaemon  # the APIService's daemon
    b: HopDaemon  # the guest's host's daemon
    pki: Pki


def _cert(pki: Path, cnf: Path, name: str, subject: str, section: str, *, ca: str | None) -> None:
    signer = None if ca is None else (pki / f"{ca}.crt", pki / f"{ca}.key")
    openssl_cert(
        cnf, section, subject, key=pki / f"{name}.key", cert=pki / f"{name}.crt", ca=signer
    )


def hop_pki(lab: LabInfo, out: Path) -> Pki:
    """The hop's certificates, made in `out`."""
    cnf = out / "openssl.cnf"
    cnf.write_text(EXTENSIONS.format(name=c.HOP_PEER_NAME))
    lab_ca = lab_pki(lab)
    for suffix in ("crt", "key"):
        (out / f"console-ca.{suffix}").write_bytes((lab_ca / f"console-ca.{suffix}").read_bytes())
    _cert(out, cnf, "hop", f"/CN={c.HOP_PEER_NAME}", "hop", ca="console-ca")
    _cert(out, cnf, "rogue-ca", "/CN=vmapi lab rogue console CA", "ca", ca=None)
    _cert(out, cnf, "rogue", f"/CN={c.HOP_PEER_NAME}", "hop", ca="rogue-ca")
    return Pki(
        ca=out / "console-ca.crt",
        hop=(out / "hop.crt", out / "hop.key"),
        rogue=(out / "rogue.crt", out / "rogue.key"),
        front_proxy=(lab_ca / "front-proxy-client.crt", lab_ca / "front-proxy-client.key"),
    )


def hop_lease(api: client.ApiClient, host: str) -> str | None:
    """The hop address published in `host`'s heartbeat Lease, if any."""
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(f"libvirt-host-{host}", LEASES)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return (lease.metadata.annotations or {}).get(c.HOP_ADDRESS_ANNOTATION)


@contextmanager
def hop_daemons(
    lab: LabInfo, api_client: client.ApiClient, pki: Pki, workdir: Path, *, log_prefix: str
) -> Iterator[Hops]:
    """Daemon A on the lab's first extra host, B on its second, both taking hops; the APIService
    names A's console port. They run with a token of deploy/'s ServiceAccount (so deploy/'s
    RBAC, which lets them read each other's heartbeat Leases, is what is proven enough). Both
    are stopped and the APIService removed at the end."""
    assert len(lab.hosts) >= 2, "the hop needs two of the lab's extra hosts"
    install_api(lab, api_client)
    deploy = REPO / "deploy"
    apply(lab, deploy / "namespace.yaml", deploy / "rbac.yaml", deploy / "console-rbac.yaml")
    kubeconfig = workdir / "provider.kubeconfig"
    service_account_kubeconfig(lab, api_client, kubeconfig)
    started: list[HopDaemon] = []
    try:
        for index, host in enumerate(lab.hosts[:2]):
            reset_host(api_client, host.name)
            port, hop_port = free_port(), free_port()
            proc, log = start_daemon(
                lab,
                host=host.name,
                libvirt_uri=host.uri,
                log_name=f"{log_prefix}-{'ab'[index]}.log",
                kubeconfig=str(kubeconfig),
                lease_namespace=LEASES,
                generic_namespaces=(f"{NS_PREFIX}*",),
                host_spec=None,
                extra_args=(
                    f"--console-port={port}",
                    "--console-address=127.0.0.1",
                    f"--console-cert-file={pki.hop[0]}",
                    f"--console-key-file={pki.hop[1]}",
                    f"--console-hop-port={hop_port}",
                    f"--console-hop-ca-file={pki.ca}",
                    "--console-advertise-address=127.0.0.1",
                    f"--guest-netns={host.netns}",
                ),
            )
            started.append(HopDaemon(host, proc, log, port, hop_port))
        for daemon in started:
            base = health_base(daemon.proc, daemon.log)
            eventually(lambda base=base: answers(f"{base}/readyz"), timeout=90, what="ready")
            eventually(
                lambda d=daemon: hop_lease(api_client, d.host.name) == f"127.0.0.1:{d.hop_port}",
                timeout=60,
                what=f"host {daemon.host.name}'s Lease publishing its daemon's hop address",
            )
        register_apiservice(lab, api_client, started[0].port)
        yield Hops(started[0], started[1], pki)
    finally:
        unregister_apiservice(api_client)
        for daemon in started:
            stop_daemon(daemon.proc, daemon.log)
