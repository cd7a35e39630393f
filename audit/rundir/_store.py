"""The run store: one SQLite file per run directory, one row per finished job.

A job's results, its distinct memories and its "done" mark are committed in one
transaction, so a run killed at any moment (even SIGKILL) holds only whole jobs,
and resuming skips exactly those.  A job's results are one typed Arrow table
(IPC, compressed), not one SQL row per read, and its distinct memories are one
compressed block with an index by sha256 (memories of a job share most of their
lines, so a block compresses far better and faster than memory by memory).
A job's log lines (tracebacks of a compressor that raised) are committed with it.
results.csv, results.parquet and run.log are written from the store at the end of
an invocation, whole, in plan order, so they equal the store and do not depend on
which worker finished first.

The store belongs to one run: it records the run id of ``config.json``, and a store
copied in from another run directory is refused.  It also records the count and
sha256 of the planned job keys (``record_plan``), which ``manifest.json`` lists: a
manifest edited by hand no longer matches them.  It holds memories and raw model
answers, so it is created readable by its owner only.  A store that cannot be read
(a damaged page, not a regular file) is one line naming it and the way out
(``store_error``), never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import stat
import time
import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.ipc as pa_ipc

from audit.errors import RunDirectoryError, RunStorageError, StoreFormatError
from audit.rundir._columns import RESULT_COLUMNS, RESULT_SCHEMA, results_table
from audit.rundir._layout import STORE_FILE, not_regular

STORE_FORMAT = 4
"""Bumped when the layout changes; an older store is never written to."""

_CODEC = pa.Codec("zstd", 3)


@dataclass(frozen=True)
class PackedJob:
    """A finished job serialized for storage (done in the worker, off the writer's path)."""

    key: str
    n_rows: int
    results: bytes
    """The job's rows: a RESULT_SCHEMA table as Arrow IPC (compressed)."""
    memory_block: bytes
    """The job's distinct memories, UTF-8, concatenated and compressed."""
    memory_size: int
    memory_index: list[tuple[str, int, int]]
    """(sha256, start, length) of each memory in the uncompressed block."""
    log: list[str]


def table_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    options = pa_ipc.IpcWriteOptions(compression="zstd")
    with pa_ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def table_from_bytes(blob: bytes) -> pa.Table:
    return pa_ipc.open_stream(blob).read_all()


def pack_job(
    key: str,
    rows: Sequence[dict[str, Any]] | Sequence[list[Any]] | pa.Table,
    memories: dict[str, str],
    log: Sequence[str] = (),
) -> PackedJob:
    """Serialize a job; ``rows`` are dicts, lists already in RESULT_COLUMNS order, or
    a RESULT_SCHEMA table."""
    if isinstance(rows, pa.Table):
        table = rows
    else:
        lists: Sequence[Sequence[Any]] = (
            [[row.get(c) for c in RESULT_COLUMNS] for row in rows]  # type: ignore[union-attr]
            if rows and isinstance(rows[0], dict)
            else rows  # type: ignore[assignment]
        )
        table = results_table(lists)
    parts, index, start = [], [], 0
    for sha, text in memories.items():
        raw = text.encode("utf-8")
        parts.append(raw)
        index.append((sha, start, len(raw)))
        start += len(raw)
    block = b"".join(parts)
    return PackedJob(
        key=key,
        n_rows=table.num_rows,
        results=table_bytes(table),
        memory_block=_CODEC.compress(block, asbytes=True) if block else b"",
        memory_size=len(block),
        memory_index=index,
        log=list(log),
    )


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS store_format (version INTEGER NOT NULL);
INSERT INTO store_format SELECT {STORE_FORMAT} WHERE NOT EXISTS (SELECT 1 FROM store_format);
CREATE TABLE IF NOT EXISTS jobs (
    job_key TEXT PRIMARY KEY,
    finished REAL NOT NULL,
    n_rows INTEGER NOT NULL,
    results BLOB NOT NULL,
    memory_block INTEGER
);
CREATE TABLE IF NOT EXISTS run_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_logs (job_key TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory_blocks (
    block INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    blob BLOB NOT NULL,
    shas BLOB NOT NULL
);
"""


def store_format(db: sqlite3.Connection) -> int | None:
    """The layout version of an open store (None: empty; 1: the first layout)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "store_format" in tables:
        found = db.execute("SELECT version FROM store_format").fetchone()
        return None if found is None else int(found[0])
    return 1 if "jobs" in tables else None


def _regular_store(path: Path) -> None:
    """``sqlite3.OperationalError`` unless ``path`` is a regular file: SQLite would fail
    on a directory with a bare "unable to open", and wait forever on a FIFO."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return  # SQLite says so itself (read-only: "unable to open")
    except OSError as error:
        raise sqlite3.OperationalError(error.strerror or str(error)) from None
    if not stat.S_ISREG(mode):
        raise sqlite3.OperationalError(not_regular(path, mode).strerror)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A store opened read-only (immutable when even that fails: a read-only medium);
    ``sqlite3.Error`` when it cannot be read at all (not a regular file, not a store)."""
    _regular_store(path)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        db.execute("SELECT 1 FROM sqlite_master").fetchone()
        return db
    except sqlite3.Error:
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            db.execute("SELECT 1 FROM sqlite_master").fetchone()
        except sqlite3.Error:
            db.close()
            raise
        return db


def store_damage(db: sqlite3.Connection) -> str | None:
    """What SQLite's structural check finds wrong with an open store (None: nothing).
    It reads every page once: a report calls it, a run does not."""
    try:
        found = [str(row[0]) for row in db.execute("PRAGMA quick_check(3)")]
    except sqlite3.Error as error:
        return str(error)
    if found == ["ok"]:
        return None
    lines = [line.strip() for row in found for line in row.splitlines() if line.strip()]
    text = "; ".join(line for line in lines if not line.startswith("***"))
    return text if len(text) <= 300 else text[:297] + "..."


def plan_record(jobs: Sequence[str], units: Sequence[str]) -> dict[str, Any]:
    """The count and sha256 of a run's planned job and unit keys, in plan order: what
    the store records when the run plans them, to check ``manifest.json`` against."""
    text = json.dumps([list(jobs), list(units)], separators=(",", ":"))
    return {
        "jobs": len(jobs),
        "units": len(units),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def stored_plan(db: sqlite3.Connection) -> dict[str, Any] | None:
    """The plan record a store holds (``plan_record``); None in a store made before
    stores recorded it."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "run_meta" not in tables:
        return None
    found = db.execute("SELECT value FROM run_meta WHERE key = 'plan'").fetchone()
    if found is None:
        return None
    try:
        value = json.loads(found[0])
    except (TypeError, ValueError):
        return {"unreadable": str(found[0])[:100]}  # never equal to a real record
    return value if isinstance(value, dict) else {"unreadable": str(value)[:100]}


def _index_blob(index: Sequence[tuple[str, int, int]]) -> bytes:
    """(sha256, start, length) of each memory in a block, compressed JSON."""
    return zlib.compress(json.dumps(index, separators=(",", ":")).encode(), 1)


def job_keys(
    db: sqlite3.Connection, order: Sequence[str] = (), only: Collection[str] | None = None
) -> list[str]:
    """Every stored job's key (those in ``only``, when given): those in ``order`` first,
    then the rest by finishing time."""
    rank = {key: i for i, key in enumerate(order)}
    found = db.execute("SELECT job_key, finished FROM jobs").fetchall()
    if only is not None:
        found = [row for row in found if row[0] in only]
    found.sort(key=lambda row: (rank.get(row[0], len(rank)), row[1], row[0]))
    return [key for key, _ in found]


def stored_run_id(db: sqlite3.Connection) -> str | None:
    """The run id a store was made for (None: a store made before run ids)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "run_meta" not in tables:
        return None
    found = db.execute("SELECT value FROM run_meta WHERE key = 'run_id'").fetchone()
    return None if found is None else str(found[0])


def job_table(db: sqlite3.Connection, key: str) -> pa.Table:
    (blob,) = db.execute("SELECT results FROM jobs WHERE job_key = ?", (key,)).fetchone()
    return table_from_bytes(blob)


def job_tables(
    db: sqlite3.Connection, order: Sequence[str] = (), only: Collection[str] | None = None
) -> Iterator[pa.Table]:
    """Each stored job's results, in ``job_keys`` order; one job decoded at a time."""
    for key in job_keys(db, order, only):
        yield job_table(db, key)


def concat_results(tables: Iterable[pa.Table]) -> pa.Table:
    """Job tables -> one table (an empty RESULT_SCHEMA table when there are none)."""
    found = list(tables)
    return pa.concat_tables(found) if found else RESULT_SCHEMA.empty_table()


class MemoryBlocks:
    """Memories by sha256, from the store's compressed blocks.

    A block carries the index of its own memories; the lookup table over all blocks is
    built on first use (reports read memories, runs only write them), so storing a job
    inserts one row instead of one per memory.  Recently used blocks stay decompressed:
    a report reads many memories of the same job.
    """

    def __init__(self, db: sqlite3.Connection, keep: int = 8) -> None:
        self._db = db
        self._keep = keep
        self._blocks: dict[int, bytes] = {}
        self._where: dict[str, tuple[int, int, int]] | None = None

    def _locations(self) -> dict[str, tuple[int, int, int]]:
        if self._where is None:
            where: dict[str, tuple[int, int, int]] = {}
            for block, shas in self._db.execute("SELECT block, shas FROM memory_blocks"):
                for sha, start, length in json.loads(zlib.decompress(shas)):
                    where.setdefault(sha, (block, start, length))
            self._where = where
        return self._where

    def _block(self, block: int) -> bytes:
        if block not in self._blocks:
            size, blob = self._db.execute(
                "SELECT size, blob FROM memory_blocks WHERE block = ?", (block,)
            ).fetchone()
            if len(self._blocks) >= self._keep:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[block] = _CODEC.decompress(blob, decompressed_size=size, asbytes=True)
        return self._blocks[block]

    def shas(self) -> set[str]:
        """Every stored memory's sha256."""
        return set(self._locations())

    def get(self, sha: str) -> str | None:
        found = self._locations().get(sha)
        if found is None:
            return None
        block, start, length = found
        return self._block(block)[start : start + length].decode("utf-8")

    def many(self, shas: Sequence[str]) -> dict[str, str]:
        where = self._locations()
        located = sorted((where[s], s) for s in dict.fromkeys(shas) if s in where)
        return {
            sha: self._block(block)[start : start + length].decode("utf-8")
            for (block, start, length), sha in located
        }


class RunStore:
    """Append-only results of one run directory.

    ``run_id`` (``config.json``'s) is recorded in a new store and checked in an old
    one: a store another run made is refused, never merged.  Every SQLite failure
    (a full disk, a read-only medium, a damaged file) becomes a ``RunDirectoryError``
    naming the file and the way out.
    """

    def __init__(self, directory: Path, run_id: str | None = None) -> None:
        self.path = directory / STORE_FILE
        if not self.path.exists():
            _create_private(self.path)
        try:
            _regular_store(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as error:
            raise store_error(self.path, error, "open") from None
        try:
            version = store_format(self._db)
            if version is not None and version != STORE_FORMAT:
                raise StoreFormatError(
                    f"{self.path} was written by another version of memory-audit (store "
                    f"format {version}, this one writes {STORE_FORMAT}); its results stay "
                    "readable by `audit report`, but it cannot be resumed: choose another --out"
                )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            if run_id is not None:
                self._claim(run_id)
        except sqlite3.Error as error:
            self._db.close()
            raise store_error(self.path, error, "open") from None
        except BaseException:
            self._db.close()
            raise
        self._memories = MemoryBlocks(self._db)

    def _claim(self, run_id: str) -> None:
        found = stored_run_id(self._db)
        if found is None:
            self._db.execute("INSERT INTO run_meta VALUES ('run_id', ?)", (run_id,))
        elif found != run_id:
            raise RunDirectoryError(
                f"{self.path} belongs to another run (run id {found}; this directory's "
                f"config.json says {run_id}): it was copied from elsewhere and is never "
                f"merged; move it away to run this directory again from its own results"
            )

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A failed read (a damaged page, a blob that does not decode) as one line
        naming the store and the way out."""
        try:
            yield
        except sqlite3.Error as error:
            raise store_error(self.path, error, "read") from None
        except pa.ArrowException as error:
            raise store_error(self.path, error, "read") from None

    def record_plan(self, jobs: Sequence[str], units: Sequence[str]) -> None:
        """Record the count and sha256 of the planned job and unit keys (``plan_record``),
        so that a ``manifest.json`` whose plan was edited by hand is found out by
        ``audit report``; called when the run plans them, before the manifest is
        written."""
        value = json.dumps(plan_record(jobs, units))
        try:
            self._db.execute("INSERT OR REPLACE INTO run_meta VALUES ('plan', ?)", (value,))
        except sqlite3.Error as error:
            raise store_error(self.path, error, "record the plan") from None

    def finished_jobs(self) -> set[str]:
        with self._reading():
            return {key for (key,) in self._db.execute("SELECT job_key FROM jobs")}

    def add_job(self, job: PackedJob, replace: bool = False) -> bool:
        """Commit a whole job atomically; False (and nothing changed) if already stored,
        unless ``replace`` (a resumed unit run again: the new rows take the old ones'
        place in the same transaction)."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                old = db.execute(
                    "SELECT memory_block FROM jobs WHERE job_key = ?", (job.key,)
                ).fetchone()
                if old is not None:
                    if not replace:
                        db.execute("ROLLBACK")
                        return False
                    db.execute("DELETE FROM jobs WHERE job_key = ?", (job.key,))
                    db.execute("DELETE FROM job_logs WHERE job_key = ?", (job.key,))
                    if old[0] is not None:
                        db.execute("DELETE FROM memory_blocks WHERE block = ?", (old[0],))
                block = None
                if job.memory_index:
                    block = db.execute(
                        "INSERT INTO memory_blocks (size, blob, shas) VALUES (?, ?, ?)",
                        (job.memory_size, job.memory_block, _index_blob(job.memory_index)),
                    ).lastrowid
                db.execute(
                    "INSERT INTO jobs VALUES (?, ?, ?, ?, ?)",
                    (job.key, time.time(), job.n_rows, job.results, block),
                )
                if job.log:
                    db.execute("INSERT INTO job_logs VALUES (?, ?)", (job.key, "\n".join(job.log)))
                db.execute("COMMIT")
            except BaseException:
                # SQLite has already rolled back after some failures (a full disk):
                # rolling back again would hide the real error behind "no transaction"
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise store_error(self.path, error, "store a finished job") from None
        return True

    def tables(
        self, order: Sequence[str] = (), only: Collection[str] | None = None
    ) -> Iterator[pa.Table]:
        """Each stored job's results (see ``job_tables``)."""
        for key in self.job_keys(order, only):
            yield self.table(key)

    def job_keys(self, order: Sequence[str] = (), only: Collection[str] | None = None) -> list[str]:
        with self._reading():
            return job_keys(self._db, order, only)

    def table(self, key: str) -> pa.Table:
        """One stored job's results."""
        with self._reading():
            return job_table(self._db, key)

    def logs(self, order: Sequence[str] = ()) -> list[str]:
        """Every stored job's log text, jobs in ``order`` first."""
        rank = {key: i for i, key in enumerate(order)}
        with self._reading():
            found = self._db.execute("SELECT job_key, text FROM job_logs").fetchall()
        found.sort(key=lambda row: (rank.get(row[0], len(rank)), row[0]))
        return [text for _, text in found]

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every stored read as a dict (for inspection and tests)."""
        for table in self.tables():
            yield from table.to_pylist()

    def memory(self, sha: str) -> str | None:
        with self._reading():
            return self._memories.get(sha)

    def memory_shas(self) -> set[str]:
        with self._reading():
            return self._memories.shas()


def _create_private(path: Path) -> None:
    """Create an empty store file readable by its owner only (SQLite gives its -wal and
    -shm files the same mode)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def store_error(
    path: Path, error: sqlite3.Error | pa.ArrowException, doing: str
) -> RunStorageError:
    """A store failure as one line: the file, what failed, and the way out."""
    text = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
    lowered = text.lower()
    if "full" in lowered:
        advice = (
            "the disk is full: nothing of the job was stored; free space, then "
            f"`audit resume {path.parent}`: finished jobs are kept"
        )
    elif "readonly" in lowered or "read-only" in lowered:
        advice = (
            "the run directory is read-only: a run cannot be resumed there (reports can "
            "still be written elsewhere with --out)"
        )
    elif (
        isinstance(error, pa.ArrowException)
        or "not a database" in lowered
        or "malformed" in lowered
        or "corrupt" in lowered
        or "not a regular file" in lowered
    ):
        advice = (
            "the store is damaged: move it away and run again; finished work is redone "
            "(LLM answers come back from the response cache)"
        )
    else:
        advice = "check the file and its directory"
    return RunStorageError(f"{path}: cannot {doing} ({text}): {advice}")


def csv_rows(table: pa.Table) -> bytes:
    """A table's rows as CSV lines, without the header (results.csv's dialect)."""
    sink = io.BytesIO()
    pa_csv.write_csv(table, sink, pa_csv.WriteOptions(include_header=False))
    return sink.getvalue()


def csv_header(schema: pa.Schema = RESULT_SCHEMA) -> bytes:
    """results.csv's header line: the column names, unquoted."""
    sink = io.BytesIO()
    options = pa_csv.WriteOptions(include_header=True, quoting_header="none")
    pa_csv.write_csv(schema.empty_table(), sink, options)
    return sink.getvalue()


def append_csv(path: Path, table: pa.Table) -> bytes:
    """Append a table's rows to a CSV file (header first if the file is new); returns
    the rows as written, so the caller can keep them."""
    new = not path.exists() or path.stat().st_size == 0
    rows = csv_rows(table)
    with path.open("ab") as handle:
        handle.write(csv_header(table.schema) + rows if new else rows)
    return rows
