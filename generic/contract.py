"""The provider status contract: read a provider object, as a plain dict, into typed facts.

The generic controller serves any provider kind, so it never imports provider types; this reader
is the only place that knows the contract paths (contract.md section 2). It reads `status` only,
never `spec`. A missing path is normal (the provider may still be converging) and yields None.
A value of the wrong type yields a `ContractViolationError` naming the path; the reading still holds
every path that was valid, so one bad field does not hide the rest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from generic import constants as c
from generic.errors import ContractViolationError

__all__ = ["ProviderReading", "ReportedAddress", "ReportedCondition", "read_provider_status"]

_REASON_RE = re.compile(c.CONDITION_REASON_PATTERN)
_CONDITION_STATUSES = (c.STATUS_TRUE, c.STATUS_FALSE, c.STATUS_UNKNOWN)


@dataclass(frozen=True)
class ReportedCondition:
    """A condition as the provider reported it; reason None when it gave none."""

    status: str
    reason: str | None
    message: str


@dataclass(frozen=True)
class ReportedAddress:
    """One entry of status.addresses."""

    type: str
    address: str
    interface: str | None


@dataclass(frozen=True)
class ProviderReading:
    """Everything the contract lets the generic controller know about a provider object."""

    power_state: str | None = None
    provider_id: str | None = None
    addresses: tuple[ReportedAddress, ...] = ()
    provider_metadata: Mapping[str, str] | None = None
    infrastructure_ready: ReportedCondition | None = None
    up_to_date: ReportedCondition | None = None
    violations: tuple[ContractViolationError, ...] = field(default=())


class _Reader:
    def __init__(self) -> None:
        self.violations: list[ContractViolationError] = []

    def optional_str(
        self, data: Mapping[str, Any], key: str, path: str, *, max_length: int
    ) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        return self._str(value, path, max_length=max_length)

    def _str(self, value: object, path: str, *, max_length: int) -> str | None:
        if not isinstance(value, str):
            self.violations.append(ContractViolationError(path, "a string", value))
            return None
        if len(value) > max_length:
            expected = f"a string of at most {max_length} characters"
            self.violations.append(ContractViolationError(path, expected, value))
            return None
        return value

    def addresses(self, value: object) -> tuple[ReportedAddress, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.violations.append(ContractViolationError("status.addresses", "a list", value))
            return ()
        found: list[ReportedAddress] = []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue  # the contract says: skipped
            found.extend(self._address(item, f"status.addresses[{index}]"))
        if len(found) > c.ADDRESSES_MAX:
            expected = f"at most {c.ADDRESSES_MAX} addresses"
            self.violations.append(ContractViolationError("status.addresses", expected, value))
            found = found[: c.ADDRESSES_MAX]
        return tuple(found)

    def _address(self, item: Mapping[str, Any], path: str) -> list[ReportedAddress]:
        kind = item.get("type")
        address = item.get("address")
        interface = self.optional_str(
            item, "interface", f"{path}.interface", max_length=c.ADDRESS_MAX
        )
        if kind not in c.ADDRESS_TYPES:
            expected = "one of " + ", ".join(c.ADDRESS_TYPES)
            self.violations.append(ContractViolationError(f"{path}.type", expected, kind))
            return []
        if address == "":
            self.violations.append(
                ContractViolationError(f"{path}.address", "a non-empty string", address)
            )
            return []
        checked = self._str(address, f"{path}.address", max_length=c.ADDRESS_MAX)
        if checked is None:
            return []
        return [ReportedAddress(type=kind, address=checked, interface=interface)]

    def metadata(self, value: object) -> Mapping[str, str] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self.violations.append(
                ContractViolationError("status.providerMetadata", "a map", value)
            )
            return None
        if len(value) > c.PROVIDER_METADATA_ENTRIES_MAX:
            expected = f"a map of at most {c.PROVIDER_METADATA_ENTRIES_MAX} entries"
            self.violations.append(
                ContractViolationError("status.providerMetadata", expected, value)
            )
            return None
        good: dict[str, str] = {}
        for key, item in value.items():
            path = f"status.providerMetadata.{key}"
            checked = self._str(item, path, max_length=c.PROVIDER_METADATA_VALUE_MAX)
            if checked is not None:
                good[str(key)] = checked
        return good

    def conditions(self, value: object) -> dict[str, ReportedCondition]:
        if value is None:
            return {}
        if not isinstance(value, list):
            self.violations.append(ContractViolationError("status.conditions", "a list", value))
            return {}
        found: dict[str, ReportedCondition] = {}
        wanted = (c.CONDITION_INFRASTRUCTURE_READY, c.CONDITION_UP_TO_DATE)
        for index, item in enumerate(value):
            if not isinstance(item, dict) or item.get("type") not in wanted:
                continue
            condition = self._condition(item, f"status.conditions[{index}]")
            if condition is not None:
                found[item["type"]] = condition
        return found

    def _condition(self, item: Mapping[str, Any], path: str) -> ReportedCondition | None:
        status = item.get("status")
        if status not in _CONDITION_STATUSES:
            expected = "one of True, False, Unknown"
            self.violations.append(ContractViolationError(f"{path}.status", expected, status))
            return None
        reason = self.optional_str(item, "reason", f"{path}.reason", max_length=1024)
        if reason == "":
            reason = None
        if reason is not None and not _REASON_RE.match(reason):
            self.violations.append(
                ContractViolationError(f"{path}.reason", "a CamelCase condition reason", reason)
            )
            reason = None
        message = self._message(item.get("message"), f"{path}.message")
        return ReportedCondition(status=status, reason=reason, message=message)

    def _message(self, value: object, path: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.violations.append(ContractViolationError(path, "a string", value))
            return ""
        return value[: c.CONDITION_MESSAGE_MAX]  # a long message is cut, not refused


def read_provider_status(provider: Mapping[str, Any]) -> ProviderReading:
    """Read the contract paths of `provider` (a whole object as returned by the API server)."""
    reader = _Reader()
    status = provider.get("status")
    if status is None:
        return ProviderReading()
    if not isinstance(status, dict):
        return ProviderReading(violations=(ContractViolationError("status", "an object", status),))
    conditions = reader.conditions(status.get("conditions"))
    return ProviderReading(
        power_state=reader.optional_str(
            status, "powerState", "status.powerState", max_length=c.POWER_STATE_MAX
        ),
        provider_id=reader.optional_str(
            status, "providerID", "status.providerID", max_length=c.PROVIDER_ID_MAX
        ),
        addresses=reader.addresses(status.get("addresses")),
        provider_metadata=reader.metadata(status.get("providerMetadata")),
        infrastructure_ready=conditions.get(c.CONDITION_INFRASTRUCTURE_READY),
        up_to_date=conditions.get(c.CONDITION_UP_TO_DATE),
        violations=tuple(reader.violations),
    )
