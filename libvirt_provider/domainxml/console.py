"""Serial console, graphics, and the guest-agent channel.

No graphics port is ever on the host's addresses: that would hand the guest's screen to anyone who
can reach the host. VNC listens nowhere at all (`<listen type="none"/>`): the daemon hands each
client to qemu through libvirt (virDomainOpenGraphicsFD, `kubectl vm vnc`, docs/console.md), so not
even a local user of the host can connect without libvirt's permission. SPICE, which nothing here
proxies, listens on loopback, an SSH tunnel away. None of these devices is attached or detached on
a running domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.constants import GUEST_AGENT_CHANNEL
from libvirt_provider.domainxml.changes import Change, Compared, Setting, compare
from libvirt_provider.resolved import Console, Graphics

__all__ = [
    "GUEST_AGENT_CHANNEL",
    "ConsoleFacts",
    "compare_console",
    "parse_console",
    "render_console",
    "render_guest_agent",
]


def render_console(devices: etree._Element, console: Console) -> None:
    if console.serial:
        serial = etree.SubElement(devices, "serial", type="pty")
        etree.SubElement(serial, "target", port="0")
        if console.log_file is not None:
            # Appended, so a reboot's output follows the previous boot's instead of replacing it.
            etree.SubElement(serial, "log", file=console.log_file, append="on")
        element = etree.SubElement(devices, "console", type="pty")
        etree.SubElement(element, "target", type="serial", port="0")
    if console.graphics is not Graphics.NONE:
        if console.graphics is Graphics.VNC:
            graphics = etree.SubElement(devices, "graphics", type=console.graphics.value)
            etree.SubElement(graphics, "listen", type="none")
        else:
            graphics = etree.SubElement(
                devices, "graphics", type=console.graphics.value, autoport="yes"
            )
            etree.SubElement(graphics, "listen", type="address", address="127.0.0.1")
        video = etree.SubElement(devices, "video")
        etree.SubElement(video, "model", type="virtio")


def render_guest_agent(devices: etree._Element) -> None:
    # No path: libvirt creates the socket under its own state directory.
    channel = etree.SubElement(devices, "channel", type="unix")
    etree.SubElement(channel, "target", type="virtio", name=GUEST_AGENT_CHANNEL)


@dataclass(frozen=True)
class ConsoleFacts:
    serial: bool
    serial_log: str | None
    graphics: tuple[str, ...]
    guest_agent: bool


def parse_console(root: etree._Element) -> ConsoleFacts:
    log = root.find("devices/serial/log")
    return ConsoleFacts(
        serial=root.find("devices/serial") is not None,
        serial_log=log.get("file") if log is not None else None,
        graphics=tuple(sorted(g.get("type") or "" for g in root.findall("devices/graphics"))),
        guest_agent=any(
            t.get("name") == GUEST_AGENT_CHANNEL for t in root.findall("devices/channel/target")
        ),
    )


_COMPARED: tuple[Compared[ConsoleFacts], ...] = (
    Compared(Setting.SERIAL_CONSOLE, lambda f: f.serial),
    Compared(Setting.SERIAL_CONSOLE_LOG, lambda f: f.serial_log),
    Compared(Setting.GRAPHICS, lambda f: f.graphics),
    Compared(Setting.GUEST_AGENT, lambda f: f.guest_agent),
)


def compare_console(desired: ConsoleFacts, observed: ConsoleFacts) -> list[Change]:
    return compare(desired, observed, _COMPARED)
