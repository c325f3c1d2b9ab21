"""Property: whatever text a catalog object carries as a pool, volume, bridge or device name, it
is either refused with a message naming the field or safe to hand to libvirt; and the names such
things really have are accepted as written (a validator that refused everything would be safe)."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from catalog.image import PoolVolume
from catalog.network import NetworkSource
from catalog.storage import LibvirtStorageClassSpec

HOSTILE = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["..", ".", "../x", "a/../../b", "/etc/passwd", "x\x00y", "<a>", "a&b", " "]),
)

# Names pools, volumes and bridges really have: DNS-1123 labels, as Kubernetes users write them,
# and libvirt's own style (`virbr0`, `eth0.100`, `ubuntu-24.04+cloud_img.qcow2`, `_scratch`).
DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
LIBVIRT_STYLE = st.builds(
    str.__add__,
    st.sampled_from(string.ascii_letters + string.digits + "_"),
    st.text(alphabet=string.ascii_letters + string.digits + "_.+-", max_size=199),
)
VALID = st.one_of(DNS_LABEL, LIBVIRT_STYLE)


def _safe(name: str) -> bool:
    return (
        "/" not in name
        and not name.startswith(".")
        and all(c.isascii() and (c.isalnum() or c in "_.+-") for c in name)
    )


@given(pool=HOSTILE, volume=HOSTILE, valid=VALID)
def test_pool_volume_names_are_safe_or_refused(pool: str, volume: str, valid: str) -> None:
    accepted = PoolVolume(pool=valid, volume=valid)
    assert (accepted.pool, accepted.volume) == (valid, valid)
    named: set[object] = set()
    try:
        PoolVolume(pool=valid, volume=volume)
    except ValidationError as error:
        named = {e["loc"][0] for e in error.errors()}
    assert named <= {"volume"}  # a refusal names the hostile field only

    fields: set[object] = set()
    try:
        parsed = PoolVolume(pool=pool, volume=volume)
    except ValidationError as error:
        fields = {e["loc"][0] for e in error.errors()}
        parsed = None
    if parsed is None:
        assert fields <= {"pool", "volume"}
        return
    assert _safe(parsed.pool)
    assert _safe(parsed.volume)


@given(bridge=HOSTILE, valid=VALID)
def test_bridge_names_are_safe_or_refused(bridge: str, valid: str) -> None:
    assert NetworkSource(bridge=valid).bridge == valid
    try:
        parsed = NetworkSource(bridge=bridge)
    except ValidationError:
        return
    assert parsed.bridge is not None
    assert _safe(parsed.bridge)


@given(pool=HOSTILE, host=st.text(max_size=50), valid=VALID)
def test_storage_pools_are_safe_or_refused(pool: str, host: str, valid: str) -> None:
    accepted = LibvirtStorageClassSpec(pool="default", host_pools={host: valid})
    assert accepted.pool_on(host) == valid
    try:
        parsed = LibvirtStorageClassSpec(pool="default", host_pools={host: pool})
    except ValidationError:
        return
    assert _safe(parsed.pool_on(host))
