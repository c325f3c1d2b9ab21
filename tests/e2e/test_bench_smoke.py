"""Every benchmark script runs in smoke mode against the lab, so benchmarks cannot rot.

A change to an API the scripts use (a helper, a flag, a model) breaks this test, not the next
person who measures. Smoke mode is a tiny run of a few seconds; no figure is judged, only that the
script runs to its end and exits 0.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.lab_access import REPO, LabInfo

BENCH = REPO / "bench"
# Seconds each smoke run may take at most (they take a few; the lab's guest boot dominates the
# provider burst).
SMOKE_TIMEOUT = {
    "connect_bench.py": 60,
    "console_bench.py": 120,
    "footprint.py": 120,
    "forward_loops.py": 60,
    "generic_status_latency.py": 120,
    "image_bench.py": 120,
    "metrics_bench.py": 120,
    "metrics_profile.py": 60,
    "migration_bench.py": 120,
    "placement_bench.py": 240,
    "provider_burst.py": 180,
    "remote_bench.py": 180,
    "render_bench.py": 60,
    "scale_bench.py": 120,
    "snapshot_bench.py": 120,
    "soak.py": 120,
    "waiting_pile_bench.py": 120,
}


def test_every_bench_script_has_a_smoke_run() -> None:
    scripts = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert scripts == sorted(SMOKE_TIMEOUT)


@pytest.mark.parametrize("script", sorted(SMOKE_TIMEOUT))
def test_the_script_runs_in_smoke_mode(lab: LabInfo, script: str) -> None:
    env = {**os.environ, "KUBECONFIG": lab.kubeconfig}
    run = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT[script],
        check=False,
    )
    assert run.returncode == 0, (
        f"{script} --smoke exited {run.returncode}:\n{run.stdout}\n{run.stderr}"
    )
    assert run.stdout.strip(), f"{script} --smoke printed nothing"
