"""The daemon's command line."""

from __future__ import annotations

import subprocess
import sys

from libvirt_provider.__main__ import build_parser


def test_help_names_the_product() -> None:
    assert "vm-api.io" in build_parser().format_help()


def test_module_entry_point_prints_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "libvirt_provider", "--help"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0
    assert "--libvirt-uri" in out.stdout
