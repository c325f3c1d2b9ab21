"""`kubectl vm`: a kubectl plugin (the console script `kubectl-vm`) for LibvirtMachines.

`kubectl vm console NAME [-n NAMESPACE]` opens the machine's serial console through the API
server (the aggregated `libvirtmachines/console` subresource, docs/console.md) with the user's
kubeconfig, read by the kubernetes client, so client certificates, tokens and exec plugins all
work. On a terminal it is interactive (raw mode; `Ctrl-]` leaves); otherwise stdin is sent as it
comes and the guest's output is written to stdout, so scripts and tests can drive it; the end of
stdin ends the session. `--viewer` watches without typing (any number of viewers beside the one
writer), `--force` takes the writer's seat from whoever holds it (they are disconnected and told
who took over), `--logs [--follow]` prints the console output the host kept (and follows it).

`kubectl vm top [NAME] [-n NAMESPACE | -A] [--host HOST]` prints CPU and memory per machine from
the daemons, through the same API server and aggregated endpoint (the `libvirtmachinestats`
resource, docs/console.md): it reads the statistics twice, `--interval` apart, because CPU use
is a rate (`console/top.py` says how it is computed).

`kubectl vm vnc NAME` and `kubectl vm screenshot NAME -o FILE.png` reach the machine's VNC display
(`plugin/vnc.py`).
`kubectl vm port-forward NAME LOCAL:REMOTE` and `kubectl vm ssh [USER@]NAME` carry TCP to a port
of the guest (`plugin/port_forward.py`).
`kubectl vm migrate NAME [--to HOST] [--wait]` creates a LibvirtMigration and follows it
(`plugin/migrate.py`); `kubectl vm drain HOST [--dry-run] [--wait] [--cancel [--abort]]`
cordons and drains a LibvirtHost (`plugin/drain.py`). `kubectl vm completion bash|zsh` prints
a completion script, and `complete_main` is `kubectl_complete-vm`, which kubectl runs to
complete `kubectl vm <TAB>` (`plugin/completion.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import sys
import termios
import time
import tty
from collections.abc import Sequence
from typing import Any

import websocket
from kubernetes import client, config

from generic.adapters.kubeclient import API_ERRORS, KubeApi, failure_message
from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin import completion, drain, migrate, vnc
from libvirt_provider.adapters.plugin.port_forward import (
    add_commands,
    run_port_forward,
    run_ssh,
    split_ssh_arguments,
)
from libvirt_provider.adapters.plugin.pump import carry
from libvirt_provider.console.client import (
    console_path,
    session_query,
    split_at_escape,
    websocket_url,
)
from libvirt_provider.console.sharing import LOGS_END_REASON
from libvirt_provider.console.top import format_table, machine_usage, stats_field_selector

__all__ = ["build_parser", "complete_main", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl vm",
        description="Reach LibvirtMachines (vm-api.io, libvirt provider) through the API server.",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG)")
    parser.add_argument("--context", default=None, help="kubeconfig context to use")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    console = commands.add_parser(
        "console",
        help="attach to a machine's serial console",
        description="Attach to a LibvirtMachine's serial console (RBAC: get on "
        "libvirtmachines/console in its namespace). On a terminal, Ctrl-] leaves; otherwise "
        "stdin is sent as it comes and the end of stdin ends the session.",
    )
    console.add_argument("name", help="the LibvirtMachine's name")
    console.add_argument("-n", "--namespace", default=None, help="its namespace")
    _sharing_arguments(console)
    top = commands.add_parser(
        "top",
        help="show CPU and memory per machine",
        description="CPU and memory of LibvirtMachines, from the daemons (RBAC: get or list on "
        "libvirtmachinestats, and reading the LibvirtMachines themselves, in their namespace). "
        "CPU is the use between two samples --interval apart.",
    )
    top.add_argument("name", nargs="?", default=None, help="one LibvirtMachine (default: all)")
    top.add_argument("-n", "--namespace", default=None, help="their namespace")
    top.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace whose LibvirtMachines you may list",
    )
    top.add_argument("--host", default=None, help="only the machines of this LibvirtHost")
    top.add_argument(
        "--interval",
        type=float,
        default=c.TOP_INTERVAL_SECONDS,
        help="seconds between the two samples (default %(default)s)",
    )
    vnc.add_commands(commands)
    add_commands(commands)
    migrate.add_commands(commands)
    drain.add_commands(commands)
    completion.add_commands(commands)
    return parser


def _sharing_arguments(console: argparse.ArgumentParser) -> None:
    """The options of shared sessions (docs/console.md, "Sharing")."""
    how = console.add_mutually_exclusive_group()
    how.add_argument(
        "--viewer",
        action="store_true",
        help="watch read-only: the guest's output, none of your keystrokes",
    )
    how.add_argument(
        "--force",
        action="store_true",
        help="take the console over from the writer attached now (they are disconnected)",
    )
    how.add_argument(
        "--logs",
        action="store_true",
        help="print the console output the host kept (its last MiB) instead of attaching",
    )
    console.add_argument(
        "-f", "--follow", action="store_true", help="with --logs: keep printing new output"
    )


def _configuration(args: argparse.Namespace) -> tuple[client.Configuration, str]:
    """The kubernetes client's configuration for the user's kubeconfig, and the namespace of its
    context."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=args.kubeconfig, context=args.context, client_configuration=configuration
    )
    namespace = "default"
    with contextlib.suppress(config.ConfigException, KeyError, TypeError):
        contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=args.kubeconfig
        )
        chosen = next((x for x in contexts if x["name"] == args.context), current)
        namespace = chosen["context"].get("namespace") or namespace
    return configuration, namespace


def _connect(
    configuration: client.Configuration,
    path: str,
    subprotocols: Sequence[str] = (c.CONSOLE_SUBPROTOCOL,),
) -> websocket.WebSocket:
    sslopt: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED}
    if not configuration.verify_ssl:
        sslopt = {"cert_reqs": ssl.CERT_NONE, "check_hostname": False}
    if configuration.ssl_ca_cert:
        sslopt["ca_certs"] = configuration.ssl_ca_cert
    if configuration.cert_file:
        sslopt["certfile"] = configuration.cert_file
    if configuration.key_file:
        sslopt["keyfile"] = configuration.key_file
    # Tokens, also those an exec plugin hands out (the client's hook refreshes them), as the
    # kubernetes client itself would send them.
    settings: dict[str, dict[str, Any]] = dict(configuration.auth_settings())  # type: ignore[arg-type]
    headers = [
        f"{setting['key']}: {setting['value']}"
        for setting in settings.values()
        if setting.get("in") == "header" and setting.get("value")
    ]
    ws = websocket.WebSocket(sslopt=sslopt, skip_utf8_validation=True)
    ws.settimeout(c.CONSOLE_CONNECT_TIMEOUT)
    ws.connect(  # type: ignore[no-untyped-call]
        websocket_url(str(configuration.host), path),
        header=headers,
        subprotocols=list(subprotocols),
    )
    ws.settimeout(None)
    return ws


def _refusal(err: websocket.WebSocketBadStatusException) -> str:
    """The API server's or the daemon's Status message, as kubectl prints it."""
    body = err.resp_body
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        status = json.loads(raw)
        return f"Error from server ({status.get('reason') or err.status_code}): {status['message']}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"Error from server ({err.status_code}): {raw.strip() or err}"


class _Session:
    """One console stream on the caller's thread (`plugin/pump.py`): the guest's output to
    stdout, stdin to the guest (a viewer's input is read and dropped, and it is told once)."""

    def __init__(self, ws: websocket.WebSocket, *, viewer: bool = False) -> None:
        self._ws = ws
        self._viewer = viewer
        self._told = False
        self.reason = ""

    @staticmethod
    def _write(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def pump(self) -> None:
        """Only the guest's output (--logs); Ctrl-C leaves."""
        with contextlib.suppress(KeyboardInterrupt):
            self.reason = carry(self._ws, sink=self._write).reason

    def _tell_viewer(self, *, interactive: bool) -> None:
        if self._told:
            return
        self._told = True
        end = "\r\n" if interactive else "\n"
        sys.stderr.write(f"[viewer: keystrokes are not sent to the guest]{end}")
        sys.stderr.flush()

    def run(self, *, interactive: bool) -> None:
        def typed(data: bytes) -> tuple[bytes, bool]:
            send, leave = split_at_escape(data) if interactive else (data, False)
            if send and self._viewer:
                self._tell_viewer(interactive=interactive)
                send = b""
            return send, leave

        source = sys.stdin.fileno()
        self.reason = carry(self._ws, sink=self._write, source=source, transform=typed).reason


def _console(args: argparse.Namespace) -> int:
    if args.follow and not args.logs:
        print("error: --follow goes with --logs", file=sys.stderr)
        return 2
    configuration, default_namespace = _configuration(args)
    namespace = args.namespace or default_namespace
    query = session_query(viewer=args.viewer, force=args.force, logs=args.logs, follow=args.follow)
    try:
        ws = _connect(configuration, console_path(namespace, args.name) + query)
    except websocket.WebSocketBadStatusException as err:
        print(_refusal(err), file=sys.stderr)
        return 1
    except (websocket.WebSocketException, OSError) as err:
        print(f"error: cannot reach the API server: {err}", file=sys.stderr)
        return 1
    if args.logs:
        return _logs(ws)
    session = _Session(ws, viewer=args.viewer)
    interactive = sys.stdin.isatty()
    if not interactive:
        session.run(interactive=False)
    else:
        role = " as a viewer (read-only: keystrokes are not sent)" if args.viewer else ""
        print(
            f"Connected to {namespace}/{args.name}'s serial console{role}; Ctrl-] leaves.",
            file=sys.stderr,
        )
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        try:
            tty.setraw(fd)
            session.run(interactive=True)
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        print("", file=sys.stderr)
    if session.reason:
        print(f"console closed: {session.reason}", file=sys.stderr)
    return 0


def _logs(ws: websocket.WebSocket) -> int:
    """Print the console's log as it comes, until the daemon closes (all sent, or with
    --follow the session ended) or Ctrl-C."""
    session = _Session(ws, viewer=True)
    session.pump()
    if session.reason and session.reason != LOGS_END_REASON:
        print(f"console closed: {session.reason}", file=sys.stderr)
    return 0


def _sample(
    kube: KubeApi, namespace: str | None, name: str | None, host: str | None
) -> dict[str, Any]:
    """One reading of `libvirtmachinestats`: one machine's, a namespace's or every namespace's."""
    group, version, plural = c.SUBRESOURCE_GROUP, c.SUBRESOURCE_VERSION, c.STATS_RESOURCE
    selector = stats_field_selector(host)
    timeout = c.TOP_REQUEST_TIMEOUT
    if namespace is None:
        answer = kube.list_cluster_custom_object(
            group, version, plural, field_selector=selector, _request_timeout=timeout
        )
    elif name is None:
        answer = kube.list_namespaced_custom_object(
            group, version, namespace, plural, field_selector=selector, _request_timeout=timeout
        )
    else:
        answer = kube.get_namespaced_custom_object(
            group, version, namespace, plural, name, _request_timeout=timeout
        )
    return answer if isinstance(answer, dict) else {}


def _top(args: argparse.Namespace) -> int:
    if args.name is not None and args.all_namespaces:
        print("error: a machine's name and --all-namespaces do not go together", file=sys.stderr)
        return 2
    configuration, default_namespace = _configuration(args)
    namespace = None if args.all_namespaces else (args.namespace or default_namespace)
    with client.ApiClient(configuration) as api:
        kube = KubeApi(api)
        try:
            first = _sample(kube, namespace, args.name, args.host)
            time.sleep(max(0.0, args.interval))
            second = _sample(kube, namespace, args.name, args.host)
        except API_ERRORS as err:
            print(failure_message(err), file=sys.stderr)
            return 1
    for host in second.get("partialHosts") or ():
        print(f"warning: host {host} did not answer in time: its machines have no figures",
              file=sys.stderr)  # fmt: skip
    usages = machine_usage(first, second)
    if not usages:
        where = "any namespace" if namespace is None else f"{namespace} namespace"
        print(f"No resources found in {where}.", file=sys.stderr)
        return 0
    print(format_table(usages, all_namespaces=namespace is None))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own, ssh_args = split_ssh_arguments(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(own)
    if ssh_args and args.command != "ssh":
        parser.error("arguments after -- are only for ssh")
    args.ssh_args = ssh_args
    if args.command == "console":
        return _console(args)
    if args.command == "top":
        return _top(args)
    if args.command in ("vnc", "screenshot"):
        configuration, default_namespace = _configuration(args)
        namespace = args.namespace or default_namespace
        if args.command == "screenshot":
            return vnc.run_screenshot(args, configuration, namespace)
        return vnc.run_vnc(args, configuration, namespace, _connect, _refusal)
    if args.command in ("port-forward", "ssh"):
        configuration, default_namespace = _configuration(args)
        namespace = args.namespace or default_namespace
        if args.command == "ssh":
            return run_ssh(args, namespace)
        return run_port_forward(
            args,
            namespace,
            lambda path: _connect(configuration, path, c.PORTFORWARD_SUBPROTOCOLS),
            _refusal,
        )
    if args.command == "migrate":
        configuration, default_namespace = _configuration(args)
        return migrate.run_migrate(args, configuration, args.namespace or default_namespace)
    if args.command == "drain":
        configuration, _namespace = _configuration(args)
        return drain.run_drain(args, configuration)
    if args.command == "completion":
        return completion.run_completion(args, parser)
    parser.print_help()
    return 2


def complete_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl_complete-vm WORD... CURRENT`: what kubectl (>= 1.26) runs to complete
    `kubectl vm WORD... CURRENT<TAB>`; prints cobra's answer."""
    return completion.run_complete(build_parser(), sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
