"""A host's entry in a LibvirtImage's status.hosts, merged without touching other hosts'."""

from __future__ import annotations

from typing import Any

from catalog.image import LibvirtImageStatus
from libvirt_provider.images.names import base_volume_name
from libvirt_provider.images.status import (
    MAX_MESSAGE,
    BaseState,
    host_entry,
    hosts_update,
    merge_hosts,
)

SHA = "ab" * 32
BASE = base_volume_name(SHA, "qcow2")


def image(hosts: list[Any] | None = None, *, sha: str = SHA) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "tiny", "resourceVersion": "7"},
        "spec": {"source": {"http": {"url": "https://example/t.qcow2", "sha256": sha}}},
    }
    if hosts is not None:
        obj["status"] = {"hosts": hosts}
    return obj


class TestEntry:
    def test_importing_shows_bytes(self) -> None:
        entry = host_entry(
            "h1", [BaseState("p", BASE, importing=True, bytes_done=10, bytes_total=100)]
        )
        assert entry == {
            "host": "h1",
            "phase": "Importing",
            "pool": "p",
            "volume": BASE,
            "bytesDone": 10,
            "bytesTotal": 100,
        }

    def test_ready_names_pool_and_volume_only(self) -> None:
        entry = host_entry("h1", [BaseState("p", BASE, verified=True)])
        assert entry == {"host": "h1", "phase": "Ready", "pool": "p", "volume": BASE}

    def test_failed_carries_the_message_bounded(self) -> None:
        entry = host_entry("h1", [BaseState("p", BASE, error="sha256 x" * 1000)])
        assert entry is not None
        assert entry["phase"] == "Failed"
        assert len(entry["message"]) == MAX_MESSAGE

    def test_a_later_success_outweighs_an_earlier_failure_in_the_same_pool(self) -> None:
        entry = host_entry("h1", [BaseState("p", BASE, verified=True, error="old")])
        assert entry is not None
        assert entry["phase"] == "Ready"

    def test_across_pools_importing_then_failed_then_ready(self) -> None:
        ready = BaseState("a", BASE, verified=True)
        failed = BaseState("b", BASE, error="boom")
        importing = BaseState("c", BASE, importing=True)
        assert (host_entry("h", [ready, failed, importing]) or {})["phase"] == "Importing"
        assert (host_entry("h", [ready, failed]) or {})["pool"] == "b"
        assert (host_entry("h", [ready]) or {})["phase"] == "Ready"

    def test_nothing_on_the_host_is_no_entry(self) -> None:
        assert host_entry("h1", []) is None
        assert host_entry("h1", [BaseState("p", BASE)]) is None

    def test_entries_fit_the_status_model(self) -> None:
        entry = host_entry("h1", [BaseState("p", BASE, importing=True, bytes_done=1)])
        status = LibvirtImageStatus.model_validate({"hosts": [entry]})
        assert status.hosts[0].bytes_total is None


class TestMerge:
    OTHERS = [  # noqa: RUF012
        {"host": "h0", "phase": "Ready", "pool": "p", "volume": BASE, "future": {"x": 1}},
        {"host": "h2", "phase": "Failed", "message": "boom"},
    ]
    MINE = {"host": "h1", "phase": "Ready", "pool": "p", "volume": BASE}  # noqa: RUF012

    def test_a_new_entry_is_appended_and_others_kept_verbatim(self) -> None:
        assert merge_hosts(self.OTHERS, "h1", self.MINE) == [*self.OTHERS, self.MINE]

    def test_an_entry_is_replaced_in_place(self) -> None:
        current = [self.OTHERS[0], {"host": "h1", "phase": "Importing"}, self.OTHERS[1]]
        assert merge_hosts(current, "h1", self.MINE) == [
            self.OTHERS[0],
            self.MINE,
            self.OTHERS[1],
        ]

    def test_an_unchanged_entry_is_no_write(self) -> None:
        assert merge_hosts([*self.OTHERS, dict(self.MINE)], "h1", dict(self.MINE)) is None

    def test_none_removes_only_this_hosts_entry(self) -> None:
        assert merge_hosts([self.MINE, *self.OTHERS], "h1", None) == self.OTHERS

    def test_none_without_an_entry_is_no_write(self) -> None:
        assert merge_hosts(self.OTHERS, "h1", None) is None

    def test_duplicates_of_this_host_collapse(self) -> None:
        current = [self.MINE, self.OTHERS[0], {"host": "h1", "phase": "Failed"}]
        assert merge_hosts(current, "h1", self.MINE) == [self.MINE, self.OTHERS[0]]


class TestUpdate:
    def test_the_entry_follows_the_image_as_read(self) -> None:
        seen: list[str] = []

        def states_of(name: str) -> list[BaseState]:
            seen.append(name)
            return [BaseState("p", name, verified=True)]

        update = hosts_update("h1", states_of)
        assert update(image([{"host": "h0", "phase": "Ready"}])) == [
            {"host": "h0", "phase": "Ready"},
            {"host": "h1", "phase": "Ready", "pool": "p", "volume": BASE},
        ]
        assert seen == [BASE]

    def test_a_base_that_was_not_looked_at_leaves_the_entry_alone(self) -> None:
        update = hosts_update("h1", lambda _name: None)
        assert update(image([{"host": "h1", "phase": "Importing"}])) is None

    def test_a_changed_checksum_drops_the_stale_entry(self) -> None:
        stale = {"host": "h1", "phase": "Ready", "pool": "p", "volume": BASE}
        update = hosts_update("h1", lambda _name: [])
        assert update(image([stale], sha="cd" * 32)) == []

    def test_a_pool_volume_image_has_no_entry(self) -> None:
        obj = {"spec": {"source": {"volume": {"pool": "p", "volume": "v"}}}}
        assert hosts_update("h1", lambda _name: [BaseState("p", "v", verified=True)])(obj) is None
