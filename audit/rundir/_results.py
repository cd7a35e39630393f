"""Writing and reading a run's result files: results.parquet, results.csv, summary.json.

results.parquet is the run's one copy of its rows (``STORED_SCHEMA``, zstd) in plan
order, its row groups of whole jobs (about ``ROW_GROUP_ROWS`` rows each), so a resume
that finishes the same plan writes the same bytes; it is rewritten streaming a group at
a time, and a job's rows are found from the runs of ``job_key`` inside its group.
results.csv (the same rows with the memories' sha256) is written on request only.
Every file is written whole.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import RunDataError
from audit.rundir._columns import MEMORY_ID, STORED_SCHEMA, conformed, result_table
from audit.rundir._layout import (
    RESULTS_CSV,
    RESULTS_PARQUET,
    RUN_FORMAT,
    STORE_FILE,
    SUMMARY_FILE,
    atomic_path,
    newer_format,
    write_atomically,
)
from audit.rundir._manifest import file_record, read_manifest
from audit.rundir._store import (
    OLDEST_READ,
    HeldJob,
    RunStore,
    connect_read_only,
    csv_header,
    csv_rows,
    damaged_jobs,
    damaged_jobs_text,
    job_keys,
    job_shas,
    pending_table,
    readable_store,
    store_format,
    vouched_results,
)

FORMAT_KEY = b"memory_audit_format"
"""results.parquet's metadata entry holding the run directory's format."""

ROW_GROUP_ROWS = 65_536
"""Rows gathered into one row group, in whole jobs (a larger job is a group alone).  A
row group per job (format 5) gave 8,400 jobs a footer of 336,000 column chunks, which
pyarrow held in memory while writing and again on opening: 835 MiB at 100x the
default's reads, against 217 MiB."""

JobRun = tuple[str, int, int]
"""A job's rows inside a row group: (job key, first row, rows)."""


def _writer(path: Path) -> pq.ParquetWriter:
    """No column statistics: nothing reads results.parquet by predicate, and the writer
    held each row group's min and max values until it closed (about 65 KB a job, so
    the main process grew with the run's jobs: 55 MB over 840)."""
    schema = STORED_SCHEMA.with_metadata({FORMAT_KEY: str(RUN_FORMAT).encode()})
    return pq.ParquetWriter(
        path, schema, compression="zstd", compression_level=3, write_statistics=False
    )


def write_parquet(
    out: Path, tables: Iterable[pa.Table], vouch: Callable[[str], None] = lambda sha: None
) -> str:
    """results.parquet from job tables (STORED_SCHEMA) given one at a time, gathered
    into row groups of whole jobs; returns its sha256, which ``vouch`` gets before the
    file is put in place (the store records it, so a kill right after the rename leaves
    a file it knows)."""
    with atomic_path(out / RESULTS_PARQUET) as temp:
        writer = _writer(temp)
        try:
            gathered: list[pa.Table] = []
            rows = 0
            for table in tables:
                if not table.num_rows:
                    continue
                if gathered and rows + table.num_rows > ROW_GROUP_ROWS:
                    _write_group(writer, gathered)
                    gathered, rows = [], 0
                gathered.append(table.cast(STORED_SCHEMA))
                rows += table.num_rows
            if gathered:
                _write_group(writer, gathered)
        finally:
            writer.close()
        sha = file_record(temp).sha256
        vouch(sha)
    return sha


def _write_group(writer: pq.ParquetWriter, tables: list[pa.Table]) -> None:
    group = pa.concat_tables(tables)
    writer.write_table(group, row_group_size=group.num_rows)


def job_runs(keys: pa.ChunkedArray | pa.Array) -> list[JobRun]:
    """Each job's (key, first row, rows) in a row group's ``job_key`` column: a job's
    rows are contiguous, in plan order."""
    array = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if not len(array):
        return []
    if array.null_count:
        raise pa.ArrowInvalid("results.parquet has a row without a job_key")
    runs = pc.run_end_encode(array.cast(pa.string()))
    ends = runs.run_ends.to_pylist()
    starts = [0, *ends[:-1]]
    return [
        (str(key), start, end - start)
        for key, start, end in zip(runs.values.to_pylist(), starts, ends, strict=True)
    ]


def grouped_runs(keys: Iterable[pa.ChunkedArray | pa.Array]) -> list[tuple[int, JobRun]]:
    """(row group, its job run) for each group's ``job_key`` column, in file order;
    ``ArrowInvalid`` when a job's rows are in two places, within a group or across two:
    a results.parquet this code never writes (edited, or damaged), refused rather than
    read in part.  (Whether a job's rows are as many as the store recorded is
    ``damaged_jobs``' to say, from ``held_jobs``: a resume runs such a job again.)"""
    found = [(group, run) for group, column in enumerate(keys) for run in job_runs(column)]
    seen: set[str] = set()
    for _group, (key, _start, _rows) in found:
        if key in seen:
            raise pa.ArrowInvalid(f"results.parquet holds the rows of job {key} in two places")
        seen.add(key)
    return found


def parquet_jobs(path: Path) -> dict[str, tuple[int, int, int]]:
    """job key -> (row group, first row, rows) in a results.parquet of format 5 or later
    (format 5 had a row group per job; the runs inside a group find both), checked as
    ``grouped_runs`` checks it."""
    handle = pq.ParquetFile(path)
    columns = (
        handle.read_row_group(group, columns=["job_key"])["job_key"]
        for group in range(handle.num_row_groups)
    )
    return {key: (group, start, rows) for group, (key, start, rows) in grouped_runs(columns)}


def held_of(jobs: Iterable[tuple[str, pa.Table]]) -> dict[str, HeldJob]:
    """What each job's rows (STORED_SCHEMA) hold, for ``damaged_jobs``."""
    found = {}
    for key, table in jobs:
        least, largest = pc.min_max(table[MEMORY_ID]).values()
        count = 0 if largest.as_py() is None else largest.as_py() + 1
        if least.as_py() is not None and least.as_py() < 0:
            count = -1  # a memory named by a negative number: damage
        found[key] = HeldJob(table.num_rows, count, _named_sizes(table, count))
    return found


def _named_sizes(table: pa.Table, count: int) -> npt.NDArray[np.int64] | None:
    """``HeldJob.sizes`` of a job's rows; None where they cannot say (no sizes, or ids
    that are negative or more than the rows: ``damaged_jobs`` names those)."""
    if "memory_bytes" not in table.column_names or not 0 <= count <= table.num_rows:
        return None
    sizes = np.full(count + 1, -1, dtype=np.int64)  # (the last: rows naming none)
    ids = table[MEMORY_ID].fill_null(count).to_numpy()
    sizes[ids] = table["memory_bytes"].fill_null(-1).to_numpy()
    return sizes[:count]


def held_jobs(path: Path) -> dict[str, HeldJob]:
    """``held_of`` each job of a results.parquet of format 5 or later."""
    handle = pq.ParquetFile(path)
    groups = [
        handle.read_row_group(group, columns=["job_key", MEMORY_ID, "memory_bytes"])
        for group in range(handle.num_row_groups)
    ]
    runs = grouped_runs(group["job_key"] for group in groups)
    return held_of((key, groups[group].slice(start, rows)) for group, (key, start, rows) in runs)


def parquet_format(path: Path) -> int | None:
    """The run-directory format a results.parquet records (None: an older layout)."""
    metadata = pq.read_schema(path).metadata or {}
    raw = metadata.get(FORMAT_KEY)
    version = None if raw is None else int(raw)
    if (newer := newer_format(path, version)) is not None:
        raise ValueError(newer)
    return version


def job_tables(
    order: Iterable[str],
    pending: Callable[[str], pa.Table | None],
    parquet: Path | None,
) -> Iterator[tuple[str, pa.Table]]:
    """Each job of ``order`` that has rows, one at a time (STORED_SCHEMA): from the store
    while they wait there (``pending``), else from ``parquet`` (a results.parquet the
    store vouches for); a job found in neither is left out.  A row group is read once
    while its jobs follow each other (plan order is the file's order)."""
    handle = pq.ParquetFile(parquet) if parquet is not None else None
    where: dict[str, tuple[int, int, int]] | None = None  # read when a job is not pending
    held: tuple[int, pa.Table] | None = None
    for key in order:
        table = pending(key)
        if table is None and parquet is not None and handle is not None:
            where = parquet_jobs(parquet) if where is None else where
            if key in where:
                group, start, rows = where[key]
                if held is None or held[0] != group:
                    held = (group, conformed(handle.read_row_group(group)))
                table = held[1].slice(start, rows)
        if table is not None:
            yield key, table


def stored_tables(
    db: sqlite3.Connection, run_dir: Path, keys: Iterable[str]
) -> Iterator[tuple[str, pa.Table]]:
    """Each of ``keys`` that has rows, with them (RESULT_SCHEMA): from the store's pending
    rows, else from the results.parquet it vouches for."""
    parquet = vouched_file(run_dir / RESULTS_PARQUET, vouched_results(db))
    for key, table in job_tables(keys, lambda key: pending_table(db, key), parquet):
        yield key, result_table(table, job_shas(db, key))


def write_csv(path: Path, tables: Iterable[pa.Table]) -> None:
    """results.csv (header, then each RESULT_SCHEMA table's rows), written whole."""
    with atomic_path(path) as temp, temp.open("xb") as handle:
        handle.write(csv_header())
        for table in tables:
            handle.write(csv_rows(table))


def write_summary(out: Path, summary: Mapping[str, Any]) -> None:
    """summary.json, indented."""
    write_atomically(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")


def vouched_file(path: Path, vouched: Collection[str]) -> Path | None:
    """``path`` (a results.parquet) when its sha256 is one the store vouches for."""
    try:
        return path if vouched and file_record(path).sha256 in vouched else None
    except OSError:
        return None


def vouched_parquet(run_dir: Path, store: RunStore) -> Path | None:
    """The run's results.parquet when the store vouches for it (None: absent, damaged,
    or another run's)."""
    return vouched_file(run_dir / RESULTS_PARQUET, store.vouched())


def lost_jobs(run_dir: Path, store: RunStore) -> set[str]:
    """Stored jobs whose rows are neither waiting in the store nor in a results.parquet
    it vouches for (the file was damaged or removed), or that the store cannot give back
    (``damaged_jobs``, each memory read): a resume runs them again."""
    parquet = vouched_parquet(run_dir, store)
    try:
        held = held_jobs(parquet) if parquet is not None else {}
    except (OSError, pa.ArrowException):
        held = {}
    settled = set(store.job_keys()) - store.pending_keys()
    return (settled - set(held)) | set(store.damaged_jobs(held, read_memories=True))


def export_csv(run_dir: Path, target: Path | None = None) -> tuple[Path, int]:
    """results.csv (or ``target``) from the run's results.parquet and store: the planned
    jobs in plan order, each memory named by its sha256; returns the path and the rows.
    ``RunDataError`` when the run has no rows to export."""
    target = target or run_dir / RESULTS_CSV
    try:
        db = connect_read_only(run_dir / STORE_FILE)
    except sqlite3.Error as error:
        raise RunDataError(f"{run_dir / STORE_FILE}: cannot be read ({error})") from None
    try:
        version = store_format(db)
        if (newer := newer_format(run_dir, version)) is not None:
            raise RunDataError(newer)
        manifest = read_manifest(run_dir)
        if not readable_store(version):
            older = manifest is None or manifest.format < OLDEST_READ
            if older and (run_dir / RESULTS_CSV).exists():
                raise RunDataError(
                    f"{run_dir} is a run of an older format: its results.csv is already in it"
                )
            runs = f", the run's {manifest.format}" if manifest else ""
            raise RunDataError(
                f"{run_dir}: cannot be exported: {STORE_FILE} is not a store of this version "
                f"(format {version or 'unrecorded'}{runs}): move it away and "
                f"`audit resume {run_dir}` runs the audit again"
            )
        parquet = vouched_file(run_dir / RESULTS_PARQUET, vouched_results(db))
        # each memory read (its sha256 is what export writes beside each row)
        broken = damaged_jobs(db, held_jobs(parquet) if parquet is not None else {}, True)
        if broken:
            raise RunDataError(
                f"{run_dir}: cannot be exported: {damaged_jobs_text(broken)}; "
                f"`audit resume {run_dir}` runs those jobs again"
            )
        order = manifest.planned if manifest is not None else []
        keys = job_keys(db, order, set(order) if order else None)
        rows = 0

        def counted() -> Iterator[pa.Table]:
            nonlocal rows
            for _key, table in stored_tables(db, run_dir, keys):
                rows += table.num_rows
                yield table

        write_csv(target, counted())
    except (sqlite3.Error, pa.ArrowException) as error:
        raise RunDataError(f"{run_dir}: cannot be exported ({error})") from None
    finally:
        db.close()
    return target, rows
