"""Port-forward's pure parts: the route and its port, the guest's address, the refusals, the
plugin's LOCAL:REMOTE and [USER@]NAME, ssh's command line, and a stream's tally."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from libvirt_provider.adapters.plugin.port_forward import split_ssh_arguments
from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.portforward import (
    ForwardSpec,
    ForwardTally,
    PortForwardRoute,
    PortForwardTarget,
    guest_address,
    match_portforward_route,
    parse_forward_spec,
    parse_port,
    parse_ssh_target,
    portforward_path,
    portforward_target,
    ssh_argv,
)
from libvirt_provider.console.routes import match_route

PREFIX = "/apis/subresources.infrastructure.vm-api.io/v1alpha1"
BASE = f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/portforward"


def test_the_plugin_builds_the_path_the_server_matches() -> None:
    path = portforward_path("team-a", "vm1", 22)
    assert path == f"{BASE}/22"
    assert match_portforward_route(path) == PortForwardRoute("team-a", "vm1", 22)
    assert match_portforward_route(path + "?x=1") == PortForwardRoute("team-a", "vm1", 22)
    # The console's matcher leaves it alone, and the other way round.
    assert match_route(path) is None
    assert (
        match_portforward_route(f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/console") is None
    )
    # The review asks about the subresource, whatever the port.
    assert PortForwardRoute("team-a", "vm1", 22).console_route.subresource == "portforward"


@pytest.mark.parametrize(
    "port", ["0", "65536", "-1", "22a", "0x16", "\uff11\uff12", "99999999999", "+22"]
)
def test_ports_outside_1_to_65535_are_a_400(port: str) -> None:
    found = match_portforward_route(f"{BASE}/{port}")
    assert isinstance(found, Refusal)
    assert found.code == 400
    assert "1 to 65535" in found.message


@pytest.mark.parametrize("path", [BASE, f"{BASE}/"])
def test_a_missing_port_is_a_400(path: str) -> None:
    found = match_portforward_route(path)
    assert isinstance(found, Refusal)
    assert (found.code, found.reason) == (400, "BadRequest")


@pytest.mark.parametrize(
    "path",
    [
        f"{BASE}/22/tcp",
        f"{PREFIX}/namespaces/Team/libvirtmachines/vm1/portforward/22",
        f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/portforwarding/22",
    ],
)
def test_other_paths_are_no_route(path: str) -> None:
    assert match_portforward_route(path) is None


def test_port_parsing_edges() -> None:
    assert parse_port("1") == 1
    assert parse_port("65535") == 65535
    assert parse_port("022") == 22
    assert parse_port("") is None


def _machine(
    power: str | None = "PoweredOn", addresses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u-1"},
        "spec": {"host": "h1"},
        "status": {
            "powerState": power,
            "providerMetadata": {"host": "h1", "domainUUID": "u-1"},
            "addresses": addresses
            if addresses is not None
            else [{"type": "InternalIP", "address": "10.0.0.5", "source": "lease"}],
        },
    }


def test_the_guest_address_prefers_ipv4_and_skips_what_names_the_host_itself() -> None:
    machine = _machine(
        addresses=[
            {"type": "Hostname", "address": "vm1"},
            {"type": "InternalIP", "address": "fe80::1%eth0"},
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "InternalIP", "address": "fd00::5"},
            {"type": "InternalIP", "address": "not-an-ip"},
            {"type": "InternalIP", "address": "10.0.0.7"},
            {"type": "ExternalIP", "address": "192.0.2.9"},
        ]
    )
    assert guest_address(machine) == "10.0.0.7"
    assert guest_address(_machine(addresses=[{"type": "InternalIP", "address": "fd00::5"}])) == (
        "fd00::5"
    )
    assert guest_address(_machine(addresses=[])) is None
    assert guest_address({}) is None


ROUTE = PortForwardRoute("team-a", "vm1", 7000)


def test_a_running_machine_with_an_address_is_reached() -> None:
    assert portforward_target(ROUTE, _machine(), frozenset({"h1"})) == PortForwardTarget(
        "h1", "u-1", "10.0.0.5", 7000
    )


@pytest.mark.parametrize(
    ("machine", "hosts", "code", "words"),
    [
        (None, {"h1"}, 404, "not found"),
        (_machine(), {"h2"}, 503, "host h1"),
        (_machine(power="PoweredOff"), {"h1"}, 409, "PoweredOff"),
        (_machine(power="Paused"), {"h1"}, 409, "paused"),
        (_machine(addresses=[]), {"h1"}, 409, "no address"),
    ],
)
def test_refusals(machine: Any, hosts: set[str], code: int, words: str) -> None:
    found = portforward_target(ROUTE, machine, frozenset(hosts))
    assert isinstance(found, Refusal)
    assert found.code == code
    assert words in found.message


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("8080:80", ForwardSpec(8080, 80)),
        ("22", ForwardSpec(22, 22)),
        (":7000", ForwardSpec(0, 7000)),
    ],
)
def test_forward_specs(text: str, spec: ForwardSpec) -> None:
    assert parse_forward_spec(text) == spec


@pytest.mark.parametrize("text", ["", "0", "80:", "80:0", "70000:80", "a:b", "1:2:3"])
def test_bad_forward_specs_are_refused_readably(text: str) -> None:
    with pytest.raises(ValueError, match="1 to 65535"):
        parse_forward_spec(text)


def test_ssh_targets() -> None:
    assert parse_ssh_target("guest") == (None, "guest")
    assert parse_ssh_target("root@guest") == ("root", "guest")
    assert parse_ssh_target("a@b@guest") == ("a@b", "guest")
    for bad in ("", "@guest", "root@"):
        with pytest.raises(ValueError, match=r"\[USER@\]NAME"):
            parse_ssh_target(bad)


def test_the_ssh_command_line_proxies_through_the_plugin_and_names_the_host_key() -> None:
    proxy = ["/opt/py 100%/python", "-m", "kubectl_vm", "port-forward", "--stdio", "vm1", "22"]
    argv = ssh_argv(
        ssh="ssh",
        proxy=proxy,
        namespace="team-a",
        name="vm1",
        user="root",
        extra=["-v", "uname", "-a"],
    )
    assert argv[0] == "ssh"
    options = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-o")
    # A % is ssh's token character: doubled, it reaches the shell as one.
    assert shlex.split(options["ProxyCommand"].replace("%%", "%")) == proxy
    assert options["HostKeyAlias"] == "vm1.team-a.libvirtmachines"
    assert argv[argv.index("-l") + 1] == "root"
    assert argv[-4:] == ["vm1", "-v", "uname", "-a"]
    assert "-l" not in ssh_argv(
        ssh="ssh", proxy=proxy, namespace="team-a", name="vm1", user=None, extra=[]
    )


def test_arguments_after_the_double_dash_are_ssh_s() -> None:
    assert split_ssh_arguments(["ssh", "vm1", "-n", "a", "--", "-v", "--", "x"]) == (
        ["ssh", "vm1", "-n", "a"],
        ["-v", "--", "x"],
    )
    assert split_ssh_arguments(["ssh", "vm1"]) == (["ssh", "vm1"], [])


def test_a_stream_s_tally_is_worded_for_the_log() -> None:
    tally = ForwardTally()
    tally.to_guest += 5
    tally.from_guest += 7
    assert tally.describe(1.25, "the client closed the stream") == (
        "5 bytes to the guest, 7 from it in 1.2 s (the client closed the stream)"
    )
