"""Property: valid Kubernetes names, through resolver and renderer, always give valid XML."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from libvirt_provider.domainxml import render_domain_xml
from libvirt_provider.naming import MAX_DOMAIN_NAME
from libvirt_provider.resolve import resolve_machine
from tests.support import builders as b

LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
SUBDOMAIN = st.from_regex(
    r"\A[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?(\.[a-z0-9]{1,30}){0,5}\Z"
) | st.from_regex(r"\A[a-z0-9]{50,63}(\.[a-z0-9]{61}[a-z0-9]){3}\Z")
TAG_TEXT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff"),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    namespace=LABEL,
    name=SUBDOMAIN,
    vm_name=SUBDOMAIN,
    disks=st.lists(LABEL, max_size=4, unique=True),
    nics=st.lists(LABEL, min_size=1, max_size=4, unique=True),
    tags=st.dictionaries(TAG_TEXT.filter(lambda k: 1 <= len(k) <= 128), TAG_TEXT, max_size=5),
    uid=st.uuids(),
)
def test_valid_names_resolve_and_render_schema_valid_xml(
    *,
    namespace: str,
    name: str,
    vm_name: str,
    disks: list[str],
    nics: list[str],
    tags: dict[str, str],
    uid: uuid.UUID,
    domain_schema: etree.RelaxNG,
) -> None:
    vm = b.vm_spec(
        disks=[{"name": d, "source": {"blank": True}, "sizeGiB": 1} for d in disks],
        network={"interfaces": [{"name": n} for n in nics]},
        tags=tags,
        sshPublicKeys=["ssh-ed25519 AAAA x"],
    )
    resolution = resolve_machine(
        vm_name=vm_name,
        vm_spec=vm,
        machine=b.machine(name=name, namespace=namespace, uid=str(uid)),
        catalog=b.catalog(),
        secrets={},
        host=b.HOST,
    )
    assert resolution.machine is not None, resolution.message()
    domain = resolution.machine.domain
    assert len(domain.name) <= MAX_DOMAIN_NAME
    document = etree.fromstring(render_domain_xml(domain))
    assert domain_schema.validate(document), str(domain_schema.error_log)
    for volume in resolution.machine.volumes:
        assert "/" not in volume.volume
        assert volume.volume.startswith(domain.name + "--")
    assert {t.get("key"): t.get("value") for t in document.iter("{*}tag")} == tags
