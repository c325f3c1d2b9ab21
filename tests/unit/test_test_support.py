"""The tests' own layout stays untangled: what tests share lives in tests/support, nowhere else.

Why: conftest modules were imported as libraries, test modules imported each other's private
helpers, tests/ and bench/ imported each other both ways, and the deadline wait was written out
again and again. Each of those grew back one convenient import at a time; these checks read the
sources (ast, nothing is imported or run) and fail on the first one to return:

- no module under tests/ or bench/ imports a conftest or a test module (`test_*.py`);
- a conftest holds fixtures and pytest hooks only (other names are private to it);
- tests/ never imports bench/; bench/ imports from tests/ only tests/support;
- tests/support imports from tests/ only itself and the doubles;
- no `while` loop consults a clock or a deadline but the one in tests/support/waiting.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("tests", "bench")
WAIT_MODULE = "tests/support/waiting.py"
# Loops that read a clock but wait for nothing, with the reason: (file, function).
CLOCKED_LOOPS_THAT_ARE_NOT_WAITS = {
    # Runs the churn for its set duration, paced; what it then waits for goes through eventually.
    ("bench/soak.py", "churn_for"),
    # Power cycles for a phase of a set length; each round's own wait is a watch with a deadline.
    ("bench/metrics_bench.py", "cycle"),
    # A scraper paced like Prometheus (one scrape every interval, start to start) until stopped.
    ("bench/metrics_bench.py", "_run"),
    # Measures how late a thread wakes over a set time; it waits for nothing.
    ("bench/metrics_profile.py", "lateness_while"),
}
CLOCK_CALLS = frozenset({"monotonic", "time", "perf_counter"})


@dataclass(frozen=True)
class Import:
    source: str  # the importing file, relative to the root
    line: int
    module: str  # the imported module's dotted name
    file: str | None  # its file, relative to the root, when it is one of ours


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _file_of(module: str, root: Path) -> str | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(root).as_posix()
    return None


def _sources(root: Path) -> Iterator[Path]:
    for top in ROOTS:
        yield from sorted((root / top).rglob("*.py"))


def imports(root: Path) -> Iterator[Import]:
    """Every import in tests/ and bench/, relative ones resolved, `from m import n` counted as
    an import of module m.n when m.n is a module of ours."""
    for path in _sources(root):
        source = path.relative_to(root).as_posix()
        name = _module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=source)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found = alias.name
                    yield Import(source, node.lineno, found, _file_of(found, root))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                yield Import(source, node.lineno, module, _file_of(module, root))
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    if (file := _file_of(sub, root)) is not None:
                        yield Import(source, node.lineno, sub, file)


def library_imports_of_tests(root: Path) -> list[str]:
    """Imports of a conftest or a test module."""
    return [
        f"{i.source}:{i.line} imports {i.module}"
        for i in imports(root)
        if i.file is not None
        and (Path(i.file).name == "conftest.py" or Path(i.file).name.startswith("test_"))
    ]


def wrong_way_imports(root: Path) -> list[str]:
    """tests/ -> bench/, bench/ -> tests/ outside tests/support, tests/support -> the rest of
    tests/ but the doubles."""
    found = []
    for i in imports(root):
        top = i.module.split(".")[0]
        if i.source.startswith("tests/") and top == "bench":
            found.append(f"{i.source}:{i.line} imports {i.module} (tests never import bench/)")
        elif i.source.startswith("bench/") and top == "tests":
            if not (i.module == "tests.support" or i.module.startswith("tests.support.")):
                found.append(f"{i.source}:{i.line} imports {i.module} (bench/ uses tests.support)")
        elif i.source.startswith("tests/support/") and top == "tests":
            allowed = ("tests.support", "tests.doubles")
            if i.module not in allowed and not i.module.startswith(tuple(f"{a}." for a in allowed)):
                found.append(f"{i.source}:{i.line} imports {i.module} (support stays below tests)")
    return found


def _is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


def public_non_fixtures_in_conftests(root: Path) -> list[str]:
    """Top-level names of a conftest that are neither a fixture, a pytest hook nor private."""
    found = []
    for path in _sources(root):
        if path.name != "conftest.py":
            continue
        source = path.relative_to(root).as_posix()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if _is_fixture(node) or node.name.startswith(("pytest_", "_")):
                    continue
                found.append(f"{source}:{node.lineno} def {node.name}")
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.append(f"{source}:{node.lineno} class {node.name}")
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and not target.id.startswith("_"):
                        found.append(f"{source}:{node.lineno} {target.id} =")
    return found


def _reads_a_clock(loop: ast.While) -> bool:
    for node in ast.walk(loop):
        if isinstance(node, ast.Attribute) and node.attr in CLOCK_CALLS:
            return True
        if isinstance(node, ast.Name) and "deadline" in node.id.lower():
            return True
    return False


def clocked_loops(root: Path) -> list[tuple[str, str | None, int]]:
    """`while` loops that consult a clock or a deadline: (file, function, line)."""
    found = []
    for path in _sources(root):
        source = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        owner: dict[int, str] = {}
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(func):
                    owner[id(inner)] = func.name  # the innermost function wins: walked last
        for node in ast.walk(tree):
            if isinstance(node, ast.While) and _reads_a_clock(node):
                found.append((source, owner.get(id(node)), node.lineno))
    return found


def hand_written_waits(root: Path) -> list[str]:
    return [
        f"{source}:{line} in {function}: a deadline loop; use tests.support.waiting.eventually"
        for source, function, line in clocked_loops(root)
        if source != WAIT_MODULE and (source, function) not in CLOCKED_LOOPS_THAT_ARE_NOT_WAITS
    ]


# -- the checks, on this repository -------------------------------------------------------------


def test_the_checks_read_every_test_and_bench_module() -> None:
    files = [p.relative_to(REPO).as_posix() for p in _sources(REPO)]
    assert "tests/e2e/provider/conftest.py" in files
    assert "bench/soak.py" in files
    assert any(i.module.startswith("tests.support.") for i in imports(REPO))


def test_no_module_imports_a_conftest_or_a_test_module() -> None:
    assert library_imports_of_tests(REPO) == []


def test_conftests_hold_fixtures_and_hooks_only() -> None:
    assert public_non_fixtures_in_conftests(REPO) == []


def test_bench_uses_tests_support_and_tests_never_import_bench() -> None:
    assert wrong_way_imports(REPO) == []


def test_the_deadline_wait_is_written_once() -> None:
    assert hand_written_waits(REPO) == []
    assert [f for f, _, _ in clocked_loops(REPO) if f == WAIT_MODULE] == [WAIT_MODULE]


# -- the checks, on a tree that breaks each rule -------------------------------------------------


@pytest.fixture
def tangled(tmp_path: Path) -> Path:
    files = {
        "tests/__init__.py": "",
        "tests/e2e/__init__.py": "",
        "tests/e2e/conftest.py": "HELPER = 1\ndef helper(): ...\n",
        "tests/e2e/test_a.py": "from tests.e2e.conftest import HELPER\nfrom . import test_b\n",
        "tests/e2e/test_b.py": "from .conftest import helper\nimport bench.tool\n",
        "tests/support/__init__.py": "",
        "tests/support/kube.py": "from tests.e2e import test_a\n",
        "tests/support/waiting.py": "import time\nwhile time.monotonic() < 1: ...\n",
        "bench/__init__.py": "",
        "bench/tool.py": (
            "import time\nfrom tests.e2e.conftest import helper\n"
            "def poll(deadline):\n    while time.monotonic() < deadline: ...\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_each_rule_catches_what_it_is_for(tangled: Path) -> None:
    assert library_imports_of_tests(tangled) == [
        "tests/e2e/test_a.py:1 imports tests.e2e.conftest",
        "tests/e2e/test_a.py:2 imports tests.e2e.test_b",
        "tests/e2e/test_b.py:1 imports tests.e2e.conftest",
        "tests/support/kube.py:1 imports tests.e2e.test_a",
        "bench/tool.py:2 imports tests.e2e.conftest",
    ]
    assert public_non_fixtures_in_conftests(tangled) == [
        "tests/e2e/conftest.py:1 HELPER =",
        "tests/e2e/conftest.py:2 def helper",
    ]
    assert wrong_way_imports(tangled) == [
        "tests/e2e/test_b.py:2 imports bench.tool (tests never import bench/)",
        "tests/support/kube.py:1 imports tests.e2e (support stays below tests)",
        "tests/support/kube.py:1 imports tests.e2e.test_a (support stays below tests)",
        "bench/tool.py:2 imports tests.e2e.conftest (bench/ uses tests.support)",
    ]
    assert hand_written_waits(tangled) == [
        "bench/tool.py:4 in poll: a deadline loop; use tests.support.waiting.eventually"
    ]
