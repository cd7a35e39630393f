"""Writing a run's result files: results.csv, results.parquet and summary.json.

Each is written whole (temporary sibling, then rename): a reader never sees half a
file, and a failed write leaves the previous version in place.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.rundir._layout import (
    RESULTS_CSV,
    RESULTS_PARQUET,
    SUMMARY_FILE,
    atomic_path,
    write_atomically,
)


def write_results(out: Path, table: pa.Table, csv_chunks: Sequence[bytes]) -> None:
    """results.csv (the header and rows already encoded, in plan order) and
    results.parquet (when there is a row)."""
    write_atomically(out / RESULTS_CSV, b"".join(csv_chunks))
    if table.num_rows:
        with atomic_path(out / RESULTS_PARQUET) as temp:
            pq.write_table(table, temp)


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """summary.json, indented."""
    write_atomically(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
