"""Migration calls of the libvirt adapter: the migratable definition, the peer-to-peer live
migration with storage, its job statistics while it runs and after, and aborting it.

The flags are the ones the lab established (docs/migration.md, "Foundations"): live,
peer-to-peer (the source's libvirtd opens the target's itself), the definition made persistent
on the target and removed from the source, only each disk's top image copied (the target's chain
is created first), and qemu's stream and the disk mirror encrypted (TLS).
"""

from __future__ import annotations

from typing import Any

import libvirt

from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import is_missing

__all__ = ["MIGRATION_FLAGS", "LibvirtMigrations", "migration_flags"]

MIGRATION_FLAGS = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    | libvirt.VIR_MIGRATE_NON_SHARED_INC
    | libvirt.VIR_MIGRATE_TLS
)


def migration_flags(*, auto_converge: bool = False) -> int:
    """The flags of every migration, with VIR_MIGRATE_AUTO_CONVERGE when the spec asks."""
    return int(MIGRATION_FLAGS) | (int(libvirt.VIR_MIGRATE_AUTO_CONVERGE) if auto_converge else 0)


def _ints(stats: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in stats.items() if isinstance(v, int)}


class LibvirtMigrations(LibvirtConnection):
    def migratable_xml(self, uuid: str, *, inactive: bool = False) -> str:
        """The running domain's definition (or, `inactive`, its persistent one) as a target
        may take it."""
        flags = libvirt.VIR_DOMAIN_XML_MIGRATABLE | libvirt.VIR_DOMAIN_XML_SECURE
        if inactive:
            flags |= libvirt.VIR_DOMAIN_XML_INACTIVE
        return self._call(lambda c: str(self._domain(c, uuid).XMLDesc(flags)))

    def migrate(
        self, uuid: str, *, uri: str, dest_xml: str, persist_xml: str, auto_converge: bool = False
    ) -> None:
        """Move the running domain to the libvirtd at `uri`; blocks until the job ends."""
        params = {
            libvirt.VIR_MIGRATE_PARAM_DEST_XML: dest_xml,
            libvirt.VIR_MIGRATE_PARAM_PERSIST_XML: persist_xml,
        }
        flags = migration_flags(auto_converge=auto_converge)
        self._call(lambda c: self._domain(c, uuid).migrateToURI3(uri, params, flags))

    def job_stats(self, uuid: str) -> dict[str, int] | None:
        """The domain's running job's statistics; None when none runs or the domain is gone."""

        def stats(conn: libvirt.virConnect) -> dict[str, int] | None:
            try:
                found = _ints(self._domain(conn, uuid).jobStats())
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return None
                raise
            if found.get("type", libvirt.VIR_DOMAIN_JOB_NONE) == libvirt.VIR_DOMAIN_JOB_NONE:
                return None
            return found

        return self._call(stats)

    def completed_job_stats(self, uuid: str) -> dict[str, int] | None:
        """The record of the domain's last finished job (on a migration's target: time,
        downtime, memory); None when the domain is not here."""

        def stats(conn: libvirt.virConnect) -> dict[str, int] | None:
            try:
                dom = self._domain(conn, uuid)
                return _ints(dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED))
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return None
                raise

        return self._call(stats)

    def abort_job(self, uuid: str) -> None:
        """Abort the domain's running job (a migration: the guest keeps running here)."""

        def abort(conn: libvirt.virConnect) -> None:
            try:
                self._domain(conn, uuid).abortJob()
            except libvirt.libvirtError as err:
                if (
                    not is_missing(err)
                    and err.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID
                ):
                    raise

        self._call(abort)
