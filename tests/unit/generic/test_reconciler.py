"""The reconciler's behaviour against an in-memory cluster, grouped by situation."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from generic import constants as c
from generic.errors import ApiError
from generic.reconciler import Outcome, Reconciler
from tests.doubles.cluster import KIND, FakeCluster

READY_STATUS: dict[str, Any] = {
    "powerState": "PoweredOn",
    "providerID": "stub://1",
    "providerMetadata": {"host": "h1"},
    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
    "conditions": [{"type": "InfrastructureReady", "status": "True", "reason": "Running"}],
}


@pytest.fixture
def cluster() -> FakeCluster:
    cluster = FakeCluster()
    cluster.install_kind()
    return cluster


def _reconciler(cluster: FakeCluster) -> Reconciler:
    ticks = itertools.count()
    return Reconciler(cluster, poll_interval=30, clock=lambda: f"T{next(ticks)}")


def _run(cluster: FakeCluster, name: str = "web") -> Outcome:
    return _reconciler(cluster).run("ns", name)


def _owners(cluster: FakeCluster, name: str = "web") -> list[dict[str, Any]]:
    owners: list[dict[str, Any]] = cluster.provider(name)["metadata"].get("ownerReferences", [])
    return owners


class TestAdoption:
    def test_mutual_link_is_adopted_with_a_controller_reference(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web")
        assert _run(cluster) == Outcome()
        assert cluster.vm("web")["metadata"]["finalizers"] == [c.FINALIZER]
        assert _owners(cluster) == [
            {
                "apiVersion": "vm-api.io/v1alpha1",
                "kind": "VirtualMachine",
                "name": "web",
                "uid": "uid-web",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert "Adopted" in cluster.event_reasons()
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("Unknown", "Waiting")

    def test_finalizer_is_added_before_anything_else(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web")
        _run(cluster)
        assert cluster.calls.index("set_vm_finalizers") < cluster.calls.index("set_provider_owners")

    def test_other_owners_are_kept(self, cluster: FakeCluster) -> None:
        other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"}
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", owners=[other])
        _run(cluster)
        assert _owners(cluster)[0] == other
        assert len(_owners(cluster)) == 2

    def test_conflict_on_owner_write_is_retried_immediately(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_vm("web")  # finalizer write will succeed
        cluster.add_provider("web", backlink="web")
        reconciler = _reconciler(cluster)
        cluster.vm("web")["metadata"]["finalizers"] = [c.FINALIZER]
        cluster.conflict_next_write = True
        assert reconciler.run("ns", "web") == Outcome(immediately=True)
        assert _owners(cluster) == []
        assert reconciler.run("ns", "web") == Outcome()
        assert len(_owners(cluster)) == 1


class TestNotAdopted:
    def _assert_not_adopted(self, cluster: FakeCluster, fragment: str) -> None:
        for type_ in ("Ready", "InfrastructureReady"):
            condition = cluster.condition("web", type_)
            assert condition is not None
            assert condition["status"] == "False"
            assert condition["reason"] == "NotAdopted"
            assert fragment in condition["message"]
        assert cluster.vm("web")["status"]["ready"] is False

    def test_missing_provider(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        assert _run(cluster) == Outcome(retry=True)
        self._assert_not_adopted(cluster, "does not exist")
        assert cluster.events[-1][:2] == ("Warning", "NotAdopted")

    def test_a_new_vms_missing_provider_is_awaited_without_a_warning(
        self, cluster: FakeCluster
    ) -> None:
        # `kubectl apply` of both: the VM's first pass may come before its provider object.
        cluster.add_vm("web")
        cluster.vms[("ns", "web")]["metadata"]["creationTimestamp"] = "2026-12-04T10:00:00Z"
        reconciler = Reconciler(cluster, clock=lambda: "2026-12-04T10:00:03Z")
        assert reconciler.run("ns", "web") == Outcome(requeue_after=pytest.approx(7.1))
        for type_ in ("Ready", "InfrastructureReady"):
            condition = cluster.condition("web", type_)
            assert condition is not None
            assert (condition["status"], condition["reason"]) == ("Unknown", "Waiting")
            assert "does not exist" in condition["message"]
            assert "waiting for it to appear" in condition["message"]
        assert not [e for e in cluster.events if e[0] == "Warning"]
        # Past the grace, still missing: the problem is reported, with its Warning.
        later = Reconciler(cluster, clock=lambda: "2026-12-04T10:00:11Z")
        assert later.run("ns", "web") == Outcome(retry=True)
        self._assert_not_adopted(cluster, "does not exist")
        assert cluster.events[-1][:2] == ("Warning", "NotAdopted")

    def test_the_missing_providers_grace_is_the_one_the_reconciler_was_given(
        self, cluster: FakeCluster
    ) -> None:
        cluster.add_vm("web")
        cluster.vms[("ns", "web")]["metadata"]["creationTimestamp"] = "2026-12-04T10:00:00Z"
        short = Reconciler(
            cluster, missing_provider_grace=2.0, clock=lambda: "2026-12-04T10:00:01Z"
        )
        assert short.run("ns", "web") == Outcome(requeue_after=pytest.approx(1.1))
        assert not [e for e in cluster.events if e[0] == "Warning"]
        later = Reconciler(
            cluster, missing_provider_grace=2.0, clock=lambda: "2026-12-04T10:00:03Z"
        )
        assert later.run("ns", "web") == Outcome(retry=True)
        self._assert_not_adopted(cluster, "does not exist")
        assert cluster.events[-1][:2] == ("Warning", "NotAdopted")

    def test_one_sided_link(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web")
        assert _run(cluster) == Outcome(retry=True)
        self._assert_not_adopted(cluster, "does not link back")
        assert _owners(cluster) == []

    def test_backlink_to_another_vm(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="db")
        _run(cluster)
        self._assert_not_adopted(cluster, "links to VirtualMachine 'db'")
        assert _owners(cluster) == []

    def test_foreign_controller_is_refused_and_untouched(self, cluster: FakeCluster) -> None:
        foreign = {
            "apiVersion": "vm-api.io/v1alpha1",
            "kind": "VirtualMachine",
            "name": "web",
            "uid": "uid-of-an-older-web",
            "controller": True,
        }
        cluster.add_vm("web")
        before = cluster.add_provider("web", backlink="web", owners=[foreign])
        assert _run(cluster) == Outcome(retry=True)
        self._assert_not_adopted(cluster, "already controlled by VirtualMachine 'web'")
        assert cluster.provider("web") == before

    def test_unknown_kind(self, cluster: FakeCluster) -> None:
        cluster.kinds.clear()
        cluster.add_vm("web")
        assert _run(cluster) == Outcome(retry=True)
        self._assert_not_adopted(cluster, f"serves no kind {KIND!r}")
        assert cluster.event_reasons() == ["ProviderKindUnknown"]
        cluster.install_kind()
        cluster.add_provider("web", backlink="web")
        assert _run(cluster) == Outcome()
        assert len(_owners(cluster)) == 1

    def test_a_different_not_adopted_message_is_news(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        cluster.add_provider("web")
        reconciler.run("ns", "web")
        assert cluster.event_reasons() == ["NotAdopted", "NotAdopted"]
        assert "does not link back" in cluster.events[-1][2]

    def test_repeated_failures_do_not_repeat_events_or_writes(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        writes = cluster.calls.count("patch_vm_status")
        events = len(cluster.events)
        for _ in range(3):
            reconciler.run("ns", "web")
        assert cluster.calls.count("patch_vm_status") == writes
        assert len(cluster.events) == events

    def test_deleted_out_of_band_is_not_recreated(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        _run(cluster)
        assert cluster.vm("web")["status"]["ready"] is True
        cluster.finish_provider_deletion("web")
        assert _run(cluster) == Outcome(retry=True)
        assert cluster.providers == {}
        self._assert_not_adopted(cluster, "does not exist")
        status = cluster.vm("web")["status"]
        for mirrored in ("powerState", "providerID", "addresses", "providerMetadata"):
            assert mirrored not in status

    def test_broken_link_lets_go_of_the_owner_reference(self, cluster: FakeCluster) -> None:
        other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"}
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", owners=[other], status=READY_STATUS)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        assert len(_owners(cluster)) == 2
        cluster.provider("web")["metadata"]["annotations"][c.LINK_ANNOTATION] = "db"
        assert reconciler.run("ns", "web") == Outcome(retry=True)
        assert _owners(cluster) == [other]
        assert "Disowned" in cluster.event_reasons()
        self._assert_not_adopted(cluster, "links to VirtualMachine 'db'")
        reconciler.run("ns", "web")
        assert cluster.event_reasons().count("Disowned") == 1


class TestMirroring:
    def test_ready_provider_is_mirrored(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        _run(cluster)
        status = cluster.vm("web")["status"]
        assert status["ready"] is True
        assert status["powerState"] == "PoweredOn"
        assert status["providerID"] == "stub://1"
        assert status["providerMetadata"] == {"host": "h1"}
        assert status["addresses"] == [{"type": "InternalIP", "address": "10.0.0.5"}]
        assert status["observedGeneration"] == 1
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "Running")
        assert cluster.events[-1][:2] == ("Normal", "Ready")

    def test_unchanged_status_is_not_written_again(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        writes = cluster.calls.count("patch_vm_status")
        reconciler.run("ns", "web")
        assert cluster.calls.count("patch_vm_status") == writes

    def test_changes_after_ready_propagate_and_addresses_are_rebuilt(
        self, cluster: FakeCluster
    ) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        since = cluster.condition("web", "Ready")
        provider = cluster.provider("web")
        provider["status"] = {
            **READY_STATUS,
            "powerState": "PoweredOff",
            "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
        }
        reconciler.run("ns", "web")
        status = cluster.vm("web")["status"]
        assert status["powerState"] == "PoweredOff"
        assert status["addresses"] == [{"type": "InternalIP", "address": "10.0.0.9"}]
        assert cluster.condition("web", "Ready") == since

    def test_changing_provider_messages_do_not_stream_events(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        events = len(cluster.events)
        for uptime in range(3):
            condition = {**READY_STATUS["conditions"][0], "message": f"up {uptime} min"}
            cluster.provider("web")["status"] = {**READY_STATUS, "conditions": [condition]}
            reconciler.run("ns", "web")
        assert len(cluster.events) == events
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert ready["message"] == "up 2 min"

    def test_missing_reason_falls_back_to_reported(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        status = {"conditions": [{"type": "InfrastructureReady", "status": "False"}]}
        cluster.add_provider("web", backlink="web", status=status)
        _run(cluster)
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert ready["reason"] == "Reported"

    def test_up_to_date_is_mirrored_and_stale_one_cleared(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        up_to_date = {"type": "UpToDate", "status": "False", "reason": "RequiresPowerOff"}
        status = {**READY_STATUS, "conditions": [*READY_STATUS["conditions"], up_to_date]}
        cluster.add_provider("web", backlink="web", status=status)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        mirrored = cluster.condition("web", "UpToDate")
        assert mirrored is not None
        assert mirrored["reason"] == "RequiresPowerOff"
        cluster.provider("web")["status"] = READY_STATUS
        reconciler.run("ns", "web")
        assert cluster.condition("web", "UpToDate") is None

    def test_terminal_errors_fill_failure_fields_until_recovery(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        failing = {
            "conditions": [
                {
                    "type": "InfrastructureReady",
                    "status": "False",
                    "reason": "ProviderError",
                    "message": "disk image is corrupt",
                }
            ]
        }
        cluster.add_provider("web", backlink="web", status=failing)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        status = cluster.vm("web")["status"]
        assert status["failureReason"] == "ProviderError"
        assert status["failureMessage"] == "disk image is corrupt"
        cluster.provider("web")["status"] = READY_STATUS
        reconciler.run("ns", "web")
        assert "failureReason" not in cluster.vm("web")["status"]
        assert "failureMessage" not in cluster.vm("web")["status"]

    def test_transient_reasons_are_not_failures(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        waiting = {
            "conditions": [
                {"type": "InfrastructureReady", "status": "False", "reason": "WaitingForCapacity"}
            ]
        }
        cluster.add_provider("web", backlink="web", status=waiting)
        _run(cluster)
        assert "failureReason" not in cluster.vm("web")["status"]

    @pytest.mark.parametrize(
        ("reason", "event_type"),
        [("Starting", "Normal"), ("WaitingForAddress", "Normal"), ("ProviderError", "Warning")],
    )
    def test_a_providers_progress_is_a_normal_event_and_a_contract_problem_a_warning(
        self, cluster: FakeCluster, reason: str, event_type: str
    ) -> None:
        cluster.add_vm("web")
        reported = {
            "conditions": [
                {"type": "InfrastructureReady", "status": "False", "reason": reason, "message": "m"}
            ]
        }
        cluster.add_provider("web", backlink="web", status=reported)
        _run(cluster)
        assert cluster.events[-1][:2] == (event_type, reason)

    def test_wrong_types_are_reported_not_raised(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        broken = {**READY_STATUS, "powerState": 42}
        cluster.add_provider("web", backlink="web", status=broken)
        assert _run(cluster) == Outcome()
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("False", "InvalidProviderStatus")
        assert "status.powerState: expected a string, got int" in ready["message"]
        assert cluster.vm("web")["status"]["providerID"] == "stub://1"
        assert cluster.events[-1][:2] == ("Warning", "InvalidProviderStatus")

    def test_unwatched_kind_is_polled(self, cluster: FakeCluster) -> None:
        cluster.install_kind(watched=False)
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        assert _run(cluster) == Outcome(requeue_after=30)


class TestDeletion:
    def _adopted(self, cluster: FakeCluster) -> Reconciler:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        cluster.delete_vm("web")
        return reconciler

    def test_provider_deleted_first_then_finalizer_released(self, cluster: FakeCluster) -> None:
        reconciler = self._adopted(cluster)
        assert reconciler.run("ns", "web") == Outcome(requeue_after=30)
        assert cluster.provider("web")["metadata"]["deletionTimestamp"]
        assert cluster.vm("web")["metadata"]["finalizers"] == [c.FINALIZER]
        ready = cluster.condition("web", "Ready")
        assert ready is not None
        assert ready["reason"] == "Deleting"
        assert "DeletingInfrastructure" in cluster.event_reasons()
        reconciler.run("ns", "web")
        assert cluster.calls.count("delete_provider") == 1
        cluster.finish_provider_deletion("web")
        assert reconciler.run("ns", "web") == Outcome()
        assert ("ns", "web") not in cluster.vms
        assert cluster.event_reasons()[-1] == "InfrastructureDeleted"

    def test_unwatched_kind_polls_while_waiting(self, cluster: FakeCluster) -> None:
        reconciler = self._adopted(cluster)
        cluster.install_kind(watched=False)
        assert reconciler.run("ns", "web") == Outcome(requeue_after=5.0)

    def test_provider_that_does_not_link_back_is_left_alone(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        before = cluster.add_provider("web")
        reconciler = _reconciler(cluster)
        reconciler.run("ns", "web")
        cluster.delete_vm("web")
        assert reconciler.run("ns", "web") == Outcome()
        assert cluster.provider("web") == before
        assert "delete_provider" not in cluster.calls
        assert ("ns", "web") not in cluster.vms
        assert cluster.events[-1][:2] == ("Warning", "InfrastructureLeftInPlace")

    def test_foreign_controlled_provider_is_left_alone(self, cluster: FakeCluster) -> None:
        foreign = {
            "apiVersion": "x/v1",
            "kind": "Other",
            "name": "o",
            "uid": "o",
            "controller": True,
        }
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", owners=[foreign])
        cluster.vm("web")["metadata"]["finalizers"] = [c.FINALIZER]
        cluster.delete_vm("web")
        _run(cluster)
        assert "delete_provider" not in cluster.calls
        assert ("ns", "web") not in cluster.vms

    def test_kind_not_served_releases(self, cluster: FakeCluster) -> None:
        cluster.kinds.clear()
        cluster.add_vm("web")
        cluster.vm("web")["metadata"]["finalizers"] = [c.FINALIZER, "other/finalizer"]
        cluster.delete_vm("web")
        _run(cluster)
        assert cluster.vm("web")["metadata"]["finalizers"] == ["other/finalizer"]

    def test_without_our_finalizer_nothing_happens(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web")
        cluster.delete_vm("web")
        assert _run(cluster) == Outcome()
        assert cluster.calls == ["get_vm"]


def test_vanished_vm_is_done(cluster: FakeCluster) -> None:
    assert _run(cluster, "ghost") == Outcome()


def test_api_failures_back_off_and_are_reported_once(cluster: FakeCluster) -> None:
    cluster.add_vm("web")

    def broken(*_: object, **__: object) -> None:
        raise ApiError("reading stubmachines: HTTP 500 boom", status=500)

    cluster.get_provider = broken  # type: ignore[assignment,method-assign]
    reconciler = _reconciler(cluster)
    assert reconciler.run("ns", "web") == Outcome(retry=True)
    assert reconciler.run("ns", "web") == Outcome(retry=True)
    assert cluster.event_reasons() == ["ReconcileFailed"]


class TestLaggingCopies:
    """Passes read copies that may lag the API server; nothing is taken away on a copy's word."""

    def test_an_ordinary_pass_reads_no_fresh_object(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web", status=READY_STATUS)
        _run(cluster)
        _run(cluster)
        assert not [call for call in cluster.calls if call.endswith("_fresh")]

    def test_a_provider_the_copy_has_not_seen_yet_keeps_the_finalizer(
        self, cluster: FakeCluster
    ) -> None:
        reconciler = TestDeletion()._adopted(cluster)
        cluster.lagging_providers[("ns", "web")] = None
        assert reconciler.run("ns", "web") == Outcome(requeue_after=30)
        assert "get_provider_fresh" in cluster.calls
        assert cluster.vm("web")["metadata"]["finalizers"] == [c.FINALIZER]
        assert cluster.calls.count("delete_provider") == 1

    def test_a_link_the_copy_shows_broken_is_not_disowned(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web")
        _run(cluster)
        adopted = _owners(cluster)
        lagging = dict(cluster.provider("web"))
        lagging["metadata"] = {k: v for k, v in lagging["metadata"].items() if k != "annotations"}
        cluster.lagging_providers[("ns", "web")] = lagging
        _run(cluster)
        assert _owners(cluster) == adopted
        assert "Disowned" not in cluster.event_reasons()

    def test_a_link_broken_on_the_api_server_is_disowned(self, cluster: FakeCluster) -> None:
        cluster.add_vm("web")
        cluster.add_provider("web", backlink="web")
        _run(cluster)
        del cluster.provider("web")["metadata"]["annotations"]
        _run(cluster)
        assert _owners(cluster) == []
        assert "get_provider_fresh" in cluster.calls

    def test_deleting_the_provider_is_decided_on_the_copy_and_preconditioned(
        self, cluster: FakeCluster
    ) -> None:
        reconciler = TestDeletion()._adopted(cluster)
        reconciler.run("ns", "web")
        assert cluster.calls.count("delete_provider") == 1
        assert "get_provider_fresh" not in cluster.calls
        # Gone: the finalizer is released only once the API server confirms it.
        cluster.finish_provider_deletion("web")
        assert reconciler.run("ns", "web") == Outcome()
        assert "get_provider_fresh" in cluster.calls
        assert ("ns", "web") not in cluster.vms
