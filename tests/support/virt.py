"""libvirt as tests see it: the lab's test guest, volumes and domains on the lab's hosts.

Why a module of its own: the lab tests, the provider tests, placement and the remote host all look
at libvirt directly (never through the daemon under test) to check what it did; one copy of "the
machine's volumes", "the domains a host defines" and "the guest's DHCP lease" keeps those checks
alike.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import libvirt_qemu
from lxml import etree
from lxml.builder import E

from tests.support.lab_access import LabInfo, LabRemote
from tests.support.waiting import TimedOutError, eventually


def guest_domain_xml(
    lab: LabInfo, *, name: str, dom_uuid: str, disk: str, serial: Path | None = None
) -> str:
    """A minimal domain for the lab's test guest on `disk`, on the lab network."""
    devices = [
        E.disk(
            E.driver(name="qemu", type="qcow2"),
            E.source(file=disk),
            E.target(dev="vda", bus="virtio"),
            type="file",
            device="disk",
        ),
        E.interface(E.source(network=lab.network), E.model(type="virtio"), type="network"),
    ]
    if serial is not None:
        devices.append(E.serial(E.source(path=str(serial)), type="file"))
    dom = E.domain(
        E.name(name),
        E.uuid(dom_uuid),
        E.memory("256", unit="MiB"),
        E.vcpu("1"),
        E.os(E.type("hvm", arch="x86_64"), E.boot(dev="hd")),
        E.features(E.acpi()),
        E.devices(*devices),
        type=lab.domain_type,
    )
    return str(etree.tostring(dom, encoding="unicode"))


def overlay_volume_xml(name: str, base_path: str) -> str:
    """A small qcow2 volume backed by `base_path`, so a test guest never writes to the base."""
    vol = E.volume(
        E.name(name),
        E.capacity("64", unit="MiB"),
        E.target(E.format(type="qcow2")),
        E.backingStore(E.path(base_path), E.format(type="qcow2")),
    )
    return str(etree.tostring(vol, encoding="unicode"))


def dhcp_lease(dom: libvirt.virDomain) -> str | None:
    """The guest's IPv4 address as its network's dnsmasq leased it, or None before it has one."""
    addrs = dom.interfaceAddresses(libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE)
    for iface in addrs.values():
        for addr in iface.get("addrs") or []:
            if addr["type"] == libvirt.VIR_IP_ADDR_TYPE_IPV4:
                return str(addr["addr"])
    return None


def machine_volumes(virt: libvirt.virConnect, lab: LabInfo, prefix: str) -> list[str]:
    pool = virt.storagePoolLookupByName(lab.pool)
    return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]


def domain_names(virt: libvirt.virConnect) -> list[str]:
    return [d.name() for d in virt.listAllDomains(0)]


@contextlib.contextmanager
def connections(lab: LabInfo) -> Iterator[dict[str, libvirt.virConnect]]:
    """A connection to each of the lab's extra hosts, by host name."""
    conns = {h.name: libvirt.open(h.uri) for h in lab.hosts}
    try:
        yield conns
    finally:
        for conn in conns.values():
            conn.close()


def hosts_defining(conns: dict[str, libvirt.virConnect], domain: str) -> list[str]:
    """The lab hosts whose libvirtd has `domain` defined."""
    return sorted(
        name for name, conn in conns.items() if domain in {d.name() for d in conn.listAllDomains(0)}
    )


def host_domains(remote: LabRemote) -> list[str]:
    """The remote host's domains, read on its local socket."""
    conn = libvirt.open(remote.uri)
    try:
        return [d.name() for d in conn.listAllDomains(0)]
    finally:
        conn.close()


def host_volumes(remote: LabRemote, prefix: str) -> list[str]:
    """The remote host's volumes starting with `prefix`, read on its local socket."""
    conn = libvirt.open(remote.uri)
    try:
        pool = conn.storagePoolLookupByName(remote.pool)
        pool.refresh(0)
        return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]
    finally:
        conn.close()


class GuestShell:
    """The busybox guest's serial shell, typed into and read over a console stream of the test's
    own (`virDomainOpenConsole`, forced), never through the daemon under test.

    Output is read on a thread (a blocking stream: its reads return as data arrives) into one
    buffer. `ask` wraps a command so that its answer is printed behind a marker the echo of what
    was typed cannot match, and types it again while no answer came (the shell may not listen
    yet). Use it as a context manager; the console is released on exit, so a migration never runs
    with it open.
    """

    def __init__(self, uri: str, domain: str) -> None:
        self._conn = libvirt.open(uri)
        self._stream = self._conn.newStream(0)
        self._conn.lookupByName(domain).openConsole(
            None, self._stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE
        )
        self._lock = threading.Lock()
        self._output = bytearray()
        self._reader = threading.Thread(target=self._read, name=f"console-{domain}", daemon=True)
        self._reader.start()

    def __enter__(self) -> GuestShell:
        return self

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(libvirt.libvirtError):
            self._stream.abort()
        self._reader.join(timeout=10)
        self._conn.close()

    def _read(self) -> None:
        while True:
            try:
                data = self._stream.recv(4096)
            except libvirt.libvirtError:
                return
            if not isinstance(data, bytes) or not data:
                return
            with self._lock:
                self._output += data

    def text(self) -> str:
        with self._lock:
            return self._output.decode(errors="replace")

    def ask(self, command: str, *, timeout: float = 90) -> str:
        """The single-line output of `command` in the guest (typed again every 5 s until it
        answers)."""
        tag = "ANS" + uuid.uuid4().hex[:8]
        answer = re.compile(rf"{tag}-\[([^\]\r\n]*)\]")

        def answered() -> str | None:
            found = answer.search(self.text())
            return found.group(1) if found else None

        def typed_and_answered() -> str | None:
            self._stream.send(f'\nx=$({command}); echo "{tag}""-[$x]"\n'.encode())
            with contextlib.suppress(TimedOutError):
                return eventually(answered, timeout=5, interval=0.1, what="the shell's answer")
            return None

        try:
            return eventually(typed_and_answered, timeout=timeout, interval=0, what=command)
        except TimedOutError as err:
            raise AssertionError(f"{err}; the console's end:\n{self.text()[-1500:]}") from err


class GuestAgentError(AssertionError):
    """A command run through the guest agent failed (its exit code and stderr in the message)."""


def agent_command(dom: libvirt.virDomain, execute: str, **arguments: Any) -> Any:
    """One qemu-guest-agent command on `dom`, sent by libvirt on the test's own connection (never
    through the daemon under test); its `return` value."""
    request: dict[str, Any] = {"execute": execute}
    if arguments:
        request["arguments"] = arguments
    answer = libvirt_qemu.qemuAgentCommand(dom, json.dumps(request), 30, 0)
    return json.loads(answer)["return"]


def agent_run(dom: libvirt.virDomain, script: str, *, timeout: float = 60) -> str:
    """`script` run by /bin/sh in the guest through its agent (`guest-exec` as root, then
    `guest-exec-status` until it exited); its stdout, stripped. A non-zero exit fails."""
    pid = agent_command(
        dom, "guest-exec", path="/bin/sh", arg=["-c", script], **{"capture-output": True}
    )["pid"]

    def exited() -> dict[str, Any] | None:
        status: dict[str, Any] = agent_command(dom, "guest-exec-status", pid=pid)
        return status if status.get("exited") else None

    done = eventually(exited, timeout=timeout, interval=0.2, what=f"the guest running {script!r}")
    out = base64.b64decode(done.get("out-data", "")).decode(errors="replace")
    if done.get("exitcode") != 0:
        err = base64.b64decode(done.get("err-data", "")).decode(errors="replace")
        raise GuestAgentError(f"{script!r} exited {done.get('exitcode')}: {err.strip()}")
    return out.strip()
