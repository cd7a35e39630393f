"""Compressor plugins: list what is installed, and scaffold a new plugin package.

``audit compressors`` shows the built-ins, then every installed plugin (entry-point
group ``memory_audit.compressors``); a plugin that fails to load is listed with its
error instead of breaking the listing.  ``audit new-compressor NAME --out DIR``
writes a small, installable plugin package from the templates in
``audit/templates/plugin``: a deterministic strict compressor, its entry point, a
test that streams generated pairs through it and audits it beside ``tail`` (the
``memory_audit`` fixture), and a GitHub Actions workflow that gates pull requests on
``audit compare --fail-on-regression`` (the same as docs/examples/memory-audit-gate.yml).
"""

from __future__ import annotations

import keyword
import re
import secrets
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

from audit.errors import PluginScaffoldError
from compressors import BASELINES, ENTRY_POINT_GROUP, available, builtins
from compressors.adapters import ChatAdapter

LLM_WRITER = "LLM"
DETERMINISTIC_WRITER = "deterministic"
_GAP = "  "
_INDENT = "    "
_MAX_NAME_LENGTH = 40


@dataclass(frozen=True)
class CompressorInfo:
    """One row of ``audit compressors``."""

    name: str
    """The condition id used on the command line (the entry-point name for plugins)."""
    kind: str
    """``strict`` or ``archive``; ``?`` when a plugin could not be loaded."""
    writer: str
    """``deterministic`` or ``LLM``; ``?`` when a plugin could not be loaded."""
    origin: str
    """``built-in`` or ``plugin module:attr``."""
    summary: str
    """The class's one-line summary, or why the plugin could not be loaded."""
    error: str | None = None
    """Set when the plugin failed to import or is not a usable Compressor class."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def list_compressors() -> list[CompressorInfo]:
    """Built-ins (in their preferred order), then installed plugins by name."""
    rows: list[CompressorInfo] = []
    for listing in available():
        cls = listing.cls
        if cls is None:
            error = _one_line(listing.error or "") or "unknown error"
            rows.append(
                CompressorInfo(
                    listing.name, "?", "?", listing.origin, f"cannot load: {error}", error
                )
            )
            continue
        summary = _one_line(cls.summary) or "(no summary)"
        if cls.name != listing.name:
            summary += f" [class name {cls.name!r}]"
        writer = LLM_WRITER if cls.uses_llm else DETERMINISTIC_WRITER
        origin = listing.origin
        if listing.origin == "adapter" and isinstance(cls, type) and issubclass(cls, ChatAdapter):
            extra = cls.extra
            origin = f"adapter [{extra}]" if cls.installed() else f"needs [{extra}]"
        rows.append(CompressorInfo(listing.name, str(cls.kind), writer, origin, summary))
    return rows


def missing_extras(rows: Sequence[CompressorInfo]) -> list[str]:
    """The extras of listed adapters that are not installed, in listing order."""
    found = [r.origin[len("needs [") : -1] for r in rows if r.origin.startswith("needs [")]
    return list(dict.fromkeys(found))


def render_compressor_list(rows: Sequence[CompressorInfo] | None = None, width: int = 100) -> str:
    """The listing as aligned text for a ``width``-column terminal.

    One line per compressor when every summary fits beside the other columns;
    otherwise (the usual case at 100 columns) each summary goes on the line below
    its row, indented.  Name, kind, writer and origin are never cut.
    """
    if rows is None:
        rows = list_compressors()
    header = ("name", "kind", "writer", "origin")
    cells = [header, *((r.name, r.kind, r.writer, r.origin) for r in rows)]
    widths = [max(len(cell[i]) for cell in cells) for i in range(len(header))]
    summary_at = sum(widths) + len(_GAP) * len(widths)
    beside = all(summary_at + len(row.summary) <= width for row in rows)

    def columns(cell: tuple[str, ...]) -> str:
        return _GAP.join(text.ljust(w) for text, w in zip(cell, widths, strict=True))

    lines = [columns(header) + _GAP + "summary" if beside else columns(header).rstrip()]
    for row, cell in zip(rows, cells[1:], strict=True):
        if beside:
            lines.append(columns(cell) + _GAP + row.summary)
        else:
            lines.append(columns(cell).rstrip())
            lines += textwrap.wrap(
                row.summary,
                max(width, 40),
                initial_indent=_INDENT,
                subsequent_indent=_INDENT,
                break_on_hyphens=False,
            )
    notes = []
    extras = missing_extras(rows)
    if extras:
        notes.append(
            "adapters marked needs [EXTRA] run once their library is installed: "
            f"pip install -e '.[{','.join(extras)}]' in a clone of memory-audit "
            f"(or pip install 'memory-audit[{','.join(extras)}]')"
        )
    failed = sum(1 for row in rows if row.error is not None)
    if failed:
        notes.append(
            f"{failed} plugin{'s' if failed > 1 else ''} could not be loaded: "
            "fix or uninstall, see above"
        )
    notes.append(
        "strict: the memory string is all that is kept; archive: re-reads the raw history; "
        "probe: a shortcut heuristic, the floor"
    )
    for note in notes:
        lines += textwrap.wrap(
            note, max(width, 40), subsequent_indent=_INDENT, break_on_hyphens=False
        )
    return "\n".join(lines)


# --- scaffolding ---------------------------------------------------------------

_TEMPLATES = {
    "pyproject.toml": "pyproject.toml.j2",
    "README.md": "README.md.j2",
    "{module}/__init__.py": "module.py.j2",
    "tests/test_{name}.py": "test_plugin.py.j2",
    ".github/workflows/memory-audit.yml": "memory-audit.yml.j2",
}
"""Output path (formatted with the names) -> template in ``audit/templates/plugin``."""

_SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def check_plugin_name(name: str) -> None:
    """Raise ``PluginScaffoldError`` unless ``name`` is a snake_case Python identifier
    that is usable as a condition name and not taken by a built-in."""
    problem: str | None = None
    if not name:
        problem = "is empty"
    elif "-" in name:
        problem = f"contains '-': use snake_case ({_snake(name)!r})"
    elif name != name.lower():
        problem = f"contains uppercase letters: use snake_case ({_snake(name)!r})"
    elif not name[0].isalpha() or not name[0].isascii():
        problem = "must start with a lowercase letter a-z"
    elif bad := sorted({c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))}):
        problem = f"contains {', '.join(map(repr, bad))}: use only a-z, 0-9 and '_'"
    elif not _SNAKE_CASE.fullmatch(name):
        problem = "has '__' or a trailing '_': use single underscores between words"
    elif keyword.iskeyword(name):
        problem = "is a Python keyword"
    elif len(name) > _MAX_NAME_LENGTH:
        problem = f"is longer than {_MAX_NAME_LENGTH} characters"
    elif name in builtins():
        problem = "is a built-in compressor: a plugin of that name would be shadowed by it"
    elif name == BASELINES:
        problem = (
            "stands for the archives and probes in --conditions: a plugin of that name "
            "could never be run by it"
        )
    if problem is not None:
        raise PluginScaffoldError(f"compressor name {name!r} {problem}")


def _snake(name: str) -> str:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[^a-z0-9]+", "_", spaced.lower()).strip("_") or "my_compressor"


def plugin_names(name: str) -> dict[str, str]:
    """What the scaffold calls things: the module, class, distribution and entry point."""
    check_plugin_name(name)
    module = name if name.endswith("_compressor") else f"{name}_compressor"
    camel = "".join(part.capitalize() for part in name.split("_"))
    return {
        "name": name,
        "module": module,
        "class_name": camel if camel.endswith("Compressor") else f"{camel}Compressor",
        "distribution": f"memory-audit-{name.replace('_', '-')}",
        "entry_point_group": ENTRY_POINT_GROUP,
    }


def _render(names: dict[str, str]) -> dict[str, str]:
    env = Environment(
        loader=PackageLoader("audit", "templates/plugin"),
        autoescape=False,
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    return {
        target.format(**names): env.get_template(template).render(**names)
        for target, template in _TEMPLATES.items()
    }


def scaffold_plugin(name: str, out: Path) -> list[Path]:
    """Write a ready-to-install plugin package for compressor ``name`` into ``out``.

    Refuses (``PluginScaffoldError``) a bad name, or an ``out`` that exists and is not
    an empty directory.  Every file is written, or none: the package is built in a
    hidden sibling directory and renamed into place, and anything this call created
    is removed again if it fails.  Returns the written files, under ``out``.
    """
    names = plugin_names(name)
    if out.exists() and not out.is_dir():
        raise PluginScaffoldError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise PluginScaffoldError(f"{out} exists and is not empty: give a new or empty directory")
    files = _render(names)  # template errors surface before anything is written

    target = out.absolute()
    created_parents = [p for p in target.parents if not p.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _make_staging_dir(target)
    moved: list[Path] = []
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.is_dir():  # empty: move the contents in, keeping the directory itself
            for entry in sorted(staging.iterdir()):
                moved.append(entry.rename(target / entry.name))
            staging.rmdir()
        else:
            staging.rename(target)
    except BaseException:
        for path in moved:
            _remove(path)
        _remove(staging)
        for parent in created_parents:
            try:
                parent.rmdir()
            except OSError:
                break
        raise
    return sorted(out / relative for relative in files)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _make_staging_dir(out: Path) -> Path:
    """A new hidden directory beside ``out`` (same file system, so it renames)."""
    for _ in range(100):
        staging = out.parent / f".{out.name}.partial-{secrets.token_hex(4)}"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging
    raise PluginScaffoldError(f"cannot create a staging directory beside {out}")
