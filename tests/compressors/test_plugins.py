"""`audit compressors` listing and `audit new-compressor` scaffolding (audit/plugins.py)."""

from __future__ import annotations

import importlib.util
import itertools
import secrets
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import typer

import compressors
from audit.plugins import (
    CompressorInfo,
    PluginScaffoldError,
    list_compressors,
    plugin_names,
    render_compressor_list,
    scaffold_plugin,
)
from histories import PRESETS, VARIANTS, generate

# --- listing ---------------------------------------------------------------------


def test_listing_has_every_builtin_first_with_kind_writer_and_summary():
    builtins = compressors.builtins()
    rows = list_compressors()
    assert [r.name for r in rows[: len(builtins)]] == list(builtins)
    for row, (name, cls) in zip(rows, builtins.items(), strict=False):
        assert row == CompressorInfo(
            name, cls.kind, "LLM" if cls.uses_llm else "deterministic", "built-in", cls.summary
        )
    assert {r.kind for r in rows[: len(builtins)]} == {"strict", "archive", "probe"}

    wide = render_compressor_list(width=400).splitlines()
    for name, cls in builtins.items():
        (line,) = [line for line in wide if line.split()[0] == name]
        writer = "LLM" if cls.uses_llm else "deterministic"
        assert line.split()[1:4] == [cls.kind, writer, "built-in"]
        assert line.endswith(cls.summary)


def test_listing_fits_100_columns_and_keeps_each_summary_whole():
    builtin_rows = [row for row in list_compressors() if row.origin == "built-in"]
    text = render_compressor_list(builtin_rows, width=100)
    lines = text.splitlines()
    assert lines[0].split() == ["name", "kind", "writer", "origin"]
    assert max(len(line) for line in lines) <= 100
    for name, cls in compressors.builtins().items():
        at = next(i for i, line in enumerate(lines) if line.split()[0] == name)
        assert lines[at].split()[1:] == [
            cls.kind,
            "LLM" if cls.uses_llm else "deterministic",
            "built-in",
        ]
        assert lines[at + 1] == "    " + cls.summary
    # the columns line up: every row's kind starts where the header's does
    column = lines[0].index("kind")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in lines[1:19:2])


def test_one_line_per_compressor_when_the_terminal_is_wide_enough():
    rows = list_compressors()[:3]
    lines = render_compressor_list(rows, width=200).splitlines()
    assert len(lines) == 1 + len(rows) + 1  # header, rows, legend
    assert lines[0].split() == ["name", "kind", "writer", "origin", "summary"]
    starts = {line.index(row.summary) for line, row in zip(lines[1:], rows, strict=False)}
    assert starts == {lines[0].index("summary")}


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Installed plugins, as importlib.metadata finds them: one LLM archive that
    loads, one whose module is missing, one that is not a Compressor class."""
    module = f"fake_plugin_{secrets.token_hex(4)}"
    (tmp_path / f"{module}.py").write_text(
        "from compressors import ArchiveCompressor\n\n\n"
        "class Oracle(ArchiveCompressor):\n"
        "    name = 'oracle'\n"
        "    uses_llm = True\n"
        "    summary = 'asks a model   to\\n recall'\n\n"
        "    def recall(self, memory, history, query_keys, budget):\n"
        "        return memory\n"
    )
    info = tmp_path / "fake_plugins-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        f"[{compressors.ENTRY_POINT_GROUP}]\n"
        f"oracle = {module}:Oracle\n"
        "zz_missing = no_such_module_for_this_test:Thing\n"
        "zz_not_a_class = os:sep\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module
    sys.modules.pop(module, None)


def test_plugins_follow_builtins_and_broken_ones_are_listed_with_their_error(fake_plugins):
    rows = list_compressors()
    by_name = {r.name: r for r in rows}
    names = [r.name for r in rows]
    assert names.index("oracle") >= len(compressors.builtins())
    assert by_name["oracle"] == CompressorInfo(
        "oracle", "archive", "LLM", f"plugin {fake_plugins}:Oracle", "asks a model to recall"
    )
    missing = by_name["zz_missing"]
    assert (missing.kind, missing.writer) == ("?", "?")
    assert missing.origin == "plugin no_such_module_for_this_test:Thing"
    assert "no_such_module_for_this_test" in (missing.error or "")
    assert missing.summary.startswith("cannot load: ")
    assert "not a Compressor subclass" in (by_name["zz_not_a_class"].error or "")

    text = render_compressor_list(rows)
    (line,) = [line for line in text.splitlines() if line.startswith("oracle ")]
    assert line.split() == ["oracle", "archive", "LLM", "plugin", f"{fake_plugins}:Oracle"]
    assert "    cannot load: No module named 'no_such_module_for_this_test'" in text
    assert "2 plugins could not be loaded" in text


# --- scaffolding -----------------------------------------------------------------


def test_names_of_the_scaffolded_package():
    assert plugin_names("keep_newest") == {
        "name": "keep_newest",
        "module": "keep_newest_compressor",
        "class_name": "KeepNewestCompressor",
        "distribution": "memory-audit-keep-newest",
        "entry_point_group": "memory_audit.compressors",
    }
    names = plugin_names("my_compressor")
    assert (names["module"], names["class_name"]) == ("my_compressor", "MyCompressor")


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_scaffold_writes_an_importable_compressor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "deep" / "plugin"
    written = scaffold_plugin("keep_newest", out)
    expected = [
        ".github",
        ".github/workflows",
        ".github/workflows/memory-audit.yml",
        "README.md",
        "keep_newest_compressor",
        "keep_newest_compressor/__init__.py",
        "pyproject.toml",
        "tests",
        "tests/test_keep_newest.py",
    ]
    assert _tree(out) == expected
    assert written == sorted(out / p for p in expected if (out / p).is_file())
    assert _tree(tmp_path / "deep") == ["plugin", *(f"plugin/{p}" for p in expected)]

    pyproject = (out / "pyproject.toml").read_text()
    assert 'name = "memory-audit-keep-newest"' in pyproject
    assert 'dependencies = ["memory-audit"]' in pyproject
    assert (
        '[project.entry-points."memory_audit.compressors"]\n'
        'keep_newest = "keep_newest_compressor:KeepNewestCompressor"\n'
    ) in pyproject
    assert "pip install -e '.[test]'" in (out / "README.md").read_text()
    test_text = (out / "tests" / "test_keep_newest.py").read_text()
    assert 'histories.PRESETS["cca-pilot"]' in test_text
    assert "ChunkView" in test_text

    monkeypatch.syspath_prepend(str(out))
    spec = importlib.util.spec_from_file_location(
        "keep_newest_compressor", out / "keep_newest_compressor" / "__init__.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = module.KeepNewestCompressor
    assert issubclass(cls, compressors.Compressor)
    assert (cls.name, cls.version, cls.kind, cls.uses_llm) == ("keep_newest", "1", "strict", False)
    assert cls.summary
    assert cls.__doc__

    pair = generate(PRESETS["cca-pilot"])[0]
    compressor = cls()
    for budget, variant in itertools.product(range(100, 1300, 25), VARIANTS):
        memory = ""
        for index, records in enumerate(pair.variants.of(variant).chunks):
            view = compressors.ChunkView(records, pair.render, index)
            memory = compressor.update(memory, view, pair.query, budget)
            assert 0 < len(memory.encode()) <= budget
            assert compressors.load(memory)[-1] == records[-1]


def test_the_scaffolds_next_step_installs_what_its_test_needs(tmp_path: Path):
    """``audit new-compressor`` said "pip install -e OUT, then python -m pytest OUT", and
    pytest was only in the package's ``test`` extra: the second step failed with "No
    module named pytest" (a new user's finding).  Both the hint and the package's README
    install that extra, which holds pytest."""
    import shlex
    import tomllib

    from typer.testing import CliRunner

    from audit.cli import app

    out = tmp_path / "my plugin"
    result = CliRunner().invoke(app, ["new-compressor", "keep_newest", "--out", str(out)])
    assert result.exit_code == 0, result.output
    hint = result.output.split("next: pip install -e ", 1)[1].split(", then")[0]
    (spec,) = shlex.split(hint)
    assert spec.startswith(str(out) + "[")
    extras = spec[len(str(out)) + 1 : -1].split(",")
    declared = tomllib.loads((out / "pyproject.toml").read_text())["project"]
    wanted = [r for e in extras for r in declared["optional-dependencies"][e]]
    assert any(r.startswith("pytest") for r in wanted), wanted
    assert f"pip install -e '.[{','.join(extras)}]'" in (out / "README.md").read_text()


def test_scaffold_into_an_existing_empty_directory(tmp_path: Path):
    out = tmp_path / "empty"
    out.mkdir()
    scaffold_plugin("keep_newest", out)
    assert (out / "keep_newest_compressor" / "__init__.py").is_file()
    assert _tree(tmp_path)[0] == "empty"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_scaffold_refuses_a_non_empty_directory_and_touches_nothing(tmp_path: Path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(PluginScaffoldError, match=r"taken exists and is not empty"):
        scaffold_plugin("keep_newest", out)
    assert _tree(tmp_path) == ["taken", "taken/notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"

    (tmp_path / "file").write_text("")
    with pytest.raises(PluginScaffoldError, match=r"file exists and is not a directory"):
        scaffold_plugin("keep_newest", tmp_path / "file")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty"),
        ("keep-newest", "contains '-': use snake_case ('keep_newest')"),
        ("Keep-Newest", "contains '-': use snake_case ('keep_newest')"),
        ("KeepNewest", "contains uppercase letters: use snake_case ('keep_newest')"),
        ("2fast", "must start with a lowercase letter"),
        ("_private", "must start with a lowercase letter"),
        ("keep newest", "contains ' ': use only a-z, 0-9 and '_'"),
        ("tail:x=1", "contains ':', '='"),
        ("caf\u00e9", "contains '\u00e9'"),
        ("keep__newest", "has '__' or a trailing '_'"),
        ("keep_", "has '__' or a trailing '_'"),
        ("lambda", "is a Python keyword"),
        ("x" * 41, "is longer than 40 characters"),
        ("frontier", "is a built-in compressor"),
        ("baselines", "stands for the archives and probes in --conditions"),
    ],
)
def test_scaffold_refuses_a_bad_name_and_writes_nothing(tmp_path: Path, name: str, problem: str):
    with pytest.raises(PluginScaffoldError) as caught:
        scaffold_plugin(name, tmp_path / "a" / "plugin")
    assert str(caught.value).startswith(f"compressor name {name!r} ")
    assert problem in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    original = Path.write_text
    calls = []

    def fail_on_third(self: Path, *args, **kwargs):
        calls.append(self)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fail_on_third)
    with pytest.raises(OSError, match="No space left"):
        scaffold_plugin("keep_newest", tmp_path / "new" / "deeper" / "plugin")
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == []  # staging and the parents it made are gone

    calls.clear()
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="No space left"):
        scaffold_plugin("keep_newest", tmp_path / "empty")
    assert _tree(tmp_path) == ["empty"]  # the user's empty directory is still there

    monkeypatch.undo()
    original_rename = Path.rename

    def fail_on_second(self: Path, target):
        calls.append(self)
        if len(calls) == 2:
            raise OSError(18, "Invalid cross-device link")
        return original_rename(self, target)

    calls.clear()
    monkeypatch.setattr(Path, "rename", fail_on_second)
    with pytest.raises(OSError, match="cross-device"):
        scaffold_plugin("keep_newest", tmp_path / "empty")
    assert len(calls) == 2  # one entry had been moved in: it is taken out again
    assert _tree(tmp_path) == ["empty"]


# --- end to end: install the scaffold, list it, build it, run its test ----------


def _can_build_editable_offline() -> bool:
    """setuptools builds a wheel itself from 70.1 on; before that it needs `wheel`."""
    if importlib.util.find_spec("wheel") is not None:
        return True
    major, minor, *_ = (
        int(p) if p.isdigit() else 0 for p in metadata.version("setuptools").split(".")
    )
    return (major, minor) >= (70, 1)


def _listing_command() -> list[str]:
    """`audit compressors` once the CLI has it; until then the function behind it."""
    from audit.cli import app

    command = typer.main.get_command(app)
    if "compressors" in getattr(command, "commands", {}):
        return [sys.executable, "-c", "from audit.cli import main; main()", "compressors"]
    return [
        sys.executable,
        "-c",
        "from audit.plugins import render_compressor_list; print(render_compressor_list())",
    ]


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done


def test_scaffolded_plugin_installs_lists_builds_and_passes_its_own_test(tmp_path: Path):
    name = f"e2e_{secrets.token_hex(4)}"
    names = plugin_names(name)
    out = tmp_path / "plugin"
    scaffold_plugin(name, out)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    isolation = ["--no-build-isolation"] if _can_build_editable_offline() else []
    try:
        _run([*pip, "install", "-q", "--no-deps", *isolation, "-e", str(out)], cwd=tmp_path)

        listing = _run(_listing_command(), cwd=tmp_path).stdout
        (line,) = [line for line in listing.splitlines() if line.split()[:1] == [name]]
        assert line.split()[1:5] == [
            "strict",
            "deterministic",
            "plugin",
            f"{names['module']}:{names['class_name']}",
        ]

        probe = (
            f"import compressors; c = compressors.build({name!r}); "
            "print(type(c).__module__, type(c).__name__, c.label)"
        )
        built = _run([sys.executable, "-c", probe], cwd=tmp_path).stdout.split()
        assert built == [names["module"], names["class_name"], f"{name}@1"]

        tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=out)
        assert "6 passed" in tests.stdout, tests.stdout  # the memory_audit fixture's too
    finally:
        subprocess.run(
            [*pip, "uninstall", "-y", names["distribution"]], capture_output=True, timeout=120
        )
    with pytest.raises(metadata.PackageNotFoundError):  # uninstalled: the environment is clean
        metadata.distribution(names["distribution"])
