"""`kubectl vm vnc` and `kubectl vm screenshot`: a machine's VNC display through the API server
(the aggregated `libvirtmachines/vnc` subresource, docs/console.md).

`vnc` listens on a port of 127.0.0.1 (loopback only: whoever reaches it uses the user's
credentials) and prints it; every TCP connection a VNC viewer makes there gets a WebSocket of its
own to the machine's display, and the bytes go through unchanged both ways. `screenshot` GETs
`.../vnc/screenshot` and writes the PNG the daemon made.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import websocket
from kubernetes import client

from generic.adapters.kubeclient import API_ERRORS, KubeApi, failure_message
from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin.pump import carry
from libvirt_provider.console.client import console_path
from libvirt_provider.console.vnc import PNG_SIGNATURE

__all__ = ["add_commands", "run_screenshot", "run_vnc"]

# Connect(configuration, path) -> an open WebSocket: kubectl_vm's `_connect`, which carries the
# user's credentials however the kubeconfig gives them.
Connect = Callable[[client.Configuration, str], websocket.WebSocket]
Refusal = Callable[[websocket.WebSocketBadStatusException], str]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vnc = commands.add_parser(
        "vnc",
        help="open a machine's VNC display on a local port",
        description="Listen on 127.0.0.1 for VNC viewers and carry each connection to the "
        "LibvirtMachine's VNC display through the API server (RBAC: get on libvirtmachines/vnc "
        "in its namespace; the machine needs spec.console.graphics: VNC). Prints the port, "
        "then runs until interrupted (Ctrl-C).",
    )
    vnc.add_argument("name", help="the LibvirtMachine's name")
    vnc.add_argument("-n", "--namespace", default=None, help="its namespace")
    vnc.add_argument(
        "--port",
        type=int,
        default=0,
        help="local port to listen on (default: any free one, printed)",
    )
    shot = commands.add_parser(
        "screenshot",
        help="save a machine's screen as a PNG",
        description="Save the LibvirtMachine's screen (its VNC display) as a PNG file (RBAC: get "
        "on libvirtmachines/vnc in its namespace).",
    )
    shot.add_argument("name", help="the LibvirtMachine's name")
    shot.add_argument("-n", "--namespace", default=None, help="its namespace")
    shot.add_argument(
        "-o", "--output", required=True, help="the PNG file to write ('-' for stdout)"
    )


def _carry(
    sock: socket.socket,
    connect: Callable[[], websocket.WebSocket],
    refusal: Refusal,
) -> None:
    """One viewer's connection: a WebSocket of its own, bytes both ways on one thread
    (`plugin/pump.py`), both closed at the end."""
    try:
        try:
            ws = connect()
        except websocket.WebSocketBadStatusException as err:
            print(refusal(err), file=sys.stderr, flush=True)
            return
        except (websocket.WebSocketException, OSError) as err:
            print(f"error: cannot reach the API server: {err}", file=sys.stderr, flush=True)
            return
        carry(ws, source=sock.fileno(), sink=sock.sendall)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


def run_vnc(
    args: argparse.Namespace,
    configuration: client.Configuration,
    namespace: str,
    connect: Connect,
    refusal: Refusal,
) -> int:
    path = console_path(namespace, args.name, c.VNC_SUBRESOURCE)
    try:
        listener = socket.create_server(("127.0.0.1", args.port))
    except OSError as err:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {err}", file=sys.stderr)
        return 1
    port = listener.getsockname()[1]
    print(
        f"Forwarding 127.0.0.1:{port} to {namespace}/{args.name}'s VNC display; point a VNC "
        f"viewer at it (vncviewer 127.0.0.1::{port}). Ctrl-C stops.",
        flush=True,
    )
    try:
        with listener:
            while True:
                sock, _peer = listener.accept()
                threading.Thread(
                    target=_carry,
                    args=(sock, lambda: connect(configuration, path), refusal),
                    name="vnc-viewer",
                    daemon=True,
                ).start()
    except KeyboardInterrupt:
        return 0


def run_screenshot(
    args: argparse.Namespace, configuration: client.Configuration, namespace: str
) -> int:
    path = console_path(namespace, args.name, c.VNC_SUBRESOURCE) + "/" + c.VNC_SCREENSHOT_PATH
    with client.ApiClient(configuration) as api:
        try:
            png = KubeApi(api).get_bytes(path, _request_timeout=c.VNC_SCREENSHOT_TIMEOUT)
        except API_ERRORS as err:
            print(failure_message(err), file=sys.stderr)
            return 1
    if not png.startswith(PNG_SIGNATURE):
        print("error: the server's answer is not a PNG", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.buffer.write(png)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(png)
        print(f"Saved {namespace}/{args.name}'s screen to {args.output}", file=sys.stderr)
    return 0
