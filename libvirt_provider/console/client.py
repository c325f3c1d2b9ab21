"""What `kubectl vm` decides without I/O: the console's URL path, and the escape key.

The shell is `adapters/plugin/kubectl_vm.py`.
"""

from __future__ import annotations

from urllib.parse import quote

from libvirt_provider import constants as c

__all__ = ["ESCAPE_BYTE", "console_path", "session_query", "split_at_escape", "websocket_url"]

# Ctrl-] (0x1d) leaves an interactive console, as telnet and virsh do.
ESCAPE_BYTE = b"\x1d"


def console_path(namespace: str, name: str, subresource: str = c.CONSOLE_SUBRESOURCE) -> str:
    group = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"
    return (
        f"{group}/namespaces/{quote(namespace, safe='')}"
        f"/{c.CONSOLE_RESOURCE}/{quote(name, safe='')}/{subresource}"
    )


def websocket_url(server: str, path: str) -> str:
    """The WebSocket URL of `path` on the API server whose kubeconfig URL is `server`."""
    base = server.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base + path


def split_at_escape(data: bytes) -> tuple[bytes, bool]:
    """What to send of keyboard input, and whether the escape key was pressed (everything from
    it on is dropped)."""
    index = data.find(ESCAPE_BYTE)
    if index < 0:
        return data, False
    return data[:index], True


def session_query(*, viewer: bool = False, force: bool = False, logs: bool = False,
                  follow: bool = False) -> str:  # fmt: skip
    """The console path's query for a viewer, a take-over or the console's log ("" for a
    writer), as `console/sharing.py` reads it."""
    asked = [name for name, on in (("viewer", viewer), ("force", force), ("logs", logs),
                                   ("follow", follow)) if on]  # fmt: skip
    return "?" + "&".join(f"{name}=true" for name in asked) if asked else ""
