"""The command line as a user runs it: ``python -m audit`` in a fresh process."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def audit(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 900,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """One ``audit`` command; ``env`` adds to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "audit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def finished_jobs(run_dir: Path) -> int:
    """Jobs a (possibly running) audit has committed to its store."""
    if not (run_dir / "store.sqlite").exists():
        return 0
    db = sqlite3.connect(run_dir / "store.sqlite")
    try:
        return int(db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
    except sqlite3.OperationalError:  # killed before the schema was written
        return 0
    finally:
        db.close()


def lean_copy(run_dir: Path, target: Path) -> Path:
    """A copy of a finished run that has results.parquet as its one copy of the rows,
    as a run made without --csv has (its manifest no longer records results.csv)."""
    shutil.copytree(run_dir, target)
    (target / "results.csv").unlink()
    manifest = json.loads((target / "manifest.json").read_text())
    del manifest["files"]["results.csv"]
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target
