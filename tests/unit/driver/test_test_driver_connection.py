"""The libvirt adapter on libvirt's in-process test driver, which has no keepalive.

`test:///default` lives inside this process (no daemon, no socket), so this runs with the unit
tests: connecting must not fail on the missing keepalive, and the host offers only `test`.
"""

from __future__ import annotations

import logging

import pytest

from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor

TEST_DRIVER = "test:///default"


def test_the_test_driver_connects_without_keepalive_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hypervisor = LibvirtHypervisor(TEST_DRIVER)
    with caplog.at_level(logging.INFO, logger="libvirt_provider.driver.libvirt_connection"):
        try:
            facts = hypervisor.host_facts()
            hypervisor.close()  # the next call opens a second connection
            assert hypervisor.host_facts() == facts
        finally:
            hypervisor.close()
    said = [r for r in caplog.records if "no keepalive" in r.getMessage()]
    assert len(said) == 1
    assert facts.domain_types == frozenset({"test"})
    assert "default-pool" in facts.pools
