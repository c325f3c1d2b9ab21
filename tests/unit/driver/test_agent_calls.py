"""Guest-agent calls of the libvirt adapter: their own budget, one per machine, never the host's
general call slots, and a timeout told apart from an agent that is simply not there.

The adapter runs on libvirt's in-process test driver (`test:///default`, whose domain `test`
runs); a silent agent is played by holding the driver's agent call until the test lets it go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import libvirt
import pytest

from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.libvirt_errors import classify
from libvirt_provider.driver.limits import Limits
from libvirt_provider.driver.types import AddressSource
from libvirt_provider.errors import AgentBusyError, AgentUnresponsiveError, RetryableError
from tests.support.waiting import eventually


class _Silent:
    """Stands in for `virDomain.interfaceAddresses`: agent calls hang until `release`."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.release = threading.Event()
        self.waiting = 0
        self.lock = threading.Lock()

    def __call__(self, dom: libvirt.virDomain, source: int, flags: int = 0) -> Any:
        if source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT:
            with self.lock:
                self.waiting += 1
            assert self.release.wait(30)
        return self.real(dom, source, flags)


@pytest.fixture
def silent(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Silent]:
    fake = _Silent(libvirt.virDomain.interfaceAddresses)

    def interface_addresses(dom: libvirt.virDomain, source: int, flags: int = 0) -> Any:
        return fake(dom, source, flags)

    monkeypatch.setattr(libvirt.virDomain, "interfaceAddresses", interface_addresses)
    yield fake
    fake.release.set()


@pytest.fixture
def adapter() -> Iterator[tuple[LibvirtHypervisor, str]]:
    hv = LibvirtHypervisor("test:///default", limits=Limits(max_concurrent=1))
    uuid = hv._connection().lookupByName("test").UUIDString()
    yield hv, uuid
    hv.close()


def test_a_silent_agent_holds_neither_a_general_slot_nor_a_second_agent_call(
    silent: _Silent, adapter: tuple[LibvirtHypervisor, str]
) -> None:
    hv, uuid = adapter
    with ThreadPoolExecutor(max_workers=2) as pool:
        stuck: Future[Any] = pool.submit(hv.addresses, uuid, AddressSource.AGENT)
        eventually(lambda: silent.waiting == 1, timeout=10, what="the agent call to hang")
        # The host's only general slot is free: the domain still answers everything else.
        assert hv.status(uuid).state.value
        assert [a.source for a in hv.addresses(uuid, AddressSource.LEASE)] == [AddressSource.LEASE]
        assert hv.limiter_stats().in_flight == 0
        # The machine's agent already has a call in flight: no second one queues behind it.
        with pytest.raises(AgentBusyError, match="still in flight"):
            hv.addresses(uuid, AddressSource.AGENT)
        assert hv.agent_stats().in_flight == 1
        silent.release.set()
        stuck.result(timeout=10)
    assert hv.agent_stats().in_flight == 0


def _libvirt_error(code: int, message: str) -> libvirt.libvirtError:
    class _Error(libvirt.libvirtError):
        def get_error_code(self) -> int:
            return code

        def get_error_message(self) -> str:
            return message

    return _Error(message)


def test_an_agent_that_times_out_is_unresponsive() -> None:
    err = _libvirt_error(
        libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
        "Guest agent is not responding: Guest agent not available for now",
    )
    assert isinstance(classify(err), AgentUnresponsiveError)


@pytest.mark.parametrize(
    "message",
    [
        "Guest agent is not responding: QEMU guest agent is not connected",
        "Guest agent is not responding: QEMU guest agent is not available due to an error",
    ],
)
def test_an_agent_that_is_not_there_is_only_retryable(message: str) -> None:
    found = classify(_libvirt_error(libvirt.VIR_ERR_AGENT_UNRESPONSIVE, message))
    assert isinstance(found, RetryableError)
    assert not isinstance(found, AgentUnresponsiveError)


def _connected_channel(
    monkeypatch: pytest.MonkeyPatch, hv: LibvirtHypervisor, answer: Any, delay: float
) -> list[int]:
    """The domain's agent channel connected, and its guestInfo answering `answer` after `delay`
    seconds; the kinds asked, in order."""
    asked: list[int] = []

    def guest_info(dom: libvirt.virDomain, types: int, flags: int = 0) -> Any:
        asked.append(types)
        time.sleep(delay)
        return answer

    monkeypatch.setattr(libvirt.virDomain, "guestInfo", guest_info)
    monkeypatch.setattr(hv, "_call", lambda fn: ("connected", True))
    return asked


def test_guest_facts_that_come_back_empty_after_the_timeout_are_a_silent_agent(
    monkeypatch: pytest.MonkeyPatch, adapter: tuple[LibvirtHypervisor, str]
) -> None:
    # libvirt skips a kind whose agent command timed out, as if it were unsupported.
    hv, uuid = adapter
    monkeypatch.setattr(hv, "_agent_silence_after", 0.05)
    asked = _connected_channel(monkeypatch, hv, {}, delay=0.1)
    with pytest.raises(AgentUnresponsiveError):
        hv.guest_info(uuid)
    assert len(asked) == 1, "the second kind is not asked of a silent agent"


def test_an_agent_that_answers_fast_is_asked_each_kind(
    monkeypatch: pytest.MonkeyPatch, adapter: tuple[LibvirtHypervisor, str]
) -> None:
    hv, uuid = adapter
    asked = _connected_channel(monkeypatch, hv, {"hostname": "web"}, delay=0)
    info = hv.guest_info(uuid)
    assert info is not None
    assert (info.agent, info.facts) == ("connected", {"hostname": "web"})
    assert asked == [libvirt.VIR_DOMAIN_GUEST_INFO_OS, libvirt.VIR_DOMAIN_GUEST_INFO_HOSTNAME]
