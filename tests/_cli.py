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


def store_sql(run_dir: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    """One statement on a run's store, committed; its rows."""
    db = sqlite3.connect(run_dir / "store.sqlite")
    try:
        rows = db.execute(sql, params).fetchall()
        db.commit()
        return rows
    finally:
        db.close()


def vouched_rewrite(run_dir: Path, groups: list, number: int = 6) -> None:
    """results.parquet rewritten as the given row groups with ``number`` in its
    metadata, and vouched for as a run would (the store's sha256 and the manifest's)."""
    import hashlib

    import pyarrow.parquet as pq

    path = run_dir / "results.parquet"
    schema = groups[0].schema.with_metadata({b"memory_audit_format": str(number).encode()})
    with pq.ParquetWriter(
        path, schema, compression="zstd", compression_level=3, write_statistics=False
    ) as writer:
        for group in groups:
            writer.write_table(group.cast(schema), row_group_size=max(group.num_rows, 1))
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    store_sql(run_dir, "UPDATE run_meta SET value = ? WHERE key = 'results_sha256'", sha)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["files"]["results.parquet"] = {"sha256": sha, "bytes": len(raw)}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
