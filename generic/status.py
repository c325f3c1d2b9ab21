"""Status computation: from what was observed about the provider to the VM's whole status.

Pure: given the VM, the link assessment and the provider reading, it returns the status the VM
should have, and the merge patch that gets it there (None when nothing changed, so an unchanged
status is never written).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from generic import constants as c
from generic.api import VirtualMachineStatus
from generic.conditions import DesiredCondition, merge_conditions
from generic.contract import ProviderReading, ReportedCondition
from generic.linking import Link, LinkAssessment

__all__ = ["Observation", "desired_status"]


@dataclass(frozen=True)
class Observation:
    """Everything gathered about a VM's provider object in one reconcile."""

    assessment: LinkAssessment
    reading: ProviderReading | None = None
    """Set only for an adopted provider: an unlinked object's status is never read."""
    deleting: bool = False
    awaited: bool = False
    """The provider object is missing, but the VM is new: it may be on its way."""


def _both(status: str, reason: str, message: str) -> list[DesiredCondition]:
    return [
        DesiredCondition(c.CONDITION_READY, status, reason, message),
        DesiredCondition(c.CONDITION_INFRASTRUCTURE_READY, status, reason, message),
    ]


def _mirror(type_: str, reported: ReportedCondition) -> DesiredCondition:
    return DesiredCondition(
        type_, reported.status, reported.reason or c.REASON_REPORTED, reported.message
    )


_VIOLATIONS_LISTED = 10


def _violations_message(reading: ProviderReading) -> str:
    listed = [str(v) for v in reading.violations[:_VIOLATIONS_LISTED]]
    more = len(reading.violations) - len(listed)
    if more:
        listed.append(f"and {more} more")
    message = "provider status breaks the vm-api.io contract: " + "; ".join(listed)
    return message[: c.CONDITION_MESSAGE_MAX]


def _conditions(observation: Observation) -> list[DesiredCondition]:
    assessment = observation.assessment
    reading = observation.reading
    if observation.awaited:
        return _both(
            c.STATUS_UNKNOWN, c.REASON_WAITING, f"{assessment.message}; waiting for it to appear"
        )
    if assessment.link is not Link.ADOPTED or reading is None:
        return _both(c.STATUS_FALSE, c.REASON_NOT_ADOPTED, assessment.message)
    wanted: list[DesiredCondition] = []
    if reading.violations:
        wanted = _both(
            c.STATUS_FALSE, c.REASON_INVALID_PROVIDER_STATUS, _violations_message(reading)
        )
    elif reading.infrastructure_ready is None:
        wanted = _both(
            c.STATUS_UNKNOWN,
            c.REASON_WAITING,
            "provider object adopted; waiting for it to report InfrastructureReady",
        )
    else:
        infra = _mirror(c.CONDITION_INFRASTRUCTURE_READY, reading.infrastructure_ready)
        ready = DesiredCondition(c.CONDITION_READY, infra.status, infra.reason, infra.message)
        wanted = [ready, infra]
    if reading.up_to_date is not None:
        wanted.append(_mirror(c.CONDITION_UP_TO_DATE, reading.up_to_date))
    return wanted


def _failure(reading: ProviderReading | None) -> tuple[str, str] | None:
    if reading is None:
        return None
    for reported in (reading.infrastructure_ready, reading.up_to_date):
        if (
            reported is not None
            and reported.status == c.STATUS_FALSE
            and reported.reason in c.TERMINAL_REASONS
        ):
            return reported.reason, reported.message
    return None


def desired_status(vm: Mapping[str, Any], observation: Observation, *, now: str) -> dict[str, Any]:
    """The complete status the VM should carry, in wire form."""
    current = vm.get("status") if isinstance(vm.get("status"), dict) else {}
    assert isinstance(current, dict)
    generation = vm.get("metadata", {}).get("generation")
    wanted = _conditions(observation)
    if observation.deleting:
        wanted = [w for w in wanted if w.type != c.CONDITION_READY]
        wanted.insert(
            0,
            DesiredCondition(
                c.CONDITION_READY,
                c.STATUS_FALSE,
                c.REASON_DELETING,
                "the VM is being deleted; waiting for its provider object to be gone",
            ),
        )
    conditions = merge_conditions(current.get("conditions"), wanted, generation=generation, now=now)
    reading = observation.reading
    ready_infra = next(w for w in wanted if w.type == c.CONDITION_INFRASTRUCTURE_READY)
    status: dict[str, Any] = {
        "ready": ready_infra.status == c.STATUS_TRUE and not observation.deleting,
        "conditions": conditions,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if reading is not None and observation.assessment.link is Link.ADOPTED:
        status["powerState"] = reading.power_state
        status["providerID"] = reading.provider_id
        status["providerMetadata"] = (
            dict(reading.provider_metadata) if reading.provider_metadata is not None else None
        )
        status["addresses"] = [
            {"type": a.type, "address": a.address, "interface": a.interface}
            for a in reading.addresses
        ] or None
        failure = _failure(reading)
        if failure is not None:
            status["failureReason"], status["failureMessage"] = failure
    validated = VirtualMachineStatus.model_validate(status)
    return validated.model_dump(by_alias=True, exclude_none=True)
