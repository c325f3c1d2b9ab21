"""What the driver tests that open libvirt's in-process test driver share: one event loop.

libvirt's event loop thread (started by the first connection) cannot be started again once stopped,
so it is stopped once, after the last test of the session, not after each module: a module that
stopped it would leave every later module without lifecycle events.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from libvirt_provider.driver.libvirt_driver import stop_event_loop


@pytest.fixture(scope="session", autouse=True)
def _event_loop_stopped() -> Iterator[None]:
    yield
    # libvirt's event thread must not meet the interpreter's finalization.
    assert stop_event_loop()
