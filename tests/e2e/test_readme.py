"""The README's commands, run as a user runs them.

`make run` on a lab that was just taken down (nothing prepared by a fixture): the lab comes up,
the daemon starts, the sample VM is placed and becomes Ready and `kubectl get vm -o wide`,
`kubectl get lvm` and `kubectl get lvh` are printed; Ctrl-C
(SIGINT to the foreground process group) stops it without a traceback. Then every command of the
README's first block and of its lab section exists and runs, and the Vagrantfile is valid for
Debian's own vagrant with the vagrant-libvirt plugin.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.lab_access import REPO
from tests.support.signals import as_at_a_terminal
from tests.support.waiting import GiveUp, TimedOutError, eventually

RUN_DEADLINE = 420.0  # a cold lab start (no control-plane build) plus one guest boot
STOP_DEADLINE = 60.0
TOUR_DEADLINE = 30.0  # two kubectl calls after the sample is Ready
LINE_WAIT = 0.5  # how long one look at `make run`'s output blocks for its next line


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", markdown, flags=re.S)


def _commands(block: str) -> list[str]:
    """The commands of a shell block, comments removed, `;`-separated ones split."""
    found = []
    for line in block.splitlines():
        code = line.split("#", 1)[0].strip()
        found += [part.strip() for part in code.split(";") if part.strip()]
    return found


def _read_until(
    lines: queue.Queue[str | None], pattern: re.Pattern[str] | None, deadline: float
) -> str:
    """Everything printed until a line matching `pattern`, or until the output ends when
    `pattern` is None; fails at the deadline, showing the output."""
    seen: list[str] = []

    def found() -> bool:
        try:
            line = lines.get(timeout=LINE_WAIT)
        except queue.Empty:
            return False
        if line is None:
            if pattern is None:
                return True
            raise GiveUp  # the output ended without the line
        seen.append(line)
        return pattern is not None and bool(pattern.search(line))

    try:
        # Each look blocks on the queue for the next line, so the wait needs no pause of its own.
        eventually(found, timeout=deadline, interval=0, what="the output", not_yet=())
    except (GiveUp, TimedOutError):
        wanted = "end" if pattern is None else f"print a line matching {pattern.pattern!r}"
        raise AssertionError(
            f"`make run` did not {wanted} within {deadline:.0f} s; its output:\n"
            + "".join(seen[-200:])
        ) from None
    return "".join(seen)


def _stacks(group: int, lines: queue.Queue[str | None]) -> str:
    """What the daemons of process group `group` print on SIGUSR1 (every thread's stack)."""
    found = subprocess.run(
        ["pgrep", "-g", str(group), "-f", "libvirt-provider"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGUSR1)
    printed: list[str] = []
    with contextlib.suppress(queue.Empty):
        while (line := lines.get(timeout=3)) is not None:
            printed.append(line)
    return "".join(printed) or f"(no daemon in process group {group} answered)"


def _lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """`proc`'s output, line by line, from a reader thread (None at the end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.fresh_lab
def test_make_run_on_a_fresh_lab_shows_the_sample_ready_and_stops_on_ctrl_c() -> None:
    down = subprocess.run(
        ["make", "-s", "lab-down"], check=False, cwd=REPO, capture_output=True, text=True
    )
    assert down.returncode == 0, down.stderr
    proc = subprocess.Popen(
        as_at_a_terminal(["make", "run"]),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        # `kubectl get vm -o wide`: NAME POWER READY REASON PROVIDER-ID PRIMARY-IP AGE
        ready_row = re.compile(r"^sample\s+PoweredOn\s+True\s+Running\s+\S+\s+\d+\.\d+\.\d+\.\d+")
        # `kubectl get lvh`, the tour's last table: NAME READY CORDONED CPUS MEMORY MACHINES ...
        host_row = re.compile(r"^lab-host\s+(True|False|Unknown)\s")
        lines = _lines_of(proc)
        before = _read_until(lines, ready_row, RUN_DEADLINE)
        assert "The sample VM is Ready" in before
        before += _read_until(lines, host_row, TOUR_DEADLINE)
        os.killpg(proc.pid, signal.SIGINT)
        # The daemon's stop deadline (25 s) plus its watchdog's margin, with room to spare: a
        # stop that hangs past its deadline ends with every thread's stack in the output.
        try:
            rest = _read_until(lines, None, STOP_DEADLINE)
        except AssertionError as err:
            stacks = _stacks(proc.pid, lines)
            raise AssertionError(f"{err}\n--- where it hangs ---\n{stacks}") from None
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = before + rest
    # The sample names no host: placement put it on the lab's one host, and the tour shows it.
    assert re.search(r"^sample\s+lab-host\s+PoweredOn\s+True", before, re.M), output
    assert re.search(r"^lab-host\s+True\s+false\s+1/\d+", before, re.M), output
    assert "Traceback" not in output, output[-4000:]
    assert "run: the daemon stopped cleanly" in rest, output[-4000:]


@pytest.mark.fresh_lab
def test_every_readme_command_exists_and_runs() -> None:
    blocks = _code_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 2, "the README's set-up block and its lab block"
    commands = [c for block in blocks[:2] for c in _commands(block)]
    assert "make run" in commands
    assert "make test" in commands
    env = dict(os.environ)
    for command in commands:
        if command.startswith("make "):
            # Every target exists and its recipe expands (make -n runs nothing).
            dry = subprocess.run(
                ["make", "-n", *command.split()[1:]],
                check=False,
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            assert dry.returncode == 0, f"{command}: {dry.stderr}"
        elif command.startswith("eval "):
            exports = subprocess.run(
                ["make", "-s", "lab-env"], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout
            for line in exports.splitlines():
                name, _, value = line.removeprefix("export ").partition("=")
                env[name] = value.strip("'\"")
        else:
            ran = subprocess.run(
                ["bash", "-c", command],
                check=False,
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
            )
            assert ran.returncode == 0, f"{command}: {ran.stderr}"


@pytest.mark.fresh_lab
def test_the_vagrantfile_is_valid_for_vagrant_libvirt(tmp_path: Path) -> None:
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant.d")}
    plugins = subprocess.run(
        ["vagrant", "plugin", "list"],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "vagrant-libvirt" in plugins.stdout, plugins.stdout + plugins.stderr
    valid = subprocess.run(
        ["vagrant", "validate"], check=False, cwd=REPO, env=env, capture_output=True, text=True
    )
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "Vagrantfile validated successfully" in valid.stdout
