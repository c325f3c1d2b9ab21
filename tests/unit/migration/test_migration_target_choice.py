"""The target of a migration that names none: placement's filters, never the source, the
networks and pools the domain uses, then the least loaded."""

from __future__ import annotations

import dataclasses

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Request, Usage
from libvirt_provider.migration.target_choice import choose_target

GIB = 2**30


def _host(name: str, **change: object) -> HostView:
    view = HostView(
        name=name,
        labels={"topology.kubernetes.io/zone": "z1"},
        ready=True,
        unschedulable=False,
        cpus=8,
        memory=16 * GIB,
        pools={"pool": 100 * GIB},
        networks=frozenset({"lab"}),
    )
    return dataclasses.replace(view, **change)  # type: ignore[arg-type]


DEMAND = Demand(cpus=2, memory=4 * GIB)
REQUEST = Request(namespace="ns")


def _choose(hosts: list[HostView], **kw: object) -> tuple[str | None, str]:
    choice = choose_target(
        kw.pop("request", REQUEST),  # type: ignore[arg-type]
        source="a",
        hosts=hosts,
        allocated=kw.pop("allocated", {}),  # type: ignore[arg-type]
        demand=DEMAND,
        networks={"lab"},
        pools={"pool"},
    )
    return choice.host, choice.message


def test_never_the_source_and_the_least_loaded_of_the_others() -> None:
    hosts = [_host("a"), _host("b"), _host("c")]
    busy = {"b": Usage(cpus=6, memory=8 * GIB)}
    assert _choose(hosts, allocated=busy)[0] == "c"
    assert _choose(hosts)[0] == "b"  # a tie goes by name
    assert _choose([_host("a")]) == (None, "no host can take the machine: there is no other host")


def test_each_host_left_out_says_why() -> None:
    hosts = [
        _host("a"),
        _host("b", unschedulable=True),
        _host("c", ready=False),
        _host("d", networks=frozenset()),
        _host("e", pools={}),
        _host("f", memory=2 * GIB),
    ]
    host, message = _choose(hosts)
    assert host is None
    assert message == (
        "no host can take the machine: b: cordoned; c: not ready; d: lacks network(s) lab; "
        "e: lacks pool(s) pool; f: insufficient memory"
    )


def test_a_failure_domain_keeps_the_machine_within_it() -> None:
    hosts = [_host("a"), _host("b", labels={"topology.kubernetes.io/zone": "z2"}), _host("c")]
    assert _choose(hosts, request=Request(namespace="ns", failure_domain="z1"))[0] == "c"
