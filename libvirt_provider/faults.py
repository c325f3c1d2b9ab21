"""Crash points: where restart-safety tests kill the daemon as `kill -9` would.

A test starts the daemon with `VMAPI_CRASH_POINT=<name>`; the first time the daemon reaches that
point it sends itself SIGKILL: no cleanup, no finally blocks, exactly the crash a host can cause.
The test then starts a daemon without the variable and checks that it converges to one domain and
no leaked volume. Unset (always, in production) a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point"]

ENV = "VMAPI_CRASH_POINT"


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
