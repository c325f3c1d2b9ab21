"""The rule for deleting cached base images, and the names it may ever touch."""

from __future__ import annotations

from typing import Any

import pytest

from libvirt_provider.images.gc import (
    PoolVolume,
    References,
    cached_bases,
    plan_collection,
    references,
)
from libvirt_provider.images.names import base_volume_name, marker_name, parse_cached_name
from libvirt_provider.resolve import resolve_machine
from tests.support import builders as b

SHA = "c0ffee" + "0" * 58
OTHER = "beef" + "1" * 60
POOL = "vmapi-lab"
BASE = base_volume_name(SHA, "qcow2")


def vol(name: str, *, pool: str = POOL, backing: str | None = None) -> PoolVolume:
    return PoolVolume(pool=pool, name=name, path=f"/pools/{pool}/{name}", backing_path=backing)


def cached(sha: str = SHA, *, pool: str = POOL, fmt: str = "qcow2") -> list[PoolVolume]:
    name = base_volume_name(sha, fmt)
    return [vol(name, pool=pool), vol(marker_name(name), pool=pool)]


def http_image(sha: str = SHA, fmt: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"source": {"http": {"url": "https://example/x.qcow2", "sha256": sha}}}
    if fmt is not None:
        spec["format"] = fmt
    return {"metadata": {"name": "x"}, "spec": spec}


def deleted(volumes: list[PoolVolume], refs: References, **kw: Any) -> list[tuple[str, ...]]:
    return [base.deletions for base in plan_collection(volumes, refs, **kw).delete]


class TestNames:
    def test_the_resolver_points_machines_at_the_names_the_collector_knows(self) -> None:
        image = b.image(source={"http": {"url": "https://example/tiny.qcow2", "sha256": b.SHA}})
        resolution = resolve_machine(
            vm_name="web",
            vm_spec=b.vm_spec(),
            machine=b.machine(),
            catalog=b.catalog(images=[image]),
            secrets={},
            host=b.HOST,
        )
        assert resolution.machine is not None
        base = resolution.machine.volumes[0].base
        assert base is not None
        assert base.volume == base_volume_name(b.SHA, "qcow2")
        parsed = parse_cached_name(base.volume)
        assert parsed is not None
        assert parsed.base == base.volume
        assert not parsed.marker

    def test_a_marker_belongs_to_its_base(self) -> None:
        parsed = parse_cached_name(marker_name(BASE))
        assert parsed is not None
        assert (parsed.base, parsed.marker) == (BASE, True)

    @pytest.mark.parametrize(
        "name",
        [
            "debian-12.qcow2",
            "image-debian.qcow2",
            f"image-{SHA[:31]}.qcow2",
            f"image-{SHA[:33]}.qcow2",
            f"image-{SHA[:32].upper()}.qcow2",
            f"image-{SHA[:32]}.iso",
            f"image-{SHA[:32]}.qcow2.bak",
            f"x-image-{SHA[:32]}.qcow2",
            "ns_web-12345678--boot.qcow2.verified",
        ],
    )
    def test_names_the_importer_never_makes_are_not_ours(self, name: str) -> None:
        assert parse_cached_name(name) is None


class TestReferences:
    def test_http_images_name_their_base_and_volume_images_their_volume(self) -> None:
        refs = references(
            [
                http_image(SHA.upper()),
                http_image(OTHER, "raw"),
                {"spec": {"source": {"volume": {"pool": "p", "volume": "v.qcow2"}}}},
            ]
        )
        assert refs.names == {BASE, base_volume_name(OTHER, "raw")}
        assert refs.volumes == {("p", "v.qcow2")}

    def test_malformed_objects_protect_what_they_can_and_never_fail(self) -> None:
        refs = references([{}, {"spec": None}, {"spec": {"source": "x"}}, http_image()])
        assert refs.names == {BASE}


class TestPlan:
    def test_a_base_a_libvirt_image_resolves_to_is_kept(self) -> None:
        assert deleted(cached(), references([http_image()])) == []

    def test_a_base_no_image_resolves_to_goes_marker_first(self) -> None:
        assert deleted(cached(), References()) == [(marker_name(BASE), BASE)]

    def test_a_changed_checksum_frees_the_old_base(self) -> None:
        volumes = cached() + cached(OTHER)
        assert deleted(volumes, references([http_image(OTHER)])) == [(marker_name(BASE), BASE)]

    def test_a_changed_format_frees_the_base_of_the_old_format(self) -> None:
        assert deleted(cached(), references([http_image(fmt="raw")])) == [(marker_name(BASE), BASE)]

    def test_a_base_backing_an_overlay_in_any_pool_is_kept(self) -> None:
        base_path = f"/pools/{POOL}/{BASE}"
        overlay = vol("ns_web-1234abcd--boot.qcow2", pool="fast", backing=base_path)
        assert deleted([*cached(), overlay], References()) == []

    def test_a_kept_data_disk_keeps_its_base(self) -> None:
        # deleteOnTermination: false leaves the overlay behind after its machine is gone.
        kept = vol("ns_db-1234abcd--data-state.qcow2", backing=f"/pools/{POOL}/./{BASE}")
        assert deleted([*cached(), kept], References()) == []

    def test_the_same_base_in_another_pool_is_judged_on_its_own(self) -> None:
        overlay = vol("ns_web-1234abcd--boot.qcow2", backing=f"/pools/{POOL}/{BASE}")
        volumes = [*cached(), *cached(pool="fast"), overlay]
        plan = plan_collection(volumes, References())
        assert [(b.pool, b.volume) for b in plan.delete] == [("fast", BASE)]

    def test_foreign_volumes_are_never_touched(self) -> None:
        volumes = [
            vol("debian-12.qcow2"),
            vol("debian-12.qcow2.verified"),
            vol(f"image-{SHA[:32]}.iso"),
            vol("ns_web-1234abcd--boot.qcow2"),
        ]
        assert deleted(volumes, References()) == []

    def test_a_user_volume_with_our_name_is_kept_while_an_image_names_it(self) -> None:
        refs = references([{"spec": {"source": {"volume": {"pool": POOL, "volume": BASE}}}}])
        assert deleted(cached(), refs) == []
        assert deleted(cached(pool="fast"), refs) == [(marker_name(BASE), BASE)]

    def test_an_unverified_leftover_is_collected(self) -> None:
        assert deleted([vol(BASE)], References()) == [(BASE,)]

    def test_a_lone_marker_is_collected(self) -> None:
        assert deleted([vol(marker_name(BASE))], References()) == [(marker_name(BASE),)]

    def test_a_base_being_imported_is_kept_and_looked_at_again(self) -> None:
        plan = plan_collection([vol(BASE)], References(), busy=frozenset({(POOL, BASE)}))
        assert plan.delete == ()
        assert [(b.pool, b.volume) for b in plan.deferred] == [(POOL, BASE)]

    def test_busy_elsewhere_does_not_protect_this_pool(self) -> None:
        plan = plan_collection(cached(), References(), busy=frozenset({("fast", BASE)}))
        assert [b.volume for b in plan.delete] == [BASE]

    def test_bases_are_grouped_with_their_markers(self) -> None:
        bases = cached_bases([*cached(), vol(base_volume_name(OTHER, "raw"))])
        assert [(b.volume, b.marker, b.path is not None) for b in bases] == [
            (base_volume_name(OTHER, "raw"), False, True),
            (BASE, True, True),
        ]
