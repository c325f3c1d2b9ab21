"""Secrets are read only in namespaces an admin opted in; elsewhere the machine says how to."""

from __future__ import annotations

import base64

from generic.workqueue import Outcome
from libvirt_provider.constants import REASON_SECRET_NOT_READABLE, SECRETS_CLUSTER_ROLE
from tests.support.reconciling import (
    KEY,
    NS,
    UID,
    make_hypervisor,
    make_reconciler,
    make_store,
)


def test_an_unreadable_secret_is_reported_with_the_way_to_allow_it_and_retried() -> None:
    store = make_store(bootstrap={"cloudInit": {"userData": {"name": "boot", "key": "user-data"}}})
    store.secrets["boot"] = {"user-data": base64.b64encode(b"#cloud-config\n").decode()}
    store.secrets_forbidden_in.add(NS)
    hv = make_hypervisor()
    reconciler = make_reconciler(store, hv)
    outcome = reconciler.reconcile(KEY)
    assert outcome == Outcome(retry=True)  # Secrets and RBAC are not watched: look again later
    assert UID not in hv.domains
    ready = next(
        c
        for c in store.machines["web"]["status"]["conditions"]
        if c["type"] == "InfrastructureReady"
    )
    assert ready["reason"] == REASON_SECRET_NOT_READABLE
    assert SECRETS_CLUSTER_ROLE in ready["message"]
    assert "RoleBinding" in ready["message"]
    # The admin opts the namespace in: the next attempt builds the machine.
    store.secrets_forbidden_in.clear()
    reconciler.reconcile(KEY)
    assert UID in hv.domains
