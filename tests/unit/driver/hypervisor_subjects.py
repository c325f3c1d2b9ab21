"""The two implementations the hypervisor contract runs against, and what drives them from outside.

`test_hypervisor_contract.py` asks the same questions of the in-memory double
(`tests.doubles.hypervisor.FakeHypervisor`) and of the real adapter (`LibvirtHypervisor`) on
libvirt's in-process test driver. Each `Subject` here gives a fresh, independent hypervisor with the
same host: two storage pools and one network, no domain. For the real adapter that is a node
definition file of its own (`test:///<file>.xml`): every connection to it starts from the file, in
memory, so no test sees another's domains or volumes.

A subject also does what the interface cannot (a guest or an admin pausing a domain) and reads
what the interface does not report (the autostart flag), each in its implementation's own way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lxml import etree
from lxml.builder import E

from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.types import HostFacts, NetworkDhcp
from libvirt_provider.errors import PermanentError, ProviderError, StateConflictError
from tests.doubles.hypervisor import FakeHypervisor

__all__ = [
    "NETWORK",
    "OTHER_POOL",
    "POOL",
    "POOL_BYTES",
    "DoubleSubject",
    "LibvirtSubject",
    "Subject",
]

POOL = "default"
OTHER_POOL = "images"
NETWORK = "default"
# libvirt's test driver gives every pool 100 GiB, whatever the node file says.
POOL_BYTES = 100 * 2**30
# Folders the test driver's pools claim; it keeps their volumes in memory and never looks there.
_POOL_PATHS = {POOL: "/vmapi-contract/default", OTHER_POOL: "/vmapi-contract/images"}


class Subject(Protocol):
    """One implementation of `Hypervisor` under the contract, on a host of its own."""

    @property
    def kind(self) -> str:
        """`double` or `libvirt`: the test ids."""
        ...

    @property
    def hv(self) -> Hypervisor: ...

    @property
    def wrong_state_error(self) -> type[ProviderError]:
        """What a refusal to start a domain that is not shut off, or to shut down or resume one
        that is not running or paused, raises.

        qemu reports these as an invalid operation (`VIR_ERR_OPERATION_INVALID`, translated to
        StateConflictError), and the double follows qemu; libvirt's test driver reports them as
        internal errors (`VIR_ERR_INTERNAL_ERROR`, PermanentError).
        """
        ...

    @property
    def volume_exists_error(self) -> type[ProviderError]:
        """What creating a volume under a name its pool already holds raises.

        libvirt's storage driver reports `VIR_ERR_STORAGE_VOL_EXIST` (StateConflictError), and the
        double follows it; the test driver reports a failed operation (`VIR_ERR_OPERATION_FAILED`,
        PermanentError).
        """
        ...

    def pause(self, uuid: str) -> None:
        """Pause a running domain from outside the controller (`virsh suspend`)."""
        ...

    def autostart(self, uuid: str) -> bool:
        """Whether the domain is marked to start with libvirtd."""
        ...

    def close(self) -> None: ...


@dataclass
class DoubleSubject:
    kind: str = "double"
    fake: FakeHypervisor = field(
        default_factory=lambda: FakeHypervisor(
            facts=HostFacts(
                hostname="contract-host",
                arch="x86_64",
                domain_types=frozenset({"test"}),
                pools=frozenset({POOL, OTHER_POOL}),
                networks=frozenset({NETWORK}),
            ),
            pool_free={POOL: POOL_BYTES, OTHER_POOL: POOL_BYTES},
            dhcp={
                NETWORK: NetworkDhcp(
                    network=NETWORK,
                    ranges=(("192.168.122.2", "192.168.122.254"),),
                    subnets=("192.168.122.0/24",),
                )
            },
        )
    )
    wrong_state_error: type[ProviderError] = StateConflictError
    volume_exists_error: type[ProviderError] = StateConflictError

    @property
    def hv(self) -> Hypervisor:
        return self.fake

    def pause(self, uuid: str) -> None:
        self.fake.pause(uuid)

    def autostart(self, uuid: str) -> bool:
        return self.fake.domains[uuid].autostart

    def close(self) -> None:
        pass


class LibvirtSubject:
    kind = "libvirt"
    wrong_state_error: type[ProviderError] = PermanentError
    volume_exists_error: type[ProviderError] = PermanentError

    def __init__(self, folder: Path) -> None:
        node = folder / "node.xml"
        node.write_bytes(etree.tostring(_node(), pretty_print=True))
        self.adapter = LibvirtHypervisor(f"test://{node}")

    @property
    def hv(self) -> Hypervisor:
        return self.adapter

    def pause(self, uuid: str) -> None:
        # The adapter's own connection: a second one to the same file would be another host.
        self.adapter._connection().lookupByUUIDString(uuid).suspend()

    def autostart(self, uuid: str) -> bool:
        return bool(self.adapter._connection().lookupByUUIDString(uuid).autostart())

    def close(self) -> None:
        self.adapter.close()


def _node() -> etree._Element:
    """The test driver's host: the pools and the network, without the default node's domain."""
    pools = [
        E.pool(E.name(name), E.target(E.path(path)), type="dir")
        for name, path in sorted(_POOL_PATHS.items())
    ]
    network = E.network(
        E.name(NETWORK),
        E.bridge(name="vmapibr0"),
        E.ip(
            E.dhcp(E.range(start="192.168.122.2", end="192.168.122.254")),
            address="192.168.122.1",
            netmask="255.255.255.0",
        ),
    )
    return E.node(network, *pools)  # type: ignore[no-any-return]
