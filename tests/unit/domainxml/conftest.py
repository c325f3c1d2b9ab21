"""Shared fixtures of the domain XML tests: libvirt's RelaxNG schema and its test driver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest
from lxml import etree

SCHEMA = Path("/usr/share/libvirt/schemas/domain.rng")
GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(scope="session")
def domain_schema() -> etree.RelaxNG:
    if not SCHEMA.exists():
        # A required check, never skipped: `make test` installs the package that ships it.
        pytest.fail(f"{SCHEMA} is missing (install libvirt's schemas: libvirt-daemon)")
    return etree.RelaxNG(etree.parse(str(SCHEMA)))


@pytest.fixture
def test_driver() -> Iterator[libvirt.virConnect]:
    """libvirt's own in-process test driver: real XML parsing and validation, no daemon."""
    connection = libvirt.open("test:///default")
    before = {d.UUIDString() for d in connection.listAllDomains()}
    try:
        yield connection
    finally:
        for domain in connection.listAllDomains():
            if domain.UUIDString() in before:
                continue
            if domain.isActive():
                domain.destroy()
            domain.undefine()
        connection.close()
