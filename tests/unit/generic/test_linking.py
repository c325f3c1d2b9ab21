"""Link checks: a reference alone never authorises control; properties over arbitrary metadata."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from generic import constants as c
from generic.linking import (
    Link,
    adopted_owner_references,
    assess_link,
    disowned_owner_references,
)

VM: dict[str, Any] = {
    "metadata": {"name": "web", "namespace": "ns", "uid": "vm-uid"},
    "spec": {"infrastructureRef": {"apiGroup": "x.io", "kind": "Stub", "name": "web"}},
}

_owner = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["vm-api.io/v1alpha1", "v1"]),
        "kind": st.sampled_from(["VirtualMachine", "ConfigMap"]),
        "name": st.sampled_from(["web", "other"]),
        "uid": st.sampled_from(["vm-uid", "other-uid"]),
    },
    optional={"controller": st.booleans()},
)
_provider = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"namespace": st.sampled_from(["ns", "elsewhere"]), "name": st.just("web")},
            optional={
                "annotations": st.dictionaries(
                    st.sampled_from([c.LINK_ANNOTATION, "other/key"]),
                    st.sampled_from(["web", "db", ""]),
                ),
                "ownerReferences": st.lists(_owner, max_size=3),
            },
        )
    }
)


@given(_provider)
def test_only_a_backlink_in_the_same_namespace_allows_control(provider: dict[str, Any]) -> None:
    link = assess_link(VM, provider).link
    meta = provider["metadata"]
    backlink = (meta.get("annotations") or {}).get(c.LINK_ANNOTATION)
    if link.mutual:
        assert backlink == "web"
        assert meta["namespace"] == "ns"
    controllers = [r for r in meta.get("ownerReferences", []) if r.get("controller") is True]
    if link is Link.ADOPTED:
        assert controllers[0]["uid"] == "vm-uid"
    if link is Link.LINKED:
        assert controllers == []


@given(_provider)
def test_adoption_leaves_exactly_one_controller_and_keeps_other_owners(
    provider: dict[str, Any],
) -> None:
    owners = adopted_owner_references(VM, provider)
    assert [o["uid"] for o in owners if o.get("controller")].count("vm-uid") == 1
    others = [o for o in provider["metadata"].get("ownerReferences", []) if o["uid"] != "vm-uid"]
    assert owners[:-1] == others


@given(_provider)
def test_disowning_removes_only_this_vm(provider: dict[str, Any]) -> None:
    existing = provider["metadata"].get("ownerReferences", [])
    remaining = disowned_owner_references(VM, provider)
    if not any(o["uid"] == "vm-uid" for o in existing):
        assert remaining is None
    else:
        assert remaining == [o for o in existing if o["uid"] != "vm-uid"]


def test_messages_name_the_problem() -> None:
    assert "does not exist" in assess_link(VM, None).message
    missing = {"metadata": {"namespace": "ns", "name": "web"}}
    assert "annotation vm-api.io/virtual-machine is missing" in assess_link(VM, missing).message
