"""`LibvirtMachineClass`: the sizing profile that a VM's `instanceType.name` names.

vCPUs and memory, plus the CPU model libvirt should present, an optional guest topology and huge
pages. It does not place machines or reserve capacity; the host either runs the domain or reports.
"""

from __future__ import annotations

import enum
from typing import Self

from pydantic import Field, field_validator, model_validator

from catalog.base import KubeModel, ObjectMeta
from catalog.quantity import QUANTITY_SCHEMA, parse_quantity

__all__ = [
    "CpuMode",
    "CpuSpec",
    "CpuTopology",
    "HugePages",
    "LibvirtMachineClass",
    "LibvirtMachineClassSpec",
]

# Page sizes x86_64 hosts offer; anything else cannot back guest memory there.
HUGEPAGE_SIZES = {2 * 2**20, 2**30}


class CpuMode(enum.StrEnum):
    """How the guest CPU is presented. HostPassthrough needs KVM; Maximum suits emulation (TCG)."""

    HOST_MODEL = "HostModel"
    HOST_PASSTHROUGH = "HostPassthrough"
    MAXIMUM = "Maximum"
    CUSTOM = "Custom"


class CpuSpec(KubeModel):
    mode: CpuMode = Field(description="HostModel, HostPassthrough, Maximum or Custom.")
    model: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Named CPU model (for example Skylake-Server); required with mode Custom.",
    )

    @model_validator(mode="after")
    def _model_iff_custom(self) -> Self:
        if (self.mode is CpuMode.CUSTOM) != (self.model is not None):
            raise ValueError("cpu.model is required with mode Custom and allowed only with it")
        return self


class CpuTopology(KubeModel):
    sockets: int = Field(ge=1, le=64, description="Sockets.")
    cores: int = Field(ge=1, le=256, description="Cores per socket.")
    threads: int = Field(ge=1, le=8, description="Threads per core.")

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores * self.threads


class HugePages(KubeModel):
    page_size: str = Field(
        json_schema_extra=QUANTITY_SCHEMA,
        description="Huge page size backing guest memory: 2Mi or 1Gi.",
    )

    @field_validator("page_size")
    @classmethod
    def _known_size(cls, value: str) -> str:
        if parse_quantity(value) not in HUGEPAGE_SIZES:
            raise ValueError("hugepages.pageSize must be 2Mi or 1Gi")
        return value


class LibvirtMachineClassSpec(KubeModel):
    """vCPUs and memory, with the CPU model, topology and memory backing to present."""

    cpus: int = Field(ge=1, le=1024, description="Number of vCPUs.")
    memory: str = Field(
        json_schema_extra=QUANTITY_SCHEMA,
        description="Guest memory as a Kubernetes quantity, e.g. 2Gi.",
    )
    cpu: CpuSpec | None = Field(
        default=None,
        description="CPU mode; unset means HostModel under KVM and qemu's default when emulated.",
    )
    topology: CpuTopology | None = Field(
        default=None, description="Guest CPU topology; sockets*cores*threads must equal cpus."
    )
    hugepages: HugePages | None = Field(default=None, description="Back memory with huge pages.")

    @field_validator("memory")
    @classmethod
    def _memory_is_a_quantity(cls, value: str) -> str:
        if parse_quantity(value) < 2**20:
            raise ValueError("memory must be at least 1Mi")
        return value

    @model_validator(mode="after")
    def _topology_matches(self) -> Self:
        if self.topology is not None and self.topology.vcpus != self.cpus:
            raise ValueError(f"topology gives {self.topology.vcpus} vCPUs but cpus is {self.cpus}")
        return self


class LibvirtMachineClass(KubeModel):
    metadata: ObjectMeta
    spec: LibvirtMachineClassSpec
