"""The pydantic base shared by every catalog model: Kubernetes spelling, immutable values.

Fields are snake_case in Python and camelCase on the wire, as Kubernetes APIs are. Unknown fields
are ignored rather than refused: the API server already prunes them through the structural schema,
and an older daemon must keep reading objects written for a newer schema.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["KubeModel", "ObjectMeta", "ResourceName", "VolumeName"]


class KubeModel(BaseModel):
    """Immutable, camelCase on the wire, validated on construction."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
        use_enum_values=False,
    )


# A DNS subdomain (RFC 1123), as Kubernetes object names are.
ResourceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]

# A libvirt pool, network, bridge or volume name we are willing to pass on: no path separators,
# no leading dot (so never `.` or `..`), nothing a shell or an XML attribute would misread.
VolumeName = Annotated[
    str,
    Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$"),
]


class ObjectMeta(KubeModel):
    """The part of Kubernetes object metadata the catalog needs: the name it is looked up by."""

    name: ResourceName
    uid: str | None = None
    generation: int | None = None
