"""Spot machines on the lab's hosts: a machine that is not spot and fits no host preempts a spot
machine on a full host; the spot machine says `Preempted` (on both objects, with an Event), is
shut down and kept with its disks on its host, and starts again by itself once the regular
machine is deleted. A spot machine pinned to a host full of regular machines is refused with a
reason that says a spot machine preempts nothing.

Capacities are shaped as the other placement tests shape them: every host but one keeps 100Mi
(no 256Mi machine fits), the one keeps room for exactly one machine. The daemons give a preempted
guest 5 s to shut down (`--preemption-grace`). 40 to 90 s: two guests booted, one twice, and a
burst of powered-off machines.
"""

from __future__ import annotations

from typing import Any

import libvirt
from kubernetes import client

from generic import constants as vmapi
from libvirt_provider import constants as c
from libvirt_provider.hosts.inventory import format_size, parse_size
from tests.support.daemons import Fleet
from tests.support.factories import unplaced
from tests.support.hosts import host_object, leave_100mi, patch_host, placed_on
from tests.support.kube import (
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    vm_status,
    wait_ready,
    wait_reason,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import connections
from tests.support.waiting import eventually

DAEMON_ARGS = ("--preemption-grace=5",)
SPOT = {"scheduling": {"spot": True}}


def leave_300mi(api: client.ApiClient, host: str) -> None:
    """Room for one 256Mi machine on `host`, not for two."""
    memory = host_object(api, host)["status"]["capacity"]["memory"]  # type: ignore[index]
    reserve = format_size(parse_size(memory) - 300 * 2**20)
    patch_host(api, host, {"spec": {"reserved": {"memory": reserve}}})
    eventually(
        lambda: (host_object(api, host) or {})["status"]["allocatable"]["memory"] == "300Mi",
        timeout=30,
        what=f"{host}'s allocatable memory down to 300Mi",
    )


def events(api: client.ApiClient, ns: str, name: str, kind: str) -> list[tuple[str, str, str]]:
    return [
        (e.type, e.reason, e.message)
        for e in client.CoreV1Api(api).list_namespaced_event(ns).items
        if e.involved_object.name == name and e.involved_object.kind == kind
    ]


def state(conn: libvirt.virConnect, domain: str) -> int:
    return int(conn.lookupByName(domain).state()[0])


def preemptible(api: client.ApiClient, host: str) -> dict[str, Any]:
    allocated = (host_object(api, host) or {})["status"]["allocated"]
    return dict(allocated.get("preemptible") or {})


def test_a_regular_machine_preempts_a_spot_machine_which_starts_again_once_it_is_gone(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    target, *others = (h.name for h in lab.hosts)
    for host in others:
        leave_100mi(api_client, host)
    leave_300mi(api_client, target)
    create(api_client, unplaced(ns, "spot", vm_spec=SPOT, running=True))
    assert placed_on(api_client, ns, "spot") == target
    wait_ready(api_client, ns, "spot", what="the spot machine booted and Ready")
    spot_domain = domain_of(api_client, ns, "spot")
    uid = get(api_client, ns, "spot", vm=False)["metadata"]["uid"]  # type: ignore[index]
    eventually(
        lambda: preemptible(api_client, target) == {"cpus": 1, "memory": "256Mi", "machines": 1},
        timeout=30,
        what=f"{target} showing the spot machine's part of its allocation as preemptible",
    )

    create(api_client, unplaced(ns, "regular", running=True))
    cond = wait_reason(api_client, ns, "spot", vmapi.REASON_PREEMPTED, what="spot Preempted")
    assert f"to make room for {ns}/regular" in cond["message"], cond
    vm_cond = wait_reason(
        api_client, ns, "spot", vmapi.REASON_PREEMPTED, vm=True, what="its VM saying so too"
    )
    assert vm_cond["status"] == "False"
    assert vm_status(api_client, ns, "spot").get("failureReason") == vmapi.REASON_PREEMPTED
    said = events(api_client, ns, "spot", c.MACHINE_KIND)
    assert any(t == "Warning" and r == vmapi.REASON_PREEMPTED for t, r, _ in said), said
    assert placed_on(api_client, ns, "regular") == target
    with connections(lab) as conns:
        eventually(
            lambda: state(conns[target], spot_domain) == libvirt.VIR_DOMAIN_SHUTOFF,
            timeout=60,
            what="the preempted guest shut down (gracefully or after its 5 s)",
        )
    wait_ready(api_client, ns, "regular", what="the regular machine booted on the spot's room")
    said = events(api_client, ns, "regular", c.MACHINE_KIND)
    assert any(r == c.EVENT_PREEMPTING and "spot" in m for _t, r, m in said), said
    # It waited for the spot machine to be off quietly: never refused, never warned.
    assert not any(r == c.REASON_NOT_ADMITTED for _t, r, _m in said), said
    spot = get(api_client, ns, "spot", vm=False) or {}
    # Kept where it was, with its domain (and disks): the same machine, off.
    assert spot["spec"]["host"] == target
    assert spot["status"]["powerState"] == vmapi.POWERED_OFF
    assert spot["status"]["preemption"]["preemptedFor"] == f"{ns}/regular"
    eventually(
        lambda: preemptible(api_client, target) == {},
        timeout=30,
        what="nothing preemptible left on the host once the spot machine is off",
    )

    delete_vm_and_wait(api_client, ns, "regular", what="the regular machine deleted")
    wait_ready(api_client, ns, "spot", what="the spot machine started again by itself")
    spot = get(api_client, ns, "spot", vm=False) or {}
    assert spot["metadata"]["uid"] == uid
    assert "preemption" not in spot["status"]
    assert domain_of(api_client, ns, "spot") == spot_domain
    assert vm_status(api_client, ns, "spot").get("failureReason") is None
    said = events(api_client, ns, "spot", c.MACHINE_KIND)
    assert any(r == c.EVENT_PREEMPTION_ENDED for _t, r, _m in said), said


def test_a_spot_machine_pinned_to_a_host_full_of_regular_machines_is_refused_readably(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    target = lab.hosts[1].name
    leave_300mi(api_client, target)
    # Powered off: a machine that is built takes its room whether or not it runs.
    regular = unplaced(ns, "regular")
    regular[1]["spec"]["host"] = target
    create(api_client, regular)
    eventually(
        lambda: (
            (get(api_client, ns, "regular", vm=False) or {}).get("status", {}).get("providerID")
        ),
        timeout=60,
        what="the regular machine built on its host",
    )
    spot = unplaced(ns, "spot", vm_spec=SPOT, running=True)
    spot[1]["spec"]["host"] = target
    create(api_client, spot)
    cond = wait_reason(api_client, ns, "spot", c.REASON_NOT_ADMITTED, what="spot not admitted")
    assert cond["message"].startswith(
        f"host {target} does not admit this machine: insufficient memory (needs 256Mi) "
        "(a spot machine preempts nothing: it runs where there is room)"
    ), cond
    regular_obj = get(api_client, ns, "regular", vm=False) or {}
    assert "preemption" not in regular_obj.get("status", {})
    assert regular_obj["status"]["powerState"] == vmapi.POWERED_OFF


def test_a_burst_of_regular_machines_preempts_only_what_it_needs(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    """Room for three machines on one host, three spot machines there (powered off: built and
    counted, no guest to boot), then two regular machines at once: two spot machines are
    preempted, the third stays; deleting the regular machines lets the two come back."""
    target, *others = (h.name for h in lab.hosts)
    for host in others:
        leave_100mi(api_client, host)
    memory = host_object(api_client, target)["status"]["capacity"]["memory"]  # type: ignore[index]
    reserve = format_size(parse_size(memory) - 800 * 2**20)
    patch_host(api_client, target, {"spec": {"reserved": {"memory": reserve}}})
    spots = [f"spot-{i}" for i in range(3)]
    for name in spots:
        create(api_client, unplaced(ns, name, vm_spec=SPOT))
    for name in spots:
        assert placed_on(api_client, ns, name) == target
    eventually(
        lambda: preemptible(api_client, target).get("machines") == 3,
        timeout=60,
        what="the three spot machines built and counted",
    )
    create(api_client, [*unplaced(ns, "regular-0"), *unplaced(ns, "regular-1")])
    for name in ("regular-0", "regular-1"):
        assert placed_on(api_client, ns, name) == target

    def marked() -> list[str]:
        return [
            n
            for n in spots
            if ((get(api_client, ns, n, vm=False) or {}).get("status") or {}).get("preemption")
        ]

    eventually(lambda: len(marked()) == 2, timeout=30, what="two spot machines preempted")
    for name in ("regular-0", "regular-1"):
        eventually(
            lambda name=name: (
                (get(api_client, ns, name, vm=False) or {}).get("status", {}).get("providerID")
            ),
            timeout=60,
            what=f"{name} built on the room of a spot machine",
        )
    assert len(marked()) == 2  # never a third
    eventually(
        lambda: preemptible(api_client, target).get("machines") == 1,
        timeout=30,
        what="one spot machine left counted on the host",
    )
    for name in ("regular-0", "regular-1"):
        delete_vm_and_wait(api_client, ns, name, what=f"{name} deleted")
    eventually(lambda: marked() == [], timeout=60, what="both preempted machines back")
