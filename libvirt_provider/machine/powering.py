"""Moving an existing domain toward its desired power state, and watching for its addresses.

The pure state machine (`power`) picks one action per pass; this module remembers what the
decision needs between passes (when a graceful power-off began and when the button was last
pressed, when a running machine started waiting for an address), performs the action, and
reads the domain's addresses from the sources each NIC's network trusts.

The guest agent is the one source the guest controls: an agent that does not answer within its
timeout is backed off per machine (`agent_backoff`), said on that machine (`guestAgent:
unresponsive`, a `GuestAgentUnresponsive` Warning Event), and its addresses then come from the
network's other sources; when the host's agent budget is taken, this pass goes without the agent
and keeps what the machine reported before.

A graceful power-off's start is also kept in the machine's status (`shutdownRequestedAt`), so a
restarted daemon goes on counting from it instead of starting the timeout again.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from catalog.network import AddressSourcePolicy
from generic import constants as vmapi
from generic.api import PowerOffMode, PowerState
from generic.formats import parse_time
from libvirt_provider import constants as c
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import AddressSource, DomainState, DomainStatus, InterfaceAddress
from libvirt_provider.errors import (
    AgentBusyError,
    AgentUnresponsiveError,
    PermanentError,
    RetryableError,
    StateConflictError,
)
from libvirt_provider.machine.agent_backoff import AgentBackoff
from libvirt_provider.machine.guest import (
    AGENT_UNRESPONSIVE,
    guest_metadata,
    reported_guest_metadata,
)
from libvirt_provider.machine.power import (
    ON_STATES,
    PowerAction,
    decide_power,
    is_settled,
    observed_power_state,
)
from libvirt_provider.machine.status import (
    NicAddressPlan,
    nics_without_address,
    select_addresses,
    sources_for,
)
from libvirt_provider.machine.store import EventSink, Obj
from libvirt_provider.resolved import ResolvedMachine

__all__ = [
    "PowerDriver",
    "PowerOutcome",
    "address_poll_delay",
]

log = logging.getLogger(__name__)

# No libvirt event announces a DHCP lease, so a running machine without an address is polled:
# every half second for the first minute, so Ready follows the lease closely; after that at a
# tenth of the time waited so far (at most every 30 s), so a guest that never takes an address
# costs a few passes an hour, not thousands.
ADDRESS_POLL_DELAY = 0.5
ADDRESS_POLL_PATIENCE = 60.0
ADDRESS_POLL_MAX = 30.0
# Once one NIC has an address the machine is Ready, but another NIC may still be waiting: a static
# address only the guest agent reports appears when the guest's network configuration ran, well
# after the first DHCP lease. Such a machine is polled too: every 5 s at first, then backing off
# like the first address, so a NIC that never gets one costs little.
NIC_ADDRESS_POLL_DELAY = 5.0
# A pass that went without the guest agent because the host's agent budget was taken looks again
# this soon (the budget frees within one agent timeout), so a machine whose agent was never asked
# does not wait for the next event to be.
AGENT_BUSY_RETRY_DELAY = 2.0


def address_poll_delay(waited: float) -> float:
    """Seconds until the next look for an address, after `waited` seconds without one."""
    if waited < ADDRESS_POLL_PATIENCE:
        return ADDRESS_POLL_DELAY
    return min(ADDRESS_POLL_MAX, waited / 10.0)


@dataclass
class _Graceful:
    since: dt.datetime
    last: dt.datetime


@dataclass(frozen=True)
class PowerOutcome:
    """What one pass saw and did about power and addresses."""

    power_state: str | None
    settled: bool
    problem: str | None
    addresses: list[dict[str, str]]
    guest: dict[str, str]
    """Guest facts from the qemu guest agent, for providerMetadata (`machine/guest.py`)."""
    shutdown_requested_at: dt.datetime | None
    address_poll: float | None
    """Seconds until the next look for an address, while a running machine has none (or its
    agent was not asked for lack of budget)."""


# The Event each action posts.
_ACTION_EVENTS: dict[PowerAction, tuple[str, str]] = {
    PowerAction.START: (c.EVENT_STARTED, "started the domain"),
    PowerAction.RESUME: (c.EVENT_RESUMED, "resumed the paused domain"),
    PowerAction.WAKE: (c.EVENT_WOKEN, "woke the domain"),
    PowerAction.SHUTDOWN: (
        c.EVENT_SHUTDOWN_REQUESTED,
        "asked the guest to power off (its agent if connected, else the power button)",
    ),
    PowerAction.DESTROY: (c.EVENT_POWERED_OFF, "powered the domain off"),
    PowerAction.MANAGED_SAVE: (c.EVENT_SUSPENDED, "saved the domain's memory and stopped it"),
    PowerAction.DISCARD_SAVED_STATE: (
        c.EVENT_SAVED_STATE_DISCARDED,
        "dropped the saved memory: the next start is a cold boot",
    ),
}


class PowerDriver:
    def __init__(
        self,
        *,
        hypervisor: Hypervisor,
        events: EventSink,
        clock: Callable[[], dt.datetime],
        agent_backoff: AgentBackoff | None = None,
    ) -> None:
        self._hv = hypervisor
        self._agent = agent_backoff or AgentBackoff()
        self._events = events
        self._clock = clock
        self._calls: dict[PowerAction, Callable[[str], None]] = {
            PowerAction.START: hypervisor.start,
            PowerAction.RESUME: hypervisor.resume,
            PowerAction.WAKE: hypervisor.start,
            PowerAction.SHUTDOWN: hypervisor.shutdown,
            PowerAction.DESTROY: hypervisor.destroy,
            PowerAction.MANAGED_SAVE: hypervisor.managed_save,
            PowerAction.DISCARD_SAVED_STATE: hypervisor.discard_saved_state,
        }
        self._graceful: dict[str, _Graceful] = {}
        # Since when each running machine has been waiting for its first address.
        self._address_wait: dict[str, dt.datetime] = {}

    def forget(self, uuid: str) -> None:
        """The machine is gone: drop what was remembered about it."""
        self._graceful.pop(uuid, None)
        self._address_wait.pop(uuid, None)
        self._agent.forget(uuid)

    def drive(
        self,
        obj: Obj,
        plan: ResolvedMachine,
        *,
        desired: PowerState,
        mode: PowerOffMode,
        status: DomainStatus,
    ) -> PowerOutcome:
        uuid = str(plan.domain.uuid)
        now = self._clock()
        graceful = self._graceful_for(uuid, desired, obj.get("status") or {})
        decision = decide_power(
            desired=desired,
            mode=mode,
            status=status,
            now=now,
            graceful_since=graceful.since if graceful else None,
            last_graceful_request=graceful.last if graceful else None,
            timeout=dt.timedelta(seconds=plan.shutdown_timeout_seconds),
        )
        if decision.action is not PowerAction.NONE:
            self._act(obj, uuid, decision.action)
            if decision.action is PowerAction.SHUTDOWN:
                if decision.graceful_started or graceful is None:
                    self._graceful[uuid] = _Graceful(since=now, last=now)
                else:
                    graceful.last = now
            status = self._hv.status(uuid)
        if status.state is DomainState.SHUTOFF:
            self._graceful.pop(uuid, None)
        running = status.state in ON_STATES
        if not running:
            # The next boot starts a new agent: it gets a fresh chance.
            self._agent.forget(uuid)
        deferred: list[AddressSource] = []
        addresses = self._addresses(obj, plan, uuid, running=running, deferred=deferred)
        guest = self._guest(obj, plan, uuid, running=running, deferred=deferred)
        settled = is_settled(desired, status)
        poll = None
        nics = [i.name for i in plan.domain.interfaces]
        if settled and desired == vmapi.POWERED_ON and nics_without_address(nics, addresses):
            # Since when some NIC has had no address (the first lease does not reset it).
            waited = (now - self._address_wait.setdefault(uuid, now)).total_seconds()
            poll = address_poll_delay(waited)
            if addresses:
                poll = max(poll, NIC_ADDRESS_POLL_DELAY)
        else:
            self._address_wait.pop(uuid, None)
        if deferred and running:
            # The host's agent budget was taken: ask again soon rather than at the next event.
            poll = min(poll, AGENT_BUSY_RETRY_DELAY) if poll is not None else AGENT_BUSY_RETRY_DELAY
        pending = self._graceful.get(uuid)
        return PowerOutcome(
            power_state=observed_power_state(status),
            settled=settled,
            problem=decision.problem,
            addresses=addresses,
            guest=guest,
            shutdown_requested_at=pending.since if pending else None,
            address_poll=poll,
        )

    def _graceful_for(
        self, uuid: str, desired: PowerState, status: Mapping[str, Any]
    ) -> _Graceful | None:
        if desired != vmapi.POWERED_OFF:
            self._graceful.pop(uuid, None)
            return None
        if uuid not in self._graceful:
            # A restarted daemon goes on with the power-off an earlier one began.
            started = parse_time(status.get("shutdownRequestedAt"))
            if started is not None:
                self._graceful[uuid] = _Graceful(since=started, last=started)
        return self._graceful.get(uuid)

    def _act(self, obj: Obj, uuid: str, action: PowerAction) -> None:
        reason, message = _ACTION_EVENTS[action]
        try:
            self._calls[action](uuid)
        except StateConflictError as err:
            # The domain changed state under us (e.g. the guest shut itself down); next pass sees.
            log.info("%s on %s: %s", action.value, uuid, err)
            return
        self._events.event(obj, reason=reason, message=message)

    def _guest(
        self,
        obj: Obj,
        plan: ResolvedMachine,
        uuid: str,
        *,
        running: bool,
        deferred: list[AddressSource],
    ) -> dict[str, str]:
        if not running:
            return {}
        before = reported_guest_metadata(obj.get("status") or {})
        if not self._agent.may_ask(uuid):
            return {**before, "guestAgent": AGENT_UNRESPONSIVE}
        try:
            info = self._hv.guest_info(uuid)
        except AgentUnresponsiveError as err:
            self._agent_silent(obj, plan, uuid, err)
            return {**before, "guestAgent": AGENT_UNRESPONSIVE}
        except AgentBusyError as err:
            # Not asked this time: what the machine said stands until the next pass.
            log.debug("guest info of %s: %s", plan.domain.name, err)
            deferred.append(AddressSource.AGENT)
            return before
        except (RetryableError, PermanentError, StateConflictError) as err:
            log.debug("guest info of %s: %s", plan.domain.name, err)
            return {}
        if info is not None and info.facts:
            self._agent_answered(obj, uuid)
        return guest_metadata(info, running=running)

    def _agent_silent(
        self, obj: Obj, plan: ResolvedMachine, uuid: str, err: AgentUnresponsiveError
    ) -> None:
        record = self._agent.timed_out(uuid)
        pause = record.retry_at - self._agent.now()
        log.info(
            "guest agent of %s did not answer (%s); not asked for %.0f s",
            plan.domain.name,
            err,
            pause,
        )
        self._events.event(
            obj,
            reason=c.REASON_GUEST_AGENT_UNRESPONSIVE,
            message=(
                f"the guest agent did not answer within {c.AGENT_TIMEOUT_SECONDS} s; it is asked "
                "less and less often (up to every "
                f"{c.AGENT_BACKOFF_MAX_SECONDS / 60:g} min) until it answers, and the machine's "
                "addresses come from its network's other sources meanwhile"
            ),
            warning=True,
        )

    def _agent_answered(self, obj: Obj, uuid: str) -> None:
        if self._agent.answered(uuid):
            self._events.event(
                obj,
                reason=c.REASON_GUEST_AGENT_RESPONDING,
                message="the guest agent answers again",
            )

    def _addresses(
        self,
        obj: Obj,
        plan: ResolvedMachine,
        uuid: str,
        *,
        running: bool,
        deferred: list[AddressSource],
    ) -> list[dict[str, str]]:
        subnets = {n.interface: n.subnets for n in plan.nic_subnets}
        public = {p.interface: p.address for p in plan.public_addresses}
        nics = [
            NicAddressPlan(
                name=i.name,
                mac=i.mac,
                policy=i.address_source,
                subnets=subnets.get(i.name, ()),
                public=public.get(i.name),
            )
            for i in plan.domain.interfaces
        ]
        observed: dict[AddressSource, list[InterfaceAddress]] = {}
        if running:
            for source in _TRUST_ORDER:
                if not _needed(source, nics, observed):
                    continue
                if source is AddressSource.AGENT and not self._agent.may_ask(uuid):
                    continue
                try:
                    observed[source] = self._hv.addresses(uuid, source)
                except AgentUnresponsiveError as err:
                    self._agent_silent(obj, plan, uuid, err)
                except AgentBusyError as err:
                    log.debug("addresses of %s from the agent: %s", plan.domain.name, err)
                    deferred.append(source)
                except (RetryableError, PermanentError, StateConflictError) as err:
                    # No agent in the guest, no lease yet, the agent budget taken: not an error
                    # of the machine.
                    log.debug("addresses of %s from %s: %s", plan.domain.name, source.value, err)
                else:
                    if source is AddressSource.AGENT:
                        self._agent_answered(obj, uuid)
        previous = list((obj.get("status") or {}).get("addresses") or [])
        return select_addresses(nics, observed, previous, running=running)


_TRUST_ORDER = sources_for(AddressSourcePolicy.ANY)


def _needed(
    source: AddressSource,
    nics: list[NicAddressPlan],
    observed: Mapping[AddressSource, list[InterfaceAddress]],
) -> bool:
    """Whether some NIC trusts `source` and no source it trusts more knows its MAC: a NIC the
    lease already answers for never costs a question to its guest's agent."""
    for nic in nics:
        trusted = sources_for(nic.policy)
        if source not in trusted:
            continue
        better = trusted[: trusted.index(source)]
        mac = nic.mac.lower()
        if not any(a.mac.lower() == mac for s in better for a in observed.get(s, ())):
            return True
    return False
