"""Property: whatever text a catalog object carries as a pool, volume, bridge or device name, it
is either refused with a message naming the field or safe to hand to libvirt."""

from __future__ import annotations

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


def _safe(name: str) -> bool:
    return (
        "/" not in name
        and not name.startswith(".")
        and all(c.isascii() and (c.isalnum() or c in "_.+-") for c in name)
    )


@given(pool=HOSTILE, volume=HOSTILE)
def test_pool_volume_names_are_safe_or_refused(pool: str, volume: str) -> None:
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


@given(bridge=HOSTILE)
def test_bridge_names_are_safe_or_refused(bridge: str) -> None:
    try:
        parsed = NetworkSource(bridge=bridge)
    except ValidationError:
        return
    assert parsed.bridge is not None
    assert _safe(parsed.bridge)


@given(pool=HOSTILE, host=st.text(max_size=50))
def test_storage_pools_are_safe_or_refused(pool: str, host: str) -> None:
    try:
        parsed = LibvirtStorageClassSpec(pool="default", host_pools={host: pool})
    except ValidationError:
        return
    assert _safe(parsed.pool_on(host))
