"""The files of a run directory: their names, how they are written, where runs go.

Every file of a run directory is named here and nowhere else.  A file is written
whole or not at all: to a temporary sibling first, then renamed over the old one,
so a run killed (or a disk filling) mid-write never leaves a torn file in place.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from audit.errors import RunDirectoryError

CONFIG_FILE = "config.json"
"""The resolved run plan, the environment and the creation time."""
RESULTS_CSV = "results.csv"
"""One row per read, in plan order (``rundir.RESULT_COLUMNS``)."""
RESULTS_PARQUET = "results.parquet"
"""The same rows, typed."""
SUMMARY_FILE = "summary.json"
"""Every score of the run (``audit.scoring``)."""
STORE_FILE = "store.sqlite"
"""Finished jobs (results and memories), committed one job per transaction."""
COSTS_FILE = "costs.json"
"""Per-stage work of every invocation (jobs, requests, tokens, seconds)."""
LOG_FILE = "run.log"
"""Tracebacks of compressors that raised (rewritten from the store at the end)."""
MANIFEST_FILE = "manifest.json"
"""Planned and finished units, the run id, the result files' checksums (``_manifest``)."""
REPORT_DIR = "report"
"""Where ``audit report`` writes by default."""
REPLICATION_FILE = "replication.json"
"""In the parent of a replication (``audit run --seeds``): per seed and pooled scores."""


def seed_run_dir(parent: Path, seed: int) -> Path:
    """The run directory of one generation seed of a replication."""
    return parent / f"seed-{seed}"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``path`` to write; renamed over ``path`` when the
    block ends normally, removed when it raises.

    The name is unique per call, so concurrent invocations on one run directory never
    write into each other's temporary file; it is created with the process's umask,
    like any file the user makes.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes | str) -> None:
    """Write ``path`` whole or not at all (temporary sibling, then rename)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_path(path) as temp, temp.open("xb") as handle:
        handle.write(data)


def default_run_dir(root: Path = Path("runs")) -> Path:
    """A new timestamped run directory under ``runs/``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / stamp
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"{stamp}-{suffix}"
    return path


_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def named_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """``runs/NAME`` for ``--name``; a name is one plain path segment, so it can never
    reach outside ``runs/`` (no separators, no ``..``, no leading dot)."""
    if not _RUN_NAME.match(name) or ".." in name:
        raise RunDirectoryError(
            f"--name {name!r}: a run name is 1-100 letters, digits, '_', '.', '-', "
            "starting with a letter or digit, and never contains '..' or '/'"
        )
    return root / name
