"""Loading a run directory back: its plan, its results, its memories, its pairs.

Nothing is re-run.  Results come from a source that can be trusted (``_integrity``:
the result files when they match ``manifest.json``, else the planned jobs in
``store.sqlite``; a run made before manifests, from the first readable of
results.parquet, results.csv and the store); memories come from the store by sha256
(blocks, since format 4; an older store's memories are not read).  ``config.json`` is
read typed (``RunConfigFile``); a run written by a version whose plan no longer
validates is still loaded, its plan kept as the raw dictionary and a note saying so.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from audit.errors import MemoryAuditError, RunDataError
from audit.plan import RunPlan
from audit.rundir._columns import CATEGORICAL, OBJECT_TEXT
from audit.rundir._config import CostsFile, RunConfigFile, read_config_file, read_costs
from audit.rundir._integrity import RunIntegrity, read_checked
from audit.rundir._layout import (
    CONFIG_FILE,
    REPLICATION_FILE,
    REPORT_DIR,
    RESULTS_CSV,
    RESULTS_PARQUET,
    STORE_FILE,
    SUMMARY_FILE,
    read_run_file,
)
from audit.rundir._manifest import read_manifest
from audit.rundir._pairs import rebuild_pair_objects
from audit.rundir._store import (
    UNFAITHFUL,
    MemoryBlocks,
    connect_read_only,
    damaged_jobs,
    job_keys,
    pending_keys,
    store_format,
    vouched_results,
)
from compressors import builtins
from histories import Pair

IDENTITY = "identity"
NUMERIC = (
    "correct", "correct_lenient", "adequate", "collision", "overflow", "equivariant",
    "memory_bytes", "budget", "repeat", "transform_index", "tokens_prompt",
    "tokens_completion", "latency_s", "cache_hit",
)  # fmt: skip
"""Columns read as numbers (empty = NA), whatever file they came from."""


@dataclass
class RunData:
    """One run directory, loaded."""

    path: Path
    label: str
    config_file: RunConfigFile | None
    """``config.json``, typed; None when missing or from an older, unreadable layout."""
    raw_config: dict[str, Any]
    """``config.json``'s ``config`` entry as stored (what an older run has)."""
    results: pd.DataFrame
    """One row per read, normalized (``normalize``)."""
    costs: CostsFile | None = None
    last_finished: float | None = None
    """Unix time of the last finished job (store.sqlite), if known."""
    notes: list[str] = field(default_factory=list)
    integrity: RunIntegrity = field(default_factory=lambda: RunIntegrity(checked=False))
    """Complete, incomplete or damaged (``manifest.json`` against the files)."""

    @property
    def plan(self) -> RunPlan | None:
        return self.config_file.config if self.config_file is not None else None

    @property
    def created(self) -> str | None:
        return self.config_file.created if self.config_file is not None else None

    @property
    def scoring(self) -> int:
        """The scoring version it was made under (0: none recorded, an older run)."""
        return self.config_file.scoring if self.config_file is not None else 0

    @property
    def has_llm(self) -> bool:
        return bool((self.results["reader_kind"] != "exact").any())

    @property
    def conditions(self) -> list[str]:
        """The planned conditions in plan order (else those in the results)."""
        if self.plan is not None:
            return self.plan.condition_labels
        listed = self.raw_config.get("conditions")
        if isinstance(listed, list):
            return [str(c) for c in listed]
        return list(dict.fromkeys(self.results["condition"].astype(str)))


def label_readers(df: pd.DataFrame) -> pd.DataFrame:
    """Reader labels and the lenient score's gaps, in place; the least scoring needs.

    ``reader_kind`` is the reader as run (``exact`` or a backend name); ``reader``
    becomes ``backend:model`` when the served model is known.  Lenient accepts
    everything strict accepts, and the exact reader has one score: where
    ``correct_lenient`` is empty it takes ``correct``.
    """
    reader, kinds = _labels(df["reader"], "exact")
    df["reader_kind"] = pd.array(kinds, dtype="str").take(reader)
    if "correct_lenient" in df:
        known = df["correct_lenient"].isna() & df["correct"].notna()
        fill = known & ((kinds[reader] == "exact") | (df["correct"] == 1))
        if fill.any():
            df["correct_lenient"] = df["correct_lenient"].where(~fill, df["correct"])
    if "reader_model" in df:  # a label per distinct (reader, model), not per read
        model, models = _labels(df["reader_model"], "")
        both, first = pd.factorize(reader * len(models) + model)
        names = [
            kinds[r] + ":" + models[m] if models[m] else kinds[r]
            for r, m in zip(*np.divmod(first, len(models)), strict=True)
        ]
        df["reader"] = np.asarray(names, dtype=object)[both]
    else:
        df["reader"] = df["reader_kind"]
    return df


def _labels(
    column: pd.Series, missing: str
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.object_]]]:
    """Each value's code into its distinct values as text (``missing`` for empty): what
    ``astype(str)`` gives, worked out once a distinct value instead of once a read."""
    codes, found = pd.factorize(column)
    texts = np.asarray([*(str(value) for value in found), missing], dtype=object)
    return np.asarray(codes, dtype=np.int64) % len(texts), texts  # empty: the last


def _builtin_kind(label: str) -> str:
    """A condition's kind by its built-in name (``strict`` for anything else)."""
    found = builtins().get(label.split(":")[0])
    return str(found.kind) if found is not None else "strict"


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Types and defaults: numeric scores (empty = NA), reader labels, categories; a
    frame from any results file (an older layout's included) comes out the same.  The
    caller's frame is left as it was: only whole columns are set, on a shallow copy."""
    df = df.copy(deep=False)
    required = ("source_pair_id", "family", "variant", "branch", "condition", "outcome")
    missing = [c for c in required if c not in df]
    if missing:
        raise RunDataError(f"results lack column(s): {', '.join(missing)}")
    if "pair_id" not in df:
        df["pair_id"] = df["source_pair_id"]
    defaults: dict[str, Any] = {
        "reader": "exact",
        "transform": IDENTITY,
        "repeat": 0,
        "budget": 0,
        "transform_index": 0,
    }
    for column, value in defaults.items():
        if column not in df:
            df[column] = value
    if "kind" not in df:  # runs made before the column: the built-ins' own kinds
        df["kind"] = df["condition"].astype(str).map(_builtin_kind)
    for column in NUMERIC:
        if column in df:
            df[column] = pd.to_numeric(df[column], errors="coerce")
    for column in ("correct", "adequate", "collision", "memory_bytes", "equivariant", "overflow"):
        if column not in df:
            df[column] = np.nan
    df["budget"] = df["budget"].fillna(0).astype(np.int64)
    df["repeat"] = df["repeat"].fillna(0).astype(np.int64)
    label_readers(df)
    for column in OBJECT_TEXT:
        if column in df:
            df[column] = df[column].astype(object).where(df[column].notna(), None)
    for column in ("reader", "reader_kind", *CATEGORICAL):
        values = df[column]
        if isinstance(values.dtype, pd.CategoricalDtype):  # read as a dictionary
            values = values.cat.remove_unused_categories()
            df[column] = values.cat.reorder_categories(values.cat.categories.sort_values())
        else:
            df[column] = values.astype(str).astype("category")
    return df


def _read_config(
    run_dir: Path, notes: list[str], damage: list[str]
) -> tuple[RunConfigFile | None, dict[str, Any]]:
    path = run_dir / CONFIG_FILE
    if not path.exists():
        notes.append("no config.json: run metadata and the pair drill-down are unavailable")
        return None, {}
    try:
        raw = json.loads(read_run_file(path).decode("utf-8"))
    except (OSError, ValueError) as error:
        why = (error.strerror if isinstance(error, OSError) else None) or str(error)
        notes.append(f"config.json unreadable ({why}); metadata missing")
        damage.append(
            f"{CONFIG_FILE} is damaged ({why}): the run's plan, metadata and pair drill-down "
            "are missing from this report, and the run cannot be resumed; restore it from a "
            "copy"
        )
        return None, {}
    stored = raw.get("config") if isinstance(raw, dict) else None
    try:
        return read_config_file(run_dir), dict(stored or {})
    except RunDataError as error:
        notes.append(f"config.json is of an older layout ({error}); read as stored")
        return None, dict(stored or {}) if isinstance(stored, dict) else {}


RUN_FILES = (CONFIG_FILE, STORE_FILE, RESULTS_PARQUET, RESULTS_CSV)
"""Any of these makes a folder a run (whole or damaged); a manifest.json alone does not:
``audit generate`` writes one beside its pairs."""


def _what_else(folder: Path) -> str:
    """What a folder that holds no run is instead, when it is one of the audit's own
    outputs (``audit compare runs/*`` picks up the comparison its last call wrote under
    runs/); "" when it holds any file of a run, which is then read (or found damaged)."""
    if any((folder / name).exists() for name in RUN_FILES):
        return ""
    if (folder / "compare.html").exists() or (folder / "compare.md").exists():
        return "it is the output of `audit compare`: leave it out"
    if (folder / "report.html").exists() or (folder / "report.md").exists():
        parent = folder.parent
        if folder.name == REPORT_DIR and any((parent / name).exists() for name in RUN_FILES):
            return f"it is a report; give the run directory it was written for ({parent})"
        return "it is a report; give the run directory it was written for"
    if (folder / REPLICATION_FILE).exists():
        return (
            "it holds a replication (`audit run --seeds`); `audit report` reads it whole, "
            f"and each seed is a run of its own ({folder / 'seed-N'})"
        )
    if (folder / "pairs.jsonl").exists():
        return (
            "it holds a pair dataset (`audit generate`); "
            f"`audit run --pairs {folder / 'pairs.jsonl'}` audits it"
        )
    return ""


def load_run(run_dir: Path, label: str | None = None) -> RunData:
    """Read a run directory (nothing is re-run)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDataError(f"{run_dir} is not a directory")
    instead = _what_else(run_dir)
    if instead:
        raise RunDataError(f"{run_dir} is not a run directory: {instead}")
    notes: list[str] = []
    damage: list[str] = []
    config_file, raw_config = _read_config(run_dir, notes, damage)
    frame, integrity = read_checked(
        run_dir, config_file.run_id if config_file is not None else None
    )
    integrity.damage[:0] = damage  # a damaged config.json is damage (exit 4), not a note
    results = normalize(frame)
    costs = None
    try:
        costs = read_costs(run_dir)
    except RunDataError as error:
        notes.append(f"{error}; ignored")
    last = None
    if (run_dir / STORE_FILE).exists():
        with suppress(sqlite3.Error), closing(connect_read_only(run_dir / STORE_FILE)) as db:
            # (a time that is not a number is no time: ``damaged_jobs`` reads the rest)
            (last,) = db.execute(
                "SELECT MAX(finished) FROM jobs WHERE typeof(finished) IN ('real', 'integer')"
            ).fetchone()
    return RunData(
        path=run_dir,
        label=label or run_dir.resolve().name,
        config_file=config_file,
        raw_config=raw_config,
        results=results,
        costs=costs,
        last_finished=None if last is None else float(last),
        notes=notes,
        integrity=integrity,
    )


def is_whole(run_dir: Path, plan: dict[str, Any], csv: bool = False) -> bool:
    """Whether running ``plan`` (``RunPlan.model_dump(mode="json")``) in ``run_dir``
    has nothing to do: the run is that plan's, the report finds it whole (complete, no
    NA read, nothing damaged, no note), results.csv is among its files with ``csv``,
    costs.json records its work, and its store holds every planned job, none pending,
    each memory as its index names it, and vouches for results.parquet.  A resume of
    such a run writes nothing (it used to record an invocation of nothing and write
    every file again)."""
    try:
        run = load_run(run_dir)
        manifest = read_manifest(run_dir)
        integrity = run.integrity
        with closing(connect_read_only(run_dir / STORE_FILE)) as db:
            return (
                manifest is not None
                and run.raw_config == plan
                and integrity.checked
                and integrity.exit_code == 0
                and integrity.results_from == RESULTS_PARQUET
                and not run.notes
                and run.costs is not None
                and bool(run.costs.invocations)
                and (not csv or RESULTS_CSV in manifest.files)
                and SUMMARY_FILE in manifest.files  # (its answer is read from it, checked)
                and set(job_keys(db)) == set(manifest.planned)
                and not pending_keys(db)
                and manifest.files[RESULTS_PARQUET].sha256 in vouched_results(db)
                # last: every memory hashed (0.4 CPU s on the default run), paid only by
                # a run whole by every other sign (a resume's lost_jobs hashes them else)
                and not damaged_jobs(db, {}, read_memories=True)
            )
    except (MemoryAuditError, OSError, sqlite3.Error):
        return False


class MemoryStore:
    """Read-only access to the memories of a run (store.sqlite), by sha256."""

    def __init__(self, run_dir: Path) -> None:
        path = run_dir / STORE_FILE
        self._db: sqlite3.Connection | None = None
        self._blocks: MemoryBlocks | None = None
        if path.exists():
            # not a store: the report says so (``read_checked``)
            with suppress(sqlite3.Error):
                self._db = connect_read_only(path)
                if (store_format(self._db) or 0) >= 4:  # blocks since format 4
                    self._blocks = MemoryBlocks(self._db)
        self._cache: dict[str, str | None] = {}

    def get(self, sha: str | None) -> str | None:
        if not sha or self._db is None:
            return None
        if sha not in self._cache:
            self._cache.update(self.many([sha]))
            self._cache.setdefault(sha, None)
        return self._cache[sha]

    def many(self, shas: Iterable[str]) -> dict[str, str]:
        shas = list(shas)
        wanted = [s for s in dict.fromkeys(shas) if s and s not in self._cache]
        if self._db is not None and wanted:
            # a damaged store: its memories are left out (the report says why)
            with suppress(sqlite3.Error, pa.ArrowException, zlib.error, ValueError):
                if self._blocks is not None:  # a store before format 4 is not read
                    self._cache.update(self._blocks.many(wanted))
        return {s: t for s in shas if (t := self._cache.get(s)) is not None}

    def damaged(self) -> dict[str, str]:
        """The jobs of which a memory read was not the one its sha256 names (it was left
        out), as ``damaged_jobs`` says them."""
        blocks = sorted(self._blocks.unfaithful) if self._blocks is not None else []
        if self._db is None or not blocks:
            return {}
        query = f"SELECT job_key FROM jobs WHERE memory_block IN ({','.join('?' * len(blocks))})"
        return {key: UNFAITHFUL for (key,) in self._db.execute(query, blocks)}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


@dataclass
class SourcePairs:
    """The run's source pairs, rebuilt; or why they could not be."""

    pairs: dict[str, Pair]
    """source pair id -> its pair (identity instance)."""
    note: str | None


def load_source_pairs(run: RunData) -> SourcePairs:
    """Rebuild the run's source pairs from config.json (preset regenerated, or file loaded),
    checked against the recorded sha256."""
    source = run.raw_config.get("pairs")
    expected = run.raw_config.get("pairs_sha256")
    if not isinstance(source, dict):
        return SourcePairs({}, "config.json records no pair source: no drill-down")
    try:
        pairs, digest = rebuild_pair_objects(source, run.path)
    except (OSError, ValueError) as error:  # PairFileError is a ValueError
        return SourcePairs({}, f"pairs could not be rebuilt ({error}): no drill-down")
    if expected and digest != expected:
        return SourcePairs(
            {},
            "the pairs rebuilt from config.json differ from the run's (sha256 mismatch): "
            "no drill-down",
        )
    return SourcePairs({p.pair_id: p for p in pairs}, None)
