"""A run's rows as CSV text for the tests: ``audit export --csv``'s own function, into a
file beside the run directory (a run writes results.csv only when asked)."""

from __future__ import annotations

from pathlib import Path

from audit.rundir import export_csv


def result_csv(run_dir: Path) -> Path:
    """The run's rows as CSV (its own results.csv when it wrote one), freshly exported."""
    if (run_dir / "results.csv").exists():
        return run_dir / "results.csv"
    return export_csv(run_dir, run_dir.with_name(f"{run_dir.name}-rows.csv"))[0]
