"""Child processes that take Ctrl-C as they would at a terminal.

A test that stands for a user pressing Ctrl-C sends SIGINT. When the test run itself is a
background job of a non-interactive shell (`make test &`, a CI runner's nohup), its children
inherit SIGINT as ignored, and Python then installs no KeyboardInterrupt handler: the signal is
lost and the test waits for nothing. Starting the command through a launcher that sets SIGINT
back to its default disposition, then execs it, restores what a terminal's foreground job has
(a disposition set to default survives exec; `preexec_fn` would do the same but is unsafe in
a test process that runs threads).
"""

from __future__ import annotations

import sys

__all__ = ["as_at_a_terminal"]

_LAUNCHER = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def as_at_a_terminal(command: list[str]) -> list[str]:
    """`command`, started with SIGINT at its default disposition."""
    return [sys.executable, "-c", _LAUNCHER, *command]
