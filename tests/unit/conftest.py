"""Fixtures shared by unit tests of several packages: libvirt's RelaxNG schema for domains."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

_SCHEMA = Path("/usr/share/libvirt/schemas/domain.rng")


@pytest.fixture(scope="session")
def domain_schema() -> etree.RelaxNG:
    if not _SCHEMA.exists():
        # A required check, never skipped: `make test` installs the package that ships it.
        pytest.fail(f"{_SCHEMA} is missing (install libvirt's schemas: libvirt-daemon)")
    return etree.RelaxNG(etree.parse(str(_SCHEMA)))
