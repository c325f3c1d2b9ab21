"""Golden files: each resolved domain renders to a reviewed XML file that libvirt itself accepts.

Regenerate with `UPDATE_GOLDEN=1 pytest tests/unit/domainxml` and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from libvirt_provider.domainxml import render_domain_xml
from tests.unit.domainxml.cases import CASES

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def golden_path(case: str) -> Path:
    return GOLDEN / f"{case}.xml"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_the_golden_file(case: str) -> None:
    rendered = render_domain_xml(CASES[case])
    path = golden_path(case)
    if UPDATE:
        path.write_text(rendered)
    assert path.exists(), f"no golden file for {case}: run with UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), f"{path.name} differs: run with UPDATE_GOLDEN=1, review"


def test_every_golden_file_has_a_case() -> None:
    stale = {p.stem for p in GOLDEN.glob("*.xml")} - set(CASES)
    assert not stale, f"golden files without a case (delete them): {sorted(stale)}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_file_is_valid_against_libvirts_schema(
    case: str, domain_schema: etree.RelaxNG
) -> None:
    document = etree.parse(str(golden_path(case)))
    assert domain_schema.validate(document), str(domain_schema.error_log)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_file_defines_on_libvirts_test_driver(
    case: str, test_driver: libvirt.virConnect
) -> None:
    xml = golden_path(case).read_text()
    domain = test_driver.defineXMLFlags(xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    assert domain.UUIDString() == str(CASES[case].uuid)
    assert domain.name() == CASES[case].name


def test_rendering_is_deterministic() -> None:
    for spec in CASES.values():
        assert render_domain_xml(spec) == render_domain_xml(spec.model_copy(deep=True))
