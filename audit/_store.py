"""The run store: one SQLite file per run directory, one transaction per finished job.

A job's rows, its distinct memories and its "done" mark are committed together,
so a run killed at any moment (even SIGKILL) holds only whole jobs, and resuming
skips exactly those.  Memories are stored once per sha256, compressed.
results.csv grows as jobs finish and is rewritten from the store at the end, so it
always equals the store after a completed run.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

STORE_FILE = "store.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (job_key TEXT PRIMARY KEY, finished REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_key TEXT NOT NULL,
    row TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_job ON results (job_key);
CREATE TABLE IF NOT EXISTS memories (sha256 TEXT PRIMARY KEY, text BLOB NOT NULL);
"""


class RunStore:
    """Append-only results of one run directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / STORE_FILE
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def finished_jobs(self) -> set[str]:
        return {key for (key,) in self._db.execute("SELECT job_key FROM jobs")}

    def add_job(self, key: str, rows: Sequence[dict[str, Any]], memories: dict[str, str]) -> None:
        """Commit a whole job atomically; a job already stored is left as it is."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if self._db.execute("SELECT 1 FROM jobs WHERE job_key = ?", (key,)).fetchone():
                self._db.execute("ROLLBACK")
                return
            self._db.executemany(
                "INSERT INTO results (job_key, row) VALUES (?, ?)",
                [(key, json.dumps(row, separators=(",", ":"))) for row in rows],
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO memories (sha256, text) VALUES (?, ?)",
                [(sha, zlib.compress(text.encode("utf-8"))) for sha, text in memories.items()],
            )
            self._db.execute("INSERT INTO jobs VALUES (?, ?)", (key, time.time()))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def rows(self) -> Iterator[dict[str, Any]]:
        for (text,) in self._db.execute("SELECT row FROM results ORDER BY seq"):
            yield json.loads(text)

    def memory(self, sha: str) -> str | None:
        found = self._db.execute("SELECT text FROM memories WHERE sha256 = ?", (sha,)).fetchone()
        return None if found is None else zlib.decompress(found[0]).decode("utf-8")


def append_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Append rows (header first if the file is new)."""
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)
