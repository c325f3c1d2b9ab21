"""Arbitrary names never yield invalid XML; hostile strings are escaped or refused, clearly."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree
from pydantic import ValidationError

from libvirt_provider.domainxml import render_domain_xml
from libvirt_provider.naming import MAX_DOMAIN_NAME, domain_name, volume_name
from libvirt_provider.resolved import DomainDisk, Owner
from tests.unit.domainxml.cases import machine

DNS_LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?(\.[a-z0-9]{1,20}){0,8}\Z")
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
SAFE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
XML_HOSTILE = st.sampled_from(["<", ">", "&", '"', "'", "]]>", "<!--", "&amp;", "<x/>", "\u202e"])
HOSTILE_TEXT = st.lists(XML_HOSTILE | st.text(max_size=5), max_size=20).map("".join)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(namespace=DNS_LABEL, name=DNS_SUBDOMAIN)
def test_any_kubernetes_name_renders_a_schema_valid_domain(
    namespace: str, name: str, domain_schema: etree.RelaxNG
) -> None:
    derived = domain_name(namespace, name, "0b5ec0de-0000-4000-8000-000000000001")
    assert len(derived) <= MAX_DOMAIN_NAME
    assert SAFE_NAME.match(derived)
    spec = machine(name[:50].strip(".-") or "x", name=derived)
    document = etree.fromstring(render_domain_xml(spec))
    assert domain_schema.validate(document), str(domain_schema.error_log)
    assert document.findtext("name") == derived


@SETTINGS
@given(namespace=st.text(max_size=300), name=st.text(max_size=600), uid=st.text(max_size=80))
def test_any_string_at_all_yields_a_bounded_safe_domain_name(
    namespace: str, name: str, uid: str
) -> None:
    derived = domain_name(namespace, name, uid)
    assert len(derived) <= MAX_DOMAIN_NAME
    assert SAFE_NAME.match(derived)
    assert ".." not in derived
    assert "/" not in derived


@given(st.text(max_size=80), st.text(max_size=80))
def test_distinct_machines_get_distinct_domain_names(a: str, b: str) -> None:
    if a != b:
        assert domain_name("ns", a, "u") != domain_name("ns", b, "u")


@SETTINGS
@given(role=st.text(max_size=300))
def test_volume_names_never_escape_the_pool(role: str) -> None:
    volume = volume_name("default_web-12345678", role, extension="qcow2")
    assert "/" not in volume
    assert ".." not in volume
    assert volume.startswith("default_web-12345678--")
    assert len(volume) <= 200


@SETTINGS
@given(
    key=HOSTILE_TEXT.filter(bool),
    value=HOSTILE_TEXT,
)
def test_xml_metacharacters_in_tags_are_escaped_and_survive(key: str, value: str) -> None:
    uid = uuid.uuid4()
    if CONTROL.search(key + value):
        with pytest.raises(ValidationError, match="control characters that XML cannot carry"):
            Owner(namespace="ns", name="vm", uid=uid, virtual_machine="vm", tags={key: value})
        return
    owner = Owner(namespace="ns", name="vm", uid=uid, virtual_machine="vm", tags={key: value})
    document = etree.fromstring(render_domain_xml(machine("tags", owner=owner)))
    tag = document.find(".//{*}tag")
    assert tag is not None
    assert (tag.get("key"), tag.get("value")) == (key, value)


@pytest.mark.parametrize(
    "volume",
    ["../etc/passwd", "a/../../b", "/abs/path", "..", ".hidden", "a b", "x" * 201, "a\x00b", "<v>"],
)
def test_path_like_or_hostile_volume_names_are_refused(volume: str) -> None:
    with pytest.raises(ValidationError, match="volume"):
        DomainDisk(
            name="boot",
            pool="p",
            volume=volume,
            format="qcow2",
            bus="virtio",
            target="vda",
            serial="boot",
            boot=True,
        )


@pytest.mark.parametrize("name", ["../x", "a/b", "with space", "ä", "x" * 64])
def test_hostile_device_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        DomainDisk(
            name=name,
            pool="p",
            volume="v",
            format="qcow2",
            bus="virtio",
            target="vda",
            serial="boot",
            boot=True,
        )
