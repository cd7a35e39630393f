"""Every command's ``--help`` reads in an 80-column terminal: no line runs past the
edge, no option's help is cut or broken mid-word, and the command lists give each
command's whole first sentence (issue 16: typer's boxed layout left about 18 columns
for the help text and cut it with an ellipsis)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from audit.cli import app
from audit.cli._common import first_sentence

runner = CliRunner()


def _commands() -> list[tuple[list[str], Any]]:
    """Every command and group, with the argument path that reaches it (typer vendors
    its own click, so groups are told by their ``commands``)."""
    root = typer.main.get_command(app)
    found: list[tuple[list[str], Any]] = []

    def walk(path: list[str], command: Any) -> None:
        found.append((path, command))
        if hasattr(command, "commands"):
            for name, child in sorted(command.commands.items()):
                walk([*path, name], child)

    walk([], root)
    return found


COMMANDS = _commands()


def _flat(text: str) -> str:
    """One line, with a word that click wrapped at its hyphen joined again."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"run", "report", "resume", "backends check", "batch export"} <= names


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "audit" for p, _ in COMMANDS]
)
def test_help_fits_80_columns_and_keeps_every_word(path: list[str], command: Any) -> None:
    result = runner.invoke(app, [*path, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    text = result.output
    too_long = [line for line in text.splitlines() if len(line) > 80]
    assert not too_long, too_long
    assert "…" not in text
    assert "..." not in text.replace("[ARGS]...", "").replace("{RUN_DIR}...", "")
    flat = _flat(text)
    for param in command.params:
        helped = getattr(param, "help", None)
        if helped:
            assert _flat(helped) in flat, (param.name, helped)
    if hasattr(command, "commands"):
        for name, child in command.commands.items():
            assert _flat(f"{name} {first_sentence(child.help or '')}") in flat


def test_flags_are_single_and_machine_defaults_are_not_printed() -> None:
    """``--quiet`` is a flag (no ``--no-quiet``), and --workers does not print this
    machine's core count as if it were a fixed default."""
    text = runner.invoke(app, ["run", "--help"], terminal_width=80).output
    assert "--no-quiet" not in text
    workers = _flat(text).split("--workers", 1)[1].split("--quiet", 1)[0]
    assert "default: every core" in workers
    assert "[default:" not in workers


def test_every_option_and_argument_says_what_it_is_for() -> None:
    """An option listed with no help (``generate --pairs-per-family`` showed only
    ``[x>=1]``) leaves a new user guessing."""
    silent = [
        (" ".join(path) or "audit", param.name)
        for path, command in COMMANDS
        for param in command.params
        if not (getattr(param, "help", None) or "").strip()
    ]
    assert not silent


def test_version_names_the_installed_distribution() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"memory-audit {version('memory-audit')}"


def test_run_help_names_the_presets() -> None:
    from histories import PRESETS

    flat = _flat(runner.invoke(app, ["run", "--help"], terminal_width=80).output)
    preset = flat.split("--preset", 1)[1].split("--pairs", 1)[0]
    assert all(name in preset for name in PRESETS), preset
