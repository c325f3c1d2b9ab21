"""`kubectl vm migrate NAME [--to HOST] [--wait]`: create a LibvirtMigration, and follow it.

Why a command for one object a manifest could make: the name (generated from the machine's),
and above all `--wait`, which prints the migration's progress as the source's daemon reports it
(docs/migration.md) and exits 0 only once the machine runs on its new host, so scripts can chain
on it. Plain Kubernetes calls with the user's kubeconfig (RBAC: get on libvirtmachines, create
and get on libvirtmigrations); what is printed is decided in `console/migrate.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kubernetes import client

from generic.adapters.kubeclient import API_ERRORS, KubeApi, failure_message
from libvirt_provider import constants as c
from libvirt_provider.console.migrate import (
    ENDED_PHASES,
    cancel_hint,
    exit_code,
    final_line,
    migration_body,
    phase_of,
    progress_line,
)

__all__ = ["POLL_SECONDS", "REQUEST_TIMEOUT", "add_commands", "run_migrate"]

# Seconds between two reads of a followed migration (its source reports every second).
POLL_SECONDS = 1.0
# Seconds one API call may take before the plugin gives up on it.
REQUEST_TIMEOUT = 30.0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="move a running machine to another host (a LibvirtMigration)",
        description="Create a LibvirtMigration of the running LibvirtMachine NAME and print its "
        "name (RBAC: get on libvirtmachines, create and get on libvirtmigrations). Without "
        "--to, the source's daemon chooses the least loaded host that fits. With --wait, "
        "follow it until it ends and exit 0 only if it succeeded; Ctrl-C or --timeout stop "
        "waiting but leave it running (`kubectl delete lvmig NAME` cancels it).",
    )
    migrate.add_argument("name", help="the LibvirtMachine's name")
    migrate.add_argument("--to", default=None, metavar="HOST", help="the LibvirtHost to move it to")
    migrate.add_argument("-n", "--namespace", default=None, help="its namespace")
    migrate.add_argument(
        "--wait", action="store_true", help="follow the migration until it ends, with progress"
    )
    migrate.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="with --wait: seconds to wait before giving up (default %(default)s; the "
        "migration goes on)",
    )


def _create(api: client.ApiClient, namespace: str, name: str, target: str | None) -> dict[str, Any]:
    """The machine must exist (kubectl's NotFound otherwise); the migration named after it."""
    KubeApi(api).get_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.MACHINE_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
    )
    created = KubeApi(api).create_namespaced_custom_object(
        c.GROUP,
        c.VERSION,
        namespace,
        c.MIGRATION_PLURAL,
        migration_body(namespace, name, target),
        _request_timeout=REQUEST_TIMEOUT,
    )
    return created if isinstance(created, dict) else {}


def _follow(api: client.ApiClient, namespace: str, name: str, timeout: float) -> int:
    """Print each new state of the migration until it ends; its exit code."""
    kube = KubeApi(api)
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        obj: dict[str, Any] = kube.get_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.MIGRATION_PLURAL, name,
            _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
        phase = phase_of(obj)
        if phase in ENDED_PHASES:
            print(final_line(obj), flush=True)
            return exit_code(phase)
        line = progress_line(obj)
        if line != shown:
            print(line, flush=True)
            shown = line
        if time.monotonic() >= deadline:
            print(f"error: timed out after {timeout:g} s; {cancel_hint(namespace, name)}",
                  file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(POLL_SECONDS)


def run_migrate(
    args: argparse.Namespace, configuration: client.Configuration, namespace: str
) -> int:
    with client.ApiClient(configuration) as api:
        try:
            created = _create(api, namespace, args.name, args.to)
        except API_ERRORS as err:
            print(failure_message(err), file=sys.stderr)
            return 1
        name = str(created["metadata"]["name"])
        print(f"{c.MIGRATION_KIND.lower()}.{c.GROUP}/{name} created", flush=True)
        if not args.wait:
            return 0
        try:
            return _follow(api, namespace, name, args.timeout)
        except KeyboardInterrupt:
            print(f"\nstopped waiting: {cancel_hint(namespace, name)}", file=sys.stderr)
            return 130
        except API_ERRORS as err:
            print(failure_message(err), file=sys.stderr)
            return 1
