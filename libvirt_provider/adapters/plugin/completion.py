"""`kubectl vm completion bash|zsh` and `kubectl_complete-vm`: shell completion for the plugin.

Why two: a script completes the `kubectl-vm` command typed as such; `kubectl vm <TAB>` is
completed by kubectl (since 1.26), which runs an executable named `kubectl_complete-vm` from
PATH with the words after `vm` and reads cobra's `__complete` answer. Both are generated from the
plugin's parser (`console/completion.py`); this shell only lists LibvirtMachines, LibvirtHosts and
namespaces with the user's kubeconfig, quickly and silently (a completion never prints an error).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from kubernetes import client, config

from generic.adapters.kubeclient import API_ERRORS, KubeApi
from libvirt_provider import constants as c
from libvirt_provider.console.completion import (
    Request,
    Values,
    bash_script,
    cobra_answer,
    plan,
    tree_of,
    zsh_script,
)

__all__ = ["add_commands", "run_complete", "run_completion"]

# Seconds a completion may wait for the API server: a shell user is waiting.
LIST_TIMEOUT = 5.0
SHELLS = ("bash", "zsh")
# What listing names may raise: the API's errors, and a kubeconfig that cannot be read.
_FAILURES: tuple[type[BaseException], ...] = (
    *API_ERRORS,
    config.ConfigException,
    KeyError,
    TypeError,
    ValueError,
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a script completing `kubectl-vm`'s commands, options and "
        "LibvirtMachine names. bash: `source <(kubectl vm completion bash)` in ~/.bashrc; zsh: "
        "`source <(kubectl vm completion zsh)` in ~/.zshrc. `kubectl vm <TAB>` is completed by "
        "kubectl (>= 1.26) through the `kubectl_complete-vm` executable installed with the "
        'plugin (docs/console.md, "Shell completion").',
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell")


def run_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    tree = tree_of(parser)
    sys.stdout.write(bash_script(tree) if args.shell == "bash" else zsh_script(tree))
    return 0


def _names(request: Request) -> list[str]:
    """The LibvirtMachines (of the request's namespace) or LibvirtHosts; none on any error."""
    configuration = client.Configuration()
    where = request.where
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=where.kubeconfig, context=where.context, client_configuration=configuration
        )
        namespace = where.namespace
        if namespace is None:
            namespace = "default"
            contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=where.kubeconfig
            )
            chosen = next((x for x in contexts if x["name"] == where.context), current)
            namespace = chosen["context"].get("namespace") or namespace
        with client.ApiClient(configuration) as api:
            kube = KubeApi(api)
            if request.values is Values.NAMESPACES:
                listed = kube.list_namespace(_request_timeout=LIST_TIMEOUT)
            elif request.values is Values.HOSTS:
                listed = kube.list_cluster_custom_object(
                    c.GROUP, c.VERSION, c.HOST_PLURAL, _request_timeout=LIST_TIMEOUT
                )
            else:
                listed = kube.list_namespaced_custom_object(
                    c.GROUP, c.VERSION, namespace, c.MACHINE_PLURAL,
                    _request_timeout=LIST_TIMEOUT,
                )  # fmt: skip
    except _FAILURES:
        return []
    items = (listed or {}).get("items") or () if isinstance(listed, dict) else ()
    return sorted(str(x["metadata"]["name"]) for x in items if x.get("metadata", {}).get("name"))


def run_complete(parser: argparse.ArgumentParser, words: Sequence[str]) -> int:
    """Answer kubectl: the candidates for the last of `words`, then the directive."""
    request = plan(tree_of(parser), list(words) or [""])
    names: list[str] = []
    if request.values in (Values.MACHINES, Values.HOSTS, Values.NAMESPACES):
        with contextlib.suppress(Exception):
            names = _names(request)
    sys.stdout.write(cobra_answer(request.answer(names), request.directive()))
    return 0
