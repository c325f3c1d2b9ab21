"""The power state machine: desired power state x observed domain state -> the next action.

Pure: the controller passes in what it observed and when it first asked the guest to shut down, and
gets back one action to take now plus the power state to report. Every libvirt domain state is
mapped explicitly; a paused domain is not off.

What `Suspended` means here: libvirt's *managed save*. Memory is written to a file beside the
domain and the qemu process stops, so a suspended machine holds no host CPU or RAM; the next start
resumes exactly where it was. (A plain pause keeps the qemu process and all its memory; it is what
libvirt calls "paused", and this provider reports it as `Paused`, never as off or suspended.)

Power-off modes, as the API defines them: `Hard` destroys at once; `Soft` asks the guest to power
off (the adapter asks its guest agent if one is connected, else presses the ACPI power button),
asks again every `resend_interval`, and after `timeout` reports that the guest did not comply
without forcing it; `TrySoft` does the same but destroys the domain once `timeout` passes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from generic.api import PowerOffMode, PowerState
from generic.constants import (
    POWER_OFF_HARD,
    POWER_OFF_SOFT,
    POWER_OFF_TRY_SOFT,
    POWERED_OFF,
    POWERED_ON,
    SUSPENDED,
)
from libvirt_provider.driver.types import DomainState, DomainStatus

__all__ = [
    "ON_STATES",
    "PAUSED",
    "PowerAction",
    "PowerDecision",
    "decide_power",
    "is_settled",
    "observed_power_state",
]

PAUSED = "Paused"
"""Reported for a domain whose vCPUs are stopped but whose memory is still held by qemu."""

CRASHED = "Crashed"
"""Reported for a domain libvirt keeps in the crashed state (on_crash=preserve)."""


class PowerAction(enum.Enum):
    NONE = "none"
    START = "start"  # also restores a managed-save image
    RESUME = "resume"  # unpause
    WAKE = "wake"  # from guest-initiated suspend to RAM
    SHUTDOWN = "shutdown"  # guest agent if connected, else ACPI power button
    DESTROY = "destroy"
    MANAGED_SAVE = "managed-save"
    DISCARD_SAVED_STATE = "discard-saved-state"


@dataclass(frozen=True)
class PowerDecision:
    action: PowerAction
    # True when the machine is where the spec wants it (nothing left to do).
    settled: bool
    # A condition-worthy explanation when the machine cannot get there by itself.
    problem: str | None = None
    # Set when this decision starts a graceful shutdown; the caller records it and passes it back.
    graceful_started: bool = False


ON_STATES = frozenset({DomainState.RUNNING, DomainState.BLOCKED})


def is_settled(desired: PowerState, status: DomainStatus) -> bool:
    """Whether the domain is where `desired` wants it, whatever the power-off mode: the same
    answer as `decide_power(...).settled`, without the timing a decision needs."""
    if desired == POWERED_ON:
        return status.state in ON_STATES
    if desired == SUSPENDED:
        return status.state is DomainState.SHUTOFF
    if desired == POWERED_OFF:
        return status.state is DomainState.SHUTOFF and not status.has_managed_save
    return False


def observed_power_state(status: DomainStatus | None) -> str | None:
    """The contract's status.powerState for an observed domain; None while it is in transition."""
    if status is None:
        return None
    match status.state:
        case DomainState.RUNNING | DomainState.BLOCKED:
            return POWERED_ON
        case DomainState.PAUSED:
            return PAUSED
        case DomainState.SHUTOFF:
            return SUSPENDED if status.has_managed_save else POWERED_OFF
        case DomainState.PMSUSPENDED:
            return SUSPENDED
        case DomainState.CRASHED:
            return CRASHED
        case DomainState.SHUTTING_DOWN | DomainState.NOSTATE:
            return None


def decide_power(
    *,
    desired: PowerState,
    mode: PowerOffMode,
    status: DomainStatus,
    now: datetime,
    graceful_since: datetime | None,
    last_graceful_request: datetime | None,
    timeout: timedelta,
    resend_interval: timedelta = timedelta(seconds=10),
) -> PowerDecision:
    """The one action that moves an existing domain toward `desired` now."""
    if desired == POWERED_ON:
        return _toward_on(status)
    if desired == SUSPENDED:
        return _toward_suspended(status)
    if desired == POWERED_OFF:
        return _toward_off(
            status=status,
            mode=mode,
            now=now,
            graceful_since=graceful_since,
            last_graceful_request=last_graceful_request,
            timeout=timeout,
            resend_interval=resend_interval,
        )
    return PowerDecision(
        PowerAction.NONE, settled=False, problem=f"unknown power state {desired!r}"
    )


def _toward_on(status: DomainStatus) -> PowerDecision:
    if status.paused_by_io_error:
        return PowerDecision(
            PowerAction.NONE,
            settled=False,
            problem="qemu paused the guest after a disk write failed (is the storage pool "
            "full?); it is not resumed until that is fixed: free space, then resume it with "
            "virsh or power-cycle the VM",
        )
    match status.state:
        case DomainState.RUNNING | DomainState.BLOCKED:
            return PowerDecision(PowerAction.NONE, settled=True)
        case DomainState.SHUTOFF:
            return PowerDecision(PowerAction.START, settled=False)
        case DomainState.PAUSED:
            return PowerDecision(PowerAction.RESUME, settled=False)
        case DomainState.PMSUSPENDED:
            return PowerDecision(PowerAction.WAKE, settled=False)
        case DomainState.CRASHED:
            # A preserved crashed domain must be destroyed before it can start again.
            return PowerDecision(PowerAction.DESTROY, settled=False)
        case DomainState.SHUTTING_DOWN | DomainState.NOSTATE:
            return PowerDecision(PowerAction.NONE, settled=False)


def _toward_suspended(status: DomainStatus) -> PowerDecision:
    match status.state:
        case DomainState.SHUTOFF if status.has_managed_save:
            return PowerDecision(PowerAction.NONE, settled=True)
        case DomainState.SHUTOFF:
            # Nothing in memory to keep: an off machine asked to suspend stays off.
            return PowerDecision(
                PowerAction.NONE,
                settled=True,
                problem="the machine is powered off; Suspended keeps a running machine's memory, "
                "so there is nothing to suspend",
            )
        case DomainState.RUNNING | DomainState.BLOCKED | DomainState.PAUSED:
            return PowerDecision(PowerAction.MANAGED_SAVE, settled=False)
        case DomainState.PMSUSPENDED:
            return PowerDecision(PowerAction.WAKE, settled=False)
        case DomainState.CRASHED:
            return PowerDecision(PowerAction.DESTROY, settled=False)
        case DomainState.SHUTTING_DOWN | DomainState.NOSTATE:
            return PowerDecision(PowerAction.NONE, settled=False)


def _toward_off(
    *,
    status: DomainStatus,
    mode: PowerOffMode,
    now: datetime,
    graceful_since: datetime | None,
    last_graceful_request: datetime | None,
    timeout: timedelta,
    resend_interval: timedelta,
) -> PowerDecision:
    state = status.state
    if state is DomainState.SHUTOFF:
        if status.has_managed_save:
            # Powered off means a cold boot next time: drop the saved memory.
            return PowerDecision(PowerAction.DISCARD_SAVED_STATE, settled=False)
        return PowerDecision(PowerAction.NONE, settled=True)
    if state is DomainState.CRASHED or mode == POWER_OFF_HARD:
        return PowerDecision(PowerAction.DESTROY, settled=False)
    if mode not in (POWER_OFF_SOFT, POWER_OFF_TRY_SOFT):
        return PowerDecision(
            PowerAction.NONE, settled=False, problem=f"unknown power-off mode {mode!r}"
        )
    if state in (DomainState.PAUSED, DomainState.PMSUSPENDED):
        # A guest whose vCPUs are stopped cannot see the power button.
        if mode == POWER_OFF_TRY_SOFT:
            return PowerDecision(PowerAction.DESTROY, settled=False)
        return PowerDecision(
            PowerAction.NONE,
            settled=False,
            problem="the guest is paused and cannot act on a graceful shutdown request; "
            "powerOffMode Soft never forces it",
        )
    if graceful_since is None:
        return PowerDecision(PowerAction.SHUTDOWN, settled=False, graceful_started=True)
    if now - graceful_since >= timeout:
        if mode == POWER_OFF_TRY_SOFT:
            return PowerDecision(PowerAction.DESTROY, settled=False)
        waited = int((now - graceful_since).total_seconds())
        problem = (
            f"the guest has not shut down {waited} s after the first graceful request "
            f"(timeout {int(timeout.total_seconds())} s); powerOffMode Soft never forces it"
        )
        resend = _resend_due(now, last_graceful_request, resend_interval)
        return PowerDecision(
            PowerAction.SHUTDOWN if resend else PowerAction.NONE, settled=False, problem=problem
        )
    if state is DomainState.SHUTTING_DOWN:
        return PowerDecision(PowerAction.NONE, settled=False)
    if _resend_due(now, last_graceful_request, resend_interval):
        return PowerDecision(PowerAction.SHUTDOWN, settled=False)
    return PowerDecision(PowerAction.NONE, settled=False)


def _resend_due(now: datetime, last: datetime | None, interval: timedelta) -> bool:
    # Guests miss a power-button press while still booting; pressing again is harmless.
    return last is None or now - last >= interval
