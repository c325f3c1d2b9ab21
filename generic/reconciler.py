"""One reconcile of one generic VM: gather, decide (pure core), act, report.

A reconcile is level-triggered: it reads the VM and its provider object as they are now (from
watch-fed copies; from the API server itself before it disowns the object or releases its
finalizer), so it does not matter which event (VM change, provider change, retry) caused it.
It returns an `Outcome` that tells the work queue whether and when to look again:

- settled (adopted, provider kind watched): no timed re-check; watch events bring changes;
- adopted but the kind is not watched (no CRD label): re-check every `poll_interval`;
- not adopted, kind not served, API failures: retry with the queue's exponential backoff;
- deleting: wait for the provider object to disappear (its DELETED event, or polling).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from generic import constants as c
from generic.conditions import find_condition
from generic.contract import read_provider_status
from generic.errors import ApiError, ConflictError, KindNotServedError
from generic.formats import merge_patch, parse_time, utc_now
from generic.gateway import ClusterGateway, EventType, ProviderKind
from generic.linking import (
    Link,
    LinkAssessment,
    adopted_owner_references,
    assess_link,
    awaiting_creation,
    describe_ref,
    disowned_owner_references,
)
from generic.status import Observation, desired_status
from generic.workqueue import Outcome

__all__ = ["Outcome", "Reconciler"]

log = logging.getLogger(__name__)


_OWN_REASONS = frozenset({c.REASON_NOT_ADOPTED, c.REASON_INVALID_PROVIDER_STATUS})
DONE = Outcome()
RETRY = Outcome(retry=True)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _worth_an_event(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """A new status or reason is news; a new message only when this controller wrote it (a
    provider may put changing detail in its message, which must not turn into a stream of
    Events)."""
    if (before.get("status"), before.get("reason")) != (after.get("status"), after.get("reason")):
        return True
    return after.get("reason") in _OWN_REASONS and before.get("message") != after.get("message")


def _now(clock: str) -> dt.datetime:
    return parse_time(clock) or dt.datetime.now(dt.UTC)


def _provider_ref(vm: Mapping[str, Any]) -> str:
    return describe_ref(vm.get("spec", {}).get("infrastructureRef", {}))


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return [f for f in _meta(obj).get("finalizers") or [] if isinstance(f, str)]


class Reconciler:
    """Reconciles generic VMs through a `ClusterGateway`."""

    def __init__(
        self,
        gateway: ClusterGateway,
        *,
        poll_interval: float = 30.0,
        deletion_poll_interval: float = 5.0,
        missing_provider_grace: float = c.MISSING_PROVIDER_GRACE_SECONDS,
        clock: Callable[[], str] = utc_now,
    ) -> None:
        self._gw = gateway
        self._poll = poll_interval
        self._deletion_poll = deletion_poll_interval
        self._missing_grace = missing_provider_grace
        self._clock = clock
        self._failures: dict[tuple[str, str], str] = {}

    def run(self, namespace: str, name: str) -> Outcome:
        """`reconcile`, with failures turned into an Outcome and reported as Events."""
        key = (namespace, name)
        vm: Mapping[str, Any] | None = None
        try:
            vm = self._gw.get_vm(namespace, name)
            outcome = DONE if vm is None else self.reconcile(vm)
        except ConflictError as exc:
            log.info("%s/%s: %s; retrying", namespace, name, exc)
            return Outcome(immediately=True)
        except ApiError as exc:
            log.warning("%s/%s: %s", namespace, name, exc)
            if vm is not None and self._failures.get(key) != str(exc):
                self._failures[key] = str(exc)
                self._event(vm, "Warning", c.EVENT_RECONCILE_FAILED, str(exc))
            return RETRY
        self._failures.pop(key, None)
        return outcome

    def reconcile(self, vm: Mapping[str, Any]) -> Outcome:
        """One pass over `vm` (as just read); raises ApiError on API failures."""
        if _meta(vm).get("deletionTimestamp"):
            return self._finalize(vm)
        if c.FINALIZER not in _finalizers(vm):
            vm = self._gw.set_vm_finalizers(vm, [*_finalizers(vm), c.FINALIZER])
        kind, provider, assessment = self._look_up(vm)
        if assessment.link is Link.LINKED and kind is not None and provider is not None:
            provider = self._gw.set_provider_owners(
                kind, provider, adopted_owner_references(vm, provider)
            )
            self._event(vm, "Normal", c.EVENT_ADOPTED, f"adopted {_provider_ref(vm)}")
            assessment = assess_link(vm, provider)
        self._let_go_if_unlinked(vm, kind, provider, assessment)
        reading = None
        if assessment.link is Link.ADOPTED and provider is not None:
            reading = read_provider_status(provider)
        awaited = awaiting_creation(vm, assessment, _now(self._clock()), grace=self._missing_grace)
        self._report(
            vm, Observation(assessment=assessment, reading=reading, awaited=awaited is not None)
        )
        if awaited is not None:
            # Its creation wakes this VM (the provider kinds are watched); this pass is for
            # the report that it is still missing, once the grace is over.
            return Outcome(requeue_after=awaited + 0.1)
        if not assessment.link.mutual:
            return RETRY
        if kind is not None and not kind.watched:
            return Outcome(requeue_after=self._poll)
        return DONE

    def _look_up(
        self, vm: Mapping[str, Any], *, fresh: bool = False
    ) -> tuple[ProviderKind | None, dict[str, Any] | None, LinkAssessment]:
        ref = vm.get("spec", {}).get("infrastructureRef", {})
        try:
            kind = self._gw.resolve_kind(str(ref.get("apiGroup")), str(ref.get("kind")))
        except KindNotServedError as exc:
            return None, None, LinkAssessment(Link.KIND_NOT_SERVED, str(exc))
        provider = self._gw.get_provider(
            kind, _meta(vm)["namespace"], str(ref.get("name")), fresh=fresh
        )
        return kind, provider, assess_link(vm, provider)

    def _report(self, vm: Mapping[str, Any], observation: Observation) -> None:
        desired = desired_status(vm, observation, now=self._clock())
        current = vm.get("status")
        patch = merge_patch(current, desired)
        if patch is None:
            return
        self._gw.patch_vm_status(vm, patch)
        before = find_condition((current or {}).get("conditions"), c.CONDITION_READY)
        after = find_condition(desired.get("conditions"), c.CONDITION_READY)
        if after is None or observation.deleting:
            return
        if before is not None and not _worth_an_event(before, after):
            return
        self._event_for_ready(vm, observation.assessment.link, after)

    def _event_for_ready(self, vm: Mapping[str, Any], link: Link, ready: Mapping[str, Any]) -> None:
        status, reason, message = ready["status"], ready["reason"], ready["message"]
        if status == c.STATUS_TRUE:
            self._event(vm, "Normal", c.EVENT_READY, message or "the VM is ready")
        elif link is Link.KIND_NOT_SERVED:
            self._event(vm, "Warning", c.EVENT_PROVIDER_KIND_UNKNOWN, message)
        elif reason == c.REASON_WAITING:
            return  # the Adopted event just said so
        else:
            # The contract's problem reasons and this controller's own are warnings. Any other
            # reason is the provider's word for where it is (Starting, WaitingForAddress, ...):
            # a step of normal progress, and a provider warns of its own problems itself.
            warning = reason in c.API_REASONS or reason in c.GENERIC_PROBLEM_REASONS
            self._event(
                vm,
                "Warning" if warning else "Normal",
                reason,
                message or f"the VM is not ready ({reason})",
            )

    def _finalize(self, vm: Mapping[str, Any]) -> Outcome:
        if c.FINALIZER not in _finalizers(vm):
            return DONE
        kind, provider, assessment = self._look_up(vm)
        if provider is None or kind is None or not assessment.link.mutual:
            # Letting go of the VM's infrastructure (releasing the finalizer, leaving the object
            # in place) is decided on the API's word, not on a copy that may not have seen the
            # object or its link yet. Deleting it needs no such read: the deletion is
            # preconditioned on the uid and resourceVersion the decision saw.
            kind, provider, assessment = self._look_up(vm, fresh=True)
        if provider is None or kind is None:
            self._release(vm, c.EVENT_INFRASTRUCTURE_DELETED, "no provider object remains")
            return DONE
        if not assessment.link.mutual:
            self._let_go_if_unlinked(vm, kind, provider, assessment)
            self._release(
                vm,
                c.EVENT_INFRASTRUCTURE_LEFT,
                f"{assessment.message}; it was not deleted",
                type_="Warning",
            )
            return DONE
        reading = read_provider_status(provider) if assessment.link is Link.ADOPTED else None
        self._report(vm, Observation(assessment=assessment, reading=reading, deleting=True))
        if not _meta(provider).get("deletionTimestamp"):
            self._gw.delete_provider(kind, provider)
            self._event(
                vm,
                "Normal",
                c.EVENT_DELETING_INFRASTRUCTURE,
                f"deleting {_provider_ref(vm)}; the VM goes once it is gone",
            )
        # Even a watched kind gets a slow re-check: the VM must not wait forever if the DELETED
        # event fell into a gap between two watch streams.
        return Outcome(requeue_after=self._poll if kind.watched else self._deletion_poll)

    def _let_go_if_unlinked(
        self,
        vm: Mapping[str, Any],
        kind: ProviderKind | None,
        provider: Mapping[str, Any] | None,
        assessment: LinkAssessment,
    ) -> None:
        if kind is None or provider is None or assessment.link.mutual:
            return
        if disowned_owner_references(vm, provider) is None:
            return
        # Disowning takes away what deleting the VM would delete: confirm on the API's word that
        # the link is broken, not only in a copy that has yet to see it restored.
        meta = _meta(provider)
        provider = self._gw.get_provider(kind, meta["namespace"], meta["name"], fresh=True)
        if provider is None or assess_link(vm, provider).link.mutual:
            return
        remaining = disowned_owner_references(vm, provider)
        if remaining is None:
            return
        self._gw.set_provider_owners(kind, provider, remaining)
        self._event(
            vm,
            "Warning",
            c.EVENT_DISOWNED,
            f"{assessment.message}; removed this VM's owner reference so that deleting the VM "
            "does not delete it",
        )

    def _release(
        self, vm: Mapping[str, Any], reason: str, message: str, *, type_: EventType = "Normal"
    ) -> None:
        remaining = [f for f in _finalizers(vm) if f != c.FINALIZER]
        self._gw.set_vm_finalizers(vm, remaining)
        self._event(vm, type_, reason, f"{message}; finalizer released")

    def _event(self, vm: Mapping[str, Any], type_: EventType, reason: str, message: str) -> None:
        try:
            self._gw.post_event(vm, type_=type_, reason=reason, message=message)
        except Exception:  # an Event is a report; failing to post one must not fail the work
            log.warning("could not post event %s for %s", reason, _meta(vm).get("name"))
