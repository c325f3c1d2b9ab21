"""The console's audit Events name the user, the role and the session's length."""

from __future__ import annotations

import pytest

from libvirt_provider import constants as c
from libvirt_provider.console.audit import attached, detached, vnc_attached, vnc_detached


def test_an_attach_names_the_user_and_role() -> None:
    assert attached("system:serviceaccount:team:ops", "writer") == (
        c.EVENT_CONSOLE_ATTACHED,
        "system:serviceaccount:team:ops attached to the serial console as writer",
    )


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.2, "0 s"), (42.4, "42 s"), (61, "1 min 1 s"), (3 * 3600 + 125, "3 h 2 min 5 s")],
)
def test_a_detach_says_how_long_and_why(seconds: float, said: str) -> None:
    reason, message = detached("alice", "writer", seconds, "the client closed the stream")
    assert reason == c.EVENT_CONSOLE_DETACHED
    assert (
        message
        == f"alice left the serial console (writer) after {said}: the client closed the stream"
    )


def test_a_vnc_session_names_its_user_and_length() -> None:
    assert vnc_attached("alice") == ("VncAttached", "alice opened the VNC display")
    assert vnc_detached("alice", 65, "the client disconnected") == (
        "VncDetached",
        "alice left the VNC display after 1 min 5 s: the client disconnected",
    )
