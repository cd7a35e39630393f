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

    def per_cell_of_pairs(self, weights: Any) -> np.ndarray[Any, Any]:
        """Sum of per-pair ``weights`` per cell."""
        w = np.asarray(weights, dtype=float)
        return np.bincount(self.pair_group, w, self.width) + np.bincount(
            self.pair_family_cell, w, self.width
        )

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
            raised = (self.df["outcome"].astype(str) == "error").to_numpy()
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


def _pair_frame(layout: _Layout, counts: _PairCounts, failure: bool) -> pd.DataFrame:
    present = np.flatnonzero(counts.blocks > 0)
    out = layout.df.iloc[layout.first_row_of_pair[present]][PAIR_KEYS].reset_index(drop=True)
    for key in PAIR_KEYS:
        out[key] = out[key].astype(np.int64) if key == "budget" else out[key].astype(str)
    out["blocks_lo"] = counts.lo[present].astype(np.int64)
    out["blocks_hi"] = counts.hi[present].astype(np.int64)
    out["blocks"] = counts.blocks[present].astype(np.int64)
    every_lo, every_hi = _worst(counts, failure)
    out["every_lo"] = every_lo[present].astype(np.int64)
    out["every_hi"] = every_hi[present].astype(np.int64)
    return out


class _PairFrames(Mapping[str, pd.DataFrame]):
    """Per-pair frames, built when first asked for (``summary.json`` needs none)."""

    def __init__(self, layout: _Layout, counts: dict[str, _PairCounts]) -> None:
        self._layout, self._counts = layout, counts
        self._frames: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            failure = BY_NAME[name].failure
            self._frames[name] = _pair_frame(self._layout, self._counts[name], failure)
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
    df = df.reset_index(drop=True)
    layout = _Layout(df)
    has_llm_reader = bool((df["reader_kind"].astype(str) != "exact").any())
    metrics = (*METRICS, *LENIENT_METRICS) if has_llm_reader else METRICS
    columns: dict[str, Any] = {}
    all_counts: dict[str, _PairCounts] = {}
    for metric in metrics:
        counts = all_counts[metric.name] = _pair_counts(layout, metric)
        every_lo, every_hi = _worst(counts, metric.failure)
        name = metric.name
        columns[f"{name}_pairs_k"] = layout.per_cell_of_pairs(every_lo)
        columns[f"{name}_pairs_k_high"] = layout.per_cell_of_pairs(every_hi)
        columns[f"{name}_pairs_n"] = layout.per_cell_of_pairs(counts.blocks > 0)
        columns[f"{name}_blocks_k"] = layout.per_cell_of_pairs(counts.lo)
        columns[f"{name}_blocks_k_high"] = layout.per_cell_of_pairs(counts.hi)
        columns[f"{name}_blocks_n"] = layout.per_cell_of_pairs(counts.blocks)
        if len(metric.branches) == 1 and metric.per_read and metric.column in df:
            rows = layout.metric_rows(metric)
            values = layout.metric_values(metric)
            counted = rows & ~np.isnan(values) if metric.na == "exclude" else rows
            unknown = np.isnan(values) & (metric.na == "bounds")
            columns[f"{name}_reads_k"] = layout.per_cell(rows & (values == 1))
            columns[f"{name}_reads_k_high"] = layout.per_cell(rows & ((values == 1) | unknown))
            columns[f"{name}_reads_n"] = layout.per_cell(counted)
    columns.update(_read_facts(layout))
    keys = df.iloc[layout.first_row_of_cell][CELL].reset_index(drop=True)
    for key in CELL:
        keys[key] = keys[key].astype(np.int64) if key == "budget" else keys[key].astype(str)
    keys.loc[: layout.n_groups - 1, "family"] = ALL
    cells = pd.concat([keys, pd.DataFrame(columns)], axis=1)
    for column in columns:
        if column != "mean_memory_bytes":
            cells[column] = cells[column].astype(np.int64)
    first = df.drop_duplicates("source_pair_id")
    families = dict(
        zip(first["source_pair_id"].astype(str), first["family"].astype(str), strict=True)
    )
    readers = _order(df["reader"].astype(str).unique(), ["exact"])
    condition_order = _order(df["condition"].astype(str).unique(), conditions)
    present = set(
        df[SYSTEM].drop_duplicates().astype({"reader": str, "condition": str})
        .itertuples(index=False, name=None)
    )  # fmt: skip
    systems = [
        (r, c, int(b))
        for r in readers
        for b in sorted(int(x) for x in df["budget"].unique())
        for c in condition_order
        if (r, c, b) in present
    ]
    kinds: dict[str, str] = {}
    if "kind" in df:
        found = df[["condition", "kind"]].drop_duplicates("condition")
        kinds = dict(zip(found["condition"].astype(str), found["kind"].astype(str), strict=True))
    pair_keys = df.iloc[layout.first_row_of_pair][PAIR_KEYS].reset_index(drop=True)
    for key in PAIR_KEYS:
        pair_keys[key] = pair_keys[key].astype(np.int64 if key == "budget" else str)
    pair_bytes = pair_keys.assign(mean_memory_bytes=pair_mean_bytes(layout))
    return Scores(
        cells, _PairFrames(layout, all_counts), systems, families, metrics, pair_bytes, kinds
    )


def pair_mean_bytes(layout: _Layout) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Per pair: the mean memory bytes over its reads with a memory (NaN: none).  A
    cell's mean memory bytes is the mean of its source pairs' means: the same unit as
    every other score, and the mean its bootstrap interval resamples."""
    size = layout.numbers("memory_bytes")
    rows = ~np.isnan(size) & (layout.pair >= 0)
    total = np.bincount(layout.pair[rows], size[rows], layout.n_pairs)
    count = np.bincount(layout.pair[rows], minlength=layout.n_pairs)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _read_facts(layout: _Layout) -> dict[str, Any]:
    """Per cell: what only makes sense per read (NA, over budget, equivariance, bytes,
    outcomes), the source pairs, and the source pairs with an equivariance violation."""
    df = layout.df
    equivariant = layout.numbers("equivariant")
    overflow = layout.numbers("overflow")
    outcome, outcome_names = _named_codes(df["outcome"])
    facts: dict[str, Any] = {
        "n_source_pairs": layout.per_cell_of_pairs(np.ones(layout.n_pairs)),
        "n_reads": layout.per_cell(np.ones(len(df))),
        "na_reads": layout.per_cell(outcome == outcome_names.get("na", -2)),
        "over_budget_reads_k": layout.per_cell(overflow > 0),
        "over_budget_reads_n": layout.per_cell(~np.isnan(overflow)),
        "equivariance_violation_reads_k": layout.per_cell(equivariant == 0),
        "equivariance_violation_reads_n": layout.per_cell(~np.isnan(equivariant)),
    }
    checked = ~np.isnan(equivariant) & (layout.pair >= 0)
    violated = np.bincount(layout.pair[checked], equivariant[checked] == 0, layout.n_pairs)
    any_checked = np.bincount(layout.pair[checked], minlength=layout.n_pairs) > 0
    facts["equivariance_violation_pairs_k"] = layout.per_cell_of_pairs(violated > 0)
    facts["equivariance_violation_pairs_n"] = layout.per_cell_of_pairs(any_checked)
    means = pair_mean_bytes(layout)
    measured = ~np.isnan(means)
    with np.errstate(invalid="ignore", divide="ignore"):
        facts["mean_memory_bytes"] = np.round(
            layout.per_cell_of_pairs(np.where(measured, means, 0.0))
            / layout.per_cell_of_pairs(measured),
            1,
        )
    for name, code in sorted(outcome_names.items()):
        if name not in ("nan", "None", ""):
            facts[f"outcome_{name}"] = layout.per_cell(outcome == code)
    if "wrong_answer" in df:  # not in runs made before the column
        wrong, wrong_names = _named_codes(df["wrong_answer"])
        for name in WRONG_ANSWERS:
            code = wrong_names.get(name, -2)
            facts[f"{WRONG_PREFIX}{name}"] = layout.per_cell(wrong == code)
    return facts
