"""Port-forward's decisions without I/O: its route, the port, the guest's address, which refusal.

`libvirtmachines/{name}/portforward/{port}` carries one TCP stream per WebSocket to a port of the
guest, dialled by the daemon serving the machine's host (docs/console.md, "Port-forward and ssh").
The port is a path segment, as KubeVirt's `portforward/{port}`: the API server's authorizer reads
the third segment after the resource as the subresource, so RBAC is `get` on
`libvirtmachines/portforward` whatever the port. The shell is
`adapters/process/port_forward.py` (the dial and the bridge) and the plugin's
`adapters/plugin/port_forward.py`; both put what they read to these functions.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.client import console_path
from libvirt_provider.console.routes import ConsoleRoute, ConsoleTarget, console_target

__all__ = [
    "ForwardSpec",
    "ForwardTally",
    "PortForwardRoute",
    "PortForwardTarget",
    "guest_address",
    "match_portforward_route",
    "parse_forward_spec",
    "parse_port",
    "parse_ssh_target",
    "portforward_path",
    "portforward_subprotocol",
    "portforward_target",
    "ssh_argv",
]

_PREFIX = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"
_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_ROUTE = re.compile(
    rf"^{re.escape(_PREFIX)}/namespaces/(?P<ns>{_NAME})/{c.CONSOLE_RESOURCE}/(?P<name>{_NAME})"
    rf"/{c.PORTFORWARD_SUBRESOURCE}(?:/(?P<port>[^/]*))?/?$"
)
_MAX_PORT = 65535


@dataclass(frozen=True)
class PortForwardRoute:
    namespace: str
    name: str
    port: int

    @property
    def console_route(self) -> ConsoleRoute:
        """The same machine as the console's routes name it (for the shared review)."""
        return ConsoleRoute(self.namespace, self.name, c.PORTFORWARD_SUBRESOURCE)


@dataclass(frozen=True)
class PortForwardTarget:
    """Where a forwarded stream goes: the guest's address and port, on a host this daemon
    serves."""

    host: str
    domain_uuid: str
    address: str
    port: int


def parse_port(text: str) -> int | None:
    """A TCP port 1..65535 written in decimal digits only, or None."""
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 1 <= port <= _MAX_PORT else None


def match_portforward_route(path: str) -> PortForwardRoute | Refusal | None:
    """The machine and port a port-forward path names; a 400 for a port that is missing or not
    in 1..65535; None for any other path."""
    found = _ROUTE.match(path.split("?", 1)[0])
    if found is None:
        return None
    raw = found.group("port")
    if not raw:
        return Refusal(
            400, "BadRequest", f"port-forward needs a port: .../{c.PORTFORWARD_SUBRESOURCE}/PORT"
        )
    port = parse_port(raw)
    if port is None:
        return Refusal(400, "BadRequest", f"port {raw[:16]!r} is not a TCP port (1 to 65535)")
    return PortForwardRoute(found.group("ns"), found.group("name"), port)


def guest_address(machine: Mapping[str, Any]) -> str | None:
    """The address the daemon dials: the first InternalIP the status reports, IPv4 before IPv6,
    never a link-local, loopback or unspecified one (those name the daemon's own host)."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for entry in (machine.get("status") or {}).get("addresses") or ():
        if not isinstance(entry, Mapping) or entry.get("type") != "InternalIP":
            continue
        try:
            ip = ipaddress.ip_address(str(entry.get("address") or "").split("%", 1)[0])
        except ValueError:
            continue
        if ip.is_link_local or ip.is_loopback or ip.is_unspecified or ip.is_multicast:
            continue
        found.append(ip)
    if not found:
        return None
    found.sort(key=lambda ip: ip.version)  # stable: the status' order within a family
    return str(found[0])


def portforward_target(
    route: PortForwardRoute, machine: Mapping[str, Any] | None, served_hosts: frozenset[str]
) -> PortForwardTarget | Refusal:
    """Where the stream goes, or why it cannot: the console's refusals (404, 409 not built,
    503 another host's), then 409 unless the guest runs (paused, it answers nothing) and has an
    address."""
    where = console_target(route.console_route, machine, served_hosts)
    if isinstance(where, Refusal):
        return where
    assert machine is not None  # console_target refuses a missing machine
    if (machine.get("status") or {}).get("powerState") != "PoweredOn":
        return Refusal(
            409,
            "Conflict",
            f"LibvirtMachine {route.name} is paused: port-forward needs it running",
        )
    address = guest_address(machine)
    if address is None:
        return Refusal(
            409,
            "Conflict",
            f"LibvirtMachine {route.name} reports no address yet (status.addresses): nothing to "
            "forward to",
        )
    return _target(where, address, route.port)


def _target(where: ConsoleTarget, address: str, port: int) -> PortForwardTarget:
    return PortForwardTarget(where.host, where.domain_uuid, address, port)


def portforward_subprotocol(offered: list[str]) -> str | None:
    """The subprotocol to answer among those the client offered (lower-cased): the one with the
    half-close when offered, else the console's (a plugin of an earlier release), else None."""
    return next((p for p in c.PORTFORWARD_SUBPROTOCOLS if p in offered), None)


def portforward_path(namespace: str, name: str, port: int) -> str:
    """The plugin's request path for `port` of the machine."""
    return f"{console_path(namespace, name, c.PORTFORWARD_SUBRESOURCE)}/{port}"


@dataclass(frozen=True)
class ForwardSpec:
    """`kubectl vm port-forward`'s LOCAL:REMOTE; local 0 asks for any free port."""

    local: int
    remote: int


def parse_forward_spec(text: str) -> ForwardSpec:
    """`8080:80`, `80` (the same port on both sides) or `:80` (any free local port), as
    `kubectl port-forward` takes them; ValueError with a readable message otherwise."""
    local_text, sep, remote_text = text.partition(":")
    if not sep:
        local_text = remote_text = text
    remote = parse_port(remote_text)
    if remote is None:
        raise ValueError(f"{text!r}: the remote port must be 1 to 65535")
    if sep and local_text == "":
        return ForwardSpec(0, remote)
    local = parse_port(local_text)
    if local is None:
        raise ValueError(f"{text!r}: the local port must be 1 to 65535 (or empty: any free one)")
    return ForwardSpec(local, remote)


def parse_ssh_target(text: str) -> tuple[str | None, str]:
    """`kubectl vm ssh`'s `[USER@]NAME`: the user (None: ssh's own default) and the machine."""
    user, sep, name = text.rpartition("@")
    if not name or (sep and not user):
        raise ValueError(f"{text!r}: expected [USER@]NAME")
    return (user if sep else None), name


def ssh_argv(
    *,
    ssh: str,
    proxy: Sequence[str],
    namespace: str,
    name: str,
    user: str | None,
    extra: Sequence[str],
) -> list[str]:
    """The OpenSSH command line: the user's own keys, config and known_hosts, with the stream
    through `proxy` (the plugin's `port-forward --stdio`) and the host key remembered under the
    machine's namespaced name, so two machines of one name in two namespaces never mix."""
    # ssh expands %-tokens in ProxyCommand: a literal % (a path may hold one) is written %%.
    command = shlex.join(proxy).replace("%", "%%")
    argv = [
        ssh,
        "-o",
        f"ProxyCommand={command}",
        "-o",
        f"HostKeyAlias={name}.{namespace}.{c.CONSOLE_RESOURCE}",
    ]
    if user is not None:
        argv += ["-l", user]
    # After the destination, as ssh reads them: its options first, then a remote command.
    return [*argv, name, *extra]


@dataclass
class ForwardTally:
    """What one forwarded stream carried, for the daemon's log line when it ends."""

    to_guest: int = 0
    from_guest: int = 0

    def describe(self, seconds: float, why: str) -> str:
        return (
            f"{self.to_guest} bytes to the guest, {self.from_guest} from it in {seconds:.1f} s "
            f"({why})"
        )
