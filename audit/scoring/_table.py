"""Every score of a run, computed once from its per-read results.

``score_results`` folds the reads of a normalized results frame
(``audit.rundir.normalize``) into:

* ``pairs[metric]``: one row per (reader, condition, budget, transform, source pair):
  its family; ``blocks_lo`` / ``blocks_hi`` (blocks passing, NA as fail / as pass) of
  ``blocks`` (the pair's instances x repeats); ``every_lo`` / ``every_hi`` (1 when
  every block passes; for a failure metric, a collision, when any block counts);
* ``cells``: one row per (reader, condition, budget, transform, family), family
  ``all`` included, with, for every metric ``m``, ``m_pairs_k``, ``m_pairs_k_high``,
  ``m_pairs_n`` (source pairs passing every block), ``m_blocks_k``, ``m_blocks_k_high``,
  ``m_blocks_n`` and, for one-branch metrics, ``m_reads_k``, ``m_reads_k_high``,
  ``m_reads_n``; and ``n_source_pairs``, ``na_reads``, ``over_budget_reads_k/n``,
  ``equivariance_violation_reads_k/n``, ``equivariance_violation_pairs_k/n``,
  ``mean_memory_bytes``, ``outcome_<name>`` and ``wrong_answer_<class>`` (reads).

Counted over integer codes (every row belongs to its group's ``all`` cell and to its
family's cell), not group by group: a 100,000-read run has hundreds of cells.  The
definitions (which reads, which unit, what NA does) are ``_metrics``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from audit.scoring._metrics import ALL, BY_NAME, IDENTITY, LENIENT_METRICS, METRICS, Metric
from histories import TRANSFORMS, WRONG_ANSWERS

SYSTEM = ["reader", "condition", "budget"]
GROUP = [*SYSTEM, "transform"]
CELL = [*GROUP, "family"]
PAIR_KEYS = [*GROUP, "family", "source_pair_id"]
WRONG_PREFIX = "wrong_answer_"
"""A cell's count of wrong reads of each class (``rundir.WRONG_ANSWERS``) is its column
``wrong_answer_<class>``."""

IntArray = np.ndarray[Any, np.dtype[np.int64]]


def _codes(values: Any) -> IntArray:
    """Integer codes of a column in order of first appearance (-1 for missing)."""
    codes, _ = pd.factorize(values, use_na_sentinel=True)
    return np.asarray(codes, dtype=np.int64)


def _combine(*codes: IntArray) -> IntArray:
    """One code per tuple of codes, in first-appearance order (-1 where a part is missing)."""
    combined = np.zeros(len(codes[0]), dtype=np.int64)
    missing = np.zeros(len(codes[0]), dtype=bool)
    for part in codes:
        combined = combined * (int(part.max(initial=0)) + 1) + np.maximum(part, 0)
        missing |= part < 0
    result = np.full(len(combined), -1, dtype=np.int64)
    result[~missing] = _codes(combined[~missing])
    return result


class _Layout:
    """The codes every score is counted over, worked out once per results frame.

    Cells are numbered groups first (their ``all`` cells, 0..G-1), then family cells
    (G..); a pair is one (group, source pair), so it lies in exactly two cells.
    """

    def __init__(self, df: pd.DataFrame) -> None:
        self.df = df
        self.group = _combine(*(_codes(df[k]) for k in GROUP))
        self.n_groups = int(self.group.max(initial=-1)) + 1
        self.family_cell = self.n_groups + _combine(self.group, _codes(df["family"]))
        self.width = int(self.family_cell.max(initial=self.n_groups - 1)) + 1
        self.pair = _combine(self.group, _codes(df["source_pair_id"]))
        self.n_pairs = int(self.pair.max(initial=-1)) + 1
        self.block = _combine(self.pair, _codes(df["pair_id"]), _codes(df["repeat"]))
        self.branch, self.branch_names = _named_codes(df["branch"])
        self.family, self.family_names = _named_codes(df["family"])
        self._numbers: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
        rows = np.arange(len(df))
        self.first_row_of_cell = np.zeros(self.width, dtype=np.int64)
        self.first_row_of_cell[self.group[::-1]] = rows[::-1]
        self.first_row_of_cell[self.family_cell[::-1]] = rows[::-1]
        valid = self.pair >= 0
        self.first_row_of_pair = np.zeros(self.n_pairs, dtype=np.int64)
        self.first_row_of_pair[self.pair[valid][::-1]] = rows[valid][::-1]
        self.pair_group = self.group[self.first_row_of_pair]
        self.pair_family_cell = self.family_cell[self.first_row_of_pair]

    def per_cell(self, weights: Any) -> np.ndarray[Any, Any]:
        """Sum of per-row ``weights`` per cell (every row counts in two cells)."""
        w = np.asarray(weights, dtype=float)
        return np.bincount(self.group, w, self.width) + np.bincount(self.family_cell, w, self.width)

    def metric_rows(self, metric: Metric) -> np.ndarray[Any, np.dtype[np.bool_]]:
        rows = np.isin(self.branch, [self.branch_names.get(b, -2) for b in metric.branches])
        if metric.family is not None:
            rows &= self.family == self.family_names.get(metric.family, -2)
        return rows

    def metric_values(self, metric: Metric) -> np.ndarray[Any, np.dtype[np.float64]]:
        """A metric's column as floats, a read of outcome ``error`` set to the metric's
        ``on_error`` (the compressor raised: its fault, whatever the column holds)."""
        values = self.numbers(metric.column)
        if metric.on_error is None:
            return values
        key = f"{metric.column}@error={metric.on_error}"
        if key not in self._numbers:
            raised = (self.df["outcome"] == "error").to_numpy()  # by code, not by text
            self._numbers[key] = np.where(raised, metric.on_error, values)
        return self._numbers[key]

    def numbers(self, column: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """A column as floats (NaN: empty), converted once."""
        if column not in self._numbers:
            values = pd.to_numeric(self.df[column], errors="coerce")
            self._numbers[column] = values.to_numpy(dtype=float, na_value=np.nan)
        return self._numbers[column]


def _named_codes(values: pd.Series) -> tuple[IntArray, dict[str, int]]:
    """Integer codes of a column and the code of each value's text."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return np.asarray(codes, dtype=np.int64), {str(u): i for i, u in enumerate(uniques)}


@dataclass
class _PairCounts:
    blocks: np.ndarray[Any, Any]
    lo: np.ndarray[Any, Any]
    hi: np.ndarray[Any, Any]


def _pair_counts(layout: _Layout, metric: Metric) -> _PairCounts:
    """Per pair: its blocks and those passing (NA as fail / as pass)."""
    rows = layout.metric_rows(metric) & (layout.block >= 0)
    empty = np.zeros(layout.n_pairs)
    if metric.column not in layout.df or not rows.any():
        return _PairCounts(empty, empty, empty)
    values = layout.metric_values(metric)[rows]
    block = layout.block[rows]
    n_blocks = int(layout.block.max(initial=-1)) + 1
    fails_lo = np.bincount(block, ~(values == 1), n_blocks) > 0
    fails_hi = np.bincount(block, values == 0, n_blocks) > 0
    seen = np.bincount(block, minlength=n_blocks) > 0
    has_na = np.bincount(block, np.isnan(values), n_blocks) > 0
    keep = seen & (~has_na if metric.na == "exclude" else True)
    block_pair = np.zeros(n_blocks, dtype=np.int64)
    block_pair[block] = layout.pair[rows]
    kept = block_pair[keep]
    return _PairCounts(
        np.bincount(kept, minlength=layout.n_pairs).astype(float),
        np.bincount(kept, ~fails_lo[keep], layout.n_pairs),
        np.bincount(kept, ~fails_hi[keep], layout.n_pairs),
    )


def _worst(counts: _PairCounts, failure: bool) -> tuple[Any, Any]:
    """Per pair, NA as fail and as pass: the worst case over its blocks (every block
    passes; for a failure metric, any block fails)."""
    seen = counts.blocks > 0
    if failure:
        return seen & (counts.lo > 0), seen & (counts.hi > 0)
    return seen & (counts.lo == counts.blocks), seen & (counts.hi == counts.blocks)


def _pair_frame(pair_keys: pd.DataFrame, counts: _PairCounts, failure: bool) -> pd.DataFrame:
    present = np.flatnonzero(counts.blocks > 0)
    out = pair_keys.iloc[present].reset_index(drop=True)
    out["blocks_lo"] = counts.lo[present].astype(np.int64)
    out["blocks_hi"] = counts.hi[present].astype(np.int64)
    out["blocks"] = counts.blocks[present].astype(np.int64)
    every_lo, every_hi = _worst(counts, failure)
    out["every_lo"] = every_lo[present].astype(np.int64)
    out["every_hi"] = every_hi[present].astype(np.int64)
    return out


class _PairFrames(Mapping[str, pd.DataFrame]):
    """Per-pair frames, built when first asked for (``summary.json`` needs none)."""

    def __init__(self, pair_keys: pd.DataFrame, counts: dict[str, _PairCounts]) -> None:
        self._keys, self._counts = pair_keys, counts
        self._frames: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            failure = BY_NAME[name].failure
            self._frames[name] = _pair_frame(self._keys, self._counts[name], failure)
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)


@dataclass
class Scores:
    """Every score of a run (see the module docstring)."""

    cells: pd.DataFrame
    pairs: Mapping[str, pd.DataFrame]
    """metric name -> its per-pair frame."""
    systems: list[tuple[str, str, int]]
    """(reader, condition, budget) in display order: the exact reader first, budgets
    ascending, conditions in plan order."""
    families: dict[str, str]
    """source pair id -> family."""
    metrics: tuple[Metric, ...]
    """The metrics scored (the lenient ones only where an LLM reader read)."""
    pair_bytes: pd.DataFrame
    """One row per (system, transform, family, source pair): ``mean_memory_bytes``."""
    kinds: dict[str, str]
    """condition -> its kind: ``strict`` (a contestant), ``archive`` (re-reads the raw
    history: a ceiling, extra storage) or ``probe`` (a shortcut heuristic: the floor)."""
    _by_key: dict[tuple[Any, ...], dict[str, Any]] | None = field(default=None, repr=False)

    def cell(
        self, system: tuple[str, str, int], transform: str = IDENTITY, family: str = ALL
    ) -> dict[str, Any] | None:
        """One cell as a dict, or None when the run has no such cell."""
        if self._by_key is None:
            self._by_key = {tuple(record[k] for k in CELL): record for record in self.records()}
        return self._by_key.get((*system, transform, family))

    def records(self) -> list[dict[str, Any]]:
        """Every cell as a dict, in table order."""
        return cast(list[dict[str, Any]], self.cells.to_dict("records"))

    def contestants(self) -> list[tuple[str, str, int]]:
        """The systems of strict conditions: archives are ceilings and probes the floor,
        neither is ever the best condition or the default reference."""
        return [s for s in self.systems if self.kinds.get(s[1], "strict") == "strict"]

    def transforms(self) -> list[str]:
        """The transforms present, in the registry's order (identity first)."""
        return _order(self.cells["transform"].astype(str), list(TRANSFORMS))

    def shortcut_transforms(self) -> list[str]:
        """The transforms present that test for a shortcut (``Transform.shortcut``):
        ``rechunk`` measures repeated compaction, its own curve, instead."""
        return [t for t in self.transforms() if getattr(TRANSFORMS.get(t), "shortcut", True)]


def _order(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    head = [v for v in preferred if v in present]
    return head + sorted(v for v in present if v not in head)


def score_results(df: pd.DataFrame, conditions: Sequence[str] = ()) -> Scores:
    """Every score of a normalized results frame (``audit.rundir.normalize``)."""
    return _Tally().add(df).scores(conditions)


def score_pieces(
    frames: Iterable[pd.DataFrame], conditions: Sequence[str] = ()
) -> tuple[Scores, int, int]:
    """The scores of the frames' rows taken together, one frame at a time (each, say, a
    job's row group of results.parquet, normalized), and the reads and source pairs.

    Only counts per cell and per source pair are kept between frames, never a read, so
    what this holds grows with cells and pairs, not reads.  A block (one instance and
    repeat of a pair) must lie within one frame: a job's or an LLM unit's rows do."""
    tally = _Tally()
    for frame in frames:
        tally.add(frame)
    return tally.scores(conditions), tally.n_reads, len(tally.source_pairs)


def _grown(arrays: dict[str, np.ndarray[Any, Any]], name: str, size: int) -> Any:
    """``arrays[name]`` zero-padded to at least ``size``."""
    found = arrays.get(name, np.zeros(0))
    if len(found) < size:
        found = arrays[name] = np.concatenate([found, np.zeros(size - len(found))])
    return found


class _Tally:
    """Counts per cell (reads) and per source pair (blocks, bytes, equivariance), added
    frame by frame under cells and pairs numbered in order of first appearance, as one
    whole frame would number them; ``scores`` then counts pairs into cells as
    ``_Layout`` does, so the scores are the same however the rows were cut."""

    def __init__(self) -> None:
        self.n_reads = 0
        self.source_pairs: set[str] = set()
        self.llm_reader = False
        self.groups: dict[tuple[Any, ...], int] = {}
        self.family_cells: dict[tuple[int, str], int] = {}
        self.pairs: dict[tuple[int, str], int] = {}
        self.cell_rows: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] = ([], [])
        self.pair_rows: list[tuple[Any, ...]] = []
        self.pair_group: list[int] = []
        self.pair_family: list[int] = []
        self.reads: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        """Per-read counts of each group cell and of each family cell."""
        self.per_pair: dict[str, Any] = {}
        self.outcomes: set[str] = set()
        self.wrong_answers = False
        self.systems: dict[tuple[str, str, int], None] = {}
        self.families: dict[str, str] = {}
        self.kinds: dict[str, str] = {}

    def add(self, df: pd.DataFrame) -> _Tally:
        if df.empty:
            return self
        df = df.reset_index(drop=True)
        layout = _Layout(df)
        self.n_reads += len(df)
        self.source_pairs.update(str(v) for v in df["source_pair_id"].dropna().unique())
        self.llm_reader |= bool((df["reader_kind"] != "exact").any())
        keys = _typed(df.iloc[layout.first_row_of_cell][CELL], CELL)
        n_groups = layout.n_groups
        keys.loc[: n_groups - 1, "family"] = ALL
        rows = list(zip(*(keys[column].tolist() for column in CELL), strict=True))
        group_of = [self._number(self.groups, row[:-1], row, 0) for row in rows[:n_groups]]
        cell_group = layout.group[layout.first_row_of_cell[n_groups:]]
        family_of = [
            self._number(self.family_cells, (group_of[group], row[-1]), row, 1)
            for group, row in zip(cell_group, rows[n_groups:], strict=True)
        ]
        pair_keys = _typed(df.iloc[layout.first_row_of_pair][PAIR_KEYS], PAIR_KEYS)
        pair_of = []
        for local, row in enumerate(zip(*(pair_keys[c].tolist() for c in PAIR_KEYS), strict=True)):
            group = group_of[layout.pair_group[local]]
            pair = self.pairs.setdefault((group, row[-1]), len(self.pairs))
            if pair == len(self.pair_rows):
                self.pair_rows.append(row)
                self.pair_group.append(group)
                self.pair_family.append(family_of[layout.pair_family_cell[local] - n_groups])
            pair_of.append(pair)
        groups, families = (
            np.asarray(group_of, dtype=np.int64),
            np.asarray(family_of, dtype=np.int64),
        )
        for name, values in self._read_counts(layout).items():
            for arrays, where, part in (
                (self.reads[0], groups, values[:n_groups]),
                (self.reads[1], families, values[n_groups:]),
            ):
                np.add.at(_grown(arrays, name, len(self.cell_rows[arrays is self.reads[1]])),
                          where, part)  # fmt: skip
        pairs = np.asarray(pair_of, dtype=np.int64)
        for name, values in self._pair_counts(layout).items():
            np.add.at(_grown(self.per_pair, name, len(self.pair_rows)), pairs, values)
        for system in df[SYSTEM].drop_duplicates().itertuples(index=False, name=None):
            self.systems.setdefault((str(system[0]), str(system[1]), int(system[2])))
        first = df.drop_duplicates("source_pair_id")
        for pair_id, family in zip(first["source_pair_id"].astype(str),
                                   first["family"].astype(str), strict=True):  # fmt: skip
            self.families.setdefault(pair_id, family)
        if "kind" in df:
            found = df[["condition", "kind"]].drop_duplicates("condition")
            for condition, kind in zip(found["condition"].astype(str),
                                       found["kind"].astype(str), strict=True):  # fmt: skip
                self.kinds.setdefault(condition, kind)
        return self

    def _number(self, index: dict[Any, int], key: Any, row: tuple[Any, ...], side: int) -> int:
        """A cell's number, given on its first appearance (its key row kept)."""
        found = index.setdefault(key, len(index))
        if found == len(self.cell_rows[side]):
            self.cell_rows[side].append(row)
        return found

    def _read_counts(self, layout: _Layout) -> dict[str, Any]:
        """Per local cell: every count of reads."""
        counts: dict[str, Any] = {}
        for metric in (*METRICS, *LENIENT_METRICS):
            if len(metric.branches) == 1 and metric.per_read and metric.column in layout.df:
                rows = layout.metric_rows(metric)
                values = layout.metric_values(metric)
                counted = rows & ~np.isnan(values) if metric.na == "exclude" else rows
                unknown = np.isnan(values) & (metric.na == "bounds")
                counts[f"{metric.name}_reads_k"] = layout.per_cell(rows & (values == 1))
                counts[f"{metric.name}_reads_k_high"] = layout.per_cell(
                    rows & ((values == 1) | unknown)
                )
                counts[f"{metric.name}_reads_n"] = layout.per_cell(counted)
        counts.update(_read_facts(layout))
        self.outcomes.update(n[len("outcome_") :] for n in counts if n.startswith("outcome_"))
        self.wrong_answers |= "wrong_answer" in layout.df
        return counts

    @staticmethod
    def _pair_counts(layout: _Layout) -> dict[str, Any]:
        """Per local pair: its blocks passing each metric, its bytes and equivariance."""
        counts: dict[str, Any] = {}
        for metric in (*METRICS, *LENIENT_METRICS):
            found = _pair_counts(layout, metric)
            counts[f"{metric.name} blocks"] = found.blocks
            counts[f"{metric.name} lo"] = found.lo
            counts[f"{metric.name} hi"] = found.hi
        size = layout.numbers("memory_bytes")
        rows = ~np.isnan(size) & (layout.pair >= 0)
        counts["bytes"] = np.bincount(layout.pair[rows], size[rows], layout.n_pairs)
        counts["measured"] = np.bincount(layout.pair[rows], minlength=layout.n_pairs)
        equivariant = layout.numbers("equivariant")
        checked = ~np.isnan(equivariant) & (layout.pair >= 0)
        counts["violated"] = np.bincount(
            layout.pair[checked], equivariant[checked] == 0, layout.n_pairs
        )
        counts["checked"] = np.bincount(layout.pair[checked], minlength=layout.n_pairs)
        return counts

    def scores(self, conditions: Sequence[str]) -> Scores:
        n_groups, n_pairs = len(self.groups), len(self.pairs)
        width = n_groups + len(self.family_cells)
        pair_group = np.asarray(self.pair_group, dtype=np.int64)
        pair_cell = n_groups + np.asarray(self.pair_family, dtype=np.int64)

        def of_pairs(weights: Any) -> np.ndarray[Any, Any]:
            w = np.asarray(weights, dtype=float)
            return np.bincount(pair_group, w, width) + np.bincount(pair_cell, w, width)

        def of_reads(name: str) -> np.ndarray[Any, Any]:
            return np.concatenate(
                [
                    _grown(self.reads[0], name, n_groups),
                    _grown(self.reads[1], name, width - n_groups),
                ]
            )

        names = (*self.per_pair, "bytes", "measured", "violated", "checked")
        per_pair = {name: _grown(self.per_pair, name, n_pairs) for name in names}
        metrics = (*METRICS, *LENIENT_METRICS) if self.llm_reader else METRICS
        columns: dict[str, Any] = {}
        all_counts: dict[str, _PairCounts] = {}
        for metric in metrics:
            name = metric.name
            counts = all_counts[name] = _PairCounts(
                per_pair.get(f"{name} blocks", np.zeros(n_pairs)),
                per_pair.get(f"{name} lo", np.zeros(n_pairs)),
                per_pair.get(f"{name} hi", np.zeros(n_pairs)),
            )
            every_lo, every_hi = _worst(counts, metric.failure)
            columns[f"{name}_pairs_k"] = of_pairs(every_lo)
            columns[f"{name}_pairs_k_high"] = of_pairs(every_hi)
            columns[f"{name}_pairs_n"] = of_pairs(counts.blocks > 0)
            columns[f"{name}_blocks_k"] = of_pairs(counts.lo)
            columns[f"{name}_blocks_k_high"] = of_pairs(counts.hi)
            columns[f"{name}_blocks_n"] = of_pairs(counts.blocks)
            if f"{name}_reads_k" in self.reads[0]:
                for suffix in ("k", "k_high", "n"):
                    columns[f"{name}_reads_{suffix}"] = of_reads(f"{name}_reads_{suffix}")
        columns["n_source_pairs"] = of_pairs(np.ones(n_pairs))
        for name in READ_FACTS:
            columns[name] = of_reads(name)
        columns["equivariance_violation_pairs_k"] = of_pairs(per_pair["violated"] > 0)
        columns["equivariance_violation_pairs_n"] = of_pairs(per_pair["checked"] > 0)
        means = _mean_bytes(per_pair["bytes"], per_pair["measured"])
        measured = ~np.isnan(means)
        with np.errstate(invalid="ignore", divide="ignore"):
            columns["mean_memory_bytes"] = np.round(
                of_pairs(np.where(measured, means, 0.0)) / of_pairs(measured), 1
            )
        for name in sorted(self.outcomes):
            if name not in ("nan", "None", ""):
                columns[f"outcome_{name}"] = of_reads(f"outcome_{name}")
        if self.wrong_answers:
            for name in WRONG_ANSWERS:
                columns[f"{WRONG_PREFIX}{name}"] = of_reads(f"{WRONG_PREFIX}{name}")
        keys = _typed(pd.DataFrame([*self.cell_rows[0], *self.cell_rows[1]], columns=CELL), CELL)
        cells = pd.concat([keys, pd.DataFrame(columns)], axis=1)
        for column in columns:
            if column != "mean_memory_bytes":
                cells[column] = cells[column].astype(np.int64)
        readers = _order((system[0] for system in self.systems), ["exact"])
        condition_order = _order((system[1] for system in self.systems), conditions)
        systems = [
            (r, c, b)
            for r in readers
            for b in sorted({system[2] for system in self.systems})
            for c in condition_order
            if (r, c, b) in self.systems
        ]
        pair_keys = _typed(pd.DataFrame(self.pair_rows, columns=PAIR_KEYS), PAIR_KEYS)
        pair_bytes = pair_keys.assign(mean_memory_bytes=means)
        return Scores(
            cells, _PairFrames(pair_keys, all_counts), systems, self.families, metrics,
            pair_bytes, self.kinds,
        )  # fmt: skip


def _typed(keys: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """Key columns as the tables hold them: budget an integer, the others text."""
    keys = keys.reset_index(drop=True)
    for key in names:
        keys[key] = keys[key].astype(np.int64) if key == "budget" else keys[key].astype(str)
    return keys


def _mean_bytes(total: Any, count: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per pair: the mean memory bytes over its reads with a memory (NaN: none).  A
    cell's mean memory bytes is the mean of its source pairs' means: the same unit as
    every other score, and the mean its bootstrap interval resamples."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


READ_FACTS = (
    "n_reads", "na_reads", "over_budget_reads_k", "over_budget_reads_n",
    "equivariance_violation_reads_k", "equivariance_violation_reads_n",
)  # fmt: skip


def _read_facts(layout: _Layout) -> dict[str, Any]:
    """Per cell: what only makes sense per read (NA, over budget, equivariance, outcomes)."""
    df = layout.df
    equivariant = layout.numbers("equivariant")
    overflow = layout.numbers("overflow")
    outcome, outcome_names = _named_codes(df["outcome"])
    facts: dict[str, Any] = {
        "n_reads": layout.per_cell(np.ones(len(df))),
        "na_reads": layout.per_cell(outcome == outcome_names.get("na", -2)),
        "over_budget_reads_k": layout.per_cell(overflow > 0),
        "over_budget_reads_n": layout.per_cell(~np.isnan(overflow)),
        "equivariance_violation_reads_k": layout.per_cell(equivariant == 0),
        "equivariance_violation_reads_n": layout.per_cell(~np.isnan(equivariant)),
    }
    for name, code in sorted(outcome_names.items()):
        facts[f"outcome_{name}"] = layout.per_cell(outcome == code)
    if "wrong_answer" in df:  # not in runs made before the column
        wrong, wrong_names = _named_codes(df["wrong_answer"])
        for name in WRONG_ANSWERS:
            code = wrong_names.get(name, -2)
            facts[f"{WRONG_PREFIX}{name}"] = layout.per_cell(wrong == code)
    return facts
