"""Address pools: what a pool may declare, and which address the next claim tries."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from catalog.network import MAX_POOL_ADDRESSES, AddressPool
from libvirt_provider.driver.libvirt_networks import parse_network_dhcp
from libvirt_provider.resolve.addresses import (
    choose_address,
    in_pool,
    pool_addresses,
    pool_overlaps,
)
from tests.support import builders as b


def pool(*ranges: tuple[str, str], prefix: int = 24, gateway: str | None = None) -> AddressPool:
    body: dict[str, Any] = {
        "ranges": [{"start": s, "end": e} for s, e in ranges],
        "prefixLength": prefix,
    }
    if gateway is not None:
        body["gateway"] = gateway
    return AddressPool.model_validate(body)


class TestAPoolDeclares:
    def test_ranges_in_one_family_with_prefix_and_gateway(self) -> None:
        p = pool(("10.0.0.10", "10.0.0.19"), ("10.0.0.30", "10.0.0.30"), gateway="10.0.0.1")
        assert p.size() == 11
        assert p.version == 4

    @pytest.mark.parametrize(
        ("body", "why"),
        [
            ({"ranges": [], "prefixLength": 24}, "at least 1"),
            ({"ranges": [{"start": "10.0.0.9", "end": "10.0.0.1"}], "prefixLength": 24}, "before"),
            ({"ranges": [{"start": "10.0.0.1", "end": "fd00::1"}], "prefixLength": 24}, "family"),
            ({"ranges": [{"start": "ten", "end": "10.0.0.1"}], "prefixLength": 24}, "bare IP"),
            ({"ranges": [{"start": "10.0.0.1", "end": "10.0.0.2"}], "prefixLength": 33}, "long"),
            (
                {
                    "ranges": [
                        {"start": "10.0.0.1", "end": "10.0.0.5"},
                        {"start": "10.0.0.5", "end": "10.0.0.9"},
                    ],
                    "prefixLength": 24,
                },
                "overlap",
            ),
            (
                {
                    "ranges": [{"start": "10.0.0.1", "end": "10.0.0.5"}],
                    "prefixLength": 24,
                    "gateway": "10.0.0.3",
                },
                "inside the pool",
            ),
            (
                {
                    "ranges": [{"start": "10.0.0.1", "end": "10.0.0.5"}],
                    "prefixLength": 24,
                    "gateway": "fd00::1",
                },
                "family",
            ),
            (
                {"ranges": [{"start": "10.0.0.0", "end": "10.1.0.0"}], "prefixLength": 8},
                f"at most {MAX_POOL_ADDRESSES}",
            ),
        ],
    )
    def test_nonsense_is_refused_with_a_reason(self, body: dict[str, Any], why: str) -> None:
        with pytest.raises(ValidationError, match=why):
            AddressPool.model_validate(body)


class TestTheNextAddress:
    def test_is_the_lowest_free_one_in_range_order(self) -> None:
        p = pool(("10.0.0.30", "10.0.0.31"), ("10.0.0.10", "10.0.0.11"))
        assert list(pool_addresses(p)) == ["10.0.0.10", "10.0.0.11", "10.0.0.30", "10.0.0.31"]
        assert choose_address(p, frozenset()) == "10.0.0.10"
        assert choose_address(p, frozenset({"10.0.0.10", "10.0.0.11"})) == "10.0.0.30"

    def test_two_choosers_seeing_the_same_claims_pick_the_same_address(self) -> None:
        # So two daemons racing for the last one try one name, and one create wins.
        p = pool(("10.0.0.10", "10.0.0.12"))
        taken = frozenset({"10.0.0.10", "10.0.0.12"})
        assert choose_address(p, taken) == choose_address(p, set(taken)) == "10.0.0.11"

    def test_is_none_when_every_address_is_claimed(self) -> None:
        p = pool(("10.0.0.10", "10.0.0.11"))
        assert choose_address(p, frozenset({"10.0.0.10", "10.0.0.11"})) is None

    def test_addresses_outside_the_pool_do_not_count(self) -> None:
        p = pool(("10.0.0.10", "10.0.0.10"))
        assert choose_address(p, frozenset({"10.0.0.11", "192.0.2.1"})) == "10.0.0.10"

    def test_ipv6_pools_use_canonical_spellings(self) -> None:
        p = pool(("fd00::a", "fd00::b"), prefix=64)
        assert choose_address(p, frozenset({"fd00::a"})) == "fd00::b"
        assert in_pool(p, "fd00:0::b")
        assert not in_pool(p, "10.0.0.10")
        assert not in_pool(p, "not an address")


class TestOverlaps:
    def test_only_pools_of_other_networks_sharing_addresses_are_named(self) -> None:
        networks = {
            "a": b.network(
                "a",
                addressPool={
                    "ranges": [{"start": "10.0.0.1", "end": "10.0.0.9"}],
                    "prefixLength": 24,
                },
            ),
            "b": b.network(
                "b",
                default=False,
                addressPool={
                    "ranges": [{"start": "10.0.0.9", "end": "10.0.0.20"}],
                    "prefixLength": 24,
                },
            ),
            "c": b.network(
                "c",
                default=False,
                addressPool={
                    "ranges": [{"start": "10.0.0.21", "end": "10.0.0.30"}],
                    "prefixLength": 24,
                },
            ),
            "d": b.network("d", default=False),
        }
        assert pool_overlaps("a", networks) == [
            "its range 10.0.0.1-10.0.0.9 overlaps range 10.0.0.9-10.0.0.20 of the addressPool "
            "of LibvirtNetwork 'b'"
        ]
        assert pool_overlaps("c", networks) == []
        assert pool_overlaps("d", networks) == []


def test_a_libvirt_networks_dhcp_is_read_from_its_xml() -> None:
    xml = (
        "<network><name>n</name><ip address='10.213.0.1' netmask='255.255.255.0'><dhcp>"
        "<range start='10.213.0.100' end='10.213.0.250'/>"
        "<host mac='52:54:00:AA:00:01' ip='10.213.0.20'/></dhcp></ip>"
        "<ip address='10.213.1.1' prefix='24'/></network>"
    )
    dhcp = parse_network_dhcp("n", xml)
    assert dhcp is not None
    assert dhcp.ranges == (("10.213.0.100", "10.213.0.250"),)
    assert dhcp.subnets == ("10.213.0.0/24",)
    assert dict(dhcp.hosts) == {"52:54:00:aa:00:01": "10.213.0.20"}
    assert (
        parse_network_dhcp("m", "<network><ip address='10.0.0.1' prefix='24'/></network>") is None
    )
