"""What every area of the resolver shares: its inputs, the problems it collects, and the result."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import ValidationError

from catalog.lookup import Catalog
from generic.api import ObjectReference, VirtualMachineSpec
from generic.constants import REASON_UNSUPPORTED_BY_PROVIDER
from generic.formats import validation_details
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.constants import GROUP, REASON_INVALID_SPEC
from libvirt_provider.driver.types import NetworkDhcp
from libvirt_provider.naming import domain_name
from libvirt_provider.resolve.refusals import OTHER_REFERENCE
from libvirt_provider.resolved import ResolvedMachine

__all__ = [
    "LM",
    "VM",
    "Context",
    "HostOffer",
    "Problem",
    "Resolution",
    "SecretData",
    "check_reference",
    "validation_problems",
]

VM = "VirtualMachine"
LM = "LibvirtMachine"

SecretData = Mapping[str, Mapping[str, bytes]]
"""Secret name -> key -> decoded value, for the Secrets the VM references (same namespace)."""


class HostOffer(Protocol):
    """What the resolver needs to know about the host it resolves for."""

    @property
    def hostname(self) -> str: ...
    @property
    def domain_types(self) -> AbstractSet[str]: ...
    @property
    def pools(self) -> AbstractSet[str]: ...
    @property
    def networks(self) -> AbstractSet[str]: ...
    @property
    def console_log_dir(self) -> str | None: ...
    @property
    def zone(self) -> str | None:
        """The host's zone (its LibvirtHost's topology.kubernetes.io/zone label), if any."""
        ...


@dataclass(frozen=True)
class Problem:
    """Why the machine cannot be resolved, and the condition reason that says so."""

    reason: str
    field: str
    message: str
    missing: str | None = None
    """For NotAvailableOnHost: what the host lacks ("network prod"), so placement can count
    hosts by it."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Resolution:
    """Either `machine` (and no problems) or the problems (and no machine)."""

    machine: ResolvedMachine | None
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.machine is not None

    def message(self) -> str:
        """All problems in one readable paragraph, for a condition message or an Event."""
        return "; ".join(str(p) for p in self.problems)


def validation_problems(error: ValidationError, where: str) -> list[Problem]:
    return [
        Problem(REASON_INVALID_SPEC, path, message)
        for path, message in validation_details(error, where)
    ]


@dataclass
class Context:
    """The inputs of one resolution and the problems found so far."""

    vm_name: str
    vm: VirtualMachineSpec
    machine: LibvirtMachine
    catalog: Catalog
    secrets: SecretData
    host: HostOffer
    domain_name: str | None = None
    """The name the machine's domain already has, when it has one (see naming)."""
    existing_macs: AbstractSet[str] = frozenset()
    """The MACs in the machine's domain definition, when it has one: a NIC keeps its MAC."""
    seed_key: str = ""
    """The key of the cloud-init digest: the VirtualMachine's uid. Empty only where the digest
    is never written (placement's resolutions, tests)."""
    existing_seed_digest: str | None = None
    """The cloud-init digest in the machine's domain definition, when it has one."""
    existing_volumes: AbstractSet[tuple[str, str]] = frozenset()
    """(pool, volume) of the disks in the machine's domain definition, when it has one: a clone's
    disk already made no longer waits on its snapshot's state (a snapshot being deleted keeps its
    copies while clones use them)."""
    unreadable_secrets: frozenset[str] = frozenset()
    """Secrets in the machine's namespace the daemon may not read (not opted in there)."""
    secrets_deferred: bool = False
    """Placement resolves without Secrets (it never reads them): their checks wait for the host."""
    public_addresses: Mapping[str, str] | None = None
    """Interface name -> the public address the machine holds for it (its claims); None where
    claims are not looked at (placement)."""
    network_dhcp: Mapping[str, NetworkDhcp | None] | None = None
    """The DHCP of this host's libvirt networks that public addresses use, by libvirt network
    name (None: serves none); None where the host is not asked (placement)."""
    problems: list[Problem] = field(default_factory=list)

    def problem(self, reason: str, where: str, message: str, *, missing: str | None = None) -> None:
        self.problems.append(Problem(reason, where, message, missing))

    def unsupported(self, where: str, message: str) -> None:
        self.problem(REASON_UNSUPPORTED_BY_PROVIDER, where, message)

    @property
    def domain(self) -> str:
        if self.domain_name is not None:
            return self.domain_name
        meta = self.machine.metadata
        return domain_name(meta.namespace, meta.name, meta.uid)


def check_reference(ctx: Context, ref: ObjectReference, kind: str, where: str) -> bool:
    if ref.api_group == GROUP and ref.kind == kind:
        return True
    ctx.unsupported(
        where,
        OTHER_REFERENCE.format(
            kind=kind, group=GROUP, other_kind=ref.kind, other_group=ref.api_group
        ),
    )
    return False
