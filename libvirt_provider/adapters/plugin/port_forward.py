"""`kubectl vm port-forward` and `kubectl vm ssh`: TCP to a guest's port through the API server.

Each TCP connection is one WebSocket to `libvirtmachines/{name}/portforward/{port}` (the
aggregated subresource, docs/console.md), opened with the user's kubeconfig as the console is.
`port-forward NAME LOCAL:REMOTE` listens on 127.0.0.1 only (never another address: the guest's port
would be open to the user's network) and opens a stream per accepted connection;
`port-forward --stdio NAME PORT` carries one stream on stdin and stdout, which is what
`ssh`'s ProxyCommand wants. `ssh [USER@]NAME` runs the local OpenSSH client with that ProxyCommand,
so the user's own keys, agent, config and known_hosts work; the host key is remembered under
`NAME.NAMESPACE.libvirtmachines`.

The decisions (ports, the path, ssh's command line) are `console/portforward.py`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
from collections.abc import Callable

import websocket

from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin.pump import carry
from libvirt_provider.console.portforward import (
    parse_forward_spec,
    parse_port,
    parse_ssh_target,
    portforward_path,
    ssh_argv,
)

__all__ = ["Connect", "add_commands", "run_port_forward", "run_ssh", "split_ssh_arguments"]

# Opens the WebSocket of a path with the user's credentials (the plugin's `_connect`).
Connect = Callable[[str], websocket.WebSocket]
_MODULE = "libvirt_provider.adapters.plugin.kubectl_vm"


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    forward = commands.add_parser(
        "port-forward",
        help="forward a local port to a port of a machine's guest",
        description="Forward 127.0.0.1:LOCAL to REMOTE on a LibvirtMachine's guest, through the "
        "API server and the daemon serving its host (RBAC: get on libvirtmachines/portforward in "
        "its namespace). LOCAL:REMOTE, REMOTE (the same port) or :REMOTE (any free local port, "
        "printed). Each connection is a stream of its own; Ctrl-C stops listening. With --stdio, "
        "one stream on stdin and stdout to port SPEC (for ssh's ProxyCommand).",
    )
    forward.add_argument("name", help="the LibvirtMachine's name")
    forward.add_argument("spec", metavar="LOCAL:REMOTE", help="the ports (with --stdio: PORT)")
    forward.add_argument("-n", "--namespace", default=None, help="its namespace")
    forward.add_argument(
        "--stdio", action="store_true", help="one stream on stdin and stdout instead of a port"
    )
    ssh = commands.add_parser(
        "ssh",
        usage="kubectl vm ssh [-h] [-n NAMESPACE] [-p PORT] [--ssh-command SSH] [USER@]NAME "
        "[-- SSH ARGUMENTS]",
        help="ssh into a machine's guest",
        description="Run the local OpenSSH client against a LibvirtMachine's guest, the "
        "connection carried by `kubectl vm port-forward --stdio` (RBAC: get on "
        "libvirtmachines/portforward in its namespace), so your own keys, agent, ssh config and "
        "known_hosts are used; the host key is remembered as NAME.NAMESPACE.libvirtmachines. "
        "Arguments after `--` go to ssh after the destination (options, then a command).",
    )
    ssh.add_argument("target", metavar="[USER@]NAME", help="the LibvirtMachine, and the login")
    ssh.add_argument("-n", "--namespace", default=None, help="its namespace")
    ssh.add_argument(
        "-p", "--port", type=int, default=c.SSH_PORT, help="the guest's ssh port (%(default)s)"
    )
    ssh.add_argument(
        "--ssh-command", default="ssh", help="the OpenSSH client to run (default %(default)s)"
    )


def _half_close(ws: websocket.WebSocket) -> bool:
    """Whether the daemon took the subprotocol in which the end of input can be said (a daemon
    of an earlier release answers in the console's, where the end of input ends the stream)."""
    return bool(ws.getsubprotocol() == c.PORTFORWARD_SUBPROTOCOL)


def _bridge_socket(ws: websocket.WebSocket, sock: socket.socket) -> None:
    """One stream between a local connection and the guest's port; the local side's end of
    writing reaches the guest as one, and the guest's closing closes the local connection."""
    try:
        carry(ws, source=sock.fileno(), sink=sock.sendall, half_close=_half_close(ws))
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


def _stdio(ws: websocket.WebSocket) -> None:
    """One stream on stdin and stdout (ssh's ProxyCommand): the end of stdin is the end of the
    input, and the plugin exits once the guest's answer is all out and the guest closed."""
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    carry(ws, source=sys.stdin.fileno(), sink=write, half_close=_half_close(ws))


def run_port_forward(
    args: argparse.Namespace,
    namespace: str,
    connect: Connect,
    refusal: Callable[[websocket.WebSocketBadStatusException], str],
) -> int:
    if args.stdio:
        port = parse_port(args.spec)
        if port is None:
            print(f"error: {args.spec!r} is not a TCP port (1 to 65535)", file=sys.stderr)
            return 2
        try:
            ws = connect(portforward_path(namespace, args.name, port))
        except websocket.WebSocketBadStatusException as err:
            print(refusal(err), file=sys.stderr)
            return 1
        except (websocket.WebSocketException, OSError) as err:
            print(f"error: cannot reach the API server: {err}", file=sys.stderr)
            return 1
        _stdio(ws)
        return 0
    try:
        spec = parse_forward_spec(args.spec)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = portforward_path(namespace, args.name, spec.remote)
    try:
        listener = socket.create_server(("127.0.0.1", spec.local))
    except OSError as err:
        print(f"error: cannot listen on 127.0.0.1:{spec.local}: {err}", file=sys.stderr)
        return 1
    local = listener.getsockname()[1]
    print(f"Forwarding from 127.0.0.1:{local} -> {spec.remote}", flush=True)

    def serve(sock: socket.socket) -> None:
        try:
            ws = connect(path)
        except websocket.WebSocketBadStatusException as err:
            print(refusal(err), file=sys.stderr, flush=True)
            sock.close()
            return
        except (websocket.WebSocketException, OSError) as err:
            print(f"error: cannot reach the API server: {err}", file=sys.stderr, flush=True)
            sock.close()
            return
        _bridge_socket(ws, sock)

    try:
        with listener:
            while True:
                sock, _peer = listener.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                print(f"Handling connection for {local}", flush=True)
                threading.Thread(target=serve, args=(sock,), daemon=True).start()
    except KeyboardInterrupt:
        return 0


def split_ssh_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """The plugin's own arguments and those after the first `--`, which go to ssh untouched
    (argparse would take an option among them for one of its own)."""
    if "--" not in argv:
        return argv, []
    index = argv.index("--")
    return argv[:index], argv[index + 1 :]


def run_ssh(args: argparse.Namespace, namespace: str) -> int:
    try:
        user, name = parse_ssh_target(args.target)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if parse_port(str(args.port)) is None:
        print(f"error: {args.port} is not a TCP port (1 to 65535)", file=sys.stderr)
        return 2
    proxy = [sys.executable, "-m", _MODULE]
    if args.kubeconfig:
        proxy.append(f"--kubeconfig={os.path.abspath(args.kubeconfig)}")
    if args.context:
        proxy.append(f"--context={args.context}")
    proxy += ["port-forward", "--stdio", "-n", namespace, name, str(args.port)]
    extra = list(getattr(args, "ssh_args", ()))
    argv = ssh_argv(
        ssh=args.ssh_command, proxy=proxy, namespace=namespace, name=name, user=user, extra=extra
    )
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        print(f"error: cannot run {argv[0]}: {err}", file=sys.stderr)
        return 1
    return 0  # not reached: exec replaced this process
