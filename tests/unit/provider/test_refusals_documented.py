"""The list of refused portable fields in docs/catalog.md is the resolver's own list.

Why: issue 28 asks that what is left unsupported is said once, clearly; a message changed in code
but not in the documentation (or a refusal dropped from one of them) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from libvirt_provider.resolve.refusals import REFUSALS

CATALOG = Path(__file__).resolve().parents[3] / "docs" / "catalog.md"
SECTION = "## What this provider refuses"


def _documented() -> list[str]:
    text = CATALOG.read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [re.split(r"\s\|\s", row.strip("| "))[1] for row in rows[1:]]


def test_every_refusal_is_documented_with_the_resolvers_exact_message() -> None:
    assert sorted(_documented()) == sorted(REFUSALS.values())
