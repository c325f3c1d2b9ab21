"""Migrations within limits, and an end for a copy that takes too long: with one outbound
migration per host, a second migration from the same host waits (Pending, WaitingForHostSlot)
until the first ends, then runs (with auto-converge); a copy slowed past its per-GiB deadline is
aborted on the source, ends Failed (DeadlineExceeded, with the figures), the machine keeps
running on its source and the target deletes what it prepared; with one migration per cluster,
two asked for from both hosts at once run one after the other.

Why: issue 27's limits and ends (docs/migration.md, "Limits and ends"), on the real lab: two
daemons, libvirt's TLS migration between two extra hosts, a copy slowed with
`migrateSetMaxSpeed` on the source's domain as the cancel test does.

Cost: about 115-130 s measured (two busybox guests booted, ~40 s under TCG; two migrations in
~17 s, the first slowed for a few seconds; a slowed one aborted at its deadline, ~45 s; the
crossing moves ~14 s: 94 to 107 s for the module in three runs).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from tests.e2e.migration.moves import (
    create_migration,
    delete_migrations,
    migration,
    migration_events,
    pool_volumes,
    read_migration,
    wait_ended,
)
from tests.support.daemons import Fleet
from tests.support.factories import pair
from tests.support.kube import create, domain_of, get, wait_ready
from tests.support.lab_access import LabHost, LabInfo
from tests.support.waiting import eventually

# 160 s per GiB: a busybox guest's ~257 MiB of memory is due within ~40 s; its unslowed copies
# take 3-10 s here.
DEADLINE_PER_GIB = 160
MIGRATION_DAEMON_ARGS = (
    "--migration-max-per-host=1",
    "--migration-max-per-cluster=1",
    f"--migration-deadline-per-gib={DEADLINE_PER_GIB}",
)
UNLIMITED_MIB_S = 1 << 20


@dataclass(frozen=True)
class Pair:
    ns: str
    source: LabHost
    target: LabHost
    uids: dict[str, str]


@pytest.fixture(scope="module")
def machines(fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str) -> Iterator[Pair]:
    """Two running busybox machines, `one` and `two`, on the first host."""
    source, target = lab.hosts[0], lab.hosts[1]
    docs = []
    for name in ("one", "two"):
        vm, lm = pair(ns, name)
        lm["metadata"]["labels"][c.HOST_LABEL] = source.name
        lm["spec"]["host"] = source.name
        docs += [vm, lm]
    create(api_client, docs)
    try:
        uids = {}
        for name in ("one", "two"):
            wait_ready(api_client, ns, name, what=f"{name} Ready on its source")
            machine = get(api_client, ns, name, vm=False)
            assert machine is not None
            uids[name] = str(machine["metadata"]["uid"])
        yield Pair(ns=ns, source=source, target=target, uids=uids)
    finally:
        delete_migrations(api_client, ns)


def _phase_and_reason(api: client.ApiClient, ns: str, name: str) -> tuple[str, str]:
    status = (read_migration(api, ns, name) or {}).get("status") or {}
    cond = next(
        (x for x in status.get("conditions") or [] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED),
        {},
    )
    return str(status.get("phase")), str(cond.get("reason"))


def test_a_second_migration_from_the_host_waits_for_the_slot_then_moves(
    machines: Pair, api_client: client.ApiClient
) -> None:
    ns = machines.ns
    first, second = "first-" + uuid.uuid4().hex[:6], "second-" + uuid.uuid4().hex[:6]
    conn = libvirt.open(machines.source.uri)
    try:
        dom = conn.lookupByUUIDString(machines.uids["one"])
        dom.migrateSetMaxSpeed(1, 0)
        create_migration(api_client, migration(ns, first, "one", machines.target.name))
        eventually(
            lambda: (
                ((read_migration(api_client, ns, first) or {}).get("status") or {})
                .get("progress", {})
                .get("memoryProcessed")
            ),
            timeout=120,
            what="the first, slowed copy under way",
        )
        create_migration(
            api_client,
            migration(ns, second, "two", machines.target.name, autoConverge=True),
        )
        eventually(
            lambda: (
                _phase_and_reason(api_client, ns, second)
                == (c.MIGRATION_PHASE_PENDING, c.MIGRATION_REASON_HOST_LIMIT)
            ),
            timeout=60,
            what="the second migration waiting for the host's slot",
        )
        waiting = read_migration(api_client, ns, second)
        assert waiting is not None
        cond = next(
            x
            for x in waiting["status"]["conditions"]
            if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED
        )
        assert f"{ns}/{first}" in cond["message"], cond
        assert "--migration-max-per-host" in cond["message"], cond
        assert c.MIGRATION_REASON_HOST_LIMIT in migration_events(api_client, ns, second)
        # Nothing was locked, prepared or copied for it meanwhile.
        assert "preparedVolumes" not in waiting["status"]
        assert "migration" not in (get(api_client, ns, "two", vm=False) or {})["status"]
        # The first copy at full speed again: it ends, and the second starts.
        dom.migrateSetMaxSpeed(UNLIMITED_MIB_S, 0)
    finally:
        conn.close()
    one = wait_ended(api_client, ns, first)["status"]
    two = wait_ended(api_client, ns, second)["status"]
    assert one["phase"] == c.MIGRATION_PHASE_SUCCEEDED, one
    assert two["phase"] == c.MIGRATION_PHASE_SUCCEEDED, two
    assert two["startTime"] >= one["completionTime"], (one, two)
    for name in ("one", "two"):
        machine = get(api_client, ns, name, vm=False)
        assert machine is not None
        assert machine["spec"]["host"] == machines.target.name
    conn = libvirt.open(machines.target.uri)
    try:
        for uid in machines.uids.values():
            assert conn.lookupByUUIDString(uid).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()


def test_a_copy_past_its_deadline_is_aborted_and_the_machine_stays_on_its_source(
    machines: Pair, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """`two`, now on the second host, back to the first at 1 MiB/s: ~100 MiB to send at that
    speed outlast the ~40 s its memory is given."""
    ns, here, there = machines.ns, machines.target, machines.source
    wait_ready(api_client, ns, "two", what="two Ready on the second host")
    name = "slow-" + uuid.uuid4().hex[:6]
    conn = libvirt.open(here.uri)
    try:
        dom = conn.lookupByUUIDString(machines.uids["two"])
        dom.migrateSetMaxSpeed(1, 0)
        create_migration(api_client, migration(ns, name, "two", there.name))
        status = wait_ended(api_client, ns, name, timeout=180)["status"]
        assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
        cond = next(x for x in status["conditions"] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED)
        assert cond["reason"] == c.MIGRATION_REASON_DEADLINE_EXCEEDED, cond
        assert f"{DEADLINE_PER_GIB} s per GiB" in cond["message"], cond
        assert "MiB of memory" in cond["message"], cond
        assert f"keeps running on host {here.name}" in cond["message"], cond
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        dom.migrateSetMaxSpeed(UNLIMITED_MIB_S, 0)
    finally:
        conn.close()
    eventually(
        lambda: ((read_migration(api_client, ns, name) or {}).get("status") or {}).get(
            "targetCleaned"
        ),
        timeout=60,
        what="the target's prepared volumes deleted",
    )
    said = migration_events(api_client, ns, name)
    assert c.MIGRATION_REASON_DEADLINE_EXCEEDED in said, said
    assert c.EVENT_MIGRATION_TARGET_CLEANED in said, said
    other = libvirt.open(there.uri)
    try:
        with pytest.raises(libvirt.libvirtError):
            other.lookupByUUIDString(machines.uids["two"])
        assert pool_volumes(other, lab, domain_of(api_client, ns, "two")) == []
    finally:
        other.close()
    eventually(
        lambda: (
            "migration" not in ((get(api_client, ns, "two", vm=False) or {}).get("status") or {})
        ),
        timeout=30,
        what="the machine's lock released",
    )
    machine = get(api_client, ns, "two", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == here.name
    wait_ready(api_client, ns, "two", what="two Ready on its source still")


def test_two_hosts_accepting_at_once_start_no_more_than_the_clusters_limit(
    machines: Pair, api_client: client.ApiClient
) -> None:
    """With `--migration-max-per-cluster=1`, `one` moves from the first host and `two` from the
    second, both asked for in the same instant: the two daemons accept at once, each claims the
    cluster's slot and counts again, so one copy runs and the other waits for it
    (WaitingForClusterSlot), then runs. Their start-to-end intervals never overlap."""
    ns, first, second = machines.ns, machines.source, machines.target
    back = "back-" + uuid.uuid4().hex[:6]
    create_migration(api_client, migration(ns, back, "one", first.name))
    assert wait_ended(api_client, ns, back)["status"]["phase"] == c.MIGRATION_PHASE_SUCCEEDED
    for name in ("one", "two"):
        wait_ready(api_client, ns, name, what=f"{name} Ready before the crossing moves")
    moves = {
        "one": ("cross-one-" + uuid.uuid4().hex[:6], second.name),
        "two": ("cross-two-" + uuid.uuid4().hex[:6], first.name),
    }
    bodies = [migration(ns, mig, machine, target) for machine, (mig, target) in moves.items()]
    for body in bodies:
        create_migration(api_client, body)
    ended = {mig: wait_ended(api_client, ns, mig)["status"] for mig, _ in moves.values()}
    for status in ended.values():
        assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
        assert "slotClaimedAt" not in status, status
    earlier, later = sorted(ended, key=lambda mig: str(ended[mig]["startTime"]))
    assert str(ended[later]["startTime"]) >= str(ended[earlier]["completionTime"]), ended
    # The later one waited for the slot. The earlier may have been told so too: when both
    # claimed at once, both withdrew and tried again apart.
    said = migration_events(api_client, ns, later)
    assert c.MIGRATION_REASON_CLUSTER_LIMIT in said, said
    for machine, (_mig, target) in moves.items():
        assert (get(api_client, ns, machine, vm=False) or {})["spec"]["host"] == target
