"""Credential roots left by processes that are gone are found (and removed at the next start);
a live process's root, or one being made this moment, never is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from libvirt_provider.adapters.host import credentials
from libvirt_provider.adapters.host.credentials import (
    OWNER_FILE,
    ROOT_PREFIX,
    abandoned_roots,
    make_root,
)


def _root(base: Path, name: str, owner: str | None) -> Path:
    root = base / f"{ROOT_PREFIX}{name}"
    (root / "host-a").mkdir(parents=True)
    if owner is not None:
        (root / OWNER_FILE).write_text(owner)
    return root


def test_roots_of_gone_owners_are_abandoned_and_live_ones_kept(tmp_path: Path) -> None:
    live = _root(tmp_path, "live", "1 100")
    gone = _root(tmp_path, "gone", "2 200")
    fresh = _root(tmp_path, "fresh", None)
    old = _root(tmp_path, "old", None)
    os.utime(old, (0, 0))
    (tmp_path / "unrelated").mkdir()

    found = abandoned_roots(
        tmp_path, alive=lambda owner: owner == "1 100", now=fresh.stat().st_mtime + 1
    )

    # `fresh` has no owner yet but is younger than the grace: a process may be making it now.
    assert found == [gone, old]
    assert live.exists()


def test_a_start_removes_a_dead_process_root_and_records_its_own(tmp_path: Path) -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    dead = _root(tmp_path, "dead", credentials._identity(child.pid).replace("?", "1"))
    mine_before = _root(tmp_path, "alive", credentials._identity(os.getpid()))

    root = make_root(tmp_path)

    assert not dead.exists()
    assert mine_before.exists()  # this very process is alive
    assert (root / OWNER_FILE).read_text() == credentials._identity(os.getpid())
    assert root.stat().st_mode & 0o777 == 0o700
    assert (root / OWNER_FILE).stat().st_mode & 0o777 == 0o600


def test_a_reused_pid_is_not_the_process_that_wrote_the_root() -> None:
    pid = os.getpid()
    start = credentials._start_time(pid)
    assert start != "?"
    assert credentials._process_alive(f"{pid} {start}")
    assert not credentials._process_alive(f"{pid} {int(start) + 1}")
