"""One API client and one translation of Kubernetes errors: only `generic/adapters/kubeclient.py`
names the client library's generated API and model classes, its exception classes or its `Watch`,
and nothing compares a `.status` with a number.

import-linter sees which modules import `kubernetes`, not which of its names they use, so this
reads the source instead. A shell calls through `KubeApi` (built from the `ApiClient` it is given),
streams with `new_watch()`, catches `API_ERRORS` and asks `failure_of` what a failure means, or
lets `translated_api_errors` raise its own error for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client.api
import kubernetes.client.exceptions
import kubernetes.client.models

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("generic", "libvirt_provider")
HOME = "generic/adapters/kubeclient.py"

GENERATED = set(kubernetes.client.api.__all__) | set(kubernetes.client.models.__all__)
EXCEPTIONS = {
    name
    for name, value in vars(kubernetes.client.exceptions).items()
    if isinstance(value, type) and issubclass(value, kubernetes.client.exceptions.ApiException)
}
FORBIDDEN = GENERATED | EXCEPTIONS
CONSTRUCTED_HERE_ONLY = {"Watch"}  # named in a type is fine; made only by new_watch()


def _is_status(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "status"


def _is_int(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_int(element) for element in node.elts)
    return False


def violations(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each use of a name only kubeclient may use, and each status compared
    with a number."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in CONSTRUCTED_HERE_ONLY:
                yield node.lineno, f"{name}()"
        if isinstance(node, ast.Name) and node.id in FORBIDDEN:
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            yield node.lineno, node.attr
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kubernetes"):
            for alias in node.names:
                if alias.name in FORBIDDEN or alias.name in ("api", "models", "exceptions"):
                    yield node.lineno, f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(("kubernetes.client.", "kubernetes.watch")):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_status, operands)) and any(map(_is_int, operands)):
                yield node.lineno, ".status compared with a number"
        elif isinstance(node, ast.Match) and _is_status(node.subject):
            yield node.lineno, "match on .status"


def scanned() -> list[Path]:
    return sorted(path for top in SCANNED for path in (REPO / top).rglob("*.py"))


def test_only_kubeclient_names_the_client_librarys_classes_or_reads_status_codes() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in scanned()
        if str(path.relative_to(REPO)) != HOME
        for line, what in violations(path.read_text())
    ]
    assert found == [], (
        "call through generic.adapters.kubeclient (KubeApi, new_watch, API_ERRORS, failure_of, "
        "translated_api_errors) instead:\n" + "\n".join(found)
    )


def test_the_rules_see_what_they_forbid() -> None:
    assert list(violations((REPO / HOME).read_text())), "kubeclient itself uses these names"
    source = """
from kubernetes import client
from kubernetes.client.exceptions import ApiException
import kubernetes.watch
core = client.CoreV1Api(api)
lease = client.V1Lease()
w = kubernetes.watch.Watch()
try:
    pass
except client.exceptions.NotFoundException as err:
    if err.status == 404 or err.status in (403, 409):
        pass
    match err.status:
        case 410:
            pass
ok = reported.status == c.STATUS_TRUE
current: watch.Watch | None = None
"""
    assert sorted(line for line, _ in violations(source)) == [3, 4, 5, 6, 7, 10, 11, 11, 13]
