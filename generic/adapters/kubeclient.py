"""Kubernetes client plumbing shared by both controllers of the daemon.

One place for what every shell needs from the client library: the request timeout and loading
the client configuration (a kubeconfig, else the in-cluster ServiceAccount).
"""

from __future__ import annotations

import os

from kubernetes import client, config

__all__ = ["REQUEST_TIMEOUT", "load_kube_config"]

REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for every non-watch request: a hung call must not hold a worker."""


def load_kube_config(kubeconfig: str | None) -> client.ApiClient:
    """An API client for `kubeconfig`, else in-cluster credentials, else the default kubeconfig.

    An explicit kubeconfig is also put into $KUBECONFIG, where kopf's login handler reads it.
    """
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()
