"""A guest's graphical display through libvirt: its VNC server's socket and its screenshot.

The display is reached without any port on the host's network: `virDomainOpenGraphicsFD` asks
qemu for a new client connection to its VNC server and hands the daemon one end of a socket pair,
passed over libvirt's connection as a file descriptor. Descriptors pass only over a local UNIX
socket (`qemu:///system`). Over a transport that carries bytes only (qemu+ssh, qemu+libssh,
qemu+tls, qemu+ext) libvirt fails the call ("Receiving file descriptors is not supported on this
socket") and, worse, closes the whole connection, which the host's other work shares: measured
in the lab over qemu+ext through a bytes-only bridge. So `open_graphics` refuses such a connection
itself, before any call (`UnsupportedError`, which the endpoint answers with 503). The screenshot
(`virDomainScreenshot`, qemu's screendump) comes through a libvirt stream, which works over every
connection (the same measurement: 720x400 over qemu+ext).
"""

from __future__ import annotations

import contextlib
import logging
import socket

import libvirt

from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.errors import UnsupportedError

__all__ = ["LibvirtGraphics", "passes_descriptors"]

log = logging.getLogger(__name__)

# The domain's first graphics device: the only one the domain XML renders.
_FIRST_GRAPHICS = 0
_SCREENSHOT_CHUNK = 256 * 1024


def passes_descriptors(uri: str) -> bool:
    """Whether a libvirt connection URI reaches libvirtd over a local UNIX socket, the only
    transport that passes file descriptors (`qemu:///system`, `qemu+unix://...`)."""
    scheme = uri.split(":", 1)[0].lower()
    return "+" not in scheme or scheme.endswith("+unix")


class LibvirtGraphics(LibvirtConnection):
    def open_graphics(self, uuid: str) -> socket.socket:
        """A new client connection to the domain's VNC server (qemu authenticates it as any
        client of that display; no password is set on the loopback-only display)."""

        def opened(conn: libvirt.virConnect) -> int:
            uri = str(conn.getURI())
            if not passes_descriptors(uri):
                raise UnsupportedError(
                    f"host {self._host} is reached over {uri.split(':', 1)[0]}, which cannot "
                    "pass the display's socket (file descriptors pass only over libvirt's local "
                    "UNIX socket): VNC is served for local hosts only"
                )
            return int(self._domain(conn, uuid).openGraphicsFD(_FIRST_GRAPHICS, 0))

        fd = self._call(opened)
        log.info("host %s: display of domain %s opened", self._host, uuid)
        return socket.socket(fileno=fd)

    def screenshot(self, uuid: str) -> tuple[str, bytes]:
        """The domain's first screen as libvirt returns it: its MIME type (`image/x-portable-pixmap`
        from qemu's screendump, or `image/png` when libvirt and qemu do PNG) and its bytes."""

        def taken(conn: libvirt.virConnect) -> tuple[str, bytes]:
            dom = self._domain(conn, uuid)
            stream = conn.newStream(0)
            chunks: list[bytes] = []
            try:
                mime = str(dom.screenshot(stream, 0, 0) or "")
                while True:
                    data = stream.recv(_SCREENSHOT_CHUNK)
                    if not isinstance(data, bytes) or not data:
                        break
                    chunks.append(data)
                stream.finish()
            except libvirt.libvirtError:
                with contextlib.suppress(libvirt.libvirtError):
                    stream.abort()
                raise
            return mime, b"".join(chunks)

        return self._call(taken)
