"""VNC through the lab's API server as a user reaches it: the vnc ClusterRole's binding,
`kubectl vm vnc` (its printed port) and `kubectl vm screenshot` run as processes, an RFB client
that goes as far as the framebuffer's size, and the screen's size as libvirt reports it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import libvirt
from kubernetes import client

from libvirt_provider.console.vnc import (
    PNG_SIGNATURE,
    RfbError,
    ServerInit,
    parse_ppm,
    parse_rfb_version,
    parse_server_init,
    png_size,
    rfb_version_reply,
)
from tests.support.lab_access import REPO
from tests.support.waiting import GiveUp, eventually

VNC_CLUSTER_ROLE = "vm-api-libvirtmachine-vnc"
_RFB_NO_AUTH = 1
_PORT_LINE = re.compile(r"127\.0\.0\.1:(\d+)")


def bind_vnc(api_client: client.ApiClient, namespace: str, user: str) -> None:
    """A RoleBinding in `namespace` to deploy/'s vnc ClusterRole for the ServiceAccount `user`."""
    account_ns, account = user.split(":")[2:4]
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"vnc-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": VNC_CLUSTER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
        },
    )


def _plugin(kubeconfig: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "libvirt_provider.adapters.plugin.kubectl_vm",
        f"--kubeconfig={kubeconfig}",
        *args,
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}


def run_screenshot(kubeconfig: Path, namespace: str, name: str, output: Path) -> tuple[int, str]:
    """`kubectl vm screenshot NAME -n NS -o OUTPUT`: its exit code and stderr."""
    done = subprocess.run(
        _plugin(kubeconfig, "screenshot", name, "-n", namespace, "-o", str(output)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
        cwd=REPO,
    )
    return done.returncode, done.stderr


class VncForward:
    """`kubectl vm vnc NAME` running, its stdout and stderr collected; `port` is the local port
    it printed."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str) -> None:
        self.process = subprocess.Popen(
            _plugin(kubeconfig, "vnc", name, "-n", namespace),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=REPO,
        )
        self._out: list[str] = []
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=self._collect, args=(self.process.stdout, self._out)),
            threading.Thread(target=self._collect, args=(self.process.stderr, self._err)),
        ]
        for thread in self._threads:
            thread.start()
        self.port = eventually(self._printed_port, timeout=60, what="kubectl vm vnc's port")

    @staticmethod
    def _collect(pipe: object, into: list[str]) -> None:
        for line in iter(pipe.readline, ""):  # type: ignore[attr-defined]
            into.append(line)

    def _printed_port(self) -> int | None:
        if self.process.poll() is not None:
            raise GiveUp(f"kubectl vm vnc exited {self.process.returncode}: {self.errors}")
        found = _PORT_LINE.search("".join(self._out))
        return int(found.group(1)) if found else None

    @property
    def output(self) -> str:
        return "".join(self._out)

    @property
    def errors(self) -> str:
        return "".join(self._err)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        for thread in self._threads:
            thread.join(30)


def vnc_refused(kubeconfig: Path, namespace: str, name: str, says: str) -> None:
    """`kubectl vm vnc NAME` is refused: the plugin closes a viewer's connection before any
    greeting, and prints `says` (part of the daemon's or the API server's refusal)."""
    forward = VncForward(kubeconfig, namespace, name)
    try:
        try:
            rfb_server_init(forward.port)
        except (OSError, RfbError):
            pass
        else:
            raise AssertionError(f"kubectl vm vnc {name} greeted a viewer: {forward.errors!r}")
        eventually(
            lambda: says in forward.errors,
            timeout=30,
            what=f"kubectl vm vnc printing {says!r} (stderr: {forward.errors!r})",
        )
    finally:
        forward.stop()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RfbError(f"the server closed the connection after {len(data)} of {size} bytes")
        data += chunk
    return data


def rfb_server_init(port: int, *, timeout: float = 60) -> tuple[tuple[int, int], ServerInit]:
    """An RFB client on 127.0.0.1:`port`, as far as the server's ServerInit (RFC 6143): the
    server's protocol version and the framebuffer's size and name. Only security type None (the
    lab's loopback display has no password)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        version = parse_rfb_version(_read_exactly(sock, 12))
        sock.sendall(rfb_version_reply(version))
        if min(version, (3, 8)) >= (3, 7):
            count = _read_exactly(sock, 1)[0]
            if count == 0:
                raise RfbError("the server refused the handshake")
            offered = _read_exactly(sock, count)
            if _RFB_NO_AUTH not in offered:
                raise RfbError(f"no security type None among {list(offered)}")
            sock.sendall(bytes([_RFB_NO_AUTH]))
            if version >= (3, 8) and _read_exactly(sock, 4) != b"\0\0\0\0":
                raise RfbError("security handshake failed")
        elif int.from_bytes(_read_exactly(sock, 4), "big") != _RFB_NO_AUTH:
            raise RfbError("the server asks for authentication")
        sock.sendall(b"\x01")  # ClientInit: shared, other viewers stay
        head = _read_exactly(sock, 24)
        name = _read_exactly(sock, int.from_bytes(head[20:24], "big"))
        return version, parse_server_init(head + name)


def libvirt_screen_size(virt: libvirt.virConnect, domain_uuid: str) -> tuple[int, int]:
    """The width and height of the domain's screen as libvirt's own screenshot gives them (a PPM,
    or a PNG from newer libvirt and qemu)."""
    stream = virt.newStream(0)
    virt.lookupByUUIDString(domain_uuid).screenshot(stream, 0, 0)
    data = b""
    while True:
        chunk = stream.recv(256 * 1024)
        if not isinstance(chunk, bytes) or not chunk:
            break
        data += chunk
    stream.finish()
    if data.startswith(PNG_SIGNATURE):
        return png_size(data)
    width, height, _pixels = parse_ppm(data)
    return width, height
