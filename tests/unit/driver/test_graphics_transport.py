"""Which libvirt connections can hand the daemon a display's socket: only a local UNIX socket
passes file descriptors, and trying over any other transport closes the whole connection, so the
driver must know before it calls."""

from __future__ import annotations

import pytest

from libvirt_provider.driver.libvirt_graphics import passes_descriptors


@pytest.mark.parametrize(
    "uri",
    [
        "qemu:///system",
        "qemu:///system?socket=/run/lab/libvirt-sock",
        "qemu+unix:///system?socket=/run/libvirt/libvirt-sock",
        "QEMU+UNIX:///system",
    ],
)
def test_local_unix_sockets_pass_descriptors(uri: str) -> None:
    assert passes_descriptors(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "qemu+ssh://root@kvm1/system",
        "qemu+libssh://root@kvm1/system",
        "qemu+tls://kvm1/system",
        "qemu+tcp://kvm1/system",
        "qemu+ext:///system?command=/usr/bin/bridge",
    ],
)
def test_byte_only_transports_do_not(uri: str) -> None:
    assert not passes_descriptors(uri)
