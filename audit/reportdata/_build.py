"""Load a stored run directory into the plain data ``reports`` renders.

Nothing is re-run: the report is rebuilt from what the run directory holds -
``results.parquet`` (or ``results.csv``, or the rows in ``store.sqlite``),
``config.json``, the memories in ``store.sqlite`` (by sha256), and, when present,
``costs.json``.  Pairs for the drill-down are rebuilt from ``config.json``'s
``pairs`` entry (a preset's generation config, regenerated; or a pair file, loaded)
and checked against the stored ``pairs_sha256``.

Counting (see ``audit.scoring``): every k/n counts independent source pairs.

* A **block** is one (instance, repeat) of a pair: the reads a score needs (both
  variants; for joint J both the reveal and the override branch).  It passes when
  all its reads pass; with NA reads it is computed twice (NA as fail, NA as pass).
* An **instance** (the source pair itself, or one transformed copy) passes when a
  strict majority of its repeats pass (with one repeat: that block).
* A **source pair passes** under a transform when it passes on *every* instance of
  that transform (at identity there is one instance).  The instance rate (passing
  instances / instances) is also kept, with a cluster-bootstrap interval.
* Paired comparisons use the same pass/fail per source pair of joint J at identity;
  a pair whose J is undetermined (NA bounds disagree) is left out of that comparison.
* Adequacy and collision are undefined for a memory the exact reader cannot parse
  (``adequate`` empty); a pair with such a read is left out of their n.

``costs.json`` (optional; every key optional).  ``audit run`` writes
``{"invocations": [{"deterministic": {"jobs", "seconds"}, "llm": {"units", "seconds",
"writer": {...}, "reader": {...}}}]}`` (one entry per resumed invocation, summed
here; a client's counters are read under the names below or their usual aliases,
e.g. ``prompt_tokens``, ``cache_hits``).  Anything else may write the stage form::

    {
      "stages": [
        {"stage": "compress",            # free text: compress, read, judge, ...
         "requests_sent": 120,           # requests that reached a backend
         "saved_by_cache": 30,           # answered from the response cache
         "saved_by_dedup": 12,           # identical prompts folded into one request
         "tokens_prompt": 100000,
         "tokens_completion": 20000,
         "seconds": 81.5}                # wall time of the stage
      ],
      "wall_seconds": 95.0               # whole run
    }

With or without it, the cost section also shows what the results hold: reads per reader,
distinct memories and their bytes, the wall time from config.json ``created`` to
the last finished job, and, for LLM readers, the sums of ``tokens_prompt``,
``tokens_completion``, ``latency_s`` and ``cache_hit``.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint  # type: ignore[import-untyped]

from audit.rundir import MemoryStore, RunData, SourcePairs, load_source_pairs
from audit.scoring import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_mean,
    cluster_bootstrap,
    holm,
    paired_comparison,
)
from reports import CompareInput, ReportInput

IDENTITY = "identity"
ALL = "all"
LATE_REFERENCE = "late_reference"
SYSTEM = ["reader", "condition", "budget"]
PAIR_KEYS = [*SYSTEM, "transform", "family", "source_pair_id"]
NUMERIC = (
    "correct",
    "correct_lenient",
    "adequate",
    "collision",
    "overflow",
    "equivariant",
    "memory_bytes",
    "budget",
    "repeat",
    "transform_index",
    "tokens_prompt",
    "tokens_completion",
    "latency_s",
    "cache_hit",
)
LLM_COLUMNS = (
    "correct_lenient",
    "reader_model",
    "finish_reason",
    "tokens_prompt",
    "tokens_completion",
    "latency_s",
    "cache_hit",
)
BRANCH_ORDER = {"current": 0, "reveal": 1, "override": 2}
OUTCOMES = ("pass", "wrong_log", "unparsed", "reader_error", "wrapper_only", "na", "error")
ATTRIBUTIONS = {
    "dropped": "evidence dropped by the compressor",
    "written_wrong": "written wrong",
    "misread": "retained but misread",
    "wrapper_only": "wrapper-only",
    "na": "NA",
    "compressor_error": "compressor raised",
}
"""Why a read failed (key -> label shown in the report)."""


@dataclass(frozen=True)
class MetricSpec:
    column: str
    branches: tuple[str, ...]
    na: Literal["bounds", "exclude"]
    """bounds: NA computed as fail and as pass; exclude: blocks with NA are left out."""


METRICS: dict[str, MetricSpec] = {
    "current": MetricSpec("correct", ("current",), "bounds"),
    "reveal": MetricSpec("correct", ("reveal",), "bounds"),
    "override": MetricSpec("correct", ("override",), "bounds"),
    "joint_J": MetricSpec("correct", ("reveal", "override"), "bounds"),
    "adequacy": MetricSpec("adequate", ("reveal",), "exclude"),
    "collision": MetricSpec("collision", ("current",), "exclude"),
}
LENIENT: dict[str, MetricSpec] = {
    "reveal_lenient": MetricSpec("correct_lenient", ("reveal",), "bounds"),
    "joint_J_lenient": MetricSpec("correct_lenient", ("reveal", "override"), "bounds"),
}


# ----------------------------------------------------------------------- pair-level scores


def pair_level(df: pd.DataFrame, spec: MetricSpec) -> pd.DataFrame:
    """One row per (system, transform, family, source pair): pass (all instances), NA bounds.

    Columns: ``lo``/``hi`` (1 if the pair passes on every instance, NA as fail / as
    pass), ``inst_lo``/``inst_hi`` (passing instances), ``n_inst``.
    """
    rows = df[df["branch"].isin(spec.branches)]
    if spec.column not in rows or rows.empty:
        return pd.DataFrame(columns=[*PAIR_KEYS, "lo", "hi", "inst_lo", "inst_hi", "n_inst"])
    values = rows[spec.column]
    block_keys = [*PAIR_KEYS, "pair_id", "repeat"]
    frame = rows[block_keys].copy()
    frame["lo"] = values.fillna(0.0).to_numpy()
    frame["hi"] = values.fillna(1.0).to_numpy()
    frame["na"] = values.isna().to_numpy()
    blocks = frame.groupby(block_keys, observed=True, sort=False).agg(
        lo=("lo", "min"), hi=("hi", "min"), na=("na", "any")
    )
    if spec.na == "exclude":
        blocks = blocks[~blocks["na"]]
    instances = (
        blocks[["lo", "hi"]].groupby(level=list(range(len(block_keys) - 1)), observed=True).mean()
        > 0.5
    ).astype(np.int64)
    grouped = instances.groupby(level=list(range(len(PAIR_KEYS))), observed=True)
    out = grouped.agg(["min", "sum", "count"])
    result = pd.DataFrame(
        {
            "lo": out[("lo", "min")],
            "hi": out[("hi", "min")],
            "inst_lo": out[("lo", "sum")],
            "inst_hi": out[("hi", "sum")],
            "n_inst": out[("lo", "count")],
        }
    ).reset_index()
    for column in PAIR_KEYS:
        if column != "budget":
            result[column] = result[column].astype(str)
    return result


def wilson_arrays(k: np.ndarray[Any, Any], n: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """Vectorized Wilson bounds (statsmodels); NaN where n == 0."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    safe = np.where(n > 0, n, 1.0)
    low, high = proportion_confint(np.minimum(k, safe), safe, alpha=0.05, method="wilson")
    low = np.where(n > 0, np.clip(low, 0.0, 1.0), np.nan)
    high = np.where(n > 0, np.clip(high, 0.0, 1.0), np.nan)
    return low, high


def cells(pairs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """k/n over source pairs per group, with Wilson intervals (envelope over NA bounds)."""
    if pairs.empty:
        return pd.DataFrame(
            columns=[
                *by,
                "k",
                "k_high",
                "n",
                "rate",
                "low",
                "high",
                "inst_k",
                "inst_k_high",
                "inst_n",
            ]
        )
    grouped = pairs.groupby(list(by), observed=True, sort=False)
    out = grouped.agg(
        k=("lo", "sum"),
        k_high=("hi", "sum"),
        n=("lo", "count"),
        inst_k=("inst_lo", "sum"),
        inst_k_high=("inst_hi", "sum"),
        inst_n=("n_inst", "sum"),
    ).reset_index()
    out["rate"] = out["k"] / out["n"]
    low, _ = wilson_arrays(out["k"].to_numpy(), out["n"].to_numpy())
    _, high = wilson_arrays(out["k_high"].to_numpy(), out["n"].to_numpy())
    out["low"], out["high"] = low, high
    return out


def _proportion_columns(prefix: str, row: Mapping[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {
            f"{prefix}_{s}": v
            for s, v in (
                ("k", 0),
                ("k_high", 0),
                ("n", 0),
                ("rate", math.nan),
                ("low", math.nan),
                ("high", math.nan),
            )
        }
    return {
        f"{prefix}_k": int(row["k"]),
        f"{prefix}_k_high": int(row["k_high"]),
        f"{prefix}_n": int(row["n"]),
        f"{prefix}_rate": float(row["rate"]),
        f"{prefix}_low": float(row["low"]),
        f"{prefix}_high": float(row["high"]),
    }


@dataclass
class Scored:
    """Pair-level scores of a run and their k/n cells."""

    pairs: dict[str, pd.DataFrame]
    """metric -> pair-level frame (see ``pair_level``)."""
    overall: dict[str, pd.DataFrame]
    """metric -> cells per system x transform (all families)."""
    by_family: dict[str, pd.DataFrame]
    """metric -> cells per system x transform x family."""
    families: dict[str, str]
    """source pair id -> family."""
    systems: list[tuple[str, str, int]]
    """(reader, condition, budget) in display order."""


def _order(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    head = [v for v in preferred if v in present]
    return head + sorted(v for v in present if v not in head)


def score(df: pd.DataFrame, conditions: Sequence[str] = ()) -> Scored:
    specs = dict(METRICS)
    if "correct_lenient" in df and df["correct_lenient"].notna().any():
        specs.update(LENIENT)
    pairs = {name: pair_level(df, spec) for name, spec in specs.items()}
    overall = {m: cells(p, [*SYSTEM, "transform"]) for m, p in pairs.items()}
    by_family = {m: cells(p, [*SYSTEM, "transform", "family"]) for m, p in pairs.items()}
    first = df.drop_duplicates("source_pair_id")
    families = dict(
        zip(first["source_pair_id"].astype(str), first["family"].astype(str), strict=True)
    )
    readers = _order(df["reader"].astype(str).unique(), ["exact"])
    condition_order = _order(df["condition"].astype(str).unique(), conditions)
    present = set(
        df[SYSTEM]
        .drop_duplicates()
        .astype({"reader": str, "condition": str})
        .itertuples(index=False, name=None)
    )
    systems = [
        (r, c, int(b))
        for r in readers
        for b in sorted(int(x) for x in df["budget"].unique())
        for c in condition_order
        if (r, c, b) in present
    ]
    return Scored(pairs, overall, by_family, families, systems)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def _lookup(frame: pd.DataFrame, keys: Sequence[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(row[k] for k in keys): row for row in _records(frame)}


def _by_system(
    frame: pd.DataFrame, extra: Sequence[str] = ()
) -> dict[tuple[Any, ...], pd.DataFrame]:
    """Groups of ``frame`` keyed (reader, condition, budget, *extra) as (str, str, int, *str)."""
    out: dict[tuple[Any, ...], pd.DataFrame] = {}
    for key, group in frame.groupby([*SYSTEM, *extra], observed=True):
        parts = cast(tuple[Any, ...], key)
        out[(str(parts[0]), str(parts[1]), int(parts[2]), *map(str, parts[3:]))] = group
    return out


# --------------------------------------------------------------------------- the tables


@dataclass
class Options:
    seed: int = DEFAULT_SEED
    resamples: int = DEFAULT_RESAMPLES
    reference: str | None = None
    """Condition every other condition is compared with (default: best joint J per budget)."""
    pairwise: bool = False
    """Compare every two conditions (instead of each against the reference)."""
    max_pairs: int = 200
    """Source pairs drilled into (failures first); 0 = all."""


def headline_table(run: RunData, scored: Scored, options: Options) -> pd.DataFrame:
    metrics = ("current", "reveal", "override", "joint_J", "adequacy", "collision")
    lookups = {m: _lookup(scored.overall[m], [*SYSTEM, "transform"]) for m in metrics}
    identity = run.results[run.results["transform"] == IDENTITY]
    bytes_per_pair = (
        identity.groupby([*SYSTEM, "family", "source_pair_id"], observed=True)["memory_bytes"]
        .mean()
        .reset_index()
    )
    bytes_by_system = _by_system(bytes_per_pair)
    j_pairs = scored.pairs["joint_J"]
    j_identity = j_pairs[j_pairs["transform"] == IDENTITY]
    j_by_system = _by_system(j_identity)
    rows = []
    for system in scored.systems:
        row: dict[str, Any] = dict(zip(SYSTEM, system, strict=True))
        for metric in metrics:
            row.update(_proportion_columns(metric, lookups[metric].get((*system, IDENTITY))))
        group = j_by_system.get(system)
        if group is not None and len(group):
            # NA as fail and NA as pass, same resamples: the envelope of the two
            low = cluster_bootstrap(
                group["lo"].to_numpy(),
                np.ones(len(group)),
                group["family"].tolist(),
                resamples=options.resamples,
                seed=options.seed,
                key=f"J/{system}",
            )[0]
            high = cluster_bootstrap(
                group["hi"].to_numpy(),
                np.ones(len(group)),
                group["family"].tolist(),
                resamples=options.resamples,
                seed=options.seed,
                key=f"J/{system}",
            )[1]
        else:
            low = high = math.nan
        row["joint_J_boot_low"], row["joint_J_boot_high"] = low, high
        sizes = bytes_by_system.get(system)
        values = sizes["memory_bytes"].dropna() if sizes is not None else pd.Series([])
        if len(values):
            row["memory_bytes_mean"] = float(values.mean())
            fam = sizes.loc[values.index, "family"].tolist() if sizes is not None else []
            row["memory_bytes_low"], row["memory_bytes_high"] = bootstrap_mean(
                values.to_numpy(),
                fam,
                resamples=options.resamples,
                seed=options.seed,
                key=f"bytes/{system}",
            )
        else:
            row["memory_bytes_mean"] = row["memory_bytes_low"] = math.nan
            row["memory_bytes_high"] = math.nan
        row["n_pairs"] = int(row["current_n"]) if row["current_n"] else int(row["joint_J_n"])
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    for metric in ("current", "reveal"):
        table[f"rank_{metric}"] = (
            table.groupby(["reader", "budget"])[f"{metric}_rate"]
            .rank(method="min", ascending=False)
            .fillna(0)
            .astype(int)
        )
    table["rank_differs"] = False
    for warning in ranking_warnings(table):
        involved = set(warning["misleading"]) | {
            c
            for inv in warning["inversions"]
            for c in (inv["current_prefers"], inv["reveal_prefers"])
        }
        mask = (
            (table["reader"] == warning["reader"])
            & (table["budget"] == warning["budget"])
            & table["condition"].isin(involved)
        )
        table.loc[mask, "rank_differs"] = True
    return table


def ranking_warnings(headline: pd.DataFrame) -> list[dict[str, Any]]:
    """Where current accuracy ranks conditions differently from reveal accuracy."""
    warnings: list[dict[str, Any]] = []
    if headline.empty:
        return warnings
    for (reader, budget), group in headline.groupby(["reader", "budget"], sort=False):
        if len(group) < 2:
            continue
        current = dict(zip(group["condition"], group["current_rate"].fillna(0), strict=True))
        reveal = dict(zip(group["condition"], group["reveal_rate"].fillna(0), strict=True))
        best_current = [c for c, v in current.items() if v == max(current.values())]
        best_reveal = [c for c, v in reveal.items() if v == max(reveal.values())]
        inversions = [
            {
                "current_prefers": a,
                "reveal_prefers": b,
                "current": (current[a], current[b]),
                "reveal": (reveal[a], reveal[b]),
            }
            for a in current
            for b in current
            if a != b and current[a] > current[b] and reveal[a] < reveal[b]
        ]
        ties = [
            {"conditions": (a, b), "current": current[a], "reveal": (reveal[a], reveal[b])}
            for i, a in enumerate(current)
            for b in list(current)[i + 1 :]
            if current[a] == current[b] and reveal[a] != reveal[b]
        ]
        if set(best_current) != set(best_reveal) or inversions:
            warnings.append(
                {
                    "reader": str(reader),
                    "budget": int(cast(Any, budget)),
                    "best_by_current": best_current,
                    "best_by_reveal": best_reveal,
                    "misleading": [c for c in best_current if c not in best_reveal],
                    "inversions": inversions,
                    "ties_split_by_reveal": len(ties),
                }
            )
    return warnings


def family_table(scored: Scored) -> pd.DataFrame:
    frame = scored.by_family["joint_J"]
    frame = frame[frame["transform"] == IDENTITY].drop(columns=["transform"])
    adequacy = scored.by_family["adequacy"]
    adequacy = adequacy[adequacy["transform"] == IDENTITY]
    merged = frame.merge(
        adequacy[[*SYSTEM, "family", "k", "k_high", "n", "rate", "low", "high"]],
        on=[*SYSTEM, "family"],
        how="left",
        suffixes=("", "_adequacy"),
    )
    return merged.rename(
        columns={c: f"joint_J_{c}" for c in ("k", "k_high", "n", "rate", "low", "high")}
        | {f"{c}_adequacy": f"adequacy_{c}" for c in ("k", "k_high", "n", "rate", "low", "high")}
    ).drop(columns=["inst_k", "inst_k_high", "inst_n"], errors="ignore")


def transform_table(run: RunData, scored: Scored, options: Options) -> pd.DataFrame:
    """Per system x transform: pair-level reveal/adequacy/late-reference, gaps, equivariance."""
    df = run.results
    reveal = _lookup(scored.overall["reveal"], [*SYSTEM, "transform"])
    adequacy = _lookup(scored.overall["adequacy"], [*SYSTEM, "transform"])
    late = scored.by_family["adequacy"]
    late_lookup = _lookup(late[late["family"] == LATE_REFERENCE], [*SYSTEM, "transform"])
    equi = df[df["equivariant"].notna()]
    equi_pairs = (
        equi.assign(violation=(equi["equivariant"] == 0).astype(int))
        .groupby([*SYSTEM, "transform", "source_pair_id"], observed=True)["violation"]
        .agg(["max", "sum", "count"])
        .reset_index()
    )
    equi_cells = _by_system(equi_pairs, ["transform"])
    reveal_pairs = scored.pairs["reveal"]
    pair_groups = _by_system(reveal_pairs, ["transform"])
    transforms = _order(
        df["transform"].astype(str).unique(), [IDENTITY, "rename", "permute", "decoy"]
    )
    rows = []
    for system in scored.systems:
        base = reveal.get((*system, IDENTITY))
        base_adequacy = adequacy.get((*system, IDENTITY))
        base_late = late_lookup.get((*system, IDENTITY))
        for transform in transforms:
            key = (*system, transform)
            if key not in reveal and key not in adequacy:
                continue
            row: dict[str, Any] = dict(zip(SYSTEM, system, strict=True))
            row["transform"] = transform
            r = reveal.get(key)
            row.update(_proportion_columns("reveal", r))
            row.update(_proportion_columns("adequacy", adequacy.get(key)))
            row.update(_proportion_columns("late_reference_adequacy", late_lookup.get(key)))
            row["reveal_instances_k"] = int(r["inst_k"]) if r else 0
            row["reveal_instances_n"] = int(r["inst_n"]) if r else 0
            group = pair_groups.get((*system, transform))
            if group is not None and len(group) and transform != IDENTITY:
                row["reveal_instances_low"], row["reveal_instances_high"] = cluster_bootstrap(
                    group["inst_lo"].to_numpy(),
                    group["n_inst"].to_numpy(),
                    group["family"].tolist(),
                    resamples=options.resamples,
                    seed=options.seed,
                    key=f"inst/{key}",
                )
            else:
                row["reveal_instances_low"] = row["reveal_instances_high"] = math.nan
            row["gap_reveal"] = _gap(base, r)
            row["gap_adequacy"] = _gap(base_adequacy, adequacy.get(key))
            row["gap_late_reference_adequacy"] = _gap(base_late, late_lookup.get(key))
            e = equi_cells.get(key)
            row["equivariance_violation_pairs_k"] = int(e["max"].sum()) if e is not None else 0
            row["equivariance_violation_pairs_n"] = len(e) if e is not None else 0
            row["equivariance_violation_reads_k"] = int(e["sum"].sum()) if e is not None else 0
            row["equivariance_violation_reads_n"] = int(e["count"].sum()) if e is not None else 0
            rows.append(row)
    return pd.DataFrame(rows)


def _gap(base: Mapping[str, Any] | None, moved: Mapping[str, Any] | None) -> float:
    if not base or not moved or not base["n"] or not moved["n"]:
        return math.nan
    return float(base["rate"]) - float(moved["rate"])


def budget_table(scored: Scored) -> pd.DataFrame:
    j = scored.overall["joint_J"]
    j = j[j["transform"] == IDENTITY]
    a = scored.overall["adequacy"]
    a = a[a["transform"] == IDENTITY]
    rows = []
    a_lookup = _lookup(a, SYSTEM)
    for row in _records(j):
        key = tuple(row[k] for k in SYSTEM)
        out = {k: row[k] for k in SYSTEM}
        out.update(_proportion_columns("joint_J", row))
        out.update(_proportion_columns("adequacy", a_lookup.get(key)))
        rows.append(out)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    rank = {(r, c): i for i, (r, c, _) in enumerate(scored.systems)}
    keys = [
        rank.get((r, c), 1 << 30) for r, c in zip(table["reader"], table["condition"], strict=True)
    ]
    return table.assign(_order=keys).sort_values(["_order", "budget"]).drop(columns="_order")


def comparison_table(scored: Scored, options: Options) -> pd.DataFrame:
    """Paired comparisons of joint J at identity on the same source pairs, Holm-corrected."""
    j = scored.pairs["joint_J"]
    j = j[j["transform"] == IDENTITY]
    values: dict[tuple[str, str, int], dict[str, float]] = {}
    for system, group in _by_system(j).items():
        determined = np.where(group["lo"] == group["hi"], group["lo"], np.nan)
        values[cast(tuple[str, str, int], system)] = dict(
            zip(group["source_pair_id"].astype(str), determined.astype(float), strict=True)
        )
    rows = []
    blocks: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for reader, condition, budget in scored.systems:
        blocks.setdefault((reader, budget), []).append((condition, budget))
    for (reader, budget), members in blocks.items():
        names = [c for c, _ in members]
        if len(names) < 2:
            continue
        rates = {
            c: np.nanmean(list(values[(reader, c, budget)].values()) or [np.nan]) for c in names
        }
        if options.pairwise:
            pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
        else:
            reference = options.reference if options.reference in names else None
            if reference is None:
                reference = max(
                    names, key=lambda c: (np.nan_to_num(rates[c], nan=-1), -names.index(c))
                )
            pairs = [(reference, c) for c in names if c != reference]
        for a, b in pairs:
            result = paired_comparison(
                values[(reader, a, budget)],
                values[(reader, b, budget)],
                scored.families,
                resamples=options.resamples,
                seed=options.seed,
                key=f"cmp/{reader}/{budget}/{a}/{b}",
            )
            rows.append(_comparison_row(reader, budget, a, b, result))
    return _with_holm(pd.DataFrame(rows))


def _comparison_row(reader: str, budget: int, a: str, b: str, result: Any) -> dict[str, Any]:
    t = result.table
    return {
        "reader": reader,
        "budget": budget,
        "a": a,
        "b": b,
        "n_pairs": t.n,
        "both_pass": t.both,
        "only_a": t.only_a,
        "only_b": t.only_b,
        "neither": t.neither,
        "rate_a": (t.both + t.only_a) / t.n if t.n else math.nan,
        "rate_b": (t.both + t.only_b) / t.n if t.n else math.nan,
        "delta": result.delta,
        "delta_low": result.low,
        "delta_high": result.high,
        "p_value": result.p_value,
        "excluded_pairs": result.excluded,
    }


def _with_holm(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    table["p_holm"] = holm(table["p_value"].tolist())
    table["significant"] = table["p_holm"] < 0.05
    return table


def taxonomy_table(run: RunData, scored: Scored, causes_by_read: pd.Series) -> pd.DataFrame:
    """Per system at identity: outcomes and causes (reads), strict vs lenient J (pairs)."""
    identity = run.results[run.results["transform"] == IDENTITY]
    outcomes = identity.groupby([*SYSTEM, "outcome"], observed=True).size().unstack(fill_value=0)
    if causes_by_read.empty:
        causes = pd.DataFrame()
    else:
        attributed = run.results.loc[causes_by_read.index, SYSTEM].assign(
            attribution=causes_by_read.to_numpy()
        )
        counted = attributed.groupby([*SYSTEM, "attribution"], observed=True).size()
        causes = counted.unstack(fill_value=0)
    j = _lookup(scored.overall["joint_J"], [*SYSTEM, "transform"])
    lenient = scored.overall.get("joint_J_lenient")
    jl = _lookup(lenient, [*SYSTEM, "transform"]) if lenient is not None else {}
    rows = []
    for system in scored.systems:
        row: dict[str, Any] = dict(zip(SYSTEM, system, strict=True))
        for outcome in OUTCOMES:
            row[f"outcome_{outcome}"] = _count(outcomes, system, outcome)
        for cause in ATTRIBUTIONS:
            row[f"cause_{cause}"] = _count(causes, system, cause)
        row.update(_proportion_columns("joint_J", j.get((*system, IDENTITY))))
        row.update(_proportion_columns("joint_J_lenient", jl.get((*system, IDENTITY))))
        rows.append(row)
    return pd.DataFrame(rows)


def _count(frame: pd.DataFrame, system: tuple[str, str, int], column: str) -> int:
    if frame.empty or column not in frame.columns:
        return 0
    try:
        return int(cast(Any, frame.loc[system, column]))
    except KeyError:
        return 0


COST_COLUMNS = [
    "stage",
    "units",
    "requests_sent",
    "saved_by_cache",
    "saved_by_dedup",
    "tokens_prompt",
    "tokens_completion",
    "seconds",
    "reads",
    "distinct_memories",
    "memory_bytes",
]
_COST_ALIASES = {
    "units": ("units", "jobs"),
    "requests_sent": ("requests_sent", "sent", "requests"),
    "saved_by_cache": ("saved_by_cache", "cache_hits", "cached", "hits"),
    "saved_by_dedup": ("saved_by_dedup", "deduplicated", "dedup", "coalesced"),
    "tokens_prompt": ("tokens_prompt", "prompt_tokens"),
    "tokens_completion": ("tokens_completion", "completion_tokens"),
    "seconds": ("seconds", "wall_seconds"),
}


def _cost_fields(stats: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column, names in _COST_ALIASES.items():
        for name in names:
            value = stats.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[column] = value
                break
    return out


def _add(rows: dict[str, dict[str, Any]], stage: str, fields: Mapping[str, Any]) -> None:
    row = rows.setdefault(stage, {"stage": stage})
    for key, value in fields.items():
        row[key] = row.get(key, 0) + value


def _costs_json_rows(costs: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows from costs.json: the ``stages`` form (documented above) or ``invocations``."""
    rows: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for stage in costs.get("stages") or []:
        if isinstance(stage, Mapping):
            _add(rows, str(stage.get("stage", "stage")), _cost_fields(stage))
    invocations = costs.get("invocations") or []
    for invocation in invocations:
        if not isinstance(invocation, Mapping):
            continue
        deterministic = invocation.get("deterministic")
        if isinstance(deterministic, Mapping):
            _add(rows, "compress + exact read (deterministic jobs)", _cost_fields(deterministic))
        llm = invocation.get("llm")
        if isinstance(llm, Mapping):
            _add(rows, "LLM stage", _cost_fields(llm))
            for role in ("writer", "reader", "writer_and_reader"):
                stats = llm.get(role)
                if isinstance(stats, Mapping):
                    label = role.replace("_", " ")
                    _add(rows, f"LLM {label} requests", _cost_fields(stats))
    if len(invocations) > 1:
        notes.append(f"costs.json: {len(invocations)} invocations (resumed run), summed")
    if "wall_seconds" in costs:
        notes.append(f"wall time of the run: {_seconds(costs['wall_seconds'])}")
    return list(rows.values()), notes


def cost_table(run: RunData, memories: MemoryStore) -> tuple[pd.DataFrame, list[str]]:
    """Requests, savings, tokens and time per stage (costs.json), plus what results hold."""
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    if run.costs:
        recorded, recorded_notes = _costs_json_rows(run.costs.model_dump(exclude_none=True))
        rows += recorded
        notes += ["from costs.json: " + ", ".join(r["stage"] for r in recorded)] if recorded else []
        notes += recorded_notes
    else:
        notes.append(
            "no costs.json in this run: requests, cache and dedup savings per stage are "
            "not recorded"
        )
    df = run.results
    distinct = df.drop_duplicates("memory_sha256")
    rows.append(
        {
            "stage": "memories (from results)",
            "distinct_memories": int(distinct["memory_sha256"].notna().sum()),
            "memory_bytes": int(distinct["memory_bytes"].fillna(0).sum()),
        }
    )
    for reader, group in df.groupby("reader", observed=True):
        row: dict[str, Any] = {"stage": f"reads by {reader} (from results)", "reads": len(group)}
        if str(group["reader_kind"].iloc[0]) != "exact":
            if "cache_hit" in group:
                cached = int(group["cache_hit"].fillna(0).sum())
                row["saved_by_cache"] = cached
                row["requests_sent"] = int(group["cache_hit"].notna().sum()) - cached
            for column in ("tokens_prompt", "tokens_completion"):
                if column in group:
                    row[column] = int(group[column].fillna(0).sum())
            if "latency_s" in group:
                row["seconds"] = float(group["latency_s"].fillna(0).sum())
        rows.append(row)
    if not run.has_llm:
        notes.append("no LLM reader in this run: no requests, tokens or latency")
    else:
        notes.append("reads by an LLM reader: seconds are summed request latencies, not wall time")
    notes.append("memory bytes: distinct memories, each stored once")
    created = run.created
    if created and run.last_finished:
        try:
            start = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))
            notes.append(
                f"wall time from config.json created ({created}) to the last finished job: "
                f"{_seconds(run.last_finished - start)}"
            )
        except (ValueError, OverflowError):
            pass
    elif created:
        notes.append(f"run created {created}; end time not recorded")
    frame = pd.DataFrame(rows, columns=COST_COLUMNS)
    frame = frame.dropna(axis=1, how="all")
    return frame, notes


def _seconds(value: Any) -> str:
    try:
        return f"{float(value):.1f} s"
    except (TypeError, ValueError):
        return str(value)


# -------------------------------------------------------------------- pairs and drill-down


_LINE_ID = re.compile(r"[A-Za-z0-9_.:\-]+")


def _history_lines(pair: Any, variant: str, branch: str) -> frozenset[str]:
    return frozenset(r.canonical_json() for r in pair.history(variant, branch))


def invented_records(memory: str, known: frozenset[str]) -> bool:
    """True when a line of the memory is a record that never was in the history.

    Lines that are no record at all (prose, garbage) are not counted here: they make
    a memory unreadable to the exact reader, which is "evidence dropped".
    """
    from compressors import load
    from histories._render import RenderParseError

    for line in memory.splitlines():
        if not line.strip() or line in known:
            continue
        try:
            records = load(line)
        except RenderParseError:
            continue
        if any(r.canonical_json() not in known for r in records):
            return True
    return False


def attribute(df: pd.DataFrame, source: SourcePairs, memories: MemoryStore) -> pd.Series:
    """Cause of every failed (or NA) read at identity, indexed like ``df`` (``ATTRIBUTIONS``)."""
    failed = df[(df["transform"] == IDENTITY) & (df["correct"] != 1)]
    if failed.empty:
        return pd.Series(dtype=object, name="attribution")
    outcome = failed["outcome"].astype(str)
    cause = np.select(
        [
            outcome == "na",
            failed["correct"].isna(),
            outcome == "wrapper_only",
            outcome == "reader_error",
            outcome == "error",
            outcome.isin(["unparsed", "wrong_log"]),
            failed["adequate"] == 1,
        ],
        ["na", "na", "wrapper_only", "misread", "compressor_error", "dropped", "misread"],
        default="dropped",
    )
    result = pd.Series(cause, index=failed.index, name="attribution", dtype=object)
    if source.pairs:
        suspects = failed[result == "dropped"]
        texts = memories.many(suspects["memory_sha256"].dropna().astype(str).tolist())
        known: dict[tuple[str, str, str], frozenset[str]] = {}
        wrong = []
        for idx, pid, variant, branch, sha in zip(
            suspects.index,
            suspects["source_pair_id"].astype(str),
            suspects["variant"].astype(str),
            suspects["branch"].astype(str),
            suspects["memory_sha256"],
            strict=True,
        ):
            pair = source.pairs.get(pid)
            text = texts.get(str(sha)) if sha else None
            if pair is None or text is None or variant not in ("A", "B"):
                continue
            key = (pid, variant, branch)
            if key not in known:
                known[key] = _history_lines(pair, variant, branch)
            if invented_records(text, known[key]):
                wrong.append(idx)
        result.loc[wrong] = "written_wrong"
    return result


def _lines(text: str, marks: frozenset[str]) -> list[dict[str, Any]]:
    """A memory's lines; ``mark``: the line names a distinguishing record (whole label)."""
    out = []
    for line in text.split("\n"):
        mark = bool(marks) and any(m in line for m in marks)
        if mark:
            mark = bool(set(_LINE_ID.findall(line)) & marks)
        out.append({"text": line, "mark": mark})
    return out


def _answer_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def drilldown(
    run: RunData,
    source: SourcePairs,
    causes: pd.Series,
    memories: MemoryStore,
    systems: Sequence[tuple[str, str, int]],
    max_pairs: int,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per source pair (identity instances only): variants, memories, reads, attribution."""
    notes = [
        "transformed instances are summarized in the tables above, not drilled into; "
        "the drill-down shows identity instances"
    ]
    if source.note:
        return [], [source.note, *notes]
    df = run.results
    identity = df[df["transform"] == IDENTITY]
    order = {s: i for i, s in enumerate(systems)}
    failing = (
        identity.assign(fail=(identity["correct"] != 1).astype(int))
        .groupby(["source_pair_id", *SYSTEM], observed=True)["fail"]
        .max()
        .groupby(level=0, observed=True)
        .sum()
    )
    ranked = sorted(
        (pid for pid in failing.index.astype(str) if pid in source.pairs),
        key=lambda pid: (-int(failing[pid]), source.pairs[pid].family, pid),
    )
    missing = len(set(failing.index.astype(str)) - source.pairs.keys())
    if missing:
        notes.append(f"{missing} source pair(s) of the results are not in the rebuilt pairs")
    if max_pairs and len(ranked) > max_pairs:
        notes.append(
            f"drilled into the first {max_pairs} of {len(ranked)} source pairs (failures "
            "first); `audit report --max-pairs 0` drills into all"
        )
        ranked = ranked[:max_pairs]
    wanted = identity[identity["source_pair_id"].astype(str).isin(set(ranked))]
    texts = memories.many(wanted["memory_sha256"].dropna().astype(str).tolist())
    by_pair = _rows_by_pair(wanted)
    cause_of = {int(cast(Any, k)): str(v) for k, v in causes.items()} if not causes.empty else {}
    from histories import distinguishing_ids

    out = []
    for pid in ranked:
        pair = source.pairs[pid]
        marks = frozenset(distinguishing_ids(pair))
        entry: dict[str, Any] = {
            "pair_id": pid,
            "family": pair.family,
            "query": list(pair.query),
            "distinguishing": sorted(marks),
            "variants": {
                v: [{"text": r.canonical_json(), "mark": r.id in marks} for r in pair.prefix(v)]
                for v in ("A", "B")
            },
            "futures": {
                f: [{"text": r.canonical_json(), "mark": False} for r in pair.future(f)]
                for f in ("reveal", "override")
            },
            "gold": {
                v: {
                    b: json.dumps(getattr(pair.gold.of(v), b)) if pair.gold else None
                    for b in ("current", "reveal", "override")
                }
                for v in ("A", "B")
            },
            "cells": [],
            "passing": [],
        }
        cells_out: list[dict[str, Any]] = []
        for system, rows in by_pair.get(pid, {}).items():
            reader, condition, budget = system
            failed = any(r["correct"] == 0 for _, r in rows)
            na = any(_is_nan(r["correct"]) for _, r in rows)
            label = f"{condition} @ {budget} B" + ("" if reader == "exact" else f" ({reader})")
            if not failed and not na:
                entry["passing"].append(label)
                continue
            cells_out.append(_cell(system, label, failed, na, rows, texts, marks, cause_of))
        cells_out.sort(key=lambda c: (not c["failed"], order.get(c["system"], 1 << 30)))
        entry["cells"] = cells_out
        out.append(entry)
    return out, notes


_DRILL_COLUMNS = ("source_pair_id", "reader", "condition", "budget", "variant", "branch",
                  "repeat", "outcome", "correct", "memory_sha256", "memory_bytes", "answer",
                  "gold", "error", "finish_reason", "raw_answer")  # fmt: skip


def _is_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _rows_by_pair(
    frame: pd.DataFrame,
) -> dict[str, dict[tuple[str, str, int], list[tuple[int, dict[str, Any]]]]]:
    """Reads as plain dicts: pair -> system -> [(row index, row)], in read order."""
    columns = [c for c in _DRILL_COLUMNS if c in frame]
    plain = {
        c: frame[c].astype(object).tolist()
        if isinstance(frame[c].dtype, pd.CategoricalDtype)
        else frame[c].tolist()
        for c in columns
    }
    out: dict[str, dict[tuple[str, str, int], list[tuple[int, dict[str, Any]]]]] = {}
    for i, index in enumerate(frame.index.tolist()):
        row = {c: plain[c][i] for c in columns}
        system = (str(row["reader"]), str(row["condition"]), int(row["budget"]))
        out.setdefault(str(row["source_pair_id"]), {}).setdefault(system, []).append(
            (int(index), row)
        )
    for systems in out.values():
        for rows in systems.values():
            rows.sort(
                key=lambda item: (
                    item[1]["repeat"],
                    str(item[1]["variant"]),
                    BRANCH_ORDER.get(str(item[1]["branch"]), 9),
                )
            )
    return out


def _cell(
    system: tuple[str, str, int],
    label: str,
    failed: bool,
    na: bool,
    rows: Sequence[tuple[int, dict[str, Any]]],
    texts: Mapping[str, str],
    marks: frozenset[str],
    cause_of: Mapping[int, str],
) -> dict[str, Any]:
    memo: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    reads = []
    for index, row in rows:
        variant, branch = str(row["variant"]), str(row["branch"])
        sha = row.get("memory_sha256")
        text = texts.get(str(sha)) if sha else None
        if variant in memo and branch not in memo[variant]:
            size = row.get("memory_bytes")
            memo[variant][branch] = {
                "lines": None if text is None else _lines(text, marks),
                "bytes": None if size is None or _is_nan(size) else int(size),
                "sha": sha,
            }
        correct = row["correct"]
        reads.append(
            {
                "variant": variant,
                "branch": branch,
                "repeat": int(row["repeat"]),
                "outcome": str(row["outcome"]),
                "correct": None if _is_nan(correct) else int(correct),
                "answer": _answer_text(row.get("answer")),
                "gold": _answer_text(row.get("gold")),
                "error": _answer_text(row.get("error")),
                "attribution": ATTRIBUTIONS.get(cause_of.get(index, "")),
                "finish_reason": _answer_text(row.get("finish_reason")),
                "raw_answer": _answer_text(row.get("raw_answer")),
            }
        )
    a_now = memo["A"].get("current", {}).get("sha")
    b_now = memo["B"].get("current", {}).get("sha")
    return {
        "system": system,
        "label": label,
        "failed": failed,
        "na": na,
        "identical": bool(a_now and a_now == b_now),
        "memories": memo,
        "reads": reads,
    }


# ------------------------------------------------------------------------------ assembly


def _meta(run: RunData, scored: Scored, extra_notes: Sequence[str]) -> dict[str, Any]:
    config = run.raw_config
    env = run.config_file.environment.model_dump() if run.config_file else {}
    df = run.results
    return {
        "run": str(run.path),
        "label": run.label,
        "created": run.created,
        "pairs": config.get("pairs"),
        "pairs_sha256": config.get("pairs_sha256"),
        "conditions": config.get("conditions") or sorted({s[1] for s in scored.systems}),
        "budgets": config.get("budgets") or sorted({s[2] for s in scored.systems}),
        "transforms": config.get("transforms") or list(dict.fromkeys(df["transform"].astype(str))),
        "seed": config.get("seed"),
        "readers": list(dict.fromkeys(s[0] for s in scored.systems)),
        "has_llm": run.has_llm,
        "has_lenient": run.has_llm and "joint_J_lenient" in scored.overall,
        "has_na": bool(df["correct"].isna().any()),
        "n_reads": len(df),
        "n_source_pairs": int(df["source_pair_id"].nunique()),
        "families": list(dict.fromkeys(df["family"].astype(str))),
        "environment": env,
        "notes": [*run.notes, *extra_notes],
    }


def build_report(run: RunData, options: Options | None = None) -> ReportInput:
    """Everything ``reports.write_report`` needs, as plain data."""
    options = options or Options()
    scored = score(run.results, run.raw_config.get("conditions") or ())
    memories = MemoryStore(run.path)
    try:
        source = load_source_pairs(run)
        causes = attribute(run.results, source, memories)
        headline = headline_table(run, scored, options)
        pairs, drill_notes = drilldown(
            run, source, causes, memories, scored.systems, options.max_pairs
        )
        if source.note is None:
            drill_notes.append(
                "'written wrong' is checked against the pair's history at "
                "identity (a memory line that is no record of the history)"
            )
        else:
            drill_notes.append(
                "without the pairs, 'written wrong' cannot be told from "
                "'evidence dropped'; both are counted as dropped"
            )
        costs, cost_notes = cost_table(run, memories)
        return ReportInput(
            title=f"memory audit: {run.label}",
            meta=_meta(run, scored, []),
            headline=headline,
            ranking=ranking_warnings(headline),
            comparisons=comparison_table(scored, options),
            families=family_table(scored),
            transforms=transform_table(run, scored, options),
            taxonomy=taxonomy_table(run, scored, causes),
            budget_curve=budget_table(scored),
            costs=costs,
            cost_notes=cost_notes,
            drilldown=pairs,
            drilldown_notes=drill_notes,
            attribution_labels=dict(ATTRIBUTIONS),
            comparison_note=_comparison_note(options),
        )
    finally:
        memories.close()


def _comparison_note(options: Options) -> str:
    what = (
        "every two conditions"
        if options.pairwise
        else f"each condition against {options.reference!r}"
        if options.reference
        else "each condition against the best by joint J (per reader and budget)"
    )
    return (
        f"{what}; unit: source pair (passes when its joint J at identity passes, majority of "
        "repeats); exact McNemar on the discordant pairs, Holm-corrected across every "
        f"comparison in this table; delta intervals: cluster bootstrap within family "
        f"({options.resamples} resamples, seed {options.seed})"
    )


# ------------------------------------------------------------------------------- compare


def build_compare(runs: Sequence[RunData], options: Options | None = None) -> CompareInput:
    """Systems across runs on their shared source pairs: paired deltas of joint J at identity."""
    options = options or Options()
    labels: list[str] = []
    for run in runs:
        label = run.label
        while label in labels:
            label += "'"
        labels.append(label)
    values: dict[tuple[str, str, str, int], dict[str, float]] = {}
    families: dict[str, str] = {}
    reader_kinds: dict[tuple[str, str], str] = {}
    order: list[tuple[str, str, str, int]] = []
    for label, run in zip(labels, runs, strict=True):
        scored = score(run.results, run.raw_config.get("conditions") or ())
        for pid, fam in scored.families.items():
            families.setdefault(pid, fam)
        kinds = run.results.drop_duplicates("reader")
        for reader, kind in zip(
            kinds["reader"].astype(str), kinds["reader_kind"].astype(str), strict=True
        ):
            reader_kinds[(label, reader)] = kind
        j = scored.pairs["joint_J"]
        j = j[j["transform"] == IDENTITY]
        grouped = _by_system(j)
        for system in scored.systems:
            group = grouped.get(system)
            if group is None:
                continue
            determined = np.where(group["lo"] == group["hi"], group["lo"], np.nan)
            key = (label, *system)
            values[key] = dict(
                zip(group["source_pair_id"].astype(str), determined.astype(float), strict=True)
            )
            order.append(key)
    shared = (
        set.intersection(
            *(set().union(*(set(v) for k, v in values.items() if k[0] == lab)) for lab in labels)
        )
        if values
        else set()
    )
    systems = []
    for key in order:
        label, reader, condition, budget = key
        observed = [values[key][p] for p in sorted(shared) if p in values[key]]
        kept = [v for v in observed if not math.isnan(v)]
        k, n = int(sum(kept)), len(kept)
        low, high = wilson_arrays(np.array([k]), np.array([n]))
        systems.append(
            {
                "run": label,
                "reader": reader,
                "condition": condition,
                "budget": budget,
                "k": k,
                "n": n,
                "rate": k / n if n else math.nan,
                "low": float(low[0]),
                "high": float(high[0]),
            }
        )
    baseline = labels[0]
    rows = []
    for key in order:
        label, reader, condition, budget = key
        if label == baseline:
            continue
        kind = reader_kinds.get((label, reader), reader)
        candidates = [
            other
            for other in order
            if other[0] == baseline
            and other[3] == budget
            and reader_kinds.get((baseline, other[1]), other[1]) == kind
            and other[2] == (options.reference or condition)
        ]
        for ref in candidates[:1]:
            a = {p: v for p, v in values[ref].items() if p in shared}
            b = {p: v for p, v in values[key].items() if p in shared}
            result = paired_comparison(
                a,
                b,
                families,
                resamples=options.resamples,
                seed=options.seed,
                key=f"compare/{ref}/{key}",
            )
            row = _comparison_row(
                reader,
                budget,
                f"{ref[0]}: {ref[2]} ({ref[1]})",
                f"{label}: {condition} ({reader})",
                result,
            )
            row["run_a"], row["run_b"] = ref[0], label
            row["condition_a"], row["condition_b"] = ref[2], condition
            row["reader_a"], row["reader_b"] = ref[1], reader
            rows.append(row)
    notes = []
    digests = {
        lab: run.raw_config.get("pairs_sha256") for lab, run in zip(labels, runs, strict=True)
    }
    if len(set(digests.values())) > 1:
        notes.append(
            "the runs were made on different pair sets (pairs_sha256 differs): compared only on "
            "source pair ids they share; make sure equal ids mean equal pairs"
        )
    notes.append(
        f"{len(shared)} source pairs shared by all runs; every rate and test below uses only them"
    )
    return CompareInput(
        title="memory audit: comparison of " + ", ".join(labels),
        runs=[
            {
                "label": lab,
                "path": str(run.path),
                "created": run.created,
                "conditions": run.raw_config.get("conditions"),
                "budgets": run.raw_config.get("budgets"),
                "readers": list(dict.fromkeys(run.results["reader"].astype(str))),
                "pairs_sha256": run.raw_config.get("pairs_sha256"),
                "n_source_pairs": int(run.results["source_pair_id"].nunique()),
            }
            for lab, run in zip(labels, runs, strict=True)
        ],
        systems=pd.DataFrame(systems),
        comparisons=_with_holm(pd.DataFrame(rows)),
        notes=notes,
        method=(
            f"baseline: {baseline}; each system of another run against the baseline's "
            + (f"{options.reference!r}" if options.reference else "same condition")
            + " at the same budget and reader kind; unit: source pair shared by all runs "
            "(passes when its joint J at identity passes, majority of repeats); exact McNemar "
            "on the discordant pairs, Holm-corrected across every comparison in this table; "
            f"delta intervals: cluster bootstrap within family ({options.resamples} resamples, "
            f"seed {options.seed})"
        ),
    )
