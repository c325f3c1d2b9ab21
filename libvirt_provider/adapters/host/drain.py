"""The drain of this daemon's host, on a thread of its own: read, ask `migration.drain`, write
the plan, act, report.

Why this daemon: it serves the drained host, holds that host's heartbeat Lease (so exactly one
daemon drains a host, the same one that accepts its outbound migrations), and already has the
host's domains at hand for the choice of target. The elected leader would have to read another
host's domains remotely. A pass runs when the host's object or any migration changes, and every
few seconds while a drain is on; a pass whose plan and condition equal the object's writes
nothing.

The status (`status.drain` and the Drained condition) is written before anything is done (a
cancel's aborts excepted: those come first, so a lost write repeats them), and conditioned on
the host's resourceVersion: a pass that lost the race does nothing and the next one starts again
from what the object shows.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from generic import constants as vmapi
from generic.api import Condition
from generic.background import BackgroundLoop
from generic.conditions import find_condition
from generic.formats import format_time
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.drains import DrainApi
from libvirt_provider.errors import ProviderError, StateConflictError
from libvirt_provider.migration.drain import (
    Abort,
    CreateMigration,
    DrainPass,
    DrainRequest,
    MachineOnHost,
    Move,
    PowerOff,
    Target,
    drain_pass,
)
from libvirt_provider.migration.target_choice import Choice

__all__ = ["DrainController"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# The shortest time between two passes (a burst of migration events is one pass).
MIN_PASS_SECONDS = 0.5


def _machine_on_host(obj: Obj) -> MachineOnHost:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    lock = status.get("migration") or {}
    return MachineOnHost(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        strategy=str(spec.get("evictionStrategy") or c.EVICTION_LIVE_MIGRATE),
        # Nothing runs to move: powered off, or no domain built here (a machine pinned to the
        # host after the cordon is never admitted); one that starts later joins the drain then.
        powered_off=status.get("powerState") == vmapi.POWERED_OFF or not status.get("providerID"),
        locked_by=str(lock["name"]) if lock.get("name") else None,
    )


def _move(obj: Obj) -> Move:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    cond = find_condition(status.get("conditions"), c.MIGRATION_CONDITION_SUCCEEDED) or {}
    return Move(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        phase=status.get("phase"),
        reason=str(cond.get("reason") or ""),
        message=str(cond.get("message") or ""),
        target=status.get("target"),
    )


class DrainController:
    """Runs this host's drain passes (docs/migration.md, "Draining a host")."""

    def __init__(
        self,
        *,
        store: DrainApi,
        host: str,
        choose: Callable[[Obj], Choice],
        read_host: Callable[[], Obj | None] | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._store = store
        # The host's object: the agent's watched copy (an idle host costs no request), or a read.
        self._read_host = read_host or (lambda: store.get_host(host))
        self._host = host
        self._choose = choose
        self._clock = clock
        self._loop = BackgroundLoop(f"drain-{host}", self._run)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=5.0)

    def wake(self) -> None:
        self._loop.wake()

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            loop.begin_pass()
            active = False
            try:
                active = self.run_pass()
            except StateConflictError:
                active = True
            except ProviderError as err:
                log.warning("host %s: the drain's pass failed: %s", self._host, err)
                active = True
            except Exception:  # a bug must not end the drain's loop for good
                log.exception("host %s: the drain's pass failed", self._host)
            loop.wait(c.DRAIN_ACTIVE_SECONDS if active else c.DRAIN_IDLE_SECONDS)
            loop.pause(MIN_PASS_SECONDS)

    def run_pass(self) -> bool:
        """One pass; True while a drain is on (a shorter wait till the next)."""
        host = self._read_host()
        if host is None:
            return False
        meta = host.get("metadata") or {}
        wanted = (host.get("spec") or {}).get("drain")
        previous = (host.get("status") or {}).get("drain")
        if wanted is None and previous is None:
            return False
        request = (
            DrainRequest(
                dry_run=bool(wanted.get("dryRun")),
                on_cancel=str(wanted.get("onCancel") or c.DRAIN_ON_CANCEL_FINISH),
            )
            if isinstance(wanted, dict)
            else None
        )
        # A machine being deleted is leaving by itself: not the drain's.
        listed = [
            m
            for m in (self._store.machines_on_host() if request is not None else [])
            if not (m.get("metadata") or {}).get("deletionTimestamp")
        ]
        raw = {
            (str((m.get("metadata") or {}).get("namespace")), str(m["metadata"]["name"])): m
            for m in listed
        }

        def choose(machine: MachineOnHost) -> Target:
            choice = self._choose(raw[(machine.namespace, machine.name)])
            return Target(choice.host, choice.message)

        result = drain_pass(
            host=self._host,
            request=request,
            previous=previous if isinstance(previous, dict) else None,
            machines=[_machine_on_host(m) for m in listed],
            moves=[_move(m) for m in self._store.drain_migrations()],
            choose=choose,
            generation=int(meta.get("generation") or 0),
            now=format_time(self._clock()),
        )
        if result.status is None:
            # A cancel: the aborts first, so that a lost write leaves the drain's status to
            # abort them again on the next pass (deleting a migration twice is harmless).
            for action in result.actions:
                self._act(action, raw)
            self._write(host, result)
        else:
            # The plan is published before anything is done by it. Without a write (nothing
            # changed), the host's copy must still be the API server's: a copy older than a
            # cancel must not start moves.
            wrote = self._write(host, result)
            if result.actions and not wrote and not self._current(host):
                return True
            for action in result.actions:
                self._act(action, raw)
        for event in result.events:
            self._store.host_event(
                host, reason=event.reason, message=event.message, warning=event.warning
            )
        return result.status is not None and result.status.get("phase") not in (
            c.DRAIN_PHASE_DRAINED,
            c.DRAIN_PHASE_PLANNED,
        )

    def _current(self, host: Obj) -> bool:
        """Whether `host` is the API server's version of the object."""
        fresh = self._store.get_host(self._host)
        version = (host.get("metadata") or {}).get("resourceVersion")
        return fresh is not None and (fresh.get("metadata") or {}).get("resourceVersion") == version

    def _write(self, host: Obj, result: DrainPass) -> bool:
        """Write the drain's status and condition if they changed; whether it wrote."""
        status = host.get("status") or {}
        current = [x for x in status.get("conditions") or [] if isinstance(x, dict)]
        others = [x for x in current if x.get("type") != c.HOST_CONDITION_DRAINED]
        conditions = others
        if result.condition is not None:
            state, reason, message = result.condition
            before = next((x for x in current if x.get("type") == c.HOST_CONDITION_DRAINED), {})
            since = (
                before.get("lastTransitionTime")
                if before.get("status") == state and before.get("lastTransitionTime")
                else format_time(self._clock())
            )
            conditions = [
                *others,
                Condition(
                    type=c.HOST_CONDITION_DRAINED,
                    status=state,
                    reason=reason,
                    message=message,
                    last_transition_time=str(since),
                ).model_dump(by_alias=True, exclude_none=True, mode="json"),
            ]
        if status.get("drain") == result.status and conditions == current:
            return False
        self._store.patch_host_status(host, {"drain": result.status, "conditions": conditions})
        return True

    def _act(
        self, action: CreateMigration | PowerOff | Abort, raw: dict[tuple[str, str], Obj]
    ) -> None:
        if isinstance(action, CreateMigration):
            log.info(
                "host %s: drain: migrating %s/%s", self._host, action.namespace, action.machine
            )
            self._store.create_migration(action.namespace, action.name, action.machine)
        elif isinstance(action, Abort):
            log.info(
                "host %s: drain cancelled: aborting %s/%s",
                self._host,
                action.namespace,
                action.name,
            )
            self._store.delete_migration(action.namespace, action.name)
        else:
            machine = raw.get((action.namespace, action.machine)) or {}
            vm = ((machine.get("metadata") or {}).get("annotations") or {}).get(
                vmapi.LINK_ANNOTATION
            )
            if not vm:
                log.warning(
                    "host %s: drain: %s/%s has no VirtualMachine to power off",
                    self._host,
                    action.namespace,
                    action.machine,
                )
                return
            self._store.power_off(action.namespace, str(vm))
