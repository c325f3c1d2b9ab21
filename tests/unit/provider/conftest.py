"""Fixtures shared with the renderer tests (libvirt's schema)."""

from __future__ import annotations

from tests.unit.domainxml.conftest import domain_schema

__all__ = ["domain_schema"]
