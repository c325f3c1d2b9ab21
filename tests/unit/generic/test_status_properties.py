"""Whatever a provider writes into its status, the computed VM status is one the CRD accepts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from generic.api import VirtualMachineStatus
from generic.contract import read_provider_status
from generic.linking import Link, LinkAssessment
from generic.status import Observation, desired_status

_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=300)
_json: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_condition = st.fixed_dictionaries(
    {"type": st.sampled_from(["InfrastructureReady", "UpToDate", "Other"])},
    optional={
        "status": st.sampled_from(["True", "False", "Unknown", "yes"]) | _json,
        "reason": st.sampled_from(["Running", "ProviderError", "", "bad reason"]) | _json,
        "message": st.text(max_size=50) | _json,
    },
)
_address = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["InternalIP", "ExternalDNS", "Bogus"]) | _json,
        "address": st.text(max_size=300) | _json,
        "interface": st.text(max_size=10) | _json,
    },
)
_status = st.fixed_dictionaries(
    {},
    optional={
        "powerState": st.sampled_from(["PoweredOn", "PoweredOff"]) | _json,
        "providerID": st.text(max_size=20) | _json,
        "providerMetadata": st.dictionaries(st.text(max_size=8), _json, max_size=5) | _json,
        "addresses": st.lists(_address | _json, max_size=5) | _json,
        "conditions": st.lists(_condition | _json, max_size=4) | _json,
    },
)
VM = {"metadata": {"name": "web", "namespace": "ns", "uid": "u", "generation": 2}, "spec": {}}


@settings(max_examples=300, deadline=None)
@given(status=_status | _json)
def test_any_provider_status_gives_a_valid_vm_status(status: object) -> None:
    reading = read_provider_status({"status": status})
    observation = Observation(LinkAssessment(Link.ADOPTED, "adopted"), reading)
    computed = desired_status(VM, observation, now="2026-01-01T00:00:00Z")
    VirtualMachineStatus.model_validate(computed)
    assert computed["observedGeneration"] == 2
    assert {cond["type"] for cond in computed["conditions"]} >= {"Ready", "InfrastructureReady"}
