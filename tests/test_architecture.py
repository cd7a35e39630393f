"""Imports flow one way (ARCHITECTURE.md): histories <- compressors <- audit; reports alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "histories": {"compressors", "audit", "reports"},
    "compressors": {"audit", "reports"},
    "reports": {"audit", "compressors", "histories"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package: str):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package} has no modules"
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in files
        if imported_packages(path) & FORBIDDEN[package]
    }
    assert offenders == {}


def test_the_checker_sees_a_violation(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("from audit.cli import app\nimport compressors\n")
    assert imported_packages(bad) == {"audit", "compressors"}
