"""The libvirt adapter on libvirt's in-process test driver, which has no keepalive.

`test:///default` lives inside this process (no daemon, no socket), so this runs with the unit
tests: connecting must not fail on the missing keepalive, and the host offers only `test`.
"""

from __future__ import annotations

import logging

import pytest

from libvirt_provider import constants as c
from libvirt_provider.driver.endpoint import ConnectionProblemError
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


def test_a_changed_connection_is_tried_at_once_and_its_state_told() -> None:
    """A remote host's connection edited to one refused before connecting: `reconnect` says so
    at once (a `reset` alone kept reporting the old connection's success until some call happened
    to connect); edited back, it is connected again at once."""
    uri = [TEST_DRIVER]

    def source() -> str:
        if uri[0] == "refused":
            raise ConnectionProblemError(c.REASON_INVALID_CONNECTION, "transport not offered")
        return uri[0]

    hypervisor = LibvirtHypervisor(source, host="far")
    try:
        hypervisor.host_facts()
        assert hypervisor.connection_state().reason == c.REASON_CONNECTED
        uri[0] = "refused"
        state = hypervisor.reconnect()
        assert (state.connected, state.reason) == (False, c.REASON_INVALID_CONNECTION)
        assert state.message == "transport not offered"
        uri[0] = TEST_DRIVER
        assert hypervisor.reconnect().connected
    finally:
        hypervisor.close()
