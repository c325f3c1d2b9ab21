"""A catalog image cannot reach another machine's disks or the image cache's bases."""

from __future__ import annotations

import pytest

from libvirt_provider import naming
from libvirt_provider.constants import REASON_INVALID_SPEC
from libvirt_provider.images.names import base_volume_name
from tests.support import builders as b
from tests.support.builders import only_problem, resolve

OTHER_TENANTS_BOOT_DISK = naming.volume_name(
    naming.domain_name("tenant-b", "db", "5c0ffee5-0000-4000-8000-00000000000b"),
    "boot",
    extension="qcow2",
)
LEGACY_BOOT_DISK = naming.volume_name(
    naming.legacy_domain_name("tenant-b", "db"), "boot", extension="qcow2"
)


@pytest.mark.parametrize(
    "volume", [OTHER_TENANTS_BOOT_DISK, LEGACY_BOOT_DISK, base_volume_name("ab" * 32, "qcow2")]
)
def test_an_image_naming_a_machine_or_cache_volume_is_refused(volume: str) -> None:
    image = b.image(source={"volume": {"pool": "vmapi-lab", "volume": volume}})
    reason, where, message = only_problem(resolve(images=[image]))
    assert reason == REASON_INVALID_SPEC
    assert where.endswith("spec.source.volume")
    assert "belongs to a machine or to the image cache" in message


def test_an_ordinary_pool_volume_image_still_resolves() -> None:
    assert resolve().machine is not None
    assert not naming.is_machine_volume("guest.qcow2")
