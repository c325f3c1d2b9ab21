"""Draining a lab host: the plan first, then the machines move by their evictionStrategy, and a
drain that cannot finish ends Blocked naming what holds it (docs/migration.md, "Draining a
host").

Why: host maintenance (issue 27, item 5) through `kubectl vm drain`, as an operator runs it,
against two daemons set up to migrate between their hosts. Four busybox guests are booted once
for the module: `a` and `b` on the first host, `stay` (evictionStrategy None) and `p` (PowerOff)
on the second. The tests run in order and each starts where the previous left the guests: a dry
run of the first host moves nothing; its drain moves `a` and `b` to the second host and reports
Drained; a drain of the second host then moves them back, powers `p` off and ends Blocked by
`stay`; a drain of the first host whose slowed copies run is cancelled with --abort and leaves
both where they were; a drain of the first host whose moves all fail (its migration Secret gone)
tries each machine three times and ends Blocked.

Cost: about 55-95 s (53 to 93 s in ten runs here, beside a CI run: the four guests booted
together, ~25 s under TCG; four migrations of ~6-10 s, two at a time; two slowed copies
aborted, ~8 s; six failed attempts, ~4 s; the rest are API round trips of a few seconds).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.e2e.migration.credentials import delete_migration_secret, put_migration_secret
from tests.e2e.migration.moves import PLURAL, delete_migrations, pool_volumes
from tests.support.console import plugin_command
from tests.support.daemons import Fleet
from tests.support.factories import pair
from tests.support.hosts import host_object, patch_host, reset_host
from tests.support.kube import GROUP, V, create, domain_of, get, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

MACHINES = ("a", "b")


def _plugin(lab: LabInfo, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run(
        plugin_command(lab.kubeconfig, "drain", *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def _drain(api: client.ApiClient, host: str) -> dict[str, Any]:
    return dict(((host_object(api, host) or {}).get("status") or {}).get("drain") or {})


def _host_of(api: client.ApiClient, ns: str, name: str) -> str | None:
    return ((get(api, ns, name, vm=False) or {}).get("spec") or {}).get("host")


def _drain_migrations(api: client.ApiClient, ns: str, host: str) -> list[dict[str, Any]]:
    listing = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, V, ns, PLURAL, label_selector=f"{c.DRAIN_HOST_LABEL}={host}"
    )
    return list(listing["items"])


def _host_events(api: client.ApiClient, host: str) -> list[str]:
    return [
        str(e.reason)
        for e in client.CoreV1Api(api).list_event_for_all_namespaces().items
        if e.involved_object.kind == c.HOST_KIND and e.involved_object.name == host
    ]


def _clear(api: client.ApiClient, host: str) -> None:
    """Cancel the drain and uncordon (the CRD refuses an uncordon while a drain is set)."""
    patch_host(api, host, {"spec": {"drain": None}})
    patch_host(api, host, {"spec": {"unschedulable": False}})
    eventually(lambda: not _drain(api, host), timeout=30, what=f"{host}'s drain status cleared")


@pytest.fixture(scope="module")
def guests(fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str) -> Iterator[str]:
    """`a` and `b` running on the first host; `stay` (evictionStrategy None) and `p`
    (PowerOff) on the second."""
    first, second = lab.hosts[0].name, lab.hosts[1].name
    docs: list[dict[str, Any]] = []
    for name, host, strategy in (
        ("a", first, None),
        ("b", first, None),
        ("stay", second, "None"),
        ("p", second, "PowerOff"),
    ):
        # `p`'s user chose a hard power-off: the drain powers it off as the user would.
        vm, lm = pair(ns, name, vm_spec={"powerOffMode": "Hard"} if name == "p" else None)
        lm["metadata"]["labels"][c.HOST_LABEL] = host
        lm["spec"]["host"] = host
        if strategy is not None:
            lm["spec"]["evictionStrategy"] = strategy
        docs += [vm, lm]
    create(api_client, docs)
    try:
        for name in (*MACHINES, "stay", "p"):
            wait_ready(api_client, ns, name, what=f"{name} Ready")
        yield ns
    finally:
        for host in (first, second):
            reset_host(api_client, host)
        delete_migrations(api_client, ns)


def test_kubectl_vm_drain_of_a_missing_host_exits_1(fleet: Fleet, lab: LabInfo) -> None:
    done = _plugin(lab, "no-such-host", timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "there is no LibvirtHost 'no-such-host'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_drain_without_the_cordon_is_refused(
    fleet: Fleet, lab: LabInfo, api_client: client.ApiClient
) -> None:
    with pytest.raises(ApiException) as refused:
        patch_host(api_client, lab.hosts[0].name, {"spec": {"drain": {"dryRun": True}}})
    assert refused.value.status == 422
    assert "a drain needs the host cordoned" in str(refused.value.body)
    assert not _drain(api_client, lab.hosts[0].name)


def test_a_dry_run_publishes_the_plan_and_moves_nothing(
    guests: str, lab: LabInfo, api_client: client.ApiClient
) -> None:
    first, second = lab.hosts[0].name, lab.hosts[1].name
    done = _plugin(lab, first, "--dry-run", "--timeout", "60")
    assert done.returncode == 0, (done.stdout, done.stderr)
    for name in MACHINES:
        assert f"  {guests}/{name} (LiveMigrate, Pending): -> {second}" in done.stdout, done.stdout
    drain = _drain(api_client, first)
    assert drain["phase"] == c.DRAIN_PHASE_PLANNED, drain
    assert drain["message"] == "plan: 2 of 2 to migrate", drain
    assert {(m["name"], m.get("target")) for m in drain["machines"]} == {
        ("a", second),
        ("b", second),
    }
    host = host_object(api_client, first) or {}
    assert host["spec"]["unschedulable"] is True
    drained = next(x for x in host["status"]["conditions"] if x["type"] == "Drained")
    assert (drained["status"], drained["reason"]) == ("False", c.DRAIN_REASON_DRY_RUN)
    # Nothing moved: no migration, every machine where it was, on a few more passes too.
    eventually(
        lambda: c.DRAIN_REASON_DRY_RUN in _host_events(api_client, first),
        timeout=30,
        what="the dry run's Event",
    )
    assert _drain_migrations(api_client, guests, first) == []
    assert all(_host_of(api_client, guests, name) == first for name in MACHINES)
    cancelled = _plugin(lab, first, "--cancel", timeout=60)
    assert cancelled.returncode == 0, (cancelled.stdout, cancelled.stderr)
    eventually(lambda: not _drain(api_client, first), timeout=30, what="the plan withdrawn")
    assert (host_object(api_client, first) or {})["spec"]["unschedulable"] is True
    assert _drain_migrations(api_client, guests, first) == []
    patch_host(api_client, first, {"spec": {"unschedulable": False}})


def test_a_drain_moves_both_running_machines_and_the_host_reports_drained(
    guests: str, lab: LabInfo, api_client: client.ApiClient
) -> None:
    first, second = lab.hosts[0].name, lab.hosts[1].name
    done = _plugin(lab, first, "--wait", "--timeout", "240")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "cordoned and draining" in done.stdout
    assert done.stdout.splitlines()[-1] == f"{c.DRAIN_PHASE_DRAINED}: 2 of 2 moved", done.stdout
    for name in MACHINES:
        assert _host_of(api_client, guests, name) == second
    drain = _drain(api_client, first)
    assert drain["phase"] == c.DRAIN_PHASE_DRAINED, drain
    assert drain["counts"]["moved"] == 2, drain
    moves = _drain_migrations(api_client, guests, first)
    assert sorted(m["metadata"]["name"] for m in moves) == [
        f"drain-{drain['id']}-1-a",
        f"drain-{drain['id']}-1-b",
    ]
    assert {m["status"]["phase"] for m in moves} == {c.MIGRATION_PHASE_SUCCEEDED}
    host = host_object(api_client, first) or {}
    drained = next(x for x in host["status"]["conditions"] if x["type"] == "Drained")
    assert (drained["status"], drained["reason"]) == ("True", c.DRAIN_REASON_DRAINED)
    events = _host_events(api_client, first)
    for reason in (
        c.DRAIN_REASON_PLANNING,
        c.EVENT_DRAIN_MIGRATION_CREATED,
        c.DRAIN_REASON_DRAINED,
    ):
        assert reason in events, events
    for name in MACHINES:
        wait_ready(api_client, guests, name, what=f"{name} Ready on {second}")
    _clear(api_client, first)


def test_a_machine_with_eviction_strategy_none_blocks_the_drain_naming_it(
    guests: str, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """`a` and `b` move back, `p` is powered off and stays, `stay` blocks the drain."""
    first, second = lab.hosts[0].name, lab.hosts[1].name
    done = _plugin(lab, second, "--wait", "--timeout", "240")
    assert done.returncode == 1, (done.stdout, done.stderr)
    reason = f"{guests}/stay (evictionStrategy None: it stays, and the host is not drained)"
    assert done.stdout.splitlines()[-1] == (
        f"{c.DRAIN_PHASE_BLOCKED}: 2 of 4 moved, 1 powered off, 1 blocked: {reason}"
    ), done.stdout
    # The plan as the plugin first read it: `p` Pending, or PoweringOff if the moves began.
    assert any(
        line.startswith(f"  {guests}/p (PowerOff, ")
        and line.endswith("): power off (stays on the host)")
        for line in done.stdout.splitlines()
    ), done.stdout
    powered = get(api_client, guests, "p", vm=False) or {}
    assert powered["spec"]["host"] == second
    assert powered["status"]["powerState"] == "PoweredOff"
    vm = get(api_client, guests, "p", vm=True) or {}
    assert vm["spec"]["powerState"] == "PoweredOff"
    assert f"  {guests}/stay (None, Blocked): blocked: evictionStrategy None" in done.stdout
    drain = _drain(api_client, second)
    assert drain["phase"] == c.DRAIN_PHASE_BLOCKED, drain
    stay = next(m for m in drain["machines"] if m["name"] == "stay")
    assert stay["state"] == c.DRAIN_MACHINE_BLOCKED, stay
    p = next(m for m in drain["machines"] if m["name"] == "p")
    assert p["state"] == c.DRAIN_MACHINE_POWERED_OFF, p
    for name in MACHINES:
        assert _host_of(api_client, guests, name) == first
    assert _host_of(api_client, guests, "stay") == second
    host = host_object(api_client, second) or {}
    drained = next(x for x in host["status"]["conditions"] if x["type"] == "Drained")
    assert (drained["status"], drained["reason"]) == ("False", c.DRAIN_REASON_BLOCKED)
    assert reason in drained["message"]
    events = _host_events(api_client, second)
    assert c.EVENT_DRAIN_MACHINE_BLOCKED in events, events
    assert c.EVENT_DRAIN_POWER_OFF in events, events
    assert c.DRAIN_REASON_BLOCKED in events, events
    _clear(api_client, second)


def test_cancelling_with_abort_stops_the_drains_copies_and_the_machines_stay(
    guests: str, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """`a` and `b`, slowed to 1 MiB/s, are being copied off the first host when the drain is
    cancelled with --abort: the daemon deletes the drain's migrations, each copy is aborted, and
    both machines keep running where they were; the host stays cordoned."""
    first = lab.hosts[0].name
    conn = libvirt.open(lab.hosts[0].uri)
    try:
        doms = []
        for name in MACHINES:
            machine = get(api_client, guests, name, vm=False) or {}
            assert machine["spec"]["host"] == first
            doms.append(conn.lookupByUUIDString(machine["metadata"]["uid"]))
        for dom in doms:
            dom.migrateSetMaxSpeed(1, 0)
        started = _plugin(lab, first, "--timeout", "60")
        assert started.returncode == 0, (started.stdout, started.stderr)
        drain_id = _drain(api_client, first)["id"]
        mine = f"drain-{drain_id}-"

        def copying() -> bool:
            return any(
                ((m.get("status") or {}).get("progress") or {}).get("memoryProcessed")
                for m in _drain_migrations(api_client, guests, first)
                if m["metadata"]["name"].startswith(mine)
            )

        eventually(copying, timeout=120, what="a drain's slowed copy under way")
        cancelled = _plugin(lab, first, "--cancel", "--abort", timeout=120)
        assert cancelled.returncode == 0, (cancelled.stdout, cancelled.stderr)
        assert "running migrations aborted" in cancelled.stdout
        eventually(
            lambda: (
                not [
                    m
                    for m in _drain_migrations(api_client, guests, first)
                    if m["metadata"]["name"].startswith(mine)
                ]
            ),
            timeout=120,
            what="the drain's aborted migrations gone",
        )
        for dom in doms:
            assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
            dom.migrateSetMaxSpeed(0, 0)
    finally:
        conn.close()
    for name in MACHINES:
        assert _host_of(api_client, guests, name) == first
    assert not _drain(api_client, first)
    host = host_object(api_client, first) or {}
    assert host["spec"]["unschedulable"] is True
    assert "Drained" not in [x["type"] for x in host["status"]["conditions"]]
    assert c.EVENT_DRAIN_CANCELLED in _host_events(api_client, first)
    for name in MACHINES:
        wait_ready(api_client, guests, name, what=f"{name} Ready on {first}")
    patch_host(api_client, first, {"spec": {"unschedulable": False}})


def test_moves_that_keep_failing_are_tried_three_times_then_the_drain_is_blocked(
    guests: str, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """The first host's migration Secret is gone, so every copy off it fails before anything is
    sent (`MigrationCredentialsMissing`): the drain retries each machine up to
    `DRAIN_MAX_ATTEMPTS` times, then ends Blocked naming both machines and the last failure,
    which both keep running on the first host; the second host holds nothing of them."""
    first, second = lab.hosts[0], lab.hosts[1]
    delete_migration_secret(api_client, first)
    try:
        done = _plugin(lab, first.name, "--wait", "--timeout", "240")
        assert done.returncode == 1, (done.stdout, done.stderr)
        last = done.stdout.splitlines()[-1]
        assert last.startswith(f"{c.DRAIN_PHASE_BLOCKED}: 0 of 2 moved, 2 blocked: "), last
        drain = _drain(api_client, first.name)
        assert drain["phase"] == c.DRAIN_PHASE_BLOCKED, drain
        attempts = c.DRAIN_MAX_ATTEMPTS
        for entry in drain["machines"]:
            assert entry["state"] == c.DRAIN_MACHINE_BLOCKED, entry
            assert entry["attempts"] == attempts, entry
            assert entry["reason"].startswith(
                f"{attempts} migrations failed, the last {c.MIGRATION_REASON_CREDENTIALS_MISSING}"
            ), entry
            assert f"{guests}/{entry['name']} ({entry['reason'][:40]}" in last, last
        moves = _drain_migrations(api_client, guests, first.name)
        mine = [m for m in moves if m["metadata"]["name"].startswith(f"drain-{drain['id']}-")]
        assert sorted(m["metadata"]["name"] for m in mine) == sorted(
            f"drain-{drain['id']}-{n}-{name}" for n in range(1, attempts + 1) for name in MACHINES
        )
        for move in mine:
            status = move["status"]
            succeeded = next(x for x in status["conditions"] if x["type"] == "Succeeded")
            assert (status["phase"], succeeded["reason"]) == (
                c.MIGRATION_PHASE_FAILED,
                c.MIGRATION_REASON_CREDENTIALS_MISSING,
            ), status
            assert "nothing was copied" in succeeded["message"], succeeded
        events = _host_events(api_client, first.name)
        assert events.count(c.EVENT_DRAIN_RETRY) >= 2 * (attempts - 1), events
        assert c.EVENT_DRAIN_MACHINE_BLOCKED in events, events
        for name in MACHINES:
            assert _host_of(api_client, guests, name) == first.name
        there = libvirt.open(second.uri)
        try:
            for name in MACHINES:
                machine = get(api_client, guests, name, vm=False) or {}
                with pytest.raises(libvirt.libvirtError):
                    there.lookupByUUIDString(machine["metadata"]["uid"])
                assert pool_volumes(there, lab, domain_of(api_client, guests, name)) == []
        finally:
            there.close()
    finally:
        put_migration_secret(api_client, first)
        _clear(api_client, first.name)
    for name in MACHINES:
        wait_ready(api_client, guests, name, what=f"{name} Ready on {first.name}")
