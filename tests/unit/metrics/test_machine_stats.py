"""The pure mapping from one bulk-stats record to samples: names, labels, units, and what a
domain does not report left out; and which machine a domain is."""

from __future__ import annotations

import pytest

from libvirt_provider.driver.types import DomainStats
from libvirt_provider.metrics.machine_stats import (
    FAMILIES,
    Kind,
    MachineIdentity,
    MachineIndex,
    machine_samples,
)
from libvirt_provider.naming import domain_name

UUID = "6f1c1a8e-0c4e-4c8e-9a7e-2b1f1c0d0e01"

# A record as qemu's driver returns it for a running guest with a balloon, one disk, one NIC.
FULL = {
    "state.state": 1,
    "state.reason": 1,
    "cpu.time": 2_500_000_000,
    "cpu.user": 1_000_000_000,
    "vcpu.current": 2,
    "vcpu.maximum": 4,
    "balloon.current": 524_288,
    "balloon.maximum": 524_288,
    "balloon.available": 480_000,
    "balloon.unused": 300_000,
    "balloon.rss": 200_000,
    "block.count": 1,
    "block.0.name": "vda",
    "block.0.rd.reqs": 10,
    "block.0.rd.bytes": 40960,
    "block.0.rd.times": 3_000_000,
    "block.0.wr.reqs": 5,
    "block.0.wr.bytes": 20480,
    "block.0.wr.times": 7_000_000_000,
    "net.count": 1,
    "net.0.name": "vnet3",
    "net.0.rx.bytes": 1000,
    "net.0.rx.pkts": 10,
    "net.0.rx.errs": 1,
    "net.0.rx.drop": 2,
    "net.0.tx.bytes": 2000,
    "net.0.tx.pkts": 20,
    "net.0.tx.errs": 3,
    "net.0.tx.drop": 4,
}


def _by_name(values: dict[str, object]) -> dict[tuple[str, tuple[str, ...]], float]:
    samples = machine_samples(
        DomainStats(UUID, "d", values), host="h1", namespace="team", name="web"
    )
    return {(s.family.exposed, s.labels): s.value for s in samples}


def test_a_full_record_becomes_every_family_in_its_unit() -> None:
    got = _by_name(FULL)
    base = ("team", "web", "h1")
    vda = (*base, "vda")
    nic = (*base, "vnet3")
    assert got == {
        ("vmapi_machine_domain_state", base): 1.0,
        ("vmapi_machine_cpu_seconds_total", base): 2.5,
        ("vmapi_machine_vcpus", base): 2.0,
        ("vmapi_machine_memory_actual_bytes", base): 524_288 * 1024.0,
        ("vmapi_machine_memory_available_bytes", base): 480_000 * 1024.0,
        ("vmapi_machine_memory_unused_bytes", base): 300_000 * 1024.0,
        ("vmapi_machine_memory_rss_bytes", base): 200_000 * 1024.0,
        ("vmapi_machine_disk_read_bytes_total", vda): 40960.0,
        ("vmapi_machine_disk_write_bytes_total", vda): 20480.0,
        ("vmapi_machine_disk_read_requests_total", vda): 10.0,
        ("vmapi_machine_disk_write_requests_total", vda): 5.0,
        ("vmapi_machine_disk_read_seconds_total", vda): pytest.approx(0.003),
        ("vmapi_machine_disk_write_seconds_total", vda): pytest.approx(7.0),
        ("vmapi_machine_network_receive_bytes_total", nic): 1000.0,
        ("vmapi_machine_network_receive_packets_total", nic): 10.0,
        ("vmapi_machine_network_receive_errors_total", nic): 1.0,
        ("vmapi_machine_network_receive_drops_total", nic): 2.0,
        ("vmapi_machine_network_transmit_bytes_total", nic): 2000.0,
        ("vmapi_machine_network_transmit_packets_total", nic): 20.0,
        ("vmapi_machine_network_transmit_errors_total", nic): 3.0,
        ("vmapi_machine_network_transmit_drops_total", nic): 4.0,
    }


def test_what_a_domain_does_not_report_is_left_out_not_zero() -> None:
    # No balloon driver in the guest: libvirt reports the current size only.
    values = {k: v for k, v in FULL.items() if k not in ("balloon.available", "balloon.unused")}
    got = {name for name, _ in _by_name(values)}
    assert "vmapi_machine_memory_actual_bytes" in got
    assert "vmapi_machine_memory_available_bytes" not in got
    assert "vmapi_machine_memory_unused_bytes" not in got
    # The test driver's record: the state only.
    assert _by_name({"state.state": 1, "state.reason": 0}) == {
        ("vmapi_machine_domain_state", ("team", "web", "h1")): 1.0
    }


def test_devices_are_labelled_each_and_nameless_or_non_numeric_fields_dropped() -> None:
    values: dict[str, object] = {
        "block.count": 3,
        "block.0.name": "vda",
        "block.0.rd.bytes": 1,
        "block.1.rd.bytes": 99,  # no name: cannot be labelled, dropped
        "block.2.name": "vdb",
        "block.2.rd.bytes": 2,
        "block.2.wr.bytes": "lots",  # not a number
        "cpu.time": True,  # a bool is not a count
    }
    got = _by_name(values)
    assert got == {
        ("vmapi_machine_disk_read_bytes_total", ("team", "web", "h1", "vda")): 1.0,
        ("vmapi_machine_disk_read_bytes_total", ("team", "web", "h1", "vdb")): 2.0,
    }


def test_names_follow_prometheus_conventions_under_one_prefix() -> None:
    names = [f.exposed for f in FAMILIES]
    assert len(names) == len(set(names))
    for family in FAMILIES:
        assert family.exposed.startswith("vmapi_machine_")
        assert family.labels[:3] == ("namespace", "name", "host")
        assert family.exposed.endswith("_total") == (family.kind is Kind.COUNTER)
        if "seconds" in family.name or "bytes" in family.name:
            assert family.name.endswith(("_seconds", "_bytes"))


def test_a_domain_is_its_machines_by_uuid_only() -> None:
    """A machine's domain has the machine's uid as UUID; a domain that holds a machine's name
    under another UUID is foreign (the reconciler refuses it), so it gets none of its series."""
    index = MachineIndex(
        [MachineIdentity("team", "web", UUID), MachineIdentity("team", "db", "uid-2")]
    )
    assert index.find(DomainStats(UUID.upper(), "whatever", {})) == ("team", "web")
    assert index.find(DomainStats("other", domain_name("team", "db", "uid-2"), {})) is None
    assert index.find(DomainStats("other", "foreign-domain", {})) is None
    assert len(index) == 2
