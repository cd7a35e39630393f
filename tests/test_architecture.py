"""The house rules of docs/architecture.md, checked."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

from histories import MemoryAuditError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("histories", "compressors", "audit", "reports")
FORBIDDEN = {
    "histories": {"compressors", "audit", "reports"},
    "compressors": {"audit", "reports"},
    "reports": {"audit", "compressors", "histories"},
}
AUDIT_ROOMS = {
    # room -> the rooms of audit it may import (besides itself)
    "audit.errors": set(),
    "audit.regular_files": set(),
    "audit.counters": set(),
    "audit.plan": {"audit.errors"},
    "audit.backends": {"audit.errors", "audit.regular_files", "audit.counters"},
    "audit.plugins": {"audit.errors"},
    "audit.rundir": {"audit.errors", "audit.plan", "audit.regular_files", "audit.counters"},
    "audit.scoring": {"audit.errors"},
    "audit.engine": {
        "audit.errors", "audit.plan", "audit.rundir", "audit.scoring", "audit.backends",
    },
    "audit.reportdata": {"audit.errors", "audit.plan", "audit.rundir", "audit.scoring"},
    "audit.api": {
        "audit.errors", "audit.plan", "audit.rundir", "audit.scoring", "audit.engine",
        "audit.reportdata",
    },
    "audit.cli": {
        "audit.errors", "audit.plan", "audit.rundir", "audit.scoring", "audit.engine",
        "audit.reportdata", "audit.backends", "audit.plugins", "audit.api",
    },
    "audit.pytest_plugin": {
        "audit.errors", "audit.plan", "audit.rundir", "audit.scoring", "audit.engine",
        "audit.reportdata",
    },
}  # fmt: skip


def imports(path: Path) -> list[str]:
    """Every absolute module an import of the file names (``from a import b`` gives
    ``a`` and ``a.b``: ``b`` may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package: str):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package} has no modules"
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            {n.split(".")[0] for n in imports(path)} & FORBIDDEN[package]
        )
        for path in files
        if {n.split(".")[0] for n in imports(path)} & FORBIDDEN[package]
    }
    assert offenders == {}


def room_of(module: str) -> str | None:
    return next(
        (room for room in AUDIT_ROOMS if module == room or module.startswith(room + ".")), None
    )


def test_the_rooms_of_audit_import_only_what_lies_below_them():
    offenders: dict[str, list[str]] = {}
    for path in sorted((ROOT / "audit").rglob("*.py")):
        own = room_of(module_of(path))
        if own is None:
            continue
        for name in imports(path):
            other = room_of(name)
            if other is not None and other != own and other not in AUDIT_ROOMS[own]:
                offenders.setdefault(str(path.relative_to(ROOT)), []).append(name)
    assert offenders == {}


def private_violations(path: Path) -> list[str]:
    """Imports of a private module (``_name``) of a package the file is not inside."""
    here = module_of(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for name in imports(path):
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__") and i > 0:
                owner = ".".join(parts[:i])
                if not (package == owner or package.startswith(owner + ".")):
                    found.append(name)
                break
    return found


def test_no_module_imports_another_packages_private_module():
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in [*package_files(), *sorted((ROOT / "benchmarks").glob("*.py"))]
        if (found := private_violations(path))
    }
    assert offenders == {}


def test_the_checks_see_violations(tmp_path: Path):
    bad = ROOT / "audit" / "engine" / "_probe_violation.py"
    bad.write_text(
        "from audit.rundir._store import RunStore\n"
        "from audit.cli import app\n"
        "from audit.engine._jobs import run_job\n"
    )
    try:
        assert private_violations(bad) == ["audit.rundir._store", "audit.rundir._store.RunStore"]
        assert room_of("audit.cli") not in AUDIT_ROOMS["audit.engine"]
    finally:
        bad.unlink()


def test_every_exception_class_is_a_memory_audit_error():
    strays = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            if info.name.endswith(".__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, Exception)
                    and obj.__module__ == module.__name__
                    and not issubclass(obj, MemoryAuditError | Warning)
                ):
                    strays.append(f"{module.__name__}.{name}")
    assert strays == []


CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b(?!\()")
OUTSIDE = ("ARCHITECTURE.md", "PROTOCOL.md", "shared/design", "../shared")


def cited_files(text: str) -> set[str]:
    """Markdown files a text names (``_markdown.md`` is a function, not a file)."""
    return {name for name in CITATION.findall(text) if not name.startswith("_")}


def test_every_cited_file_is_in_the_repository():
    sources = [
        *package_files(),
        *sorted((ROOT / "tests").rglob("*.py")),
        *sorted((ROOT / "benchmarks").glob("*.py")),
        *sorted((ROOT / "scripts").glob("*")),
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "README.md",
    ]
    missing: dict[str, list[str]] = {}
    for path in sources:
        if path == Path(__file__).resolve() or path.suffix not in (".py", ".md", ".sh", ""):
            continue
        text = path.read_text(encoding="utf-8")
        outside = [marker for marker in OUTSIDE if marker in text]
        unresolved = [
            name
            for name in cited_files(text)
            if not (ROOT / name).exists()
            and not (ROOT / "docs" / name).exists()
            and not (path.parent / name).exists()
            and not name.startswith(("report.", "compare.", "transfer.", "replication.", "pairs-"))
        ]
        if outside or unresolved:
            missing[str(path.relative_to(ROOT))] = outside + unresolved
    assert missing == {}


def test_the_citation_check_sees_a_file_outside():
    assert cited_files("see ARCHITECTURE.md and docs/method.md") == {
        "ARCHITECTURE.md",
        "docs/method.md",
    }


PY_CITATION = re.compile(r"(?<![\w/.-])((?:histories|compressors|audit|reports|tests|benchmarks|"
                         r"scripts)/[\w/]+\.py)\b")  # fmt: skip
DOTTED = re.compile(r"`((?:histories|compressors|audit|reports)(?:\.\w+)+)(?:\(\))?`")


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` names a module, or an attribute of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_cited_module_and_file_of_the_code_exists():
    texts = [  # the tests are left out: they name files they make themselves
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "README.md",
        *package_files(),
        *sorted((ROOT / "benchmarks").glob("*.py")),
    ]
    stale: dict[str, list[str]] = {}
    for path in texts:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        gone = [
            name
            for name in PY_CITATION.findall(text)
            if not (ROOT / name).exists() and "NAME" not in name  # a placeholder
        ]
        gone += [
            name
            for name in DOTTED.findall(text)
            if not resolves(name) and not name.endswith(".toml")  # a file, not a module
        ]
        if gone:
            stale[str(path.relative_to(ROOT))] = gone
    assert stale == {}


def test_the_module_check_sees_a_stale_citation():
    assert not resolves("audit._run.execute")
    assert resolves("audit.engine.execute")
    assert DOTTED.findall("see `audit._run.execute` and `audit.engine.execute()`") == [
        "audit._run.execute",
        "audit.engine.execute",
    ]
    assert PY_CITATION.findall("in audit/_report_data.py") == ["audit/_report_data.py"]


RECORD_ROW = re.compile(r"^\| `(\w+)` \| `(\w+Record)` \| ([^|]+) \|", re.MULTILINE)


def test_the_readme_record_table_is_every_record_kind_with_its_fields():
    """The compressor section's table of record kinds is what a user matches on: each
    class, its ``op``, its fields (``?``: optional) as the models define them."""
    import typing

    import histories

    rows = RECORD_ROW.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    kinds = typing.get_args(typing.get_args(histories.Record)[0])
    assert sorted(cls for _, cls, _ in rows) == sorted(k.__name__ for k in kinds)
    for op, cls, fields in rows:
        model = getattr(histories, cls)
        assert model.model_fields["op"].default == op
        listed = {f.strip().strip("`?").rstrip("`") for f in fields.split(",")}
        optional = {f.strip().strip("`").rstrip("?").rstrip("`") for f in fields.split(",")
                    if f.strip().endswith("?")}  # fmt: skip
        assert "text" in model.model_fields, cls  # every kind; one sentence says so
        assert listed == set(model.model_fields) - {"id", "op", "text"}, cls
        assert optional == {n for n, f in model.model_fields.items() if not f.is_required()
                            and n not in ("op", "text")}, cls  # fmt: skip


def test_the_error_tree_in_audit_errors_names_every_error_with_its_exit_status():
    """Issue 30: the exception tree is drawn once, in the docstring of the module that
    holds the audit's classes, each with its exit status; every error class of the
    packages is in it, and no class that does not exist."""
    import importlib
    import pkgutil
    import re

    import audit.errors
    import compressors
    import histories
    from histories import MemoryAuditError

    for package in (histories, compressors, audit):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)

    def subclasses(cls: type) -> set[type]:
        found = set(cls.__subclasses__())
        return found.union(*(subclasses(sub) for sub in found)) if found else set()

    drawn = dict(re.findall(r"([A-Z]\w+) \((\d)\)", audit.errors.__doc__ or ""))
    public = {c for c in subclasses(MemoryAuditError) if not c.__name__.startswith("_")}
    public = {
        c for c in public if c.__module__.split(".")[0] in ("histories", "compressors", "audit")
    }
    assert {c.__name__ for c in public} | {"MemoryAuditError"} == set(drawn)
    for cls in [*public, MemoryAuditError]:
        assert int(drawn[cls.__name__]) == cls.exit_code, cls


FACES = (
    "histories", "compressors", "reports", "audit.rundir", "audit.scoring", "audit.backends",
    "audit.engine", "audit.reportdata",
)  # fmt: skip


def test_each_public_face_is_exact_and_used_outside_its_package():
    """Issue 30: ``__all__`` held about 90 names used nowhere outside their package and 60
    used only by tests. A package's face is exactly what its ``__init__`` imports, and
    each name of it is used by another package, a script, a benchmark or the docs (a
    test imports a private module instead)."""
    sources = [
        (str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        for pattern in ("*.py", "*.md", "*.j2", "*.toml")
        for path in ROOT.rglob(pattern)
        if not {".venv", ".ci-venv", ".cache", "tests", "runs"} & set(path.relative_to(ROOT).parts)
    ]
    for name in FACES:
        module = importlib.import_module(name)
        namespace = {
            n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)
        }
        exported = {n for n in module.__all__ if not inspect.ismodule(getattr(module, n))}
        assert sorted(exported) == sorted(namespace), name
        root = name.replace(".", "/") + "/"
        unused = [
            member for member in module.__all__
            if not any(
                not path.startswith(root) and re.search(rf"\b{re.escape(member)}\b", text)
                for path, text in sources
            )
        ]  # fmt: skip
        assert unused == [], f"{name} exports names nothing outside it uses: {unused}"


TEST_ROOMS = {"histories", "compressors", "reports", "audit"}
"""The folders of tests/: one a package, audit's by its rooms (tests/audit/engine/...)."""


def test_each_test_file_lives_in_the_room_it_tests():
    # a test of a room sits in tests/<package>/ (or tests/audit/<room>/); only the
    # whole-house checks stay at the top, beside the shared helpers
    top = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert top == ["test_architecture.py", "test_dependencies.py"], top
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        parts = path.relative_to(ROOT / "tests").parts[:-1]
        if not parts:
            continue
        assert parts[0] in TEST_ROOMS, path
        if parts[0] == "audit":
            assert len(parts) == 2, path
            assert (ROOT / "audit" / parts[1]).is_dir(), path
