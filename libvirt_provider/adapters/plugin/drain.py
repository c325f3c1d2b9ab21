"""`kubectl vm drain HOST [--dry-run] [--wait]` and `kubectl vm drain HOST --cancel [--abort]`:
cordon and drain a LibvirtHost, show its plan, follow it; or cancel it.

Plain Kubernetes calls with the user's kubeconfig (RBAC: get and patch on libvirthosts); the
drain itself is the host's daemon's (docs/migration.md, "Draining a host"), and what is sent
and printed is decided in `console/drain.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from kubernetes import client

from generic.adapters.kubeclient import API_ERRORS, ApiFailure, KubeApi, failure_message, failure_of
from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin.migrate import POLL_SECONDS, REQUEST_TIMEOUT
from libvirt_provider.console.drain import (
    abort_patch,
    cancel_patch,
    drain_of,
    drain_patch,
    exit_code,
    plan_lines,
    progress_line,
    settled,
)

__all__ = ["add_commands", "run_drain"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = commands.add_parser(
        "drain",
        help="cordon a host and move its machines off it (or --cancel)",
        description="Cordon the LibvirtHost HOST and drain it: its daemon publishes a plan "
        "(each machine: where it goes, or why it cannot), then moves the machines by their "
        "evictionStrategy within the migration limits. Prints the plan. --dry-run publishes "
        "only the plan; --wait follows the drain until it is Drained (exit 0) or Blocked "
        "(exit 1). --cancel clears the drain (the host stays cordoned); its running migrations "
        "finish, or with --abort are aborted. RBAC: get and patch on libvirthosts.",
    )
    drain.add_argument("host", help="the LibvirtHost's name")
    drain.add_argument("--dry-run", action="store_true", help="publish the plan only")
    drain.add_argument(
        "--wait", action="store_true", help="follow the drain until it is Drained or Blocked"
    )
    drain.add_argument("--cancel", action="store_true", help="clear the drain (stays cordoned)")
    drain.add_argument(
        "--abort",
        action="store_true",
        help="with --cancel: abort the drain's running migrations (default: they finish)",
    )
    drain.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds to wait for the plan, or with --wait for the end (default %(default)s)",
    )


def _get(api: client.ApiClient, host: str) -> dict[str, Any]:
    obj = KubeApi(api).get_cluster_custom_object(
        c.GROUP, c.VERSION, c.HOST_PLURAL, host, _request_timeout=REQUEST_TIMEOUT
    )
    return obj if isinstance(obj, dict) else {}


def _patch(api: client.ApiClient, host: str, body: dict[str, Any]) -> None:
    KubeApi(api).patch_cluster_custom_object(
        c.GROUP, c.VERSION, c.HOST_PLURAL, host, body, _request_timeout=REQUEST_TIMEOUT
    )


def _follow(api: client.ApiClient, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    shown = ""
    planned = False
    while True:
        obj = _get(api, args.host)
        line = progress_line(obj)
        if line != shown:
            print(line, flush=True)
            shown = line
        if not planned and drain_of(obj).get("machines") is not None and drain_of(obj):
            planned = True
            print("plan:", flush=True)
            for entry in plan_lines(obj) or ["  (no machine on the host)"]:
                print(entry, flush=True)
        if settled(obj, dry_run=args.dry_run, wait=args.wait):
            return exit_code(obj)
        if time.monotonic() >= deadline:
            print(f"error: timed out after {args.timeout:g} s; the drain goes on "
                  f"(kubectl vm drain {args.host} --cancel stops it)", file=sys.stderr)  # fmt: skip
            return 1
        time.sleep(POLL_SECONDS)


def _cancel(api: client.ApiClient, args: argparse.Namespace) -> int:
    if args.abort:
        _patch(api, args.host, abort_patch())
        deadline = time.monotonic() + min(args.timeout, 60.0)
        while drain_of(_get(api, args.host)).get("onCancel") != c.DRAIN_ON_CANCEL_ABORT:
            if time.monotonic() >= deadline:
                print(f"error: the daemon of host {args.host} did not take --abort; the drain "
                      "is not cancelled", file=sys.stderr)  # fmt: skip
                return 1
            time.sleep(POLL_SECONDS)
    _patch(api, args.host, cancel_patch())
    fate = "aborted" if args.abort else "left to finish"
    print(f"libvirthost.{c.GROUP}/{args.host} drain cancelled (running migrations {fate}; the "
          "host stays cordoned)", flush=True)  # fmt: skip
    return 0


def run_drain(args: argparse.Namespace, configuration: client.Configuration) -> int:
    with client.ApiClient(configuration) as api:
        try:
            _get(api, args.host)
            if args.cancel:
                return _cancel(api, args)
            on_cancel = c.DRAIN_ON_CANCEL_FINISH
            _patch(api, args.host, drain_patch(dry_run=args.dry_run, on_cancel=on_cancel))
            what = "planned (dry run)" if args.dry_run else "cordoned and draining"
            print(f"libvirthost.{c.GROUP}/{args.host} {what}", flush=True)
            return _follow(api, args)
        except KeyboardInterrupt:
            print(f"\nstopped waiting: the drain goes on (kubectl vm drain {args.host} --cancel "
                  "stops it)", file=sys.stderr)  # fmt: skip
            return 130
        except API_ERRORS as err:
            print(failure_message(err), file=sys.stderr)
            if failure_of(err) is ApiFailure.NOT_FOUND:
                print(f"error: there is no LibvirtHost {args.host!r} (kubectl get lvh lists "
                      "them)", file=sys.stderr)  # fmt: skip
            return 1
