"""The run store: one SQLite file per run directory, one row per finished job.

A job's rows, its distinct memories (one compressed block, indexed by sha256: a row's
``memory_id`` is its position there), its log and its "done" mark are committed in one
transaction, so a run killed at any moment holds only whole jobs and a resume skips
exactly those.  Rows wait in ``pending`` until results.parquet holds them; ``settle``
records that file's sha256 in the transaction that drops them, so every row is stored
once.  The store records its run id and the planned keys' count and sha256 (a copied
store or a hand-edited manifest is found out), is readable by its owner only (it holds
memories and raw answers), and a store that cannot be read is one line naming it
(``store_error``), never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import time
import zlib
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.ipc as pa_ipc

from audit.errors import RunDirectoryError, RunStorageError, StoreFormatError
from audit.rundir._columns import (
    RESULT_COLUMNS,
    RESULT_SCHEMA,
    conformed,
    results_table,
    retryable_na_keys,
    stored_table,
)
from audit.rundir._errors import JobLog
from audit.rundir._layout import RUN_FORMAT, STORE_FILE, check_regular, newer_format

STORE_FORMAT = RUN_FORMAT
"""The run directory's format (``_layout.RUN_FORMAT``) as the store records it; a store
of another format is migrated (``MIGRATIONS``) before it is written to, or refused."""

MIGRATIONS: dict[int, tuple[str, ...]] = {
    5: (),  # format 6 changed only results.parquet's row groups, which a resume rewrites
}
"""Append-only: the SQL statements that bring a store of format N to N + 1 (none: its
tables are unchanged).  A store with a chain of migrations to ``STORE_FORMAT`` is
migrated when a run that owns it opens it to write; readers read it as it is while
every step ahead is empty."""


def _steps(version: int) -> list[str] | None:
    """The statements from ``version`` to ``STORE_FORMAT`` (None: there is no chain)."""
    steps: list[str] = []
    while version != STORE_FORMAT:
        if version not in MIGRATIONS:
            return None
        steps += MIGRATIONS[version]
        version += 1
    return steps


def readable_store(version: int | None) -> bool:
    """Whether a store of ``version`` is read as this format: its tables are this
    format's (None: a store created before its schema was written is not)."""
    return version is not None and _steps(version) == []


OLDEST_READ = min(v for v in (*MIGRATIONS, STORE_FORMAT) if readable_store(v))
"""The oldest store format ``readable_store`` accepts (named when an older is refused)."""

_CODEC = pa.Codec("zstd", 3)


@dataclass(frozen=True)
class PackedJob:
    """A finished job serialized for storage (done in the worker, off the writer's path)."""

    key: str
    n_rows: int
    results: bytes
    """The job's rows: a STORED_SCHEMA table as Arrow IPC (compressed)."""
    memory_block: bytes
    """The job's distinct memories, UTF-8, concatenated and compressed."""
    memory_size: int
    memory_index: list[tuple[str, int, int]]
    """(sha256, start, length) of each memory in the uncompressed block; a row's
    ``memory_id`` is its memory's position here."""
    log: JobLog
    """Its compressor errors (each distinct one once) and other lines for run.log."""
    retry_na: bool = False
    """A read is NA for want of a server: a resume runs the job again."""


def table_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    options = pa_ipc.IpcWriteOptions(compression="zstd")
    with pa_ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def table_from_bytes(blob: bytes) -> pa.Table:
    return conformed(pa_ipc.open_stream(blob).read_all())


def pack_job(
    key: str,
    rows: Sequence[dict[str, Any]] | Sequence[list[Any]] | pa.Table,
    memories: dict[str, str],
    log: JobLog | Sequence[str] = (),
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
        results=table_bytes(stored_table(table, list(memories))),
        memory_block=_CODEC.compress(block, asbytes=True) if block else b"",
        memory_size=len(block),
        memory_index=index,
        log=log if isinstance(log, JobLog) else JobLog(lines=list(log)),
        retry_na=bool(retryable_na_keys(table)),
    )


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS store_format (version INTEGER NOT NULL);
INSERT INTO store_format SELECT {STORE_FORMAT} WHERE NOT EXISTS (SELECT 1 FROM store_format);
CREATE TABLE IF NOT EXISTS jobs (
    job_key TEXT PRIMARY KEY,
    finished REAL NOT NULL,
    n_rows INTEGER NOT NULL,
    retry_na INTEGER NOT NULL,
    memory_block INTEGER
);
CREATE TABLE IF NOT EXISTS pending (job_key TEXT PRIMARY KEY, results BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS run_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS job_logs (job_key TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memory_blocks (
    block INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    blob BLOB NOT NULL,
    shas BLOB NOT NULL
);
"""


def _tables(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _meta_value(db: sqlite3.Connection, key: str) -> str | None:
    """A ``run_meta`` entry of a store (None: absent, or a store made before it)."""
    if "run_meta" not in _tables(db):
        return None
    found = db.execute("SELECT value FROM run_meta WHERE key = ?", (key,)).fetchone()
    return None if found is None else str(found[0])


def store_format(db: sqlite3.Connection) -> int | None:
    """The layout version of an open store (None: empty; 1: the first layout)."""
    tables = _tables(db)
    if "store_format" in tables:
        found = db.execute("SELECT version FROM store_format").fetchone()
        if found is not None and not isinstance(found[0], int):  # read as a damaged store
            raise sqlite3.DatabaseError(f"its format is {found[0]!r}, not a version number")
        return None if found is None else int(found[0])
    return 1 if "jobs" in tables else None


def _regular_store(path: Path) -> None:
    """``sqlite3.OperationalError`` unless ``path`` is a regular file: SQLite would fail
    on a directory with a bare "unable to open", and wait forever on a FIFO."""
    try:
        check_regular(path)
    except FileNotFoundError:
        return  # SQLite says so itself (read-only: "unable to open")
    except OSError as error:  # ``NotRegularFileError`` included
        raise sqlite3.OperationalError(error.strerror or str(error)) from None


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
    found = _meta_value(db, "plan")
    if found is None:
        return None
    try:
        value = json.loads(found)
    except ValueError:
        return {"unreadable": found[:100]}  # never equal to a real record
    return value if isinstance(value, dict) else {"unreadable": str(value)[:100]}


_INDEX_MAGIC = b"MAi5"
"""How a block index of format 5 begins (format 4's was zlib-compressed JSON)."""


def _index_blob(index: Sequence[tuple[str, int, int]]) -> bytes:
    """The index of a block's memories, in block order: their sha256 as 32 raw bytes
    each (hex text was 9.6 of a default run's 40 MB), then their lengths (the starts
    follow), compressed."""
    digests = b"".join(bytes.fromhex(sha) for sha, _, _ in index)
    lengths = np.fromiter((length for _, _, length in index), dtype="<u4", count=len(index))
    count = len(index).to_bytes(4, "little")
    return _INDEX_MAGIC + count + digests + zlib.compress(lengths.tobytes(), 6)


def _index_parts(blob: object) -> tuple[bytes, npt.NDArray[np.uint32]]:
    """A block index of this layout (``_INDEX_MAGIC``): its sha256s as raw bytes, 32
    each, and its lengths; ``ValueError`` when it is not one (any damage)."""
    if not isinstance(blob, bytes) or not blob.startswith(_INDEX_MAGIC):
        raise ValueError("a block index that is not one")
    start = len(_INDEX_MAGIC) + 4
    count = int.from_bytes(blob[len(_INDEX_MAGIC) : start], "little")
    digests = blob[start : start + 32 * count]
    try:
        lengths = np.frombuffer(zlib.decompress(blob[start + 32 * count :]), dtype="<u4")
    except (zlib.error, ValueError) as error:
        raise ValueError(f"a block index whose lengths do not decompress ({error})") from None
    if not len(digests) == 32 * count == 32 * len(lengths):
        raise ValueError("a block index whose sha256s and lengths differ from its count")
    return digests, lengths


def _json_index(blob: object) -> TypeGuard[bytes]:
    """Whether a block index is format 4's (zlib-compressed JSON), not this layout's."""
    return isinstance(blob, bytes) and bool(blob) and not blob.startswith(_INDEX_MAGIC)


def _index_columns(blob: object) -> tuple[list[str], list[int], list[int]]:
    """The sha256s, starts and lengths of a block's memories (any format since 4);
    ``ValueError`` for a damaged index."""
    if _json_index(blob):
        try:
            rows = [(str(sha), int(a), int(b)) for sha, a, b in json.loads(zlib.decompress(blob))]
        except (zlib.error, ValueError, TypeError) as error:  # JSON's errors are ValueErrors
            raise ValueError(f"a block index that does not parse ({error})") from None
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    digests, lengths = _index_parts(blob)
    hexed = digests.hex()
    shas = [hexed[i : i + 64] for i in range(0, len(hexed), 64)]
    starts = np.cumsum(lengths, dtype=np.int64) - lengths
    return shas, starts.tolist(), lengths.tolist()


_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"
"""How a zstd frame (a memory block) begins."""


def _frame_size(head: bytes) -> int | None:
    """The size a zstd frame's header says its content has (None: it says none; a
    frame this code compresses always says it)."""
    if len(head) < 5:
        return None
    descriptor = head[4]
    single = descriptor >> 5 & 1
    at = 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3]
    width = (single, 2, 4, 8)[descriptor >> 6]
    if not width or len(head) < at + width:
        return None
    return int.from_bytes(head[at : at + width], "little") + (256 if width == 2 else 0)


@dataclass(frozen=True)
class HeldJob:
    """What a results.parquet holds of one job: its rows, and how many memories they
    name (the largest ``memory_id`` plus one), to be checked against the store's record
    of the job."""

    rows: int
    memories: int
    """-1 where a row names a memory by a negative number."""
    sizes: npt.NDArray[np.int64] | None = None
    """Each named memory's ``memory_bytes`` by its ``memory_id`` (-1: one no row names
    with a size), to check that the block is the one the rows name."""


def damaged_jobs(
    db: sqlite3.Connection, held: Mapping[str, HeldJob | None], read_memories: bool = False
) -> dict[str, str]:
    """Each stored job whose rows or memories the store cannot give back as stored,
    with why: a row count that is not one, a memory block gone or another job's, an
    index that does not parse, a block that is not compressed memories or not of its
    index's size; and each job of ``held`` (jobs whose rows a results.parquet holds,
    with what it holds of each where known) of which it holds no record, or, its rows
    not waiting in the store, whose row count is not the file's or whose rows name
    memories its block does not list.
    Reads each index and the header of each block; with ``read_memories`` also each
    memory, hashed against its index (0.4 CPU s on the default run, which a resume
    pays and a report does not: it checks the memories it shows, ``MemoryBlocks``)."""
    query = (
        "SELECT j.job_key, typeof(j.n_rows), j.n_rows, j.memory_block, b.block, b.size, "
        "substr(CAST(b.blob AS BLOB), 1, 18), CAST(b.shas AS BLOB), p.job_key IS NULL "
        "FROM jobs j LEFT JOIN memory_blocks b ON b.block = j.memory_block "
        "LEFT JOIN pending p ON p.job_key = j.job_key"
    )
    jobs = db.execute(query).fetchall()
    recorded = {job[0] for job in jobs}
    found = {
        key: "the store holds no record of it, its rows are in results.parquet"
        for key in held
        if key not in recorded
    }
    shared = Counter(job[3] for job in jobs)
    for key, kind, rows, named, block, size, head, index, settled in jobs:
        # (a job whose rows wait in the store is not read from results.parquet)
        sharing, parquet = shared[named], held.get(key) if settled else None
        if kind != "integer":
            found[key] = "its row count is not a number"
        elif parquet is not None and parquet.rows != rows:
            found[key] = f"its row count is {rows}, results.parquet holds {parquet.rows}"
        elif parquet is not None and parquet.memories < 0:
            found[key] = "its rows name a memory by a negative number"
        elif named is None:
            if parquet is not None and parquet.memories:
                found[key] = f"its rows name {parquet.memories} memories, it keeps none"
        elif block is None:
            found[key] = "its memory block is missing"
        elif sharing > 1:
            found[key] = f"its memory block is also {sharing - 1} other job(s)'"
        else:
            try:
                digests, lengths = _index_parts(index)
            except ValueError as error:
                found[key] = f"its memory index is damaged ({error})"
                continue
            frame = bool(head) and head[:4] == _ZSTD_FRAME and _frame_size(head) in (None, size)
            if size != int(lengths.sum()) or (size and not frame):  # no memory: no frame
                found[key] = "its memory block is not the memories its index lists"
            elif parquet is not None and parquet.memories > len(lengths):
                found[key] = (
                    f"its rows name {parquet.memories} memories, its index lists {len(lengths)}"
                )
            elif parquet is not None and not _sizes_agree(parquet.sizes, lengths):
                found[key] = "its memory block is not the one its rows name (their sizes differ)"
            elif read_memories and _block_digests(db, block, lengths) != digests:
                found[key] = UNFAITHFUL
    counts = {job[0]: job[2] for job in jobs if job[1] == "integer"}
    # (rows waiting for a key the store has no job of are never read: job keys come from
    # its jobs, and storing that job replaces them)
    for key, blob in db.execute("SELECT job_key, CAST(results AS BLOB) FROM pending"):
        if key in counts and key not in found and (why := _waiting_damage(key, blob, counts[key])):
            found[key] = why
    return found


def _waiting_damage(key: str, blob: object, rows: int) -> str | None:
    """Why a job's rows waiting in the store are not its rows as it stored them (None:
    they are): they do not parse, are not as many as its record says, or name another
    job."""
    try:
        table = table_from_bytes(blob) if isinstance(blob, bytes) else None
        # every row's job_key is the job's (one of another type: a table never written)
        own = (
            table is not None
            and (pc.sum(pc.equal(table["job_key"], key)).as_py() or 0) == table.num_rows
        )
    except (pa.ArrowException, ValueError, OSError, KeyError):
        table = None
    if table is None:
        return "its rows waiting in the store do not parse"
    if rows != table.num_rows:
        return f"its rows waiting in the store are {table.num_rows}, its record says {rows}"
    if not own:
        return "its rows waiting in the store name another job"
    return None


UNFAITHFUL = "its memory block does not hold the memories its index names"


def _sizes_agree(sizes: npt.NDArray[np.int64] | None, lengths: npt.NDArray[np.uint32]) -> bool:
    """Whether each memory the rows give a size has that length in the block's index."""
    if sizes is None:
        return True
    named = sizes >= 0
    return bool(np.array_equal(sizes[named], lengths[: len(sizes)][named]))


def _block_digests(db: sqlite3.Connection, block: int, lengths: npt.NDArray[np.uint32]) -> bytes:
    """The sha256 of each memory a block holds, by its index's ``lengths``, as raw bytes
    (empty when the block does not decompress)."""
    size, blob = db.execute(
        "SELECT size, CAST(blob AS BLOB) FROM memory_blocks WHERE block = ?", (block,)
    ).fetchone()
    try:
        memories = memoryview(_CODEC.decompress(blob, decompressed_size=size)) if size else b""
    except (TypeError, OverflowError, OSError):
        return b""
    ends = np.cumsum(lengths, dtype=np.int64).tolist()
    sha256 = hashlib.sha256
    return b"".join(
        sha256(memories[start:end]).digest() for start, end in zip([0, *ends], ends, strict=False)
    )


def damaged_jobs_text(damaged: dict[str, str]) -> str:
    """``damaged_jobs`` in one line: how many, and the first with why."""
    key, why = next(iter(damaged.items()))
    more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
    return f"{STORE_FILE} is damaged (job {key}: {why}{more})"


def job_keys(
    db: sqlite3.Connection, order: Sequence[str] = (), only: Collection[str] | None = None
) -> list[str]:
    """Every stored job's key (those in ``only``, when given): those in ``order`` first,
    then the rest by finishing time."""
    rank = {key: i for i, key in enumerate(order)}
    found = db.execute(  # a time that is not a number sorts as the first (it is no time)
        "SELECT job_key, CASE WHEN typeof(finished) IN ('real', 'integer') THEN finished "
        "ELSE 0 END FROM jobs"
    ).fetchall()
    if only is not None:
        found = [row for row in found if row[0] in only]
    found.sort(key=lambda row: (rank.get(row[0], len(rank)), row[1], row[0]))
    return [key for key, _ in found]


def stored_run_id(db: sqlite3.Connection) -> str | None:
    """The run id a store was made for (None: a store made before run ids)."""
    return _meta_value(db, "run_id")


def pending_table(db: sqlite3.Connection, key: str) -> pa.Table | None:
    """A stored job's rows (STORED_SCHEMA) while they wait for results.parquet; None
    once they are in it."""
    found = db.execute("SELECT results FROM pending WHERE job_key = ?", (key,)).fetchone()
    return None if found is None else table_from_bytes(found[0])


def pending_keys(db: sqlite3.Connection) -> set[str]:
    """The jobs whose rows are not in results.parquet yet."""
    return {key for (key,) in db.execute("SELECT job_key FROM pending")}


def retry_keys(db: sqlite3.Connection) -> set[str]:
    """Stored jobs with a read that is NA for want of a server."""
    return {key for (key,) in db.execute("SELECT job_key FROM jobs WHERE retry_na = 1")}


def job_shas(db: sqlite3.Connection, key: str) -> pa.StringArray | None:
    """A job's distinct memories' sha256 in block order (a row's ``memory_id`` indexes
    it); None when the store does not hold the job or cannot say (``damaged_jobs`` says
    why).  Built from the index's hex digits as one buffer: a Python string a memory
    took most of a report's digest lookup."""
    found = db.execute(
        "SELECT j.memory_block, CAST(b.shas AS BLOB) FROM jobs j "
        "LEFT JOIN memory_blocks b ON b.block = j.memory_block "
        "WHERE j.job_key = ?",
        (key,),
    ).fetchone()
    if found is None:
        return None
    named, blob = found
    if blob is None:
        return None if named is not None else pa.array([], pa.string())
    try:
        if _json_index(blob):
            return pa.array(_index_columns(blob)[0], pa.string())
        digests, lengths = _index_parts(blob)
    except ValueError:
        return None
    offsets = np.arange(0, 64 * (len(lengths) + 1), 64, dtype=np.int32)
    digits = pa.py_buffer(digests.hex().encode("ascii"))
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), digits)


def vouched_results(db: sqlite3.Connection) -> set[str]:
    """The sha256 of the results.parquet files the store vouches for: the one its
    settled rows are in, and the one an invocation was about to put in place (a kill
    between the rename and ``settle`` leaves that one)."""
    found = db.execute(
        "SELECT value FROM run_meta WHERE key IN ('results_sha256', 'results_next')"
    ).fetchall()
    return {str(value) for (value,) in found}


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
        self._blocks: dict[int, memoryview] = {}
        self._where: dict[str, int] | None = None
        self._spots: tuple[list[int], list[int], list[int]] = ([], [], [])
        """Block, start and length of each indexed memory, by its place in the index."""
        self.unfaithful: set[int] = set()
        """Blocks with a memory that is not the one its sha256 names (left out)."""

    def _locations(self) -> dict[str, int]:
        """sha256 -> its place in ``_spots``: the first block that holds it (built in
        columns, a tuple per memory took most of a report's reading)."""
        if self._where is None:
            shas: list[str] = []
            blocks: list[int] = []
            starts: list[int] = []
            lengths: list[int] = []
            for block, blob in self._db.execute(
                "SELECT block, CAST(shas AS BLOB) FROM memory_blocks"
            ):
                try:
                    index = _index_columns(blob)
                except ValueError:  # its memories are left out (``damaged_jobs`` says so)
                    continue
                shas += index[0]
                blocks += [block] * len(index[0])
                starts += index[1]
                lengths += index[2]
            self._spots = (blocks, starts, lengths)
            self._where = dict(zip(reversed(shas), range(len(shas) - 1, -1, -1), strict=True))
        return self._where

    def _text(self, place: int, sha: str) -> str | None:
        """The memory at ``place``; None when it is not the one ``sha`` names (a byte
        changed inside its block, blocks of one size swapped, an index reordered)."""
        blocks, starts, lengths = self._spots
        start = starts[place]
        raw = self._block(blocks[place])[start : start + lengths[place]]
        if hashlib.sha256(raw).hexdigest() != sha:
            self.unfaithful.add(blocks[place])
            return None
        return str(raw, "utf-8")

    def _block(self, block: int) -> memoryview:
        """The block's memories, decompressed (not copied into bytes: a third of the time)."""
        if block not in self._blocks:
            size, blob = self._db.execute(
                "SELECT size, CAST(blob AS BLOB) FROM memory_blocks WHERE block = ?", (block,)
            ).fetchone()
            try:
                memories = _CODEC.decompress(blob, decompressed_size=size)
            except (TypeError, OverflowError, OSError) as error:  # a damaged block
                raise ValueError(f"memory block {block} does not decompress ({error})") from None
            if len(self._blocks) >= self._keep:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[block] = memoryview(memories)
        return self._blocks[block]

    def shas(self) -> set[str]:
        """Every stored memory's sha256."""
        return set(self._locations())

    def get(self, sha: str) -> str | None:
        found = self._locations().get(sha)
        return None if found is None else self._text(found, sha)

    def many(self, shas: Sequence[str]) -> dict[str, str]:
        where = self._locations()
        found = {}
        for place, sha in sorted((where[s], s) for s in dict.fromkeys(shas) if s in where):
            with contextlib.suppress(ValueError):  # a damaged block's memories are left out
                if (text := self._text(place, sha)) is not None:
                    found[sha] = text
        return found


class RunStore:
    """Append-only results of one run directory.

    ``run_id`` (``config.json``'s) is recorded in a new store and checked in an old
    one: a store another run made is refused, never merged.  Every SQLite failure
    (a full disk, a read-only medium, a damaged file) becomes a ``RunDirectoryError``
    naming the file and the way out.
    """

    def __init__(self, directory: Path, run_id: str | None = None) -> None:
        self.path = directory / STORE_FILE
        self.owned = False
        """Whether the store already named ``run_id`` as its run when opened."""
        if not self.path.exists():
            _create_private(self.path)
        try:
            _regular_store(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as error:
            raise store_error(self.path, error, "open") from None
        try:
            version = store_format(self._db)
            steps = None if version is None else _steps(version)
            if (newer := newer_format(directory, version)) is not None:
                raise StoreFormatError(newer)
            if version is not None and steps is None:
                raise StoreFormatError(
                    f"{self.path} was written by another version of memory-audit (run "
                    f"directory format {version}, this one writes {STORE_FORMAT}); its "
                    "results stay readable by `audit report`, but it cannot be resumed: run "
                    "the same command with another --out (or move the directory away)"
                )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            if run_id is not None:
                self._claim(run_id)  # another run's store is refused before it is migrated
            if version is not None and version != STORE_FORMAT:
                self._migrate(version)
        except sqlite3.Error as error:
            self._db.close()
            raise store_error(self.path, error, "open") from None
        except BaseException:
            self._db.close()
            raise
        self._memories = MemoryBlocks(self._db)

    def _migrate(self, version: int) -> None:
        """Bring an earlier format's store to ``STORE_FORMAT`` in one transaction (a
        concurrent invocation that migrated it first leaves nothing to do)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if store_format(self._db) == version:
                for statement in _steps(version) or ():
                    self._db.execute(statement)
                self._db.execute("UPDATE store_format SET version = ?", (STORE_FORMAT,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _claim(self, run_id: str) -> None:
        found = stored_run_id(self._db)
        self.owned = found == run_id
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
        except (sqlite3.Error, pa.ArrowException) as error:
            raise store_error(self.path, error, "read") from None

    @contextlib.contextmanager
    def _writing(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed when the block ends; a failed write as one
        line naming the store and what it was ``doing`` (``store_error``)."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                # SQLite has already rolled back after some failures (a full disk):
                # rolling back again would hide the real error behind "no transaction"
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise store_error(self.path, error, doing) from None

    def record_plan(self, jobs: Sequence[str], units: Sequence[str]) -> None:
        """Record the count and sha256 of the planned job and unit keys (``plan_record``),
        so that a ``manifest.json`` whose plan was edited by hand is found out by
        ``audit report``; called when the run plans them, before the manifest is
        written."""
        self._meta("plan", json.dumps(plan_record(jobs, units)), "record the plan")

    def planned(self, jobs: Sequence[str], units: Sequence[str]) -> bool:
        """Whether the store recorded this very plan (``record_plan``)."""
        with self._reading():
            return stored_plan(self._db) == plan_record(jobs, units)

    def finished_jobs(self) -> set[str]:
        with self._reading():
            return {key for (key,) in self._db.execute("SELECT job_key FROM jobs")}

    def drop_jobs(self, keys: Collection[str]) -> None:
        """Delete the records of ``keys`` and every memory block no job names then, in
        one transaction: records of this run's store that its plan never made."""
        with self._writing("drop unplanned jobs") as db:
            for table in ("jobs", "job_logs", "pending"):
                db.executemany(f"DELETE FROM {table} WHERE job_key = ?", [(k,) for k in keys])
            db.execute(
                "DELETE FROM memory_blocks WHERE block NOT IN "
                "(SELECT memory_block FROM jobs WHERE memory_block IS NOT NULL)"
            )

    def add_job(self, job: PackedJob, replace: bool = False) -> bool:
        """Commit a whole job atomically; False (and nothing changed) if already stored,
        unless ``replace`` (a resumed unit run again: the new rows take the old ones'
        place in the same transaction)."""
        with self._writing("store a finished job") as db:
            old = db.execute(
                "SELECT memory_block FROM jobs WHERE job_key = ?", (job.key,)
            ).fetchone()
            if old is not None and not replace:
                return False  # (the transaction ends having written nothing)
            # (rows or a log left without a job record are damage: replaced too)
            for table in ("jobs", "job_logs", "pending"):
                db.execute(f"DELETE FROM {table} WHERE job_key = ?", (job.key,))
            if old is not None and old[0] is not None:
                db.execute("DELETE FROM memory_blocks WHERE block = ?", (old[0],))
            block = None
            if job.memory_index:
                block = db.execute(
                    "INSERT INTO memory_blocks (size, blob, shas) VALUES (?, ?, ?)",
                    (job.memory_size, job.memory_block, _index_blob(job.memory_index)),
                ).lastrowid
            db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?, ?)",
                (job.key, time.time(), job.n_rows, int(job.retry_na), block),
            )
            db.execute("INSERT INTO pending VALUES (?, ?)", (job.key, job.results))
            if job.log or job.log.seconds:
                db.execute("INSERT INTO job_logs VALUES (?, ?)", (job.key, job.log.to_text()))
        return True

    def job_keys(self, order: Sequence[str] = (), only: Collection[str] | None = None) -> list[str]:
        with self._reading():
            return job_keys(self._db, order, only)

    def pending_keys(self) -> set[str]:
        with self._reading():
            return pending_keys(self._db)

    def damaged_jobs(
        self, held: Mapping[str, HeldJob | None], read_memories: bool = False
    ) -> dict[str, str]:
        with self._reading():
            return damaged_jobs(self._db, held, read_memories)

    def pending(self, key: str) -> pa.Table | None:
        """A job's rows (STORED_SCHEMA) if they are not in results.parquet yet."""
        with self._reading():
            return pending_table(self._db, key)

    def retry_keys(self) -> set[str]:
        with self._reading():
            return retry_keys(self._db)

    def vouched(self) -> set[str]:
        with self._reading():
            return vouched_results(self._db)

    def expect_results(self, sha256: str) -> None:
        """Vouch for the results.parquet about to be put in place (before the rename)."""
        self._meta("results_next", sha256, "record the results' checksum")

    def settle(self, sha256: str, keys: Collection[str]) -> None:
        """results.parquet (``sha256``) now holds the rows of ``keys``: vouch for it alone
        and drop those rows from ``pending``, in one transaction; the file then shrinks
        by their size (``VACUUM``)."""
        with self._writing("record the results") as db:
            db.execute("INSERT OR REPLACE INTO run_meta VALUES ('results_sha256', ?)", (sha256,))
            db.execute("DELETE FROM run_meta WHERE key = 'results_next'")
            db.executemany("DELETE FROM pending WHERE job_key = ?", [(k,) for k in keys])
        try:
            db.execute("VACUUM")  # the rows' pages back to the file system
        except sqlite3.Error as error:
            raise store_error(self.path, error, "record the results") from None

    def _meta(self, key: str, value: str, doing: str) -> None:
        try:
            self._db.execute("INSERT OR REPLACE INTO run_meta VALUES (?, ?)", (key, value))
        except sqlite3.Error as error:
            raise store_error(self.path, error, doing) from None

    def logs(self, order: Sequence[str] = ()) -> list[JobLog]:
        """Every stored job's log, jobs in ``order`` first (then by key: a fixed order)."""
        rank = {key: i for i, key in enumerate(order)}
        with self._reading():
            found = self._db.execute("SELECT job_key, text FROM job_logs").fetchall()
        found.sort(key=lambda row: (rank.get(row[0], len(rank)), row[0]))
        return [JobLog.from_text(text) for _, text in found]

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every stored read as a dict, each memory by its sha256 (for inspection and
        tests): from ``pending`` and the results.parquet the store vouches for."""
        from audit.rundir._results import stored_tables

        with self._reading():
            for _key, table in stored_tables(self._db, self.path.parent, self.job_keys()):
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
