"""`kubectl vm migrate`'s shell without an API server: what it prints and returns when the
machine is missing, when the user stops waiting, when the wait times out, and when it ends."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin import migrate


def _args(**over: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"name": "web", "to": "h2", "wait": True, "timeout": 600.0}
    values.update(over)
    return argparse.Namespace(**values)


def _created(*_args: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web-abcde"}}


def _states(monkeypatch: pytest.MonkeyPatch, states: list[dict[str, Any]]) -> None:
    """The migration reads as each of `states` in turn (the last one again after that)."""

    def read(self: object, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return states.pop(0) if len(states) > 1 else states[0]

    monkeypatch.setattr(migrate, "_create", _created)
    monkeypatch.setattr(migrate.KubeApi, "get_namespaced_custom_object", read)
    monkeypatch.setattr(migrate, "POLL_SECONDS", 0.0)


def test_a_missing_machine_is_reported_as_kubectl_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(*_args: Any) -> dict[str, Any]:
        err = ApiException(status=404, reason="Not Found")
        err.body = (
            '{"kind":"Status","reason":"NotFound","message":'
            '"libvirtmachines.infrastructure.vm-api.io \\"web\\" not found"}'
        )
        raise err

    monkeypatch.setattr(migrate, "_create", missing)
    assert migrate.run_migrate(_args(), client.Configuration(), "team-a") == 1
    assert capsys.readouterr().err.strip() == (
        'Error from server (NotFound): libvirtmachines.infrastructure.vm-api.io "web" not found'
    )


def test_without_wait_it_prints_the_name_and_returns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(migrate, "_create", _created)
    assert migrate.run_migrate(_args(wait=False), client.Configuration(), "team-a") == 0
    assert capsys.readouterr().out == f"libvirtmigration.{c.GROUP}/web-abcde created\n"


def test_waiting_prints_each_new_state_once_and_ends_with_the_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    preparing = {"status": {"phase": "Preparing", "source": "h1", "target": "h2"}}
    done = {
        "status": {
            "phase": "Succeeded",
            "source": "h1",
            "target": "h2",
            "result": {"downtimeMilliseconds": 120, "elapsedMilliseconds": 5000},
        }
    }
    _states(monkeypatch, [{}, preparing, preparing, done])
    assert migrate.run_migrate(_args(), client.Configuration(), "team-a") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"libvirtmigration.{c.GROUP}/web-abcde created",
        "Pending",
        "Preparing h1 -> h2",
        "Succeeded h1 -> h2: downtime 120 ms, elapsed 5.0 s",
    ]


def test_a_failed_migration_exits_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _states(monkeypatch, [{"status": {"phase": "Cancelled"}}])
    assert migrate.run_migrate(_args(), client.Configuration(), "team-a") == 1
    assert capsys.readouterr().out.splitlines()[-1] == "Cancelled"


def test_ctrl_c_leaves_the_migration_running_and_says_how_to_cancel(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(migrate, "_create", _created)
    monkeypatch.setattr(migrate, "_follow", interrupted)
    assert migrate.run_migrate(_args(), client.Configuration(), "team-a") == 130
    err = capsys.readouterr().err
    assert "stopped waiting" in err
    assert "kubectl delete lvmig web-abcde -n team-a" in err


def test_a_timeout_stops_waiting_not_the_migration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _states(monkeypatch, [{"status": {"phase": "Migrating"}}])
    assert migrate.run_migrate(_args(timeout=0.0), client.Configuration(), "team-a") == 1
    err = capsys.readouterr().err
    assert "timed out after 0 s" in err
    assert "goes on" in err
