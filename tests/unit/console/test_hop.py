"""The hop between daemons: which daemon, whether a request may go there, and what it carries."""

from __future__ import annotations

import datetime as dt

import pytest

from libvirt_provider import constants as c
from libvirt_provider.console.auth import Identity, Refusal, authenticate
from libvirt_provider.console.hop import (
    HOP_TRUST,
    HopTarget,
    certificate_names,
    format_hop_address,
    hop_host,
    hop_identity,
    hop_request_head,
    hop_target,
    no_second_hop,
    parse_hop_address,
)

NOW = dt.datetime(2026, 12, 4, 22, 0, 0, tzinfo=dt.UTC)


def machine(host: str | None) -> dict[str, object]:
    spec = {"host": host} if host is not None else {}
    return {"metadata": {"uid": "u"}, "spec": spec, "status": {"host": "forged"}}


def lease(
    address: object = "10.0.0.7:8444", *, age: float = 5.0, duration: int | None = 40
) -> dict[str, object]:
    renewed = (NOW - dt.timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec: dict[str, object] = {"holderIdentity": "kvm-b", "renewTime": renewed}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    annotations = {c.HOP_ADDRESS_ANNOTATION: address} if address is not None else {}
    return {"metadata": {"annotations": annotations}, "spec": spec}


# -- which daemon -----------------------------------------------------------------------------


def test_a_machine_on_another_host_hops_to_its_spec_host_never_its_status() -> None:
    assert hop_host(machine("kvm-b"), frozenset({"kvm-a"})) == "kvm-b"


@pytest.mark.parametrize(
    "found",
    [None, machine(None), machine(""), machine("kvm-a")],
    ids=["missing", "no host yet", "empty host", "served here"],
)
def test_answered_here_when_the_machine_is_missing_unplaced_or_served(
    found: dict[str, object] | None,
) -> None:
    assert hop_host(found, frozenset({"kvm-a"})) is None


def test_the_target_is_the_address_the_hosts_lease_publishes() -> None:
    assert hop_target("kvm-b", lease(), NOW) == HopTarget("kvm-b", "10.0.0.7", 8444)
    v6 = hop_target("kvm-b", lease("[fd00::7]:8444"), NOW)
    assert v6 == HopTarget("kvm-b", "fd00::7", 8444)
    assert isinstance(v6, HopTarget)
    assert v6.authority == "[fd00::7]:8444"


@pytest.mark.parametrize(
    ("found", "words"),
    [
        (None, "no heartbeat Lease"),
        (lease(age=41), "last renewed its heartbeat 41 s ago"),
        (lease(age=100, duration=None), "100 s ago"),
        (lease(None), "takes no hops"),
        (lease("kvm-b.example:8444"), "not ADDRESS:PORT"),
        (lease("10.0.0.7"), "not ADDRESS:PORT"),
        (lease(8444), "not ADDRESS:PORT"),
    ],
    ids=["no lease", "expired", "expired, grace", "no address", "a name", "no port", "not text"],
)
def test_no_hop_to_a_daemon_that_is_gone_or_takes_none_503_with_why(
    found: dict[str, object] | None, words: str
) -> None:
    refusal = hop_target("kvm-b", found, NOW)
    assert isinstance(refusal, Refusal)
    assert refusal.code == 503
    assert words in refusal.message
    assert "kvm-b" in refusal.message


def test_a_lease_without_its_duration_is_fresh_within_the_heartbeat_grace() -> None:
    assert isinstance(hop_target("kvm-b", lease(age=30, duration=None), NOW), HopTarget)


def test_a_request_that_hopped_is_never_forwarded_again() -> None:
    refusal = no_second_hop("guest", "kvm-c")
    assert refusal.code == 503
    assert "kvm-c" in refusal.message
    assert "not forwarded again" in refusal.message


# -- addresses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "port", "text"),
    [("10.1.2.3", 8444, "10.1.2.3:8444"), ("fd00::1", 1, "[fd00::1]:1")],
)
def test_addresses_round_trip(address: str, port: int, text: str) -> None:
    assert format_hop_address(address, port) == text
    assert parse_hop_address(text) == (address, port)


@pytest.mark.parametrize(
    "text", ["", ":8444", "10.1.2.3:", "10.1.2.3:0", "10.1.2.3:70000", "fd00::1:8444", "[x]:1"]
)
def test_malformed_addresses_are_refused(text: str) -> None:
    assert parse_hop_address(text) is None


# -- what a hop carries -----------------------------------------------------------------------

IDENTITY = Identity(
    user="system:serviceaccount:team:alice",
    groups=("system:serviceaccounts", "cn=ops,dc=example"),
    extra={"authentication.kubernetes.io/pod-name": ("p1",)},
)
ASKED = [
    ("Host", "libvirt-provider-console.vm-api-system.svc:443"),
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Protocol", "plain.kubevirt.io"),
    ("X-Remote-User", "system:admin"),
    ("X-Remote-Group", "system:masters"),
    ("X-Remote-Extra-Scopes", "all"),
    ("Authorization", "Bearer secret"),
    ("Cookie", "c=1"),
    ("X-Forwarded-For", "10.0.0.1"),
]
PATH = (
    "/apis/subresources.infrastructure.vm-api.io/v1alpha1/namespaces/team/libvirtmachines/g"
    "/console?viewer=true"
)


def parsed_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    text = head.decode("latin-1")
    assert text.endswith("\r\n\r\n")
    first, *rest = text[:-4].split("\r\n")
    return first, [(k, v.strip()) for k, _, v in (line.partition(":") for line in rest)]


def test_the_hop_carries_the_upgrade_and_the_identity_authenticated_here_only() -> None:
    head = hop_request_head("GET", PATH, ASKED, IDENTITY, "10.0.0.7:8444")
    first, headers = parsed_head(head)
    assert first == f"GET {PATH} HTTP/1.1"
    names = [k.lower() for k, _ in headers]
    assert dict(headers)["Host"] == "10.0.0.7:8444"
    assert names.count("host") == 1
    for kept in ("upgrade", "connection", "sec-websocket-key", "sec-websocket-protocol"):
        assert kept in names
    # The client's own identity headers, credentials and anything else stay behind.
    for dropped in ("authorization", "cookie", "x-forwarded-for", "x-remote-extra-scopes"):
        assert dropped not in names
    assert ("X-Remote-User", "system:admin") not in headers
    assert ("X-Remote-Group", "system:masters") not in headers


def test_the_target_reads_back_exactly_the_identity_the_sender_authenticated() -> None:
    _first, headers = parsed_head(hop_request_head("GET", PATH, ASKED, IDENTITY, "h:1"))
    assert hop_identity(frozenset({c.HOP_PEER_NAME}), headers) == IDENTITY
    assert authenticate(HOP_TRUST, c.HOP_PEER_NAME, headers, need_user=True) == IDENTITY


def test_no_header_is_believed_without_a_hop_certificate_naming_the_console_service() -> None:
    _first, headers = parsed_head(hop_request_head("GET", PATH, ASKED, IDENTITY, "h:1"))
    for names in (frozenset(), frozenset({"localhost", "front-proxy-client"})):
        refusal = hop_identity(names, headers)
        assert isinstance(refusal, Refusal)
        assert refusal.code == 401


def test_a_hop_without_a_user_is_refused() -> None:
    refusal = hop_identity(frozenset({c.HOP_PEER_NAME}), [("Upgrade", "websocket")])
    assert isinstance(refusal, Refusal)
    assert refusal.code == 401


def test_a_header_value_with_a_line_break_is_never_passed_on() -> None:
    head = hop_request_head("GET", PATH, [("User-Agent", "a\r\nX-Remote-User: x")], IDENTITY, "h:1")
    assert b"X-Remote-User: x" not in head
    with pytest.raises(ValueError, match="line break"):
        hop_request_head("GET", PATH + "\r\nX: y", [], IDENTITY, "h:1")


def test_a_certificates_names_are_its_dns_subject_alternative_names() -> None:
    cert = {
        "subject": ((("commonName", "x"),),),
        "subjectAltName": (
            ("DNS", c.HOP_PEER_NAME),
            ("DNS", "localhost"),
            ("IP Address", "1.2.3.4"),
        ),
    }
    assert certificate_names(cert) == frozenset({c.HOP_PEER_NAME, "localhost"})
    assert certificate_names(None) == frozenset()
    assert certificate_names({}) == frozenset()
