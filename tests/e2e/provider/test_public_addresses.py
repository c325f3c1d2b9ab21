"""Public addresses from a LibvirtNetwork's pool, on the lab's DHCP network `vmapi-lab`.

The pool holds one address (10.213.0.20, outside the network's DHCP range .100-.250), so two
machines asking at once race for the last one: one holds it (an IPAddress named after it, a DHCP
reservation for its MAC, the busybox guest's lease, `ExternalIP` in its status), the other waits
with `AddressPoolExhausted`, claims it once the first is deleted, and waits with
`AddressStillLeased` while the destroyed guest's lease lasts. A daemon killed right after it
claimed an address leaves a claim its restarted successor finds, and the deletion releases it. A
pool inside the network's DHCP range (known only on the host) is refused with
`AddressPoolConflict`, nothing claimed.

The daemon runs the LibvirtMachine controller alone (`--no-generic`) on a host name of its own;
outcomes are read from the LibvirtMachines, the IPAddresses and libvirt's network definition.
About 55 s on the development machines: three boots of the busybox guest under emulation; the
race test stops once the loser waits out the destroyed winner's lease (two minutes) rather than
waiting it out.
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lxml import etree

from libvirt_provider.driver.libvirt_networks import parse_network_dhcp
from tests.support.daemons import start_daemon, stop_daemon
from tests.support.factories import pair
from tests.support.kube import GROUP, V, apply, condition, create, get, namespace
from tests.support.lab_access import REPO, LabInfo
from tests.support.waiting import eventually

HOST = "public-host"
ADDRESS = "10.213.0.20"
MANAGED = "ipaddress.kubernetes.io/managed-by=libvirt.infrastructure.vm-api.io"


@contextmanager
def running_daemon(
    lab: LabInfo, *, crash_point: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name="e2e-public-addresses-daemon.log"
        if crash_point is None
        else "e2e-public-addresses-crash.log",
        crash_point=crash_point,
        generic=False,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            stop_daemon(proc, log)


@contextmanager
def pool_network(lab: LabInfo, api_client: client.ApiClient, address: str) -> Iterator[str]:
    """A LibvirtNetwork on the lab's DHCP network with a pool of one address."""
    name = "public-" + uuid.uuid4().hex[:6]
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(
        GROUP,
        V,
        "libvirtnetworks",
        {
            "apiVersion": f"{GROUP}/{V}",
            "kind": "LibvirtNetwork",
            "metadata": {"name": name},
            "spec": {
                "source": {"network": lab.network},
                "addressSource": "Lease",
                "addressPool": {
                    "ranges": [{"start": address, "end": address}],
                    "prefixLength": 24,
                    "gateway": "10.213.0.1",
                },
            },
        },
    )
    try:
        yield name
    finally:
        custom.delete_cluster_custom_object(GROUP, V, "libvirtnetworks", name)


@pytest.fixture(scope="module")
def catalog(lab: LabInfo) -> None:
    apply(lab, REPO / "crds")
    apply(lab, REPO / "deploy" / "samples" / "catalog.yaml")


@pytest.fixture
def ns(api_client: client.ApiClient, catalog: None) -> Iterator[str]:
    with namespace(api_client) as name:
        yield name


def public_pair(ns: str, name: str, network: str) -> list[dict[str, Any]]:
    interface = {
        "name": "eth0",
        "network": {"apiGroup": GROUP, "kind": "LibvirtNetwork", "name": network},
        "publicIP": True,
    }
    docs = pair(ns, name, vm_spec={"network": {"interfaces": [interface]}})
    docs[1]["metadata"]["labels"]["infrastructure.vm-api.io/host"] = HOST
    docs[1]["spec"]["host"] = HOST
    return docs


def claims(api_client: client.ApiClient) -> dict[str, dict[str, Any]]:
    listing = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        "networking.k8s.io", "v1", "ipaddresses", label_selector=MANAGED
    )
    return {item["metadata"]["name"]: item for item in listing["items"]}


def holder(api_client: client.ApiClient, ns: str, address: str = ADDRESS) -> str | None:
    """The machine of namespace `ns` that holds `address`, if one does."""
    claim = claims(api_client).get(address)
    parent = claim["spec"]["parentRef"] if claim is not None else {}
    return parent["name"] if parent.get("namespace") == ns else None


def reservations(virt: libvirt.virConnect, lab: LabInfo, address: str = ADDRESS) -> dict[str, str]:
    xml = virt.networkLookupByName(lab.network).XMLDesc(libvirt.VIR_NETWORK_XML_INACTIVE)
    dhcp = parse_network_dhcp(lab.network, xml)
    assert dhcp is not None
    return {mac: ip for mac, ip in dhcp.hosts.items() if ip == address}


def machine(api_client: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    found = get(api_client, ns, name, vm=False)
    assert found is not None, f"LibvirtMachine {ns}/{name} is gone"
    return found


def external(api_client: client.ApiClient, ns: str, name: str) -> list[str]:
    status = machine(api_client, ns, name).get("status") or {}
    return [a["address"] for a in status.get("addresses") or [] if a["type"] == "ExternalIP"]


def mac_of(virt: libvirt.virConnect, uid: str) -> str:
    root = etree.fromstring(virt.lookupByUUIDString(uid).XMLDesc(0).encode())
    return str(root.find("devices/interface/mac").get("address")).lower()


def delete_machine(api_client: client.ApiClient, ns: str, name: str) -> None:
    custom = client.CustomObjectsApi(api_client)
    for group, plural in (("vm-api.io", "virtualmachines"), (GROUP, "libvirtmachines")):
        try:
            custom.delete_namespaced_custom_object(group, V, ns, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
    eventually(
        lambda: get(api_client, ns, name, vm=False) is None,
        timeout=120,
        what=f"LibvirtMachine {name} deleted",
    )


def test_two_machines_race_for_the_last_address_and_the_loser_claims_it_after_a_release(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    with pool_network(lab, api_client, ADDRESS) as network, running_daemon(lab):
        create(api_client, public_pair(ns, "alpha", network) + public_pair(ns, "beta", network))
        winner = eventually(lambda: holder(api_client, ns), timeout=60, what="one machine claims")
        loser = "beta" if winner == "alpha" else "alpha"
        waiting = eventually(
            lambda: (
                (cond := condition(machine(api_client, ns, loser), "InfrastructureReady")).get(
                    "reason"
                )
                == "AddressPoolExhausted"
                and cond
            ),
            timeout=60,
            what=f"{loser} waiting for an address",
        )
        assert (
            f"all 1 addresses of the addressPool of LibvirtNetwork {network!r}"
            in (waiting["message"])
        )
        uid = machine(api_client, ns, winner)["metadata"]["uid"]
        eventually(
            lambda: external(api_client, ns, winner) == [ADDRESS],
            timeout=240,
            interval=1,
            what=f"{winner}'s guest leasing {ADDRESS}, reported as ExternalIP",
        )
        assert reservations(virt, lab) == {mac_of(virt, uid): ADDRESS}
        loser_uid = machine(api_client, ns, loser)["metadata"]["uid"]
        assert loser_uid not in [d.UUIDString() for d in virt.listAllDomains(0)]
        assert holder(api_client, ns) == winner

        delete_machine(api_client, ns, winner)
        eventually(
            lambda: holder(api_client, ns) == loser,
            timeout=60,
            interval=1,
            what=f"{loser} claiming the released address",
        )
        # The winner's guest was destroyed holding a lease on the address (two minutes): the
        # loser's domain is not made until it ends, so its guest's first request gets the
        # address. That it then does is the winner's boot above over again; waiting the two
        # minutes out here would prove nothing more, so the test stops at the wait.
        still = eventually(
            lambda: (
                (cond := condition(machine(api_client, ns, loser), "InfrastructureReady")).get(
                    "reason"
                )
                == "AddressStillLeased"
                and cond
            ),
            timeout=60,
            what=f"{loser} waiting out the destroyed guest's lease",
        )
        assert f"{ADDRESS} is still leased by the DHCP server" in still["message"]
        assert loser_uid not in [d.UUIDString() for d in virt.listAllDomains(0)]
        delete_machine(api_client, ns, loser)
        assert holder(api_client, ns) is None
        assert reservations(virt, lab) == {}


@pytest.mark.parametrize(
    "case",
    [("after-address-claim", "10.213.0.21"), ("create:after-start", "10.213.0.22")],
    ids=["after-address-claim", "create:after-start"],
)
def test_a_daemon_killed_mid_creation_leaves_a_claim_the_deletion_releases(
    lab: LabInfo,
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    ns: str,
    case: tuple[str, str],
) -> None:
    point, address = case
    # An address of its own: the one a test before it released may still be leased to that
    # test's guest for two minutes.
    with pool_network(lab, api_client, address) as network:
        create(api_client, public_pair(ns, "crashy", network))
        with running_daemon(lab, crash_point=point) as crashing:
            assert crashing.wait(timeout=120) == -signal.SIGKILL, "the crash point was not reached"
        assert holder(api_client, ns, address) == "crashy"
        uid = machine(api_client, ns, "crashy")["metadata"]["uid"]
        with running_daemon(lab):
            eventually(
                lambda: (
                    uid in [d.UUIDString() for d in virt.listAllDomains(0)]
                    and reservations(virt, lab, address) == {mac_of(virt, uid): address}
                ),
                timeout=120,
                interval=1,
                what="the restarted daemon building the machine with its claim",
            )
            assert [a for a in claims(api_client) if a == address] == [address]
            delete_machine(api_client, ns, "crashy")
        assert holder(api_client, ns, address) is None
        assert reservations(virt, lab, address) == {}
        assert uid not in [d.UUIDString() for d in virt.listAllDomains(0)]


def test_a_pool_inside_the_networks_dhcp_range_is_refused_and_nothing_is_claimed(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    # 10.213.0.150 lies in the lab network's DHCP range (.100-.250), which only the host knows.
    with pool_network(lab, api_client, "10.213.0.150") as network, running_daemon(lab):
        create(api_client, public_pair(ns, "clash", network))
        refused = eventually(
            lambda: (
                (cond := condition(machine(api_client, ns, "clash"), "InfrastructureReady")).get(
                    "reason"
                )
                == "AddressPoolConflict"
                and cond
            ),
            timeout=60,
            what="the machine refused with AddressPoolConflict",
        )
        assert "overlaps the DHCP range 10.213.0.100-10.213.0.250" in refused["message"]
        assert "10.213.0.150" not in claims(api_client)
        assert reservations(virt, lab, "10.213.0.150") == {}
        uid = machine(api_client, ns, "clash")["metadata"]["uid"]
        assert uid not in [d.UUIDString() for d in virt.listAllDomains(0)]
        delete_machine(api_client, ns, "clash")
