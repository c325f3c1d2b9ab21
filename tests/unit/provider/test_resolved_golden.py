"""End-to-end golden files: a linked pair as a user writes it -> the domain XML libvirt receives.

They pin what the resolver decides (names, MACs, targets, buses, defaults), which the renderer
goldens cannot. Regenerate with `UPDATE_GOLDEN=1` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from libvirt_provider.domainxml import render_domain_xml
from libvirt_provider.resolve import resolve_machine
from tests.support import builders as b

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lab-sample": (b.vm_spec(), b.machine({"domainType": "qemu"})),
    "cloud-init-two-nics-data-disk": (
        b.vm_spec(
            instanceType={"resources": {"cpus": 2, "memory": "1Gi"}},
            disks=[{"name": "logs", "source": {"blank": True}, "sizeGiB": 4}],
            network={
                "hostName": "web-1",
                "interfaces": [
                    {"name": "eth0"},
                    {"name": "eth1", "network": b.ref("LibvirtNetwork", "br")},
                ],
            },
            bootstrap={"cloudInit": {"userData": {"name": "boot", "key": "user-data"}}},
            sshPublicKeys=["ssh-ed25519 AAAA user@example"],
            tags={"team": "web"},
        ),
        b.machine({"firmware": {"type": "UEFI"}, "hotplug": {"maxCPUs": 4}}),
    ),
}
CATALOG = b.catalog(
    networks=[b.network(), b.network("br", source={"bridge": "br0"}, default=False)]
)
SECRETS = {"boot": {"user-data": b"#cloud-config\n"}}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_a_pair_resolves_and_renders_to_its_golden_file(
    case: str, domain_schema: etree.RelaxNG
) -> None:
    vm, machine = PAIRS[case]
    resolution = resolve_machine(
        vm_name="web", vm_spec=vm, machine=machine, catalog=CATALOG, secrets=SECRETS, host=b.HOST
    )
    assert resolution.machine is not None, resolution.message()
    rendered = render_domain_xml(resolution.machine.domain)
    path = GOLDEN / f"{case}.xml"
    if UPDATE:
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{path.name} differs: run with UPDATE_GOLDEN=1, review"
    assert domain_schema.validate(etree.fromstring(rendered)), str(domain_schema.error_log)
