"""Who is asking and may they: the front proxy is authenticated before any header is believed."""

from __future__ import annotations

import json

import pytest

from libvirt_provider.console.auth import (
    FrontProxyTrust,
    Identity,
    Refusal,
    authenticate,
    forbidden,
    status_body,
    subject_access_review,
    trust_from_configmap,
)

TRUST = FrontProxyTrust(
    client_ca="PEM",
    allowed_names=frozenset({"front-proxy-client"}),
    extra_prefixes=("X-Remote-Extra-",),
)
FORGED = [("X-Remote-User", "system:admin"), ("X-Remote-Group", "system:masters")]


def test_the_configmaps_trust_is_read_with_its_json_lists() -> None:
    trust = trust_from_configmap(
        {
            "requestheader-client-ca-file": "PEM",
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
    )
    assert trust == TRUST


def test_no_front_proxy_ca_means_no_trust() -> None:
    assert trust_from_configmap({"client-ca-file": "PEM"}) is None


def test_a_malformed_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="JSON list"):
        trust_from_configmap(
            {"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": '"x"'}
        )


@pytest.mark.parametrize("need_user", [True, False])
def test_headers_without_a_verified_certificate_are_never_believed(need_user: bool) -> None:
    found = authenticate(TRUST, None, FORGED, need_user=need_user)
    assert isinstance(found, Refusal)
    assert found.code == 401


def test_a_certificate_with_a_name_not_allowed_is_refused() -> None:
    found = authenticate(TRUST, "someone-else", FORGED, need_user=True)
    assert isinstance(found, Refusal)
    assert found.code == 401
    assert "someone-else" in found.message


def test_without_known_trust_nothing_is_served() -> None:
    found = authenticate(None, "front-proxy-client", FORGED, need_user=False)
    assert isinstance(found, Refusal)
    assert found.code == 401


def test_the_front_proxys_user_groups_and_extras_are_read() -> None:
    found = authenticate(
        TRUST,
        "front-proxy-client",
        [
            ("x-remote-user", "alice"),
            ("X-Remote-Group", "cn=dev,ou=groups"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Example.com%2fTeam", "b"),
        ],
        need_user=True,
    )
    # A group is a whole header (an LDAP DN keeps its commas, a name is never split into more
    # groups); an extra's key is percent-decoded, as the API server encodes it.
    assert found == Identity(
        "alice",
        ("cn=dev,ou=groups", "system:authenticated"),
        {"scopes": ("a",), "example.com/team": ("b",)},
    )


def test_discovery_needs_the_proxy_but_no_user_and_a_console_needs_both() -> None:
    assert authenticate(TRUST, "front-proxy-client", [], need_user=False) is None
    refused = authenticate(TRUST, "front-proxy-client", [], need_user=True)
    assert isinstance(refused, Refusal)
    assert refused.code == 401


def test_any_name_is_allowed_when_the_api_server_lists_none() -> None:
    open_trust = FrontProxyTrust(client_ca="PEM")
    assert authenticate(open_trust, "anything", [("X-Remote-User", "bob")], need_user=True) == (
        Identity("bob")
    )


def test_the_review_asks_for_get_on_the_subresource_in_the_machines_namespace() -> None:
    review = subject_access_review(Identity("alice", ("dev",)), "team-a", "vm1", "console")
    assert review["spec"] == {
        "user": "alice",
        "groups": ["dev"],
        "resourceAttributes": {
            "namespace": "team-a",
            "verb": "get",
            "group": "subresources.infrastructure.vm-api.io",
            "version": "v1alpha1",
            "resource": "libvirtmachines",
            "subresource": "console",
            "name": "vm1",
        },
    }


def test_a_refusal_is_a_status_object() -> None:
    body = json.loads(status_body(forbidden(Identity("alice"), "team-a", "console", "")))
    assert body["kind"] == "Status"
    assert body["code"] == 403
    assert body["reason"] == "Forbidden"
    assert body["message"].startswith('User "alice" cannot get resource "libvirtmachines/console"')
