"""The contract reader: every path, missing values, and every wrong type."""

from __future__ import annotations

from typing import Any

import pytest

from generic.contract import ReportedAddress, ReportedCondition, read_provider_status


def _read(status: object) -> Any:
    return read_provider_status({"metadata": {"name": "p"}, "status": status})


def test_everything_missing_is_not_an_error() -> None:
    assert read_provider_status({"spec": {"powerState": "PoweredOn"}}) == _read(None)
    reading = _read({})
    assert reading.violations == ()
    assert reading.power_state is None
    assert reading.infrastructure_ready is None


def test_full_status_is_read() -> None:
    reading = _read(
        {
            "powerState": "PoweredOn",
            "providerID": "libvirt://host/uuid",
            "providerMetadata": {"host": "h1"},
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.5", "interface": "eth0"},
                "not-a-dict",
                {"type": "InternalDNS", "address": "web.local"},
            ],
            "conditions": [
                {"type": "InfrastructureReady", "status": "True", "reason": "Running"},
                {
                    "type": "UpToDate",
                    "status": "False",
                    "reason": "RequiresPowerOff",
                    "message": "m",
                },
                {"type": "SomethingElse", "status": 12},
                "garbage",
            ],
        }
    )
    assert reading.violations == ()
    assert reading.power_state == "PoweredOn"
    assert reading.provider_id == "libvirt://host/uuid"
    assert reading.provider_metadata == {"host": "h1"}
    assert reading.addresses == (
        ReportedAddress("InternalIP", "10.0.0.5", "eth0"),
        ReportedAddress("InternalDNS", "web.local", None),
    )
    assert reading.infrastructure_ready == ReportedCondition("True", "Running", "")
    assert reading.up_to_date == ReportedCondition("False", "RequiresPowerOff", "m")


@pytest.mark.parametrize(
    ("status", "path"),
    [
        ("a string", "status"),
        ({"powerState": 3}, "status.powerState"),
        ({"providerID": ["x"]}, "status.providerID"),
        ({"providerMetadata": "x"}, "status.providerMetadata"),
        ({"providerMetadata": {"a": 1}}, "status.providerMetadata.a"),
        ({"addresses": {"type": "InternalIP"}}, "status.addresses"),
        ({"addresses": [{"type": "Bogus", "address": "x"}]}, "status.addresses[0].type"),
        ({"addresses": [{"type": "InternalIP", "address": 5}]}, "status.addresses[0].address"),
        ({"addresses": [{"type": "InternalIP", "address": ""}]}, "status.addresses[0].address"),
        (
            {"addresses": [{"type": "InternalIP", "address": "x", "interface": 1}]},
            "status.addresses[0].interface",
        ),
        ({"conditions": "Ready"}, "status.conditions"),
        (
            {"conditions": [{"type": "InfrastructureReady", "status": True}]},
            "status.conditions[0].status",
        ),
        (
            {"conditions": [{"type": "UpToDate", "status": "True", "reason": 7}]},
            "status.conditions[0].reason",
        ),
        (
            {"conditions": [{"type": "UpToDate", "status": "True", "reason": "not a reason"}]},
            "status.conditions[0].reason",
        ),
        (
            {"conditions": [{"type": "UpToDate", "status": "True", "message": {"a": 1}}]},
            "status.conditions[0].message",
        ),
    ],
)
def test_wrong_types_are_violations_naming_the_path(status: object, path: str) -> None:
    reading = _read(status)
    assert [v.path for v in reading.violations] == [path]
    assert path in str(reading.violations[0])


def test_a_bad_path_does_not_hide_the_good_ones() -> None:
    reading = _read(
        {
            "powerState": 1,
            "providerID": "id",
            "addresses": [
                {"type": "Bogus", "address": "x"},
                {"type": "ExternalIP", "address": "y"},
            ],
            "conditions": [{"type": "InfrastructureReady", "status": "False"}],
        }
    )
    assert len(reading.violations) == 2
    assert reading.provider_id == "id"
    assert reading.addresses == (ReportedAddress("ExternalIP", "y", None),)
    assert reading.infrastructure_ready == ReportedCondition("False", None, "")


def test_empty_reason_counts_as_none_and_long_messages_are_cut() -> None:
    reading = _read(
        {
            "conditions": [
                {
                    "type": "InfrastructureReady",
                    "status": "Unknown",
                    "reason": "",
                    "message": "x" * 40000,
                }
            ]
        }
    )
    assert reading.infrastructure_ready is not None
    assert reading.infrastructure_ready.reason is None
    assert len(reading.infrastructure_ready.message) == 32768


@pytest.mark.parametrize(
    ("status", "path"),
    [
        ({"powerState": "x" * 65}, "status.powerState"),
        ({"providerID": "x" * 1025}, "status.providerID"),
        (
            {"addresses": [{"type": "InternalIP", "address": "x" * 254}]},
            "status.addresses[0].address",
        ),
        ({"providerMetadata": {"k": "x" * 4097}}, "status.providerMetadata.k"),
        ({"providerMetadata": {f"k{i}": "v" for i in range(65)}}, "status.providerMetadata"),
        (
            {"addresses": [{"type": "InternalIP", "address": f"10.0.0.{i}"} for i in range(65)]},
            "status.addresses",
        ),
    ],
)
def test_values_beyond_the_status_schema_limits_are_violations(status: object, path: str) -> None:
    reading = _read(status)
    assert [v.path for v in reading.violations] == [path]
    assert "of length" in str(reading.violations[0])
