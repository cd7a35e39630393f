"""The command line as a user runs it: ``python -m audit`` in a fresh process."""

from __future__ import annotations

import os
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
