"""`kubectl vm drain`: what it sends, prints and returns, without an API server."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from generic.adapters.kubeclient import KubeApi
from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin import drain
from libvirt_provider.adapters.plugin.kubectl_vm import build_parser
from libvirt_provider.console.completion import Values, plan, tree_of
from libvirt_provider.console.drain import (
    cancel_patch,
    drain_patch,
    exit_code,
    plan_lines,
    progress_line,
    settled,
)


def _host(phase: str | None, *, dry_run: bool = False, **drain_fields: Any) -> dict[str, Any]:
    if phase is None:
        return {"metadata": {"name": "h1"}, "status": {}}
    status = {"phase": phase, "dryRun": dry_run, "message": "1 of 2 moved", **drain_fields}
    return {"metadata": {"name": "h1"}, "status": {"drain": status}}


PLAN = [
    {"namespace": "ns", "name": "a", "strategy": "LiveMigrate", "state": "Pending", "target": "h2"},
    {"namespace": "ns", "name": "b", "strategy": "None", "state": "Blocked", "reason": "None"},
    {"namespace": "ns", "name": "p", "strategy": "PowerOff", "state": "Pending"},
]


def test_a_drain_cordons_in_the_same_write() -> None:
    assert drain_patch(dry_run=True, on_cancel="Finish") == {
        "spec": {"unschedulable": True, "drain": {"dryRun": True, "onCancel": "Finish"}}
    }
    assert cancel_patch() == {"spec": {"drain": None}}


def test_the_plan_reads_machine_by_machine() -> None:
    lines = plan_lines(_host(c.DRAIN_PHASE_PLANNED, machines=PLAN))
    assert lines == [
        "  ns/a (LiveMigrate, Pending): -> h2",
        "  ns/b (None, Blocked): blocked: None",
        "  ns/p (PowerOff, Pending): power off (stays on the host)",
    ]


def test_when_the_plugin_stops_reading() -> None:
    assert settled(_host(c.DRAIN_PHASE_PLANNED, dry_run=True), dry_run=True, wait=False)
    assert not settled(_host(None), dry_run=True, wait=False)
    assert not settled(_host(c.DRAIN_PHASE_PLANNED, dry_run=True), dry_run=False, wait=False)
    assert settled(_host(c.DRAIN_PHASE_PLANNING), dry_run=False, wait=False)
    assert not settled(_host(c.DRAIN_PHASE_DRAINING), dry_run=False, wait=True)
    assert settled(_host(c.DRAIN_PHASE_BLOCKED), dry_run=False, wait=True)
    assert exit_code(_host(c.DRAIN_PHASE_BLOCKED)) == 1
    assert exit_code(_host(c.DRAIN_PHASE_DRAINED)) == 0
    assert progress_line(_host(c.DRAIN_PHASE_DRAINING)) == "Draining: 1 of 2 moved"


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["drain", *argv])


def test_a_host_that_does_not_exist_is_said_readably(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        raise ApiException(
            status=404,
            reason="Not Found",
        ) from None

    monkeypatch.setattr(KubeApi, "get_cluster_custom_object", missing)
    assert drain.run_drain(_args("nosuch"), client.Configuration()) == 1
    err = capsys.readouterr().err
    assert "there is no LibvirtHost 'nosuch'" in err


def test_a_dry_run_prints_the_plan_and_returns_once_published(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    states = [_host(None), _host(c.DRAIN_PHASE_PLANNED, dry_run=True, machines=PLAN)]
    sent: list[Any] = []

    def read(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return states.pop(0) if len(states) > 1 else states[0]

    monkeypatch.setattr(KubeApi, "get_cluster_custom_object", read)
    monkeypatch.setattr(KubeApi, "patch_cluster_custom_object", lambda *a, **_: sent.append(a))
    monkeypatch.setattr(drain, "POLL_SECONDS", 0.0)
    assert drain.run_drain(_args("h1", "--dry-run"), client.Configuration()) == 0
    assert sent[0][-1]["spec"]["drain"]["dryRun"] is True
    out = capsys.readouterr().out
    assert "planned (dry run)" in out
    assert "  ns/a (LiveMigrate, Pending): -> h2" in out


def test_completion_offers_hosts_after_drain() -> None:
    assert plan(tree_of(build_parser()), ["drain", ""]).values is Values.HOSTS
