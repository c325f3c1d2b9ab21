"""Per-machine metrics on the daemon's /metrics, from a real guest: its CPU time grows, its
disk and NIC series carry its namespace and name, and once the machine is deleted its series
are gone (issue 29; docs/metrics.md).

One busybox guest is booted for the module and shared; the last test deletes it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.support.factories import HOST, pair
from tests.support.kube import create, delete_vm_and_wait, namespace, wait_ready
from tests.support.waiting import eventually

NAME = "metered"
BOOT_TIMEOUT = 240

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class Guest:
    ns: str
    name: str


def _scrape(base: str) -> Series:
    with urllib.request.urlopen(f"{base}/metrics", timeout=15) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _of(series: Series, guest: Guest, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`metric`'s samples for the guest, by their labels."""
    own = {("namespace", guest.ns), ("name", guest.name), ("host", HOST)}
    return {labels: v for (m, labels), v in series.items() if m == metric and own <= set(labels)}


def _machine_series(series: Series, guest: Guest) -> list[str]:
    return sorted(
        m
        for (m, labels), _ in series.items()
        if m.startswith("vmapi_machine_")
        and ("namespace", guest.ns) in labels
        and ("name", guest.name) in labels
    )


@pytest.fixture(scope="module")
def guest(api_client: client.ApiClient, daemon: str) -> Iterator[Guest]:
    with namespace(api_client) as ns:
        create(api_client, pair(ns, NAME))
        wait_ready(api_client, ns, NAME, timeout=BOOT_TIMEOUT, what=f"{NAME} Ready")
        yield Guest(ns, NAME)


def test_the_machines_cpu_time_grows_between_two_scrapes(daemon: str, guest: Guest) -> None:
    def cpu() -> float | None:
        found = _of(_scrape(daemon), guest, "vmapi_machine_cpu_seconds_total")
        assert len(found) == 1, f"no single CPU series for {guest}: {found}"
        return next(iter(found.values())) or None

    first = eventually(cpu, timeout=60, what="the machine's CPU time on /metrics")
    eventually(lambda: (cpu() or 0.0) > first, timeout=60, what="the machine's CPU time growing")


def test_the_machines_disk_nic_and_memory_series_carry_its_name(daemon: str, guest: Guest) -> None:
    series = _scrape(daemon)
    disks = _of(series, guest, "vmapi_machine_disk_read_bytes_total")
    assert disks, f"no disk series for {guest}"
    assert all(dict(labels)["drive"] for labels in disks)
    # The guest booted from its disk: something was read.
    assert max(disks.values()) > 0
    for metric in (
        "vmapi_machine_disk_write_requests_total",
        "vmapi_machine_disk_read_seconds_total",
        "vmapi_machine_network_receive_bytes_total",
        "vmapi_machine_network_transmit_packets_total",
        "vmapi_machine_network_receive_drops_total",
        "vmapi_machine_vcpus",
        "vmapi_machine_memory_actual_bytes",
        "vmapi_machine_memory_rss_bytes",
    ):
        assert _of(series, guest, metric), f"no {metric} for {guest}"
    nics = _of(series, guest, "vmapi_machine_network_transmit_bytes_total")
    assert all(dict(labels)["interface"] for labels in nics)
    assert series[("vmapi_machine_stats_partial", (("host", HOST),))] == 0.0


def test_the_host_its_machines_and_the_leader_are_reported(daemon: str, guest: Guest) -> None:
    series = _scrape(daemon)
    host = (("host", HOST),)
    assert series[("vmapi_host_ready", host)] == 1.0
    assert series[("vmapi_host_allocatable_cpus", host)] > 0
    assert series[("vmapi_host_allocated_machines", host)] >= 1
    assert any(m == "vmapi_host_pool_available_bytes" for m, _ in series)
    running = {
        dict(labels)["reason"]: v
        for (m, labels), v in series.items()
        if m == "vmapi_host_machines" and ("power_state", "PoweredOn") in labels
    }
    assert sum(running.values()) >= 1, f"no running machine counted: {running}"
    # The module's daemon leads the generic controller (the fixture waited for it).
    assert series[("vmapi_generic_leader", ())] == 1.0
    # The host's machine queue is served (empty or a few entries: nothing piles up here).
    assert 0 <= series[("vmapi_libvirt_machine_queue_depth", host)] < 10


def test_a_deleted_machines_series_are_gone(
    api_client: client.ApiClient, daemon: str, guest: Guest
) -> None:
    assert _machine_series(_scrape(daemon), guest)
    delete_vm_and_wait(api_client, guest.ns, guest.name, what=f"{guest.name} deleted")
    eventually(
        lambda: not _machine_series(_scrape(daemon), guest),
        timeout=30,
        what="the deleted machine's series gone from /metrics",
    )
