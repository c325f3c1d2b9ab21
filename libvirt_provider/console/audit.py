"""What a console session says in the LibvirtMachine's Events: the audit trail of who typed
into a guest (pure).

Every session leaves two Events: one when it attaches (so a session that is still open shows in
`kubectl describe`), one when it ends, with its length and why it ended. They name the user as the
API server authenticated them; never a token, a certificate or anything the user typed.
"""

from __future__ import annotations

from libvirt_provider import constants as c

__all__ = ["attached", "detached", "taken_over", "vnc_attached", "vnc_detached"]


def attached(user: str, role: str) -> tuple[str, str]:
    """The Event (reason, message) of a session that just attached as `role` (writer or viewer)."""
    return c.EVENT_CONSOLE_ATTACHED, f"{user} attached to the serial console as {role}"


def detached(user: str, role: str, seconds: float, why: str) -> tuple[str, str]:
    """The Event (reason, message) of a session that ended after `seconds`, and why it ended."""
    return (
        c.EVENT_CONSOLE_DETACHED,
        f"{user} left the serial console ({role}) after {_duration(seconds)}: {why}",
    )


def vnc_attached(user: str) -> tuple[str, str]:
    """The Event (reason, message) of a VNC session that just opened the guest's display."""
    return c.EVENT_VNC_ATTACHED, f"{user} opened the VNC display"


def vnc_detached(user: str, seconds: float, why: str) -> tuple[str, str]:
    """The Event (reason, message) of a VNC session that ended after `seconds`, and why."""
    return c.EVENT_VNC_DETACHED, f"{user} left the VNC display after {_duration(seconds)}: {why}"


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min {secs} s"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def taken_over(user: str, displaced: str) -> tuple[str, str]:
    """The Event (reason, message) of a writer who took the console over from another."""
    return (
        c.EVENT_CONSOLE_TAKEN_OVER,
        f"{user} took over the serial console from {displaced} (the displaced writer was "
        "disconnected)",
    )
