"""A guest whose agent stays silent hurts only itself: its machine is Ready from its lease, says
`guestAgent: unresponsive` with one Warning, and its agent is asked less and less often; the first
answer clears it."""

from __future__ import annotations

from lxml import etree

from generic.workqueue import Outcome
from libvirt_provider import constants as c
from libvirt_provider.driver.types import GuestInfo
from libvirt_provider.errors import AgentBusyError
from libvirt_provider.machine.agent_backoff import AgentBackoff, BackoffPolicy
from libvirt_provider.machine.powering import AGENT_BUSY_RETRY_DELAY
from libvirt_provider.machine.reconciler import MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import HOST, UID
from tests.support.reconciling import KEY, make_hypervisor, make_store


def _agent_network(store: MemoryStore) -> None:
    """The lab's DHCP network, trusted for any source: the domain gets the agent channel."""
    store.catalog["libvirtnetworks"][0]["spec"]["addressSource"] = "Any"


def _world() -> tuple[MemoryStore, FakeHypervisor, MachineReconciler, list[float]]:
    store, hv = make_store(), make_hypervisor()
    _agent_network(store)
    now = [1000.0]
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hv,
        host=HOST.hostname,
        agent_backoff=AgentBackoff(clock=lambda: now[0], policy=BackoffPolicy(10.0, 40.0)),
    )
    reconciler.reconcile(KEY)
    dom = hv.domains[UID]
    dom.agent_silent = True
    mac = etree.fromstring(dom.xml.encode()).find("devices/interface/mac").get("address")
    hv.give_lease(UID, mac, "10.0.0.9")
    hv.agent_calls.clear()
    return store, hv, reconciler, now


def _agent_warnings(store: MemoryStore) -> list[str]:
    return [r for _, r, _ in store.events if r == c.REASON_GUEST_AGENT_UNRESPONSIVE]


def test_a_silent_agent_leaves_the_machine_ready_from_its_lease_and_says_so() -> None:
    store, hv, reconciler, _ = _world()
    assert reconciler.reconcile(KEY) == Outcome()
    status = store.machines["web"]["status"]
    ready = {x["type"]: x for x in status["conditions"]}["InfrastructureReady"]
    assert (ready["status"], ready["reason"]) == ("True", "Running")
    assert [(a["address"], a["source"]) for a in status["addresses"]] == [("10.0.0.9", "lease")]
    assert status["providerMetadata"]["guestAgent"] == "unresponsive"
    assert _agent_warnings(store) == [c.REASON_GUEST_AGENT_UNRESPONSIVE]
    # The lease answers for the NIC, so only the guest facts asked the agent.
    assert hv.agent_calls == [UID]


def test_a_nic_without_a_lease_asks_the_agent_once_per_pass_at_most() -> None:
    store, hv, reconciler, _ = _world()
    hv.domains[UID].addresses.clear()
    reconciler.reconcile(KEY)
    # The addresses timed out: the facts are not asked in the same pass.
    assert hv.agent_calls == [UID]
    assert store.machines["web"]["status"]["providerMetadata"]["guestAgent"] == "unresponsive"


def test_a_silent_agent_is_not_asked_again_until_its_pause_ends_then_less_often() -> None:
    store, hv, reconciler, now = _world()
    reconciler.reconcile(KEY)
    asked_at = []
    for second in range(1, 80):
        now[0] = 1000.0 + second
        before = len(hv.agent_calls)
        reconciler.reconcile(KEY)
        if len(hv.agent_calls) > before:
            asked_at.append(second)
    assert asked_at == [10, 30, 70]
    assert store.machines["web"]["status"]["providerMetadata"]["guestAgent"] == "unresponsive"
    assert len(_agent_warnings(store)) == 4


def test_the_first_answer_clears_the_silence() -> None:
    store, hv, reconciler, now = _world()
    reconciler.reconcile(KEY)
    dom = hv.domains[UID]
    dom.agent_silent = False
    dom.guest = GuestInfo(agent="connected", facts={"hostname": "web"})
    now[0] += 10
    reconciler.reconcile(KEY)
    metadata = store.machines["web"]["status"]["providerMetadata"]
    assert (metadata["guestAgent"], metadata["guestHostName"]) == ("connected", "web")
    assert [r for _, r, _ in store.events][-1] == c.REASON_GUEST_AGENT_RESPONDING
    calls = len(hv.agent_calls)
    reconciler.reconcile(KEY)
    assert len(hv.agent_calls) > calls


def test_another_machine_on_the_host_is_asked_as_usual() -> None:
    backoff = AgentBackoff(clock=lambda: 0.0)
    backoff.timed_out(UID)
    assert not backoff.may_ask(UID)
    assert backoff.may_ask("another-machine")


def test_a_new_boot_gives_the_agent_a_fresh_chance() -> None:
    store, hv, reconciler, _ = _world()
    reconciler.reconcile(KEY)
    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    store.vms["web"]["spec"]["powerOffMode"] = "Hard"
    reconciler.reconcile(KEY)
    assert "guestAgent" not in store.machines["web"]["status"]["providerMetadata"]
    store.vms["web"]["spec"]["powerState"] = "PoweredOn"
    hv.domains[UID].agent_silent = False
    calls = len(hv.agent_calls)
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    assert len(hv.agent_calls) > calls


def test_a_pass_without_agent_budget_looks_again_soon_and_keeps_what_was_said() -> None:
    store, hv, reconciler, _ = _world()
    dom = hv.domains[UID]
    dom.agent_silent = False
    dom.guest = GuestInfo(agent="connected", facts={"hostname": "web"})
    assert reconciler.reconcile(KEY) == Outcome()
    hv.fail_next(
        "guest_info", AgentBusyError("all 2 guest-agent call slots of the host are in use")
    )
    assert reconciler.reconcile(KEY) == Outcome(requeue_after=AGENT_BUSY_RETRY_DELAY)
    metadata = store.machines["web"]["status"]["providerMetadata"]
    assert (metadata["guestAgent"], metadata["guestHostName"]) == ("connected", "web")
    assert not _agent_warnings(store)
    assert reconciler.reconcile(KEY) == Outcome()
