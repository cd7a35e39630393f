"""The run store: one SQLite file per run directory, one transaction per finished job.

A job's rows, its distinct memories and its "done" mark are committed together,
so a run killed at any moment (even SIGKILL) holds only whole jobs, and resuming
skips exactly those.  Memories are stored once per sha256, compressed.
results.csv grows as jobs finish and is rewritten from the store at the end, so it
always equals the store after a completed run.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STORE_FILE = "store.sqlite"

_ZDICT = (
    b'"expires":"starts":"options":{"selector":"cond_key":"cond_value":"delta":"now":'
    b'{"id":"","op":"tick",{"id":"","op":"revoke","target":"{"id":"","op":"replay","key":"'
    b'{"id":"","op":"choose","key":"{"id":"","op":"copy","key":"","src":"'
    b'{"id":"","op":"set","key":"","value":"","rev":'
)
"""Preset zlib dictionary: record-log memories are short and share these fragments,
which roughly halves their stored size."""


def compress_memory(text: str) -> bytes:
    packer = zlib.compressobj(6, zdict=_ZDICT)
    return packer.compress(text.encode("utf-8")) + packer.flush()


def decompress_memory(blob: bytes) -> str:
    return zlib.decompressobj(zdict=_ZDICT).decompress(blob).decode("utf-8")


@dataclass(frozen=True)
class PackedJob:
    """A finished job serialized for storage (done in the worker, off the writer's path)."""

    key: str
    rows_json: list[str]
    csv_text: str
    memories: list[tuple[str, bytes]]
    log: list[str]


def pack_job(
    key: str,
    rows: Sequence[dict[str, Any]],
    memories: dict[str, str],
    columns: Sequence[str],
    log: Sequence[str] = (),
) -> PackedJob:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
    writer.writerows(rows)
    return PackedJob(
        key=key,
        rows_json=[json.dumps(row, separators=(",", ":")) for row in rows],
        csv_text=buffer.getvalue(),
        memories=[(sha, compress_memory(text)) for sha, text in memories.items()],
        log=list(log),
    )


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

    def add_job(self, job: PackedJob) -> bool:
        """Commit a whole job atomically; False (and nothing changed) if already stored."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if self._db.execute("SELECT 1 FROM jobs WHERE job_key = ?", (job.key,)).fetchone():
                self._db.execute("ROLLBACK")
                return False
            self._db.executemany(
                "INSERT INTO results (job_key, row) VALUES (?, ?)",
                [(job.key, row) for row in job.rows_json],
            )
            self._db.executemany(
                "INSERT OR IGNORE INTO memories (sha256, text) VALUES (?, ?)", job.memories
            )
            self._db.execute("INSERT INTO jobs VALUES (?, ?)", (job.key, time.time()))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return True

    def rows(self) -> Iterator[dict[str, Any]]:
        for (text,) in self._db.execute("SELECT row FROM results ORDER BY seq"):
            yield json.loads(text)

    def memory(self, sha: str) -> str | None:
        found = self._db.execute("SELECT text FROM memories WHERE sha256 = ?", (sha,)).fetchone()
        return None if found is None else decompress_memory(found[0])


def append_csv_text(path: Path, columns: Sequence[str], text: str) -> None:
    """Append pre-formatted CSV lines (header first if the file is new)."""
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        if new:
            csv.writer(handle).writerow(columns)
        handle.write(text)


def append_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Append rows (header first if the file is new)."""
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerows(rows)
