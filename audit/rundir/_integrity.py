"""Is a run whole?  Read its results from a source that can be trusted, and say so.

``read_checked`` compares every file ``manifest.json`` records with its checksum: a file
that no longer matches is not read and is named as damaged; with no intact file the
planned jobs' rows come from ``store.sqlite``, and the manifest's plan is checked against
the one the store recorded.  The finding is a ``RunIntegrity`` (complete, incomplete and
why, or damaged and the way out), which the report puts first and the command line turns
into its exit status.  A run made before manifests is read as before, marked unchecked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pyarrow as pa

from audit.errors import RunDataError
from audit.rundir._columns import CATEGORICAL, OBJECT_TEXT, STORED_SCHEMA, result_table
from audit.rundir._layout import (
    MANIFEST_FILE,
    RESULTS_CSV,
    RESULTS_PARQUET,
    STORE_FILE,
    SUMMARY_FILE,
    check_regular,
    newer_format,
)
from audit.rundir._manifest import RunManifest, file_record, read_manifest
from audit.rundir._results import (
    grouped_runs,
    held_jobs,
    held_of,
    parquet_format,
    stored_tables,
    vouched_file,
)
from audit.rundir._store import (
    OLDEST_READ,
    HeldJob,
    concat_results,
    connect_read_only,
    damaged_jobs,
    damaged_jobs_text,
    job_keys,
    job_shas,
    plan_record,
    readable_store,
    retry_keys,
    store_damage,
    store_format,
    stored_plan,
    stored_run_id,
    vouched_results,
)

OLDER_LAYOUT = (
    "a run of an older format (before run-directory format {format}): `audit report` "
    "reads its result files while they are whole, but its store is not read and it "
    "cannot be resumed; run the same command again with another --out"
)

EXIT_INCOMPLETE = 3
"""Exit status of ``audit run``, ``report`` and ``compare`` for a run that is not whole."""
EXIT_DAMAGED = 4
"""Exit status when a result file or the store is damaged (the report is still written
from what is intact)."""
EXIT_COMPRESSOR_RAISED = 5
"""Exit status of ``audit run`` and ``resume`` for a run that finished but in which a
compressor raised (its reads are scored 0): a CI job must not pass on a broken
compressor."""


@dataclass
class RunIntegrity:
    """What the run's files say about its completeness."""

    checked: bool
    """False for a run made before manifests: nothing could be checked."""
    state: str | None = None
    planned_pairs: int | None = None
    finished_pairs: int | None = None
    planned_units: int | None = None
    finished_units: int | None = None
    na_units: int = 0
    na_jobs: int = 0
    stopped: str | None = None
    damage: list[str] = field(default_factory=list)
    """One line per damaged file: which, what was done instead, the way out."""
    results_from: str = RESULTS_PARQUET

    @property
    def missing(self) -> bool:
        """Planned work that has no results."""
        return (self.finished_pairs or 0) < (self.planned_pairs or 0) or (
            self.finished_units or 0
        ) < (self.planned_units or 0)

    @property
    def incomplete(self) -> bool:
        return self.checked and (
            self.missing
            or self.na_units > 0
            or self.na_jobs > 0
            or self.state in ("running", "stopped")
        )

    @property
    def damaged(self) -> bool:
        return bool(self.damage)

    def add_damaged_jobs(self, run_dir: Path, broken: dict[str, str]) -> None:
        """``damaged_jobs`` found (or a read of their memories): the one text for it."""
        if broken:
            self.damage.append(
                f"{damaged_jobs_text(broken)}: what it cannot give back is left out; "
                f"`audit resume {run_dir}` runs those jobs again"
            )

    @property
    def exit_code(self) -> int:
        return EXIT_DAMAGED if self.damaged else EXIT_INCOMPLETE if self.incomplete else 0

    def progress(self) -> str:
        """``12 of 24 source pairs and 0 of 12 LLM units finished``."""
        text = f"{self.finished_pairs} of {self.planned_pairs} source pairs"
        if self.planned_units:
            text += f" and {self.finished_units} of {self.planned_units} LLM units"
        return text + " finished"

    def problems(self, run: str) -> list[str]:
        """Every way the run is not whole, one sentence each, with the way out."""
        found: list[str] = []
        if self.incomplete:
            if self.missing:
                why = {
                    "running": "it is still running, or it ended without a word: killed, "
                    "or its disk filled",
                    "stopped": f"it stopped: {self.stopped}" if self.stopped else "it stopped",
                }.get(self.state or "", "it did not finish")
                found.append(
                    f"INCOMPLETE run: {self.progress()} ({why}); scores cover only the "
                    f"finished part; `audit resume {run}` finishes it"
                )
            elif self.state == "running":
                found.append(
                    "INCOMPLETE run: every unit finished, but the run is still running "
                    "(writing its result files), or it ended without a word before it wrote "
                    f"them (read from {STORE_FILE}); if nothing runs, `audit resume {run}` "
                    "writes them"
                )
            elif self.state == "stopped":
                found.append(
                    "INCOMPLETE run: every unit finished, but the run stopped before writing "
                    f"its result files (read from {STORE_FILE}); `audit resume {run}` writes them"
                )
            if self.na_jobs:
                found.append(
                    f"INCOMPLETE run: {self.na_jobs} job(s) hold reads that are NA (an "
                    "external memory system did not answer: their scores are bounds); "
                    f"`audit resume {run}` runs them again"
                )
            if self.na_units:
                found.append(
                    f"INCOMPLETE run: {self.na_units} LLM unit(s) hold reads that are NA for "
                    f"want of a server; `audit resume {run}` asks again"
                )
        found += self.damage
        return found


def settled_job_keys(directory: Path, among: set[str]) -> set[str]:
    """The jobs of ``among`` that a run directory's store holds and that a resume would
    not run again (one with reads NA for want of a server is run again), read without
    writing anything; empty when there is no store yet."""
    path = directory / STORE_FILE
    if not path.exists():
        return set()
    with closing(connect_read_only(path)) as db:
        try:
            return set(job_keys(db, only=among)) - retry_keys(db)
        except sqlite3.OperationalError:  # created, killed before its schema was written
            return set()


def _file_problem(path: Path, manifest: RunManifest) -> str | None:
    """What is wrong with a file ``manifest.json`` records (None: it matches)."""
    record = manifest.files.get(path.name)
    if record is None:
        return None
    try:
        found = file_record(path)
    except FileNotFoundError:
        return f"{path.name} is missing"
    except OSError as error:
        return f"{path.name} cannot be read ({error.strerror or error})"
    if found != record:
        return (
            f"{path.name} does not match its checksum in {MANIFEST_FILE} (the file or the "
            "manifest was changed after the run wrote them)"
        )
    return None


def _read_file(path: Path) -> tuple[pd.DataFrame, dict[str, HeldJob] | None]:
    """A result file's rows, and what it holds of each job where it says (this format's
    results.parquet: ``held_of``, for ``damaged_jobs``)."""
    if path.suffix == ".parquet":
        if parquet_format(path) is None:  # an older layout: the digests are in the file
            return pd.read_parquet(path), None
        return _digested_parquet(path)
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""]), None


DICTIONARY_TEXT = tuple(c for c in (*CATEGORICAL, *OBJECT_TEXT) if c in STORED_SCHEMA.names)
"""What ``normalize`` makes categories or Python strings: never a string a row."""


def _digested_parquet(path: Path) -> tuple[pd.DataFrame, dict[str, HeldJob]]:
    """A results.parquet of this format, each memory's sha256 looked up in the store
    beside it (empty where the store cannot say: the drill-down is then unavailable)."""
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(path, read_dictionary=DICTIONARY_TEXT)
    # a row group is a few jobs (up to ``ROW_GROUP_ROWS`` rows): threads cost more than
    # they decode
    tables = [handle.read_row_group(g, use_threads=False) for g in range(handle.num_row_groups)]
    db = None
    try:
        db = connect_read_only(path.parent / STORE_FILE)
        if not readable_store(store_format(db)):
            db.close()
            db = None
    except (OSError, sqlite3.Error):
        db = None

    def digested(key: str, table: pa.Table) -> pa.Table:
        """The job's rows with their digests; none where the store cannot say."""
        try:
            return result_table(table, None if db is None else job_shas(db, key))
        except sqlite3.Error:
            return result_table(table, None)

    try:
        keyed = [
            (key, tables[group].slice(start, rows))
            for group, (key, start, rows) in grouped_runs(t["job_key"] for t in tables)
        ]
        table = concat_results(digested(key, table) for key, table in keyed)
    finally:
        if db is not None:
            db.close()
    return cast(pd.DataFrame, table.to_pandas()), held_of(keyed)


def _unchecked_file(path: Path, manifest: RunManifest) -> str:
    """Why a result file ``manifest.json`` does not record cannot be read instead."""
    if not path.exists() and not path.is_symlink():
        return f"{path.name} was not written yet (the run did not finish)"
    return (
        f"{path.name} is not recorded in {MANIFEST_FILE} (the last invocation, "
        f"{manifest.state}, did not finish), so it cannot be checked"
    )


def read_checked(run_dir: Path, run_id: str | None) -> tuple[pd.DataFrame, RunIntegrity]:
    """The run's rows from a trusted source, and what was found (see the module)."""
    try:
        manifest = read_manifest(run_dir)
    except RunDataError as error:
        return _without_manifest(run_dir, f"{error}")
    store = run_dir / STORE_FILE
    if manifest is not None and (newer := newer_format(run_dir, manifest.format)) is not None:
        raise RunDataError(newer)
    if manifest is None:
        if run_id is None and _store_meta(store)[0] is None:
            return _read_unchecked(run_dir), RunIntegrity(checked=False)
        # a run made since manifests (config.json or the store carries a run id): its
        # manifest was deleted, maybe to hide that the run is not whole
        return _without_manifest(run_dir, f"{MANIFEST_FILE} missing")
    owner, recorded = _store_meta(store)
    if recorded is not None and owner == manifest.run_id:  # another run's store: see below
        listed = plan_record(manifest.planned_jobs, manifest.planned_units)
        if listed != recorded:
            return _without_manifest(
                run_dir,
                f"{MANIFEST_FILE} was changed after the run wrote it: its plan "
                f"({_plan_text(listed)}) is not the one {STORE_FILE} recorded when the run "
                f"planned it ({_plan_text(recorded)})",
            )
    integrity = RunIntegrity(
        checked=True,
        state=manifest.state,
        planned_pairs=len(manifest.planned_jobs),
        planned_units=len(manifest.planned_units),
        finished_pairs=manifest.finished_jobs,
        finished_units=manifest.finished_units,
        na_units=manifest.na_units,
        na_jobs=manifest.na_jobs,
        stopped=manifest.stopped,
    )
    if run_id is not None and manifest.run_id != run_id:
        integrity.damage.append(
            f"manifest.json belongs to another run (run id {manifest.run_id}, config.json "
            f"says {run_id}): completeness cannot be checked; `audit resume {run_dir}` "
            "writes it again"
        )
    finished = manifest.state in ("complete", "incomplete")
    files = [run_dir / RESULTS_PARQUET, run_dir / RESULTS_CSV]
    # every file the manifest records is checked, not only the one the results come from
    problems = {
        name: problem
        for name in (RESULTS_PARQUET, RESULTS_CSV, SUMMARY_FILE)
        if (problem := _file_problem(run_dir / name, manifest)) is not None
    }
    frame: pd.DataFrame | None = None
    held: dict[str, HeldJob] | None = None
    if finished:
        for path in files:
            if path.name not in manifest.files or path.name in problems:
                continue
            try:
                frame, held = _read_file(path)
            except Exception as error:  # it matched its checksum yet does not parse
                problems[path.name] = f"{path.name} cannot be parsed ({_first_line(error)})"
                continue
            integrity.results_from = path.name
            store_problem = _store_problem(store, manifest)
            if store_problem is not None:
                integrity.damage.append(
                    f"{store_problem}: its memories (the drill-down) are not used; the "
                    f"results come from {path.name}, which matches manifest.json"
                )
            break
    if frame is None:
        frame = _read_store(run_dir, manifest, run_id, integrity)
        if frame is None:
            why = [
                problems.get(path.name)
                or (_unchecked_file(path, manifest) if path.name not in manifest.files else "")
                for path in files
            ]
            raise RunDataError(
                f"{run_dir}: " + "; ".join(w for w in why if w) + f"; and {STORE_FILE} cannot "
                "be used (" + "; ".join(integrity.damage) + "): nothing here can be trusted; "
                "run the audit again"
            )
        integrity.results_from = STORE_FILE
    integrity.add_damaged_jobs(run_dir, _damaged_jobs(run_dir, frame["job_key"].unique(), held))
    for name, problem in problems.items():
        instead = (
            "the report does not read it"
            if name not in (RESULTS_PARQUET, RESULTS_CSV)
            else f"results read from {integrity.results_from}, which is intact"
            if integrity.results_from != STORE_FILE
            else f"only the rows still in {STORE_FILE} are read"
        )
        integrity.damage.append(
            f"{problem}: {instead}; `audit resume {run_dir}` writes the files again"
        )
    return frame, integrity


def _plan_text(record: dict[str, Any]) -> str:
    if "jobs" not in record:
        return "unreadable"
    text = f"{record.get('jobs')} jobs"
    if record.get("units"):
        text += f" and {record.get('units')} LLM units"
    return text


def _store_meta(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The run id and the plan record a store holds, (None, None) when it has none or
    cannot be read (what is wrong with it is said where its rows are read)."""
    try:
        if not path.exists():
            return None, None
        with closing(connect_read_only(path)) as db:
            return stored_run_id(db), stored_plan(db)
    except (OSError, sqlite3.Error):
        return None, None


def _damaged_jobs(
    run_dir: Path, keys: Iterable[str], read: Mapping[str, HeldJob] | None
) -> dict[str, str]:
    """``damaged_jobs`` of a readable store, for the jobs whose rows were read (``keys``)
    and what the results.parquet read (``read``), else the one it vouches for, holds of
    each (none when it cannot be read: said apart)."""
    try:
        with closing(connect_read_only(run_dir / STORE_FILE)) as db:
            if not readable_store(store_format(db)):
                return {}
            held: dict[str, HeldJob | None] = dict.fromkeys(keys)
            if read is not None:
                held.update(read)
            elif parquet := vouched_file(run_dir / RESULTS_PARQUET, vouched_results(db)):
                held.update(held_jobs(parquet))
            return damaged_jobs(db, held)
    except (OSError, sqlite3.Error, pa.ArrowException):
        return {}


def _store_problem(path: Path, manifest: RunManifest) -> str | None:
    """What is wrong with the store beside intact result files, if anything."""
    if not path.exists() and not path.is_symlink():
        return f"{STORE_FILE} is missing"
    try:
        with closing(connect_read_only(path)) as db:
            found = store_format(db)
            older = manifest.format < OLDEST_READ and found in (4, manifest.format)
            if not readable_store(found) and not older:  # an older run keeps its store
                return f"{STORE_FILE} is not a store of this version"
            owner = stored_run_id(db)
            damage = store_damage(db)
    except sqlite3.Error as error:
        return f"{STORE_FILE} is damaged ({error})"
    if owner is not None and owner != manifest.run_id:
        return f"{STORE_FILE} belongs to another run (run id {owner})"
    if damage is not None:
        return f"{STORE_FILE} is damaged ({damage})"
    return None


def _read_store(
    run_dir: Path, manifest: RunManifest, run_id: str | None, integrity: RunIntegrity
) -> pd.DataFrame | None:
    """The planned jobs' rows from the store, in plan order; None (and the damage noted)
    when the store cannot be used.  Updates the finished counts from the store."""
    path = run_dir / STORE_FILE
    if not path.exists() and not path.is_symlink():
        integrity.damage.append(f"{STORE_FILE} is missing")
        return None
    try:
        db = connect_read_only(path)
    except sqlite3.Error as error:
        integrity.damage.append(f"{STORE_FILE} cannot be opened ({error})")
        return None
    try:
        if not readable_store(store_format(db)):
            integrity.damage.append(f"{STORE_FILE} is {OLDER_LAYOUT.format(format=OLDEST_READ)}")
            return None
        damage = store_damage(db)
        if damage is not None:
            integrity.damage.append(f"{STORE_FILE} is damaged ({damage})")
            return None
        owner = stored_run_id(db)
        if owner is not None and owner != manifest.run_id:
            integrity.damage.append(
                f"{STORE_FILE} belongs to another run (run id {owner}, this run's is "
                f"{manifest.run_id}): it was copied in and is not used"
            )
            return None
        planned = manifest.planned
        wanted = set(planned)
        stored = job_keys(db)
        extra = len([key for key in stored if key not in wanted])
        if extra:
            integrity.damage.append(
                f"{STORE_FILE} holds {extra} job(s) this run did not plan (copied in from "
                "another run?): they are left out"
            )
        frame, held = _store_rows(db, run_dir, job_keys(db, planned, wanted))
        lost = (set(stored) & wanted) - held
        if lost:
            integrity.damage.append(
                f"the rows of {len(lost)} finished job(s) were in a results.parquet that is "
                f"gone or damaged: they are left out; `audit resume {run_dir}` runs them again"
            )
        integrity.finished_pairs = len(held & set(manifest.planned_jobs))
        integrity.finished_units = len(held & set(manifest.planned_units))
        retry = retry_keys(db) & held
        integrity.na_units = len(retry & set(manifest.planned_units))
        integrity.na_jobs = len(retry & set(manifest.planned_jobs))
        return frame
    except (sqlite3.Error, pa.ArrowException) as error:
        integrity.damage.append(f"{STORE_FILE} is damaged ({error})")
        return None
    finally:
        db.close()


def _store_rows(
    db: sqlite3.Connection, run_dir: Path, keys: list[str]
) -> tuple[pd.DataFrame, set[str]]:
    """The rows of ``keys`` (RESULT_SCHEMA, in that order) from the store's pending rows
    and the results.parquet it vouches for, and the keys found."""
    found = list(stored_tables(db, run_dir, keys))
    table = concat_results(table for _, table in found)
    return cast(pd.DataFrame, table.to_pandas()), {key for key, _ in found}


def _without_manifest(run_dir: Path, problem: str) -> tuple[pd.DataFrame, RunIntegrity]:
    """A damaged or missing manifest: every job in the store is read, completeness
    unknown (damaged: exit 4)."""
    integrity = RunIntegrity(checked=True, state=None, results_from=STORE_FILE)
    path = run_dir / STORE_FILE
    if not path.exists() and not path.is_symlink():
        raise RunDataError(f"{problem}, and {path} is missing: run the audit again")
    try:
        with closing(connect_read_only(path)) as db:
            damage = store_damage(db)
            if damage is not None:
                raise sqlite3.DatabaseError(damage)
            plan = stored_plan(db)
            keys = job_keys(db)
            if not readable_store(store_format(db)):
                raise sqlite3.DatabaseError(OLDER_LAYOUT.format(format=OLDEST_READ))
            frame, _held = _store_rows(db, run_dir, keys)
    except (sqlite3.Error, pa.ArrowException) as error:
        raise RunDataError(
            f"{problem}, and {path} is unreadable ({error}): run the audit again"
        ) from None
    held = ""
    if plan is not None and isinstance(plan.get("jobs"), int):
        units = plan.get("units") if isinstance(plan.get("units"), int) else 0
        what = "jobs and LLM units" if units else "jobs"
        held = (
            f" ({STORE_FILE} holds {len(keys)} of the {plan['jobs'] + units} {what} the run "
            "planned)"
        )
    integrity.damage.append(
        f"{problem}: completeness cannot be checked{held}; results read from {STORE_FILE}; "
        f"`audit resume {run_dir}` finishes the run and writes {MANIFEST_FILE} again"
    )
    return frame, integrity


def _read_unchecked(run_dir: Path) -> pd.DataFrame:
    """A run made before manifests: results.parquet, else results.csv, else the store
    (the order those versions wrote them in), each tried in turn when the one before
    cannot be read."""
    failures: list[str] = []
    parquet, csv, store = run_dir / RESULTS_PARQUET, run_dir / RESULTS_CSV, run_dir / STORE_FILE
    for path in (parquet, csv, store):
        if not path.exists():
            continue
        try:
            check_regular(path)  # a FIFO would block the reader forever
            if path == store:
                return _store_only(path)
            return _read_file(path)[0]
        except Exception as error:  # any unreadable file: try the next source
            failures.append(f"{path.name}: {type(error).__name__}: {_first_line(error)}")
    if failures:
        raise RunDataError(f"{run_dir}: no readable results ({'; '.join(failures)})")
    raise RunDataError(f"{run_dir}: no results (results.parquet, results.csv or store.sqlite)")


def _store_only(path: Path) -> pd.DataFrame:
    """The rows of a store that is a run's only result file (this format only)."""
    with closing(connect_read_only(path)) as db:
        if not readable_store(store_format(db)):
            raise RunDataError(f"{path.name} is {OLDER_LAYOUT.format(format=OLDEST_READ)}")
        frame, _held = _store_rows(db, path.parent, job_keys(db))
        return frame if len(frame) else pd.DataFrame()


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return text[:200]
