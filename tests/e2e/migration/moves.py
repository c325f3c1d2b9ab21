"""LibvirtMigrations as this directory's tests wait for them, and what a lab host's pool holds of a
machine (shared by test_migration.py and test_migration_limits.py). Making, reading and deleting
them is tests/support/migrations.py's, which bench/migration_bench.py shares."""

from __future__ import annotations

from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from tests.support.lab_access import LabHost, LabInfo
from tests.support.migrations import (
    PLURAL,
    create_migration,
    delete_migrations,
    migration,
    read_migration,
)
from tests.support.waiting import eventually

__all__ = [
    "PLURAL",
    "assert_moved_whole",
    "create_migration",
    "delete_migrations",
    "migration",
    "migration_events",
    "pool_volumes",
    "read_migration",
    "wait_ended",
]


def wait_ended(
    api: client.ApiClient, ns: str, name: str, *, timeout: float = 240
) -> dict[str, Any]:
    """The migration once its phase is Succeeded, Failed or Cancelled."""
    ends = {c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED}
    found: dict[str, Any] = eventually(
        lambda: (
            (obj := read_migration(api, ns, name)) is not None
            and (obj.get("status") or {}).get("phase") in ends
            and obj
        ),
        timeout=timeout,
        interval=0.5,
        what=f"migration {ns}/{name} to end",
    )
    return found


def migration_events(api: client.ApiClient, ns: str, name: str) -> list[str]:
    """The reasons of the Events on the migration."""
    return [
        str(e.reason)
        for e in client.CoreV1Api(api).list_namespaced_event(ns).items
        if e.involved_object.kind == c.MIGRATION_KIND and e.involved_object.name == name
    ]


def pool_volumes(conn: libvirt.virConnect, lab: LabInfo, prefix: str) -> list[str]:
    """The lab pool's volumes whose names start with `prefix` (a machine's domain name)."""
    pool = conn.storagePoolLookupByName(lab.pool)
    pool.refresh(0)
    return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]


def assert_moved_whole(
    lab: LabInfo, source: LabHost, target: LabHost, uid: str, domain: str
) -> None:
    """After a successful move: the source has no domain and no volume of the machine left, the
    target holds its volumes."""
    conn = libvirt.open(source.uri)
    try:
        with pytest.raises(libvirt.libvirtError) as missing:
            conn.lookupByUUIDString(uid)
        assert missing.value.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
        assert pool_volumes(conn, lab, domain) == []
    finally:
        conn.close()
    conn = libvirt.open(target.uri)
    try:
        assert pool_volumes(conn, lab, domain), f"{target.name} holds none of the machine's volumes"
    finally:
        conn.close()
