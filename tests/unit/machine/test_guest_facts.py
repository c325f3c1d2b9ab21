"""Guest facts in status: the agent's words under guest* keys, absent rather than stale."""

from __future__ import annotations

from libvirt_provider.driver.types import GuestInfo
from libvirt_provider.machine.guest import guest_metadata

DEBIAN = {
    "os.name": "Debian GNU/Linux",
    "os.version": "12 (bookworm)",
    "os.kernel-release": "6.1.0-50-cloud-amd64",
    "os.id": "debian",
    "hostname": "web-1",
}


def test_a_connected_agent_gives_os_kernel_and_host_name() -> None:
    assert guest_metadata(GuestInfo(agent="connected", facts=DEBIAN), running=True) == {
        "guestAgent": "connected",
        "guestOSName": "Debian GNU/Linux",
        "guestOSVersion": "12 (bookworm)",
        "guestKernel": "6.1.0-50-cloud-amd64",
        "guestHostName": "web-1",
    }


def test_a_silent_agent_reports_only_its_state() -> None:
    assert guest_metadata(GuestInfo(agent="disconnected"), running=True) == {
        "guestAgent": "disconnected"
    }
    partial = GuestInfo(agent="connected", facts={"hostname": " ", "os.name": "Linux"})
    assert guest_metadata(partial, running=True) == {
        "guestAgent": "connected",
        "guestOSName": "Linux",
    }


def test_no_channel_or_a_stopped_domain_reports_nothing() -> None:
    assert guest_metadata(None, running=True) == {}
    assert guest_metadata(GuestInfo(agent="connected", facts=DEBIAN), running=False) == {}


def test_a_guest_cannot_flood_the_status() -> None:
    info = GuestInfo(agent="connected", facts={"hostname": "x" * 10_000})
    assert len(guest_metadata(info, running=True)["guestHostName"]) == 256
