"""Every field of the rendered model shows in some golden file (the virtinst rule).

For each leaf field of `DomainSpec`, some golden case must render differently when only that field
changes. A field that no golden file exercises is either dead or untested; both fail here, so a new
field arrives together with the golden case that shows what it does.
"""

from __future__ import annotations

import typing

from libvirt_provider.domainxml import render_domain_xml
from libvirt_provider.resolved import DomainSpec
from tests.unit.domainxml.cases import CASES
from tests.unit.domainxml.fields import Path, leaf_paths, variants


def _shows(path: Path) -> bool:
    for spec in CASES.values():
        original = render_domain_xml(spec)
        for variant in variants(spec, path):
            try:
                if render_domain_xml(typing.cast(DomainSpec, variant)) != original:
                    return True
            except (AssertionError, TypeError, ValueError, AttributeError):
                continue  # an inconsistent variant proves nothing either way
    return False


def test_every_domain_field_changes_some_golden_rendering() -> None:
    paths = list(leaf_paths(DomainSpec))
    assert len(paths) > 30  # the walk found the nested models
    unexercised = [".".join(p) for p in paths if not _shows(p)]
    assert not unexercised, f"fields no golden case exercises: {unexercised}"
