"""``audit runs list`` and ``audit runs prune``: every default run is a new directory
under ``runs/``, so a user needs to see them and to remove the old ones.

Only a directory that holds a readable ``manifest.json`` is a run here: prune never
removes anything else (a folder of the user's that happens to sit in ``runs/``), never
follows a symbolic link, and never removes a run whose manifest says ``running``
unless asked (an invocation may be writing it now; a killed one also says so).
"""

from __future__ import annotations

import calendar
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from audit.cli._common import echo_fitted, fail, new_app, plural, terminal_text
from audit.errors import MemoryAuditError, RunDataError
from audit.rundir import SUMMARY_FILE, RunManifest, read_manifest
from audit.scoring import load_summary

runs_app = new_app("runs", "List the run directories under a folder, or remove old ones.")

RootOption = Annotated[Path, typer.Option("--root", help="Folder that holds the run directories.")]

_AGE = re.compile(r"^(?P<count>[0-9]+)(?P<unit>[mhdw])$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class _Run:
    """One run directory as the list shows it."""

    path: Path
    manifest: RunManifest
    bytes: int

    @property
    def state(self) -> str:
        """The manifest's state; ``raised`` for a complete run whose compressor raised
        (``audit run`` exited 5: a failed run, whatever its files say)."""
        if self.manifest.state != "complete":
            return self.manifest.state
        try:
            summary = load_summary(self.path / SUMMARY_FILE)
        except RunDataError:
            return self.manifest.state
        return "raised" if summary.compressor_errors else self.manifest.state

    @property
    def updated(self) -> float:
        """Seconds since the epoch of the manifest's last write (0 when unstamped)."""
        try:
            return float(
                calendar.timegm(time.strptime(self.manifest.updated, "%Y-%m-%dT%H:%M:%SZ"))
            )
        except ValueError:
            return 0.0


def _size(directory: Path) -> int:
    """Bytes of the regular files under ``directory`` (links not followed)."""
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def _runs(root: Path) -> list[_Run]:
    """The run directories directly under ``root``, oldest first."""
    if not root.is_dir():
        fail(f"--root {root}: no such folder")
    found: list[_Run] = []
    for path in sorted(root.iterdir()):
        if path.is_symlink() or not path.is_dir():
            continue
        try:
            manifest = read_manifest(path)
        except MemoryAuditError:
            continue  # damaged or unreadable: not ours to judge here, never removed
        if manifest is not None:
            found.append(_Run(path, manifest, _size(path)))
    return sorted(found, key=lambda run: (run.updated, run.path.name))


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _line(run: _Run) -> str:
    return (
        f"{terminal_text(run.path.name):<24} {run.state:<10} "
        f"{run.manifest.updated or '-':<20} {_mb(run.bytes):>10}"
    )


def list_runs(root: RootOption = Path("runs")) -> None:
    """Each run directory under --root, oldest first: state, last update (UTC), size."""
    runs = _runs(root)
    if not runs:
        echo_fitted(f"no run directories under {root}")
        return
    typer.echo(f"{'run':<24} {'state':<10} {'updated (UTC)':<20} {'size':>10}")
    for run in runs:
        typer.echo(_line(run))
    echo_fitted(f"{plural(len(runs), 'run')}, {_mb(sum(run.bytes for run in runs))} under {root}")


def _age_seconds(text: str) -> int:
    """``30m``, ``12h``, ``7d``, ``2w`` as seconds; a clear error otherwise."""
    found = _AGE.match(text.strip())
    if found is None:
        fail(f"--older-than {text!r}: give a count and a unit, e.g. 30m, 12h, 7d or 2w")
    return int(found["count"]) * _UNIT_SECONDS[found["unit"]]


def prune_runs(
    older_than: Annotated[
        str,
        typer.Option(help="Remove runs last updated longer ago than this: 30m, 12h, 7d, 2w."),
    ],
    root: RootOption = Path("runs"),
    include_running: Annotated[
        bool,
        typer.Option(
            help="Also remove runs whose manifest says running (a run that was killed "
            "says so too; one still running would lose its directory)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option(help="Say what would be removed, remove nothing.")
    ] = False,
) -> None:
    """Remove the run directories under --root last updated before --older-than."""
    cutoff = time.time() - _age_seconds(older_than)
    removed = kept_running = freed = 0
    for run in _runs(root):
        if run.updated >= cutoff:
            continue
        if run.manifest.state == "running" and not include_running:
            kept_running += 1
            continue
        typer.echo(("would remove " if dry_run else "removed ") + _line(run))
        if not dry_run:
            shutil.rmtree(run.path)
        removed += 1
        freed += run.bytes
    verb = "would free" if dry_run else "freed"
    echo_fitted(f"{plural(removed, 'run')}, {verb} {_mb(freed)}")
    if kept_running:
        echo_fitted(
            f"kept {plural(kept_running, 'run')} whose manifest says running (--include-running "
            "removes them too)"
        )


runs_app.command("list")(list_runs)
runs_app.command("prune")(prune_runs)
