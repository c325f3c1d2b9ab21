"""A TCP connection to a guest's port, made in the network namespace its libvirt network lives in.

In production the daemon runs on the KVM host in the host's network namespace (a hostNetwork
pod), where libvirt's bridges are: even an isolated network's bridge has the host's address on
it, so a plain connect reaches the guest. Where libvirtd runs in a network namespace of its own
(the lab: `ip netns exec NS libvirtd`), its bridges are in that namespace and the daemon's own has
no route to them; `--guest-netns` names it. A socket belongs to the namespace it was created in,
for as long as it lives, whichever thread uses it later. So the connection is made by a short-lived
thread that first joins the namespace (`setns(2)`, which changes only the calling thread's): the
daemon's other threads, and the rest of the process, never leave their own. Joining needs
CAP_SYS_ADMIN (the daemon runs as root on a KVM host anyway); Python 3.11 has no `os.setns`, so it
is libc's, through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
import threading
from pathlib import Path

__all__ = ["GuestDialer", "netns_path"]

# sched.h: the network namespace's flag for setns(2).
_CLONE_NEWNET = 0x40000000
_RUN_NETNS = Path("/run/netns")


def netns_path(value: str) -> str:
    """A namespace given by name (`ip netns`' /run/netns/NAME) or by path (/proc/PID/ns/net);
    FileNotFoundError when it does not exist, so a typo stops the daemon at start."""
    path = Path(value) if "/" in value else _RUN_NETNS / value
    if not path.exists():
        raise FileNotFoundError(f"--guest-netns {value!r}: {path} does not exist")
    return str(path)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot join the guests' network namespace: {os.strerror(code)}")


class GuestDialer:
    """Connects to guests: in this process' own namespace, or in `netns` (a path) when given."""

    def __init__(self, netns: str | None = None) -> None:
        self._netns = netns

    @property
    def netns(self) -> str | None:
        return self._netns

    def dial(self, address: str, port: int, timeout: float) -> socket.socket:
        """A connected socket (blocking, with `timeout` for its I/O too), or OSError: refused,
        unreachable or timed out."""
        if self._netns is None:
            return _connect(address, port, timeout)
        result: list[socket.socket | BaseException] = []
        thread = threading.Thread(
            target=self._dial_inside,
            args=(address, port, timeout, result),
            name="guest-dial",
            daemon=True,
        )
        thread.start()
        thread.join(timeout + 5.0)
        if not result:
            raise OSError(errno.ETIMEDOUT, f"connecting to {address}:{port} took too long")
        outcome = result[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _dial_inside(
        self, address: str, port: int, timeout: float, result: list[socket.socket | BaseException]
    ) -> None:
        assert self._netns is not None
        try:
            fd = os.open(self._netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            # This thread now lives in the guests' namespace until it ends, in a moment.
            result.append(_connect(address, port, timeout))
        except BaseException as err:  # handed to the caller's thread, raised there
            result.append(err)


def _connect(address: str, port: int, timeout: float) -> socket.socket:
    sock = socket.create_connection((address, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
