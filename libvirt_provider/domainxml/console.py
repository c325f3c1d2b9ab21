"""Serial console, graphics, and the guest-agent channel.

Graphics listen on loopback only: exposing a VNC or SPICE server on the host's addresses would hand
the guest's console to anyone who can reach the host. Reaching it is an SSH tunnel away.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.resolved import Console, Graphics

__all__ = ["GUEST_AGENT_CHANNEL", "render_console", "render_guest_agent"]

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"


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
