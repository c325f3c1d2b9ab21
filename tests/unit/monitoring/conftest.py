"""Fixtures of the deploy/monitoring/ tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool's path: Debian's `prometheus` package, which tests/lab/install-deps.sh
    installs. Its absence fails the tests that need it, never skips them."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: run tests/lab/install-deps.sh (as root), which installs "
            "Debian's prometheus package"
        )
    return found
