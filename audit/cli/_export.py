"""``audit export``: a run's results in another format (results.csv), on request.

results.parquet is a run's one copy of its rows; a CSV of them (each memory by its
sha256, as ``audit run --csv`` writes it) is made here from it and the store, one job
at a time, without re-running anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from audit.cli._common import echo_fitted, fail, plural, terminal_text


def export_command(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="A run directory written by `audit run`.")
    ],
    csv: Annotated[
        bool,
        typer.Option(
            "--csv",
            help="Write the rows as CSV (memories by sha256; about 360 bytes a read, 142 MB "
            "for the default audit).",
        ),
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="The CSV file (default: RUN_DIR/results.csv).")
    ] = None,
) -> None:
    """Write a run's results as CSV (results.parquet stays the run's own copy)."""
    from audit.rundir import export_csv

    if not csv:
        fail("say which format: --csv")
    if not run_dir.is_dir():
        fail(f"{terminal_text(str(run_dir))} is not a directory")
    path, rows = export_csv(run_dir, out)  # RunDataError: one line
    size = path.stat().st_size / 1e6  # about 360 bytes a read: 142 MB for the default
    echo_fitted(f"wrote {terminal_text(str(path))} ({plural(rows, 'row')}, {size:.1f} MB)")
