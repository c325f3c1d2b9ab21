"""The console subresources in the lab: the APIService wired to a daemon on the machine's
loopback, users with a kubeconfig of their own, `kubectl vm` driven through pipes, and requests
straight to the daemon's port.

How the lab wires it (docs/console.md): the lab's API server runs with the front-proxy flags and
the certificates `lab.py` makes (`make_front_proxy_credentials`); the daemon runs on the machine's
127.0.0.1 like the API server, so the APIService names a Service of type ExternalName `localhost`
whose port is the daemon's console port (the aggregator resolves ExternalName Services to that
name and the APIService's port; Endpoints on loopback addresses are refused by the API server).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import re
import ssl
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.daemons import answers, free_port, health_base, start_daemon, stop_daemon
from tests.support.factories import HOST
from tests.support.kube import NS_PREFIX, apply, install_api, service_account_kubeconfig
from tests.support.lab_access import REPO, LabInfo
from tests.support.signals import as_at_a_terminal
from tests.support.waiting import GiveUp, eventually

APISERVICE = f"{c.SUBRESOURCE_VERSION}.{c.SUBRESOURCE_GROUP}"
SERVICE = "libvirt-provider-console"
SERVICE_NAMESPACE = "vm-api-system"
CONSOLE_CLUSTER_ROLE = "vm-api-libvirtmachine-console"


def lab_pki(lab: LabInfo) -> Path:
    return Path(lab.dir) / "pki"


def console_flags(lab: LabInfo, port: int) -> tuple[str, ...]:
    pki = lab_pki(lab)
    return (
        f"--console-port={port}",
        "--console-address=127.0.0.1",
        f"--console-cert-file={pki / 'console-serving.crt'}",
        f"--console-key-file={pki / 'console-serving.key'}",
        # libvirtd and its networks live in the lab's namespace: port-forward dials guests there.
        f"--guest-netns={lab.netns}",
    )


def register_apiservice(lab: LabInfo, api_client: client.ApiClient, port: int) -> None:
    """The ExternalName Service and the APIService for a daemon's console on `port`, then wait
    until the aggregator finds it Available (its discovery answered through the front proxy)."""
    core = client.CoreV1Api(api_client)
    reg = client.ApiregistrationV1Api(api_client)
    unregister_apiservice(api_client)
    # deploy/'s namespace and the ClusterRoles users are bound to, which a module run on its
    # own (its daemon not started by `start_console_daemon`) may not have yet.
    deploy = REPO / "deploy"
    apply(lab, deploy / "namespace.yaml", deploy / "console-rbac.yaml")
    core.create_namespaced_service(
        SERVICE_NAMESPACE,
        {
            "metadata": {"name": SERVICE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "console", "port": port}],
            },
        },
    )
    ca = (lab_pki(lab) / "console-ca.crt").read_bytes()
    reg.create_api_service(
        {
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": c.SUBRESOURCE_GROUP,
                "version": c.SUBRESOURCE_VERSION,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
                "service": {"name": SERVICE, "namespace": SERVICE_NAMESPACE, "port": port},
                "caBundle": base64.b64encode(ca).decode(),
            },
        }
    )

    def available() -> bool:
        conditions = reg.read_api_service(APISERVICE).status.conditions or []
        return any(x.type == "Available" and x.status == "True" for x in conditions)

    eventually(available, timeout=60, what=f"APIService {APISERVICE} Available")


def unregister_apiservice(api_client: client.ApiClient) -> None:
    """The APIService first (an unavailable one would hold namespace deletion), then the
    Service."""
    for delete in (
        lambda: client.ApiregistrationV1Api(api_client).delete_api_service(APISERVICE),
        lambda: client.CoreV1Api(api_client).delete_namespaced_service(SERVICE, SERVICE_NAMESPACE),
    ):
        try:
            delete()
        except ApiException as err:
            if err.status != 404:
                raise


def user_kubeconfig(
    lab: LabInfo, api_client: client.ApiClient, path: Path, *, namespace: str, name: str
) -> str:
    """A ServiceAccount `name` of `namespace` and a kubeconfig at `path` with its token: a user
    who is not an admin. Returns its user name."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    service_account_kubeconfig(lab, api_client, path, account=name, namespace=namespace)
    return f"system:serviceaccount:{namespace}:{name}"


def bind_console(api_client: client.ApiClient, namespace: str, user: str) -> None:
    """A RoleBinding in `namespace` to deploy/'s console ClusterRole for `user`."""
    account_ns, account = user.split(":")[2:4]
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"console-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CONSOLE_CLUSTER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
        },
    )


class Plugin:
    """`kubectl vm console` as a user runs it, stdin and stdout through pipes (or, with
    `terminal`, a pseudo-terminal, as on a user's screen); what it printed is collected by a
    thread as it comes."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        name: str,
        *options: str,
        terminal: bool = False,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self._terminal: int | None = None
        tty_in: int | None = None
        if terminal:
            self._terminal, tty_in = os.openpty()
        # Ctrl-C (the tests' SIGINT) as at a terminal, even in a test run started in the
        # background.
        self.process = subprocess.Popen(
            as_at_a_terminal(
                [
                    sys.executable,
                    "-m",
                    "libvirt_provider.adapters.plugin.kubectl_vm",
                    f"--kubeconfig={kubeconfig}",
                    "console",
                    name,
                    "-n",
                    namespace,
                    *options,
                ]
            ),
            stdin=tty_in if tty_in is not None else subprocess.PIPE,
            stdout=tty_in if tty_in is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        self._out = bytearray()
        self._err = bytearray()
        self._lock = threading.Lock()
        if tty_in is not None:
            os.close(tty_in)
            out: Any = os.fdopen(self._terminal, "rb", buffering=0, closefd=False)
        else:
            out = self.process.stdout
        self._threads = [
            threading.Thread(target=self._collect, args=(out, self._out)),
            threading.Thread(target=self._collect, args=(self.process.stderr, self._err)),
        ]
        for thread in self._threads:
            thread.start()

    def _collect(self, pipe: Any, into: bytearray) -> None:
        read = pipe.read1 if hasattr(pipe, "read1") else pipe.read
        while True:
            try:
                chunk = read(4096)
            except OSError:  # a pseudo-terminal whose other side closed
                return
            if not chunk:
                return
            with self._lock:
                into += chunk

    @property
    def output(self) -> str:
        with self._lock:
            return self._out.decode("utf-8", "replace")

    @property
    def errors(self) -> str:
        with self._lock:
            return self._err.decode("utf-8", "replace")

    def type(self, text: str) -> None:
        if self._terminal is not None:
            os.write(self._terminal, text.encode())
            return
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def send(self, data: bytes) -> None:
        """Bytes into the plugin's stdin (not a terminal's), blocking while it does not take
        them, as a pipe does."""
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def leave(self, timeout: float = 30) -> int:
        """End stdin (which ends the session) and wait for the plugin to exit."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        code = self.process.wait(timeout=timeout)
        if self._terminal is not None:
            os.close(self._terminal)
            self._terminal = None
        for thread in self._threads:
            thread.join(timeout)
        return code


def run_plugin(kubeconfig: Path, namespace: str, name: str, *options: str) -> tuple[int, str]:
    """A console attempt that is expected to be refused: its exit code and stderr."""
    plugin = Plugin(kubeconfig, namespace, name, *options)
    code = plugin.process.wait(timeout=60)
    plugin.leave()
    return code, plugin.errors


STATS_CLUSTER_ROLE = "vm-api-libvirtmachine-stats"


def run_top(kubeconfig: Path | str, *args: str) -> tuple[int, str, str]:
    """`kubectl vm top ARGS` as a user runs it: its exit code, stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "libvirt_provider.adapters.plugin.kubectl_vm",
            f"--kubeconfig={kubeconfig}",
            "top",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=REPO,
    )
    return done.returncode, done.stdout, done.stderr


def top_rows(stdout: str) -> list[dict[str, str]]:
    """`kubectl vm top`'s table as one dict per row, keyed by the header's columns."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    header, *rows = lines
    return [dict(zip(header, row, strict=True)) for row in rows]


def grant_stats(api_client: client.ApiClient, namespace: str, user: str) -> None:
    """A RoleBinding in `namespace` to deploy/'s stats ClusterRole for `user` (what lets
    `kubectl vm top` through the API server there, not yet the daemon's own check)."""
    _bind(api_client, namespace, user, STATS_CLUSTER_ROLE, kind="ClusterRole")


def grant_machine_reading(api_client: client.ApiClient, namespace: str, user: str) -> None:
    """A Role and RoleBinding in `namespace` letting `user` get and list LibvirtMachines: what
    the daemon asks before it shows their figures. The Role is shared by every user granted
    it in the namespace."""
    try:
        client.RbacAuthorizationV1Api(api_client).create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "read-libvirtmachines"},
                "rules": [
                    {
                        "apiGroups": [c.GROUP],
                        "resources": [c.MACHINE_PLURAL],
                        "verbs": ["get", "list"],
                    }
                ],
            },
        )
    except ApiException as err:
        if err.status != 409:
            raise
    _bind(api_client, namespace, user, "read-libvirtmachines", kind="Role")


def _bind(api_client: client.ApiClient, namespace: str, user: str, role: str, *, kind: str) -> None:
    account_ns, account = user.split(":")[2:4]
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{role}-{account}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
        },
    )


def direct_request(
    port: int,
    path: str,
    headers: dict[str, str],
    *,
    cert: tuple[Path, Path] | None = None,
    ca: Path | None = None,
) -> tuple[int, str]:
    """A GET straight to a daemon's console port, bypassing the API server; TLS verified against
    `ca`, with `cert` as the client certificate if given."""
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=30)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def start_console_daemon(
    lab: LabInfo,
    api_client: client.ApiClient,
    workdir: Path,
    *,
    log_name: str,
    extra_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], Path, int]:
    """A daemon serving consoles on a free port with deploy/'s ServiceAccount (so deploy/'s RBAC,
    console-rbac.yaml included, is what is proven enough), healthy and holding the front proxy's
    trust; returns its process, log and console port. The caller stops it (`stop_daemon`)."""
    install_api(lab, api_client)
    deploy = REPO / "deploy"
    apply(lab, deploy / "namespace.yaml", deploy / "rbac.yaml", deploy / "console-rbac.yaml")
    kubeconfig = workdir / "provider.kubeconfig"
    service_account_kubeconfig(lab, api_client, kubeconfig)
    port = free_port()
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name=log_name,
        kubeconfig=str(kubeconfig),
        lease_namespace="vm-api-system",
        generic_namespaces=(f"{NS_PREFIX}*",),
        extra_args=(*console_flags(lab, port), *extra_args),
    )
    try:
        base = health_base(proc, log)
        eventually(lambda: answers(f"{base}/healthz"), timeout=60, what="the daemon healthy")
        eventually(
            lambda: "console: front-proxy trust loaded" in log.read_text(),
            timeout=60,
            what=f"the daemon serving consoles with the front proxy's trust (log: {log})",
        )
    except BaseException:
        stop_daemon(proc, log)
        raise
    return proc, log, port


PORTFORWARD_CLUSTER_ROLE = "vm-api-libvirtmachine-portforward"


def bind_portforward(api_client: client.ApiClient, namespace: str, user: str) -> None:
    """A RoleBinding in `namespace` to deploy/'s port-forward ClusterRole for `user`."""
    _bind(api_client, namespace, user, PORTFORWARD_CLUSTER_ROLE, kind="ClusterRole")


def plugin_command(kubeconfig: Path | str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "libvirt_provider.adapters.plugin.kubectl_vm",
        f"--kubeconfig={kubeconfig}",
        *args,
    ]


def run_forward_stdio(
    kubeconfig: Path | str, namespace: str, name: str, port: int | str, data: bytes = b""
) -> tuple[int, bytes, str]:
    """`kubectl vm port-forward --stdio NAME PORT` fed `data` (then the end of stdin): its exit
    code, stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        plugin_command(kubeconfig, "port-forward", "--stdio", "-n", namespace, name, str(port)),
        input=data,
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
        cwd=REPO,
    )
    return done.returncode, done.stdout, done.stderr.decode("utf-8", "replace")


class PortForward:
    """`kubectl vm port-forward NAME LOCAL:REMOTE` running, as a user leaves it running; `local`
    is the port it printed once it listens."""

    def __init__(self, kubeconfig: Path | str, namespace: str, name: str, spec: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(
            plugin_command(kubeconfig, "port-forward", "-n", namespace, name, spec),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
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
        self.local = eventually(
            self._listening, timeout=60, what=f"kubectl vm port-forward listening ({self._err})"
        )

    @staticmethod
    def _collect(pipe: Any, into: list[str]) -> None:
        for line in pipe:
            into.append(line.decode("utf-8", "replace"))

    def _listening(self) -> int | None:
        if self.process.poll() is not None:
            raise GiveUp(f"kubectl vm port-forward exited: {''.join(self._err)}")
        for line in list(self._out):
            if line.startswith("Forwarding from 127.0.0.1:"):
                return int(line.split(":", 1)[1].split()[0])
        return None

    @property
    def errors(self) -> str:
        return "".join(self._err)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        for thread in self._threads:
            thread.join(10)


def shell_answers(plugin: Plugin, marker: str, *, command: str = "") -> bool:
    """Type `command; echo MARKER-$((6*7))` (the answer only the shell can produce) unless the
    answer came already; whether it has. A plugin that exited ends the wait at once."""
    if plugin.process.poll() is not None:
        raise GiveUp(f"kubectl vm exited {plugin.process.returncode}: {plugin.errors}")
    if f"{marker}-42" in plugin.output:
        return True
    plugin.type(f"{command + '; ' if command else ''}echo {marker}-$((6*7))\n")
    return f"{marker}-42" in plugin.output


def read_raw(plugin: Plugin, size: int, *, timeout: float = 60) -> str:
    """Have the guest's serial shell read the next `size` bytes raw (`stty raw -echo`: no echo,
    no line discipline, so any byte passes unchanged) into `md5sum`, then print a marker; once
    the tty is raw, the tag to pass to `raw_md5`. The shell must be answering (`shell_answers`):
    the command is typed once, as anything typed after it is read as data."""
    tag = uuid.uuid4().hex[:8]
    plugin.type(
        f"stty raw -echo; echo P{tag}-$((6*7)); head -c {size} | md5sum; stty sane; "
        f"echo D{tag}-$((6*7))\n"
    )
    eventually(
        lambda: _printed(plugin, f"P{tag}-42"),
        timeout=timeout,
        what=f"the guest's tty raw (stderr: {plugin.errors!r})",
    )
    return tag


def raw_md5(plugin: Plugin, tag: str, *, timeout: float) -> str:
    """The md5 the guest printed for `read_raw`'s bytes, once it has read them all (the guest's
    own lines, a DHCP lease's, may come between; the md5 is the 32 hex digits)."""
    eventually(
        lambda: _printed(plugin, f"D{tag}-42"),
        timeout=timeout,
        interval=0.5,
        what=f"the guest's md5 of the raw read (stderr: {plugin.errors!r})",
    )
    out = plugin.output
    answer = out[out.index(f"P{tag}-42") + len(tag) + 4 : out.index(f"D{tag}-42")]
    found = re.search(r"\b[0-9a-f]{32}\b", answer)
    return found.group() if found else answer


def _printed(plugin: Plugin, text: str) -> bool:
    if text in plugin.output:
        return True
    if plugin.process.poll() is not None:
        raise GiveUp(f"kubectl vm exited {plugin.process.returncode}: {plugin.errors}")
    return False
