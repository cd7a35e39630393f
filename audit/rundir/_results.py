"""Writing and reading a run's result files: results.parquet, results.csv, summary.json.

results.parquet is the run's one copy of its rows (``STORED_SCHEMA``, zstd), one row
group per job in plan order, so a resume that finishes the same plan writes the same
bytes; it is rewritten streaming one job at a time.  results.csv (the same rows with
the memories' sha256) is written on request only.  Every file is written whole.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from audit.errors import RunDataError
from audit.rundir._columns import STORED_SCHEMA, conformed, result_table
from audit.rundir._layout import (
    RESULTS_CSV,
    RESULTS_PARQUET,
    RUN_FORMAT,
    STORE_FILE,
    SUMMARY_FILE,
    atomic_path,
    open_regular,
    write_atomically,
)
from audit.rundir._store import (
    RunStore,
    connect_read_only,
    csv_header,
    csv_rows,
    job_keys,
    job_shas,
    pending_table,
    store_format,
    vouched_results,
)

FORMAT_KEY = b"memory_audit_format"
"""results.parquet's metadata entry holding the run directory's format."""


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
    """results.parquet from job tables (STORED_SCHEMA) given one at a time, each its own
    row group; returns its sha256, which ``vouch`` gets before the file is put in place
    (the store records it, so a kill right after the rename leaves a file it knows)."""
    with atomic_path(out / RESULTS_PARQUET) as temp:
        writer = _writer(temp)
        try:
            for table in tables:
                if table.num_rows:
                    writer.write_table(table.cast(STORED_SCHEMA), row_group_size=table.num_rows)
        finally:
            writer.close()
        sha = _sha256(temp)
        vouch(sha)
    return sha


def parquet_jobs(path: Path) -> dict[str, int]:
    """job key -> its row group in a results.parquet of this format."""
    found: dict[str, int] = {}
    handle = pq.ParquetFile(path)
    for group in range(handle.num_row_groups):
        keys = handle.read_row_group(group, columns=["job_key"])["job_key"]
        found[str(keys[0])] = group
    return found


def parquet_format(path: Path) -> int | None:
    """The run-directory format a results.parquet records (None: an older layout)."""
    metadata = pq.read_schema(path).metadata or {}
    raw = metadata.get(FORMAT_KEY)
    return None if raw is None else int(raw)


def job_tables(
    order: Iterable[str],
    pending: Callable[[str], pa.Table | None],
    parquet: Path | None,
) -> Iterator[tuple[str, pa.Table]]:
    """Each job of ``order`` that has rows, one at a time (STORED_SCHEMA): from the store
    while they wait there (``pending``), else from ``parquet`` (a results.parquet the
    store vouches for); a job found in neither is left out."""
    handle = pq.ParquetFile(parquet) if parquet is not None else None
    groups = parquet_jobs(parquet) if parquet is not None else {}
    for key in order:
        table = pending(key)
        if table is None and handle is not None and key in groups:
            table = conformed(handle.read_row_group(groups[key]))
        if table is not None:
            yield key, table


def with_digests(
    tables: Iterable[tuple[str, pa.Table]], shas: Callable[[str], list[str] | None]
) -> Iterator[pa.Table]:
    """Job tables with ``memory_sha256`` back in place of ``memory_id`` (RESULT_SCHEMA)."""
    for key, table in tables:
        yield result_table(table, shas(key))


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def vouched_file(path: Path, vouched: Collection[str]) -> Path | None:
    """``path`` (a results.parquet) when its sha256 is one the store vouches for."""
    try:
        return path if vouched and _sha256(path) in vouched else None
    except OSError:
        return None


def vouched_parquet(run_dir: Path, store: RunStore) -> Path | None:
    """The run's results.parquet when the store vouches for it (None: absent, damaged,
    or another run's)."""
    return vouched_file(run_dir / RESULTS_PARQUET, store.vouched())


def lost_jobs(run_dir: Path, store: RunStore) -> set[str]:
    """Stored jobs whose rows are neither waiting in the store nor in a results.parquet
    it vouches for (the file was damaged or removed): a resume runs them again."""
    settled = set(store.job_keys()) - store.pending_keys()
    if not settled:
        return set()
    parquet = vouched_parquet(run_dir, store)
    try:
        held = set(parquet_jobs(parquet)) if parquet is not None else set()
    except (OSError, pa.ArrowException):
        held = set()
    return settled - held


def export_csv(run_dir: Path, target: Path | None = None) -> tuple[Path, int]:
    """results.csv (or ``target``) from the run's results.parquet and store: the planned
    jobs in plan order, each memory named by its sha256; returns the path and the rows.
    ``RunDataError`` when the run has no rows to export."""
    from audit.rundir._manifest import read_manifest

    target = target or run_dir / RESULTS_CSV
    try:
        db = connect_read_only(run_dir / STORE_FILE)
    except sqlite3.Error as error:
        raise RunDataError(f"{run_dir / STORE_FILE}: cannot be read ({error})") from None
    try:
        if store_format(db) != RUN_FORMAT:
            raise RunDataError(
                f"{run_dir} is a run of an older format: its results.csv is already in it"
            )
        manifest = read_manifest(run_dir)
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
