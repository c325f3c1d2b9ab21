"""The adapters' pure helpers: which VMs a provider event concerns, scopes, error mapping."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from generic import constants as c
from generic.adapters.controller import namespace_filter
from generic.adapters.kube import translate_errors
from generic.adapters.watches import is_provider_crd
from generic.errors import ApiError, ConflictError, GoneError
from generic.provider_index import ProviderIndex, vm_keys_of_provider


def test_provider_events_wake_the_linked_vm_and_the_controlling_vm() -> None:
    obj = {
        "metadata": {
            "namespace": "ns",
            "annotations": {c.LINK_ANNOTATION: "new"},
            "ownerReferences": [
                {"apiVersion": "vm-api.io/v1alpha1", "kind": "VirtualMachine", "name": "old"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm"},
                {"apiVersion": "other.io/v1", "kind": "VirtualMachine", "name": "foreign"},
            ],
        }
    }
    assert vm_keys_of_provider(obj) == {("ns", "new"), ("ns", "old")}


@pytest.mark.parametrize(
    "meta",
    [{}, {"namespace": "ns"}, {"namespace": "ns", "annotations": {c.LINK_ANNOTATION: ""}}],
)
def test_unlinked_provider_events_wake_nobody(meta: dict[str, object]) -> None:
    assert vm_keys_of_provider({"metadata": meta}) == set()


def test_provider_crds_are_recognised_by_their_label() -> None:
    labelled = {"metadata": {"labels": {c.PROVIDER_CRD_LABEL: c.PROVIDER_CRD_LABEL_VALUE}}}
    assert is_provider_crd(labelled)
    assert not is_provider_crd({"metadata": {"labels": {c.PROVIDER_CRD_LABEL: "v2"}}})
    assert not is_provider_crd({"metadata": {}})


def test_namespace_patterns() -> None:
    assert namespace_filter([])("anything")
    scoped = namespace_filter(["team-*", "!team-secret"])
    assert scoped("team-a")
    assert not scoped("team-secret")
    assert not scoped("other")
    assert namespace_filter(["!kube-*"])("default")


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (ApiException(status=409, reason="Conflict"), ConflictError),
        (ApiException(status=404, reason="Not Found"), GoneError),
        (ApiException(status=500, reason="Internal"), ApiError),
        (ProtocolError("connection reset"), ApiError),
        (ConnectionRefusedError("refused"), ApiError),
    ],
)
def test_client_errors_become_project_errors(raised: Exception, expected: type[Exception]) -> None:
    with pytest.raises(expected) as caught, translate_errors("reading things"):
        raise raised
    assert "reading things" in str(caught.value)
    assert type(caught.value) is expected


def _provider(name: str, backlink: str | None) -> dict[str, object]:
    meta: dict[str, object] = {"namespace": "ns", "name": name}
    if backlink:
        meta["annotations"] = {c.LINK_ANNOTATION: backlink}
    return {"metadata": meta}


def test_index_reports_objects_that_vanished_between_listings() -> None:
    index = ProviderIndex()
    assert index.replace([_provider("a", "vm-a"), _provider("b", "vm-b")]) == {
        ("ns", "vm-a"),
        ("ns", "vm-b"),
    }
    assert index.replace([_provider("a", "vm-a")]) == {("ns", "vm-a"), ("ns", "vm-b")}
    assert index.replace([_provider("a", "vm-a")]) == {("ns", "vm-a")}


def test_index_reports_old_and_new_links_on_events() -> None:
    index = ProviderIndex()
    index.update(_provider("a", "old"), deleted=False)
    assert index.update(_provider("a", "new"), deleted=False) == {("ns", "old"), ("ns", "new")}
    assert index.update(_provider("a", None), deleted=True) == {("ns", "new")}
    assert index.replace([]) == set()
