"""The run store: one SQLite file per run directory, one row per finished job.

A job's results, its distinct memories and its "done" mark are committed in one
transaction, so a run killed at any moment (even SIGKILL) holds only whole jobs,
and resuming skips exactly those.  A job's results are kept as one compressed
block (its columns as JSON, and its results.csv lines), not one SQL row per read:
a 100,000-read run then writes and reads back in a fraction of a second.
Memories are stored once per sha256, compressed.  results.csv grows as jobs
finish and is rewritten from the store at the end, in plan order, so after a
completed run it always equals the store and does not depend on which worker
finished first.
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

_BLOCK_LEVEL = 1
"""zlib level of a job's result block: the block is repetitive, so the fastest
level already shrinks it about tenfold, and it is written on the hot path."""


def compress_memory(text: str) -> bytes:
    packer = zlib.compressobj(6, zdict=_ZDICT)
    return packer.compress(text.encode("utf-8")) + packer.flush()


def decompress_memory(blob: bytes) -> str:
    return zlib.decompressobj(zdict=_ZDICT).decompress(blob).decode("utf-8")


@dataclass(frozen=True)
class PackedJob:
    """A finished job serialized for storage (done in the worker, off the writer's path)."""

    key: str
    n_rows: int
    columns_blob: bytes
    """zlib of JSON ``{column: [value per row]}``: typed values, None kept apart from ""."""
    csv_text: str
    """The job's results.csv lines (no header)."""
    memories: list[tuple[str, bytes]]
    log: list[str]


def rows_to_lists(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> list[list[Any]]:
    """Dict rows -> value lists in ``columns`` order (missing columns are None)."""
    return [[row.get(c) for c in columns] for row in rows]


def pack_job(
    key: str,
    rows: Sequence[dict[str, Any]] | Sequence[list[Any]],
    memories: dict[str, str],
    columns: Sequence[str],
    log: Sequence[str] = (),
) -> PackedJob:
    """Serialize a job; ``rows`` are dicts, or lists already in ``columns`` order."""
    lists: Sequence[list[Any]] = (
        rows_to_lists(rows, columns)  # type: ignore[arg-type]
        if rows and isinstance(rows[0], dict)
        else rows  # type: ignore[assignment]
    )
    buffer = io.StringIO()
    csv.writer(buffer).writerows(lists)
    by_column = {c: list(v) for c, v in zip(columns, zip(*lists, strict=True), strict=True)}
    blob = zlib.compress(json.dumps(by_column, separators=(",", ":")).encode(), _BLOCK_LEVEL)
    return PackedJob(
        key=key,
        n_rows=len(lists),
        columns_blob=blob,
        csv_text=buffer.getvalue(),
        memories=[(sha, compress_memory(text)) for sha, text in memories.items()],
        log=list(log),
    )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_key TEXT PRIMARY KEY,
    finished REAL NOT NULL,
    n_rows INTEGER NOT NULL DEFAULT 0,
    columns BLOB,
    csv BLOB
);
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
                "INSERT OR IGNORE INTO memories (sha256, text) VALUES (?, ?)", job.memories
            )
            self._db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?, ?)",
                (job.key, time.time(), job.n_rows, job.columns_blob,
                 zlib.compress(job.csv_text.encode("utf-8"), _BLOCK_LEVEL)),
            )  # fmt: skip
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return True

    def _ordered(self, what: str, order: Sequence[str]) -> Iterator[tuple[str, bytes | None]]:
        """(job_key, blob) in ``order``, then any other stored job by finishing time."""
        rank = {key: i for i, key in enumerate(order)}
        found = self._db.execute(f"SELECT job_key, {what}, finished FROM jobs").fetchall()
        found.sort(key=lambda row: (rank.get(row[0], len(rank)), row[2], row[0]))
        for key, blob, _ in found:
            yield key, blob

    def columns(self, columns: Sequence[str], order: Sequence[str] = ()) -> dict[str, list[Any]]:
        """Every stored read as ``{column: values}`` (jobs in ``order`` first)."""
        out: dict[str, list[Any]] = {c: [] for c in columns}
        for _, blob in self._ordered("columns", order):
            if not blob:
                continue
            block: dict[str, list[Any]] = json.loads(zlib.decompress(blob))
            size = len(next(iter(block.values()), []))
            for column in columns:
                out[column].extend(block.get(column) or [None] * size)
        return out

    def rows(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every stored read as a dict (for inspection and tests)."""
        if columns is None:
            from audit._evaluate import RESULT_COLUMNS

            columns = RESULT_COLUMNS
        data = self.columns(columns)
        for values in zip(*data.values(), strict=True):
            yield dict(zip(columns, values, strict=True))

    def csv_text(self, order: Sequence[str] = ()) -> Iterator[str]:
        """The results.csv lines of every stored job (jobs in ``order`` first)."""
        for _, blob in self._ordered("csv", order):
            if blob:
                yield zlib.decompress(blob).decode("utf-8")

    def memory(self, sha: str) -> str | None:
        found = self._db.execute("SELECT text FROM memories WHERE sha256 = ?", (sha,)).fetchone()
        return None if found is None else decompress_memory(found[0])


def write_csv_header(handle: Any, columns: Sequence[str]) -> None:
    csv.writer(handle).writerow(columns)


def append_csv_text(path: Path, columns: Sequence[str], text: str) -> None:
    """Append pre-formatted CSV lines (header first if the file is new)."""
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        if new:
            write_csv_header(handle, columns)
        handle.write(text)
