"""Every third-party import is declared in pyproject.toml.

The packages may import only ``[project] dependencies`` (or an optional extra, for
modules of an integration); tests and benchmarks may also import ``[dev]``.  An
undeclared import works on the machine that happens to have it installed and fails
on a user's fresh one; this test fails first.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("histories", "compressors", "audit", "reports")
LOCAL = {*PACKAGES, "tests", "bench_audit"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements: list[str]) -> set[str]:
    return {_normal(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RUNTIME = _names(PROJECT["dependencies"])
OPTIONAL: dict[str, list[str]] = PROJECT.get("optional-dependencies", {})
SELF = re.compile(rf"^{re.escape(PROJECT['name'])}\[([^\]]*)\]$")


def _expanded(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """An extra's distributions, with ``memory-audit[a,b]`` (the project's own extras,
    as ``dev`` and ``adapters`` name them) replaced by what those extras install."""
    names: set[str] = set()
    for requirement in OPTIONAL.get(extra, []):
        own = SELF.match(requirement.replace(" ", ""))
        if own is None:
            names |= _names([requirement])
            continue
        for inner in own.group(1).split(","):
            if inner not in seen:
                names |= _expanded(inner, seen | {extra})
    return names


EXTRAS = {name: _expanded(name) for name in OPTIONAL}


def top_level_imports(path: Path) -> set[str]:
    """Absolute imports anywhere in the file (function-level ones too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - LOCAL - {"__future__"}


@functools.cache
def _installed() -> dict[str, list[str]]:
    return dict(packages_distributions())


def distributions(module: str) -> set[str]:
    return {_normal(d) for d in _installed().get(module, [])}


def undeclared(files: list[Path], allowed: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in files:
        for module in sorted(top_level_imports(path)):
            dists = distributions(module)
            if not dists & allowed:
                out.setdefault(str(path.relative_to(ROOT)), []).append(
                    f"{module} ({', '.join(sorted(dists)) or 'not installed'})"
                )
    return out


def test_packages_import_only_declared_dependencies():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    optional = set().union(*(v for k, v in EXTRAS.items() if k != "dev")) if EXTRAS else set()
    assert undeclared(files, RUNTIME | optional) == {}


@pytest.mark.parametrize("folder", ["tests", "benchmarks"])
def test_tests_and_benchmarks_import_only_declared_dependencies(folder: str):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files
    assert undeclared(files, RUNTIME | EXTRAS.get("dev", set())) == {}


def test_dev_installs_every_adapter_extra():
    """The README's test command (``.[dev]``) installs the adapters' libraries: their
    tests must run in CI."""
    for extra in ("inspect-ai", "langchain", "langmem", "llama-index"):
        assert EXTRAS[extra], extra
        assert EXTRAS[extra] <= EXTRAS["dev"], extra


def test_the_check_sees_an_undeclared_import(tmp_path: Path):
    probe = ROOT / "tests" / "_probe_undeclared.py"
    probe.write_text("import hypothesis\nfrom pandas import DataFrame\n")
    try:
        assert undeclared([probe], {"pandas"}) == {
            "tests/_probe_undeclared.py": ["hypothesis (hypothesis)"]
        }
    finally:
        probe.unlink()
