"""Fixtures of the domain XML tests: libvirt's test driver (its RelaxNG schema is in
tests/unit/conftest.py, shared with the resolver tests)."""

from __future__ import annotations

from collections.abc import Iterator

import libvirt
import pytest


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
