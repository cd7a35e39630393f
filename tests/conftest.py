"""Fixtures every room's tests share."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from histories import PRESETS, Pair, generate


@pytest.fixture(scope="session")
def pilot() -> tuple[Pair, ...]:
    """The default pilot's pairs (``cca-pilot``), generated once for the session: pairs
    are frozen, and a tuple, so no test can change what the next one reads."""
    return tuple(generate(PRESETS["cca-pilot"]))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the working directory, and no MEMORY_AUDIT_* variable of the
    developer's: no audit.toml, .env or setting of theirs leaks in."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.upper().startswith("MEMORY_AUDIT_"):
            monkeypatch.delenv(name)
    return tmp_path


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], str]]:
    """Write a plugin module: ``plugin(name, source)`` puts the dedented ``source`` in
    ``name.py`` on ``sys.path`` for the test's duration, imported afresh (no module of
    that name left from an earlier test), and returns ``name``."""
    written: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(tmp_path))
        sys.modules.pop(name, None)
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)
