"""The generic controller against a real API server: adoption, mirroring, deletion, bad input."""

from __future__ import annotations

import urllib.request
import uuid
from typing import Any, ClassVar

import pytest
from kubernetes import client

from generic import constants as c
from tests.support.daemons import RunningController
from tests.support.factories import stub_crd
from tests.support.kube import install_crd
from tests.support.stub_provider import Cluster, StubKind, remove_vms
from tests.support.waiting import eventually

TIMEOUT = 30
READY: dict[str, Any] = {
    "powerState": "PoweredOn",
    "providerID": "stub://web",
    "providerMetadata": {"host": "lab"},
    "addresses": [{"type": "InternalIP", "address": "10.213.0.7", "interface": "eth0"}],
    "conditions": [
        {
            "type": "InfrastructureReady",
            "status": "True",
            "reason": "Running",
            "message": "running",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


def _controller_owner(provider: dict[str, Any] | None) -> dict[str, Any] | None:
    for ref in (provider or {}).get("metadata", {}).get("ownerReferences", []):
        if ref.get("controller"):
            return dict(ref)
    return None


def _reason(cluster: Cluster, vm: str, type_: str = c.CONDITION_READY) -> str | None:
    condition = cluster.condition(vm, type_)
    return condition["reason"] if condition else None


def _ready_status(cluster: Cluster, vm: str) -> dict[str, Any] | None:
    got = cluster.vm(vm) or {}
    status: dict[str, Any] | None = got.get("status")
    return status if status and status.get("ready") is True else None


class TestAdoption:
    def test_mutual_link_is_adopted_and_status_mirrored(self, cluster: Cluster) -> None:
        vm = cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        owner = eventually(
            lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT, what="owner ref"
        )
        assert owner["uid"] == vm["metadata"]["uid"]
        assert owner["blockOwnerDeletion"] is True
        assert owner["kind"] == c.KIND
        eventually(lambda: _reason(cluster, "web") == c.REASON_WAITING, timeout=TIMEOUT)
        assert c.FINALIZER in (cluster.vm("web") or {})["metadata"]["finalizers"]
        cluster.write_provider_status("web", READY)
        status = eventually(lambda: _ready_status(cluster, "web"), timeout=TIMEOUT)
        assert status["powerState"] == "PoweredOn"
        assert status["providerID"] == "stub://web"
        assert status["providerMetadata"] == {"host": "lab"}
        assert status["addresses"][0]["address"] == "10.213.0.7"
        assert status["observedGeneration"] == 1
        assert _reason(cluster, "web") == "Running"
        reasons = eventually(
            lambda: (r := cluster.event_reasons("web")) and "Ready" in r and r, timeout=TIMEOUT
        )
        assert "Adopted" in reasons

    def test_one_sided_link_is_not_adopted(self, cluster: Cluster) -> None:
        cluster.create_vm("web")
        cluster.create_provider("web")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        condition = cluster.condition("web", c.CONDITION_INFRASTRUCTURE_READY)
        assert condition is not None
        assert "does not link back" in condition["message"]
        assert _controller_owner(cluster.provider("web")) is None
        eventually(lambda: "NotAdopted" in cluster.event_reasons("web"), timeout=TIMEOUT)
        # Linking back later is picked up through the provider watch.
        cluster.patch_provider("web", {"metadata": {"annotations": {c.LINK_ANNOTATION: "web"}}})
        eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)

    def test_foreign_controller_is_refused_and_untouched(self, cluster: Cluster) -> None:
        holder = client.CoreV1Api(cluster.api).create_namespaced_config_map(
            cluster.namespace, {"metadata": {"name": "holder"}}
        )
        foreign = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "holder",
            "uid": holder.metadata.uid,
            "controller": True,
        }
        before = cluster.create_provider("web", backlink="web", owners=[foreign])
        cluster.create_vm("web")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        condition = cluster.condition("web", c.CONDITION_READY)
        assert condition is not None
        assert "already controlled by ConfigMap 'holder'" in condition["message"]
        eventually(lambda: "NotAdopted" in cluster.event_reasons("web"), timeout=TIMEOUT)
        after = cluster.provider("web")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    def test_controller_vm_whose_link_broke_lets_the_linked_vm_adopt(
        self, cluster: Cluster
    ) -> None:
        old = cluster.create_vm("old", target="web")
        cluster.create_provider("web", backlink="old")
        eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)
        cluster.create_vm("web")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        cluster.patch_provider("web", {"metadata": {"annotations": {c.LINK_ANNOTATION: "web"}}})
        owner = eventually(
            lambda: (o := _controller_owner(cluster.provider("web"))) and o["name"] == "web" and o,
            timeout=TIMEOUT,
            what="adopted by the VM it now links to",
        )
        assert owner["uid"] != old["metadata"]["uid"]

    def test_deleted_out_of_band_is_not_recreated(self, cluster: Cluster) -> None:
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        cluster.write_provider_status("web", READY)
        eventually(lambda: _ready_status(cluster, "web"), timeout=TIMEOUT)
        cluster.delete_provider("web")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        got = cluster.vm("web")
        assert got is not None
        assert got["status"]["ready"] is False
        assert "addresses" not in got["status"]
        assert cluster.provider("web") is None


class TestDeletion:
    def test_provider_goes_first_then_the_vm(self, cluster: Cluster) -> None:
        hold = "e2e.vm-api.io/hold"
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web", finalizers=[hold])
        eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)
        cluster.delete_vm("web")
        eventually(
            lambda: (cluster.provider("web") or {}).get("metadata", {}).get("deletionTimestamp"),
            timeout=TIMEOUT,
            what="provider deletion requested",
        )
        eventually(lambda: _reason(cluster, "web") == c.REASON_DELETING, timeout=TIMEOUT)
        assert cluster.vm("web") is not None
        cluster.patch_provider("web", {"metadata": {"finalizers": None}})
        eventually(lambda: cluster.vm("web") is None, timeout=TIMEOUT, what="VM gone")
        assert cluster.provider("web") is None

    def test_provider_that_does_not_link_back_is_left_alone(self, cluster: Cluster) -> None:
        cluster.create_vm("web")
        before = cluster.create_provider("web", backlink="someone-else")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        cluster.delete_vm("web")
        eventually(lambda: cluster.vm("web") is None, timeout=TIMEOUT, what="VM gone")
        after = cluster.provider("web")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    def test_relinked_provider_survives_its_old_vm(self, cluster: Cluster) -> None:
        """The garbage collector must not delete a provider that no longer links back."""
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)
        cluster.patch_provider("web", {"metadata": {"annotations": {c.LINK_ANNOTATION: "db"}}})
        eventually(
            lambda: _controller_owner(cluster.provider("web")) is None,
            timeout=TIMEOUT,
            what="owner reference dropped",
        )
        eventually(lambda: "Disowned" in cluster.event_reasons("web"), timeout=TIMEOUT)
        cluster.delete_vm("web")
        eventually(lambda: cluster.vm("web") is None, timeout=TIMEOUT, what="VM gone")
        provider = cluster.provider("web")
        assert provider is not None
        assert not provider["metadata"].get("deletionTimestamp")


class TestBadInput:
    def test_kind_not_installed_recovers_when_its_crd_appears(
        self, cluster: Cluster, api_client: client.ApiClient
    ) -> None:
        late = StubKind(group=f"late-{uuid.uuid4().hex[:6]}.generic.e2e.test")
        cluster.stub = late
        cluster.create_vm("web")
        eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
        condition = cluster.condition("web", c.CONDITION_READY)
        assert condition is not None
        assert "serves no group" in condition["message"]
        eventually(lambda: "ProviderKindUnknown" in cluster.event_reasons("web"), timeout=TIMEOUT)
        install_crd(api_client, stub_crd(late.group))
        try:
            cluster.create_provider("web", backlink="web")
            eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)
            cluster.write_provider_status("web", READY)
            eventually(lambda: _ready_status(cluster, "web"), timeout=TIMEOUT)
        finally:
            client.ApiextensionsV1Api(api_client).delete_custom_resource_definition(
                f"{late.plural}.{late.group}"
            )

    def test_wrong_types_end_in_a_condition_not_a_crash(self, cluster: Cluster) -> None:
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        cluster.write_provider_status("web", {**READY, "powerState": 42, "addresses": "none"})
        eventually(
            lambda: _reason(cluster, "web") == c.REASON_INVALID_PROVIDER_STATUS, timeout=TIMEOUT
        )
        condition = cluster.condition("web", c.CONDITION_READY)
        assert condition is not None
        assert "status.powerState: expected a string, got int" in condition["message"]
        eventually(lambda: "InvalidProviderStatus" in cluster.event_reasons("web"), timeout=TIMEOUT)
        cluster.write_provider_status("web", READY)
        eventually(lambda: _ready_status(cluster, "web"), timeout=TIMEOUT, what="recovery")


class TestPropagation:
    def test_changes_after_ready_arrive_promptly(self, cluster: Cluster) -> None:
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        cluster.write_provider_status("web", READY)
        eventually(lambda: _ready_status(cluster, "web"), timeout=TIMEOUT)
        cluster.write_provider_status(
            "web",
            {
                "powerState": "PoweredOff",
                "addresses": [{"type": "InternalIP", "address": "10.213.0.9"}],
            },
        )
        # Well inside the 30 s poll interval: this can only come from the watch.
        eventually(
            lambda: (cluster.vm("web") or {}).get("status", {}).get("powerState") == "PoweredOff",
            timeout=5,
            what="power flip propagated",
        )
        status = (cluster.vm("web") or {})["status"]
        assert [a["address"] for a in status["addresses"]] == ["10.213.0.9"]
        failing = {
            "conditions": [
                {
                    "type": "InfrastructureReady",
                    "status": "False",
                    "reason": "ProviderError",
                    "message": "domain vanished",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
        cluster.write_provider_status("web", failing)
        eventually(
            lambda: (
                (cluster.vm("web") or {}).get("status", {}).get("failureReason") == "ProviderError"
            ),
            timeout=5,
        )
        cluster.write_provider_status("web", READY)
        eventually(
            lambda: "failureReason" not in (cluster.vm("web") or {}).get("status", {}), timeout=5
        )

    def test_an_unlabelled_kind_is_refused_until_its_crd_is_labelled(
        self, cluster: Cluster, api_client: client.ApiClient
    ) -> None:
        plain = StubKind(group=f"plain-{uuid.uuid4().hex[:6]}.generic.e2e.test")
        crd = stub_crd(plain.group, labelled=False)
        install_crd(api_client, crd)
        ext = client.ApiextensionsV1Api(api_client)
        try:
            cluster.stub = plain
            cluster.create_vm("web")
            cluster.create_provider("web", backlink="web")
            # A reference to a kind whose CRD does not mark it a provider is never adopted: it
            # could be any object in the tenant's namespace, which the VM's deletion would take.
            eventually(lambda: _reason(cluster, "web") == c.REASON_NOT_ADOPTED, timeout=TIMEOUT)
            refused = cluster.condition("web", c.CONDITION_READY)
            assert refused is not None
            assert f"lacks the label {c.PROVIDER_CRD_LABEL}" in refused["message"]
            assert _controller_owner(cluster.provider("web")) is None
            ext.patch_custom_resource_definition(
                crd["metadata"]["name"],
                {"metadata": {"labels": {c.PROVIDER_CRD_LABEL: c.PROVIDER_CRD_LABEL_VALUE}}},
            )
            # Labelled, the kind is adopted and watched: a status write arrives well inside the
            # 30 s poll interval.
            eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)
            cluster.write_provider_status("web", READY)
            eventually(lambda: _ready_status(cluster, "web"), timeout=10, what="watched")
        finally:
            remove_vms(cluster)
            ext.delete_custom_resource_definition(crd["metadata"]["name"])


class TestAdmission:
    IMAGE: ClassVar[dict[str, str]] = {
        "apiGroup": "catalog.vm-api.io",
        "kind": "Image",
        "name": "debian-12",
    }

    def _rejected(self, call: Any, fragment: str) -> None:
        with pytest.raises(client.ApiException) as raised:
            call()
        assert raised.value.status == 422, raised.value.body
        assert fragment in str(raised.value.body)

    @pytest.mark.parametrize(
        ("ref", "fragment"),
        [
            ({"apiGroup": "x.io", "kind": "K", "name": "debian:12"}, "infrastructureRef.name"),
            ({"apiGroup": "Not A Group", "kind": "K", "name": "a"}, "infrastructureRef.apiGroup"),
            ({"apiGroup": "x.io", "kind": "9K", "name": "a"}, "infrastructureRef.kind"),
            ({"apiGroup": "x.io", "name": "a"}, "infrastructureRef.kind"),
        ],
    )
    def test_malformed_references(
        self, cluster: Cluster, ref: dict[str, str], fragment: str
    ) -> None:
        body = cluster.vm_body("bad")
        body["spec"]["infrastructureRef"] = ref
        self._rejected(
            lambda: cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.namespace, c.PLURAL, body
            ),
            fragment,
        )

    def test_raw_image_string_is_not_a_reference(self, cluster: Cluster) -> None:
        body = cluster.vm_body(
            "bad",
            bootDisk={"source": {"image": {**self.IMAGE, "name": "debian:12"}}, "sizeGiB": 5},
        )
        self._rejected(
            lambda: cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.namespace, c.PLURAL, body
            ),
            "bootDisk.source.image.name",
        )

    def test_immutable_fields_and_shrinking_disks(self, cluster: Cluster) -> None:
        cluster.create_vm(
            "web",
            bootDisk={"source": {"image": self.IMAGE}, "sizeGiB": 10, "storageClassName": "fast"},
            disks=[{"name": "data", "source": {"blank": True}, "sizeGiB": 5}],
            network={"hostName": "web"},
        )
        edits = [
            ({"spec": {"infrastructureRef": {"name": "other"}}}, "infrastructureRef is immutable"),
            ({"spec": {"bootDisk": {"sizeGiB": 5}}}, "sizeGiB may only grow"),
            ({"spec": {"bootDisk": {"storageClassName": "slow"}}}, "storageClassName is immutable"),
            (
                {"spec": {"bootDisk": {"source": {"image": {"name": "debian-13"}}}}},
                "source is immutable",
            ),
            (
                {"spec": {"disks": [{"name": "data", "source": {"blank": True}, "sizeGiB": 1}]}},
                "sizeGiB may only grow",
            ),
            ({"spec": {"network": {"hostName": "db"}}}, "hostName is immutable"),
        ]
        for body, fragment in edits:
            self._rejected(lambda body=body: cluster.patch_vm("web", body), fragment)
        cluster.patch_vm("web", {"spec": {"bootDisk": {"sizeGiB": 20}, "powerState": "PoweredOff"}})
        got = cluster.vm("web")
        assert got is not None
        assert got["spec"]["bootDisk"]["sizeGiB"] == 20

    @pytest.mark.parametrize(
        ("spec", "fragment"),
        [
            (
                {"bootDisk": {"source": {}, "sizeGiB": 5}},
                "set exactly one of image or snapshot",
            ),
            (
                {"bootDisk": {"source": {"image": IMAGE, "snapshot": IMAGE}, "sizeGiB": 5}},
                "set exactly one of image or snapshot",
            ),
            (
                {"disks": [{"name": "d", "source": {"blank": True, "image": IMAGE}, "sizeGiB": 1}]},
                "set exactly one of image, snapshot or blank",
            ),
            ({"disks": [{"name": "d", "source": {}, "sizeGiB": 1}]}, "set exactly one of"),
        ],
    )
    def test_disk_sources_are_exactly_one_of(
        self, cluster: Cluster, spec: dict[str, Any], fragment: str
    ) -> None:
        body = cluster.vm_body("bad", **spec)
        self._rejected(
            lambda: cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.namespace, c.PLURAL, body
            ),
            fragment,
        )

    @pytest.mark.parametrize("memory", ["0", 0, "-1Gi"])
    def test_memory_must_be_positive(self, cluster: Cluster, memory: object) -> None:
        body = cluster.vm_body("bad", instanceType={"resources": {"cpus": 1, "memory": memory}})
        self._rejected(
            lambda: cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.namespace, c.PLURAL, body
            ),
            "must be greater than zero",
        )

    def test_exactly_one_of(self, cluster: Cluster) -> None:
        body = cluster.vm_body(
            "bad", instanceType={"name": "small", "resources": {"cpus": 1, "memory": "1Gi"}}
        )
        self._rejected(
            lambda: cluster.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, cluster.namespace, c.PLURAL, body
            ),
            "exactly one of name or resources",
        )


def test_metrics_count_reconciles(cluster: Cluster, controller: RunningController) -> None:
    cluster.create_vm("web")
    cluster.create_provider("web", backlink="web")
    eventually(lambda: _controller_owner(cluster.provider("web")), timeout=TIMEOUT)

    def scraped() -> dict[str, float]:
        with urllib.request.urlopen(controller.metrics_url, timeout=5) as response:
            text = response.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("vmapi_generic_") and " " in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    values = eventually(scraped, timeout=TIMEOUT, what="metrics served")
    assert values['vmapi_generic_reconciles_total{result="done"}'] >= 1
    assert values["vmapi_generic_watched_provider_kinds"] >= 1
    assert "vmapi_generic_queue_depth" in values
    assert values["vmapi_generic_reconcile_duration_seconds_count"] >= 1
