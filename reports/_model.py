"""What a report is made of: plain data (DataFrames, dicts, lists), no audit objects.

``audit`` builds these from a stored run (``audit._report_data``); anything else
that can produce the same columns can render a report too.

Proportion columns follow one convention: for a metric ``m`` a table carries
``m_k`` (successes, NA as fail), ``m_k_high`` (successes, NA as pass: equal to
``m_k`` without NA), ``m_n`` (independent source pairs), ``m_rate`` (``m_k/m_n``),
``m_low`` / ``m_high`` (95 % Wilson interval; with NA bounds, the envelope of the
two).  ``m_n == 0`` means "not measured".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


def _frame() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass
class ReportInput:
    """One run's report.

    Tables (one row per reader x condition x budget unless said otherwise):

    * ``headline``: at identity, proportions ``current``, ``reveal``, ``override``,
      ``joint_J``, ``adequacy``, ``collision``; ``joint_J_boot_low/high`` (cluster
      bootstrap); ``memory_bytes_mean/low/high``; ``rank_current``, ``rank_reveal``,
      ``rank_differs``.
    * ``comparisons``: ``reader, budget, a, b, n_pairs, both_pass, only_a, only_b,
      neither, rate_a, rate_b, delta, delta_low, delta_high, p_value, p_holm,
      significant, excluded_pairs`` (delta = b - a).
    * ``families``: per family, ``joint_J`` and ``adequacy`` proportions at identity.
    * ``transforms``: per transform, ``reveal``, ``adequacy``,
      ``late_reference_adequacy`` proportions; ``reveal_instances_k/n/low/high``;
      ``gap_reveal``, ``gap_adequacy``, ``gap_late_reference_adequacy`` (identity
      rate minus transformed rate); ``equivariance_violation_pairs_k/n`` and
      ``equivariance_violation_reads_k/n``.
    * ``taxonomy``: ``outcome_<outcome>`` and ``cause_<cause>`` read counts at
      identity; ``joint_J`` and ``joint_J_lenient`` proportions.
    * ``budget_curve``: per budget, ``joint_J`` and ``adequacy`` proportions.
    * ``costs``: ``stage, requests_sent, saved_by_cache, saved_by_dedup,
      tokens_prompt, tokens_completion, seconds`` (+ optional ``reads``,
      ``memory_bytes``); empty cells are "not recorded".

    ``ranking``: one dict per (reader, budget) where current accuracy ranks
    conditions differently from reveal accuracy: ``reader, budget, best_by_current,
    best_by_reveal, misleading, inversions`` (list of ``current_prefers,
    reveal_prefers, current, reveal``), ``ties_split_by_reveal``.

    ``drilldown``: one dict per source pair, failures first: ``pair_id, family,
    query, distinguishing, variants {A,B: [line]}, futures {reveal, override:
    [line]}, gold {A,B: {branch: text}}, cells, passing``; a line is ``{"text",
    "mark"}`` (mark: a distinguishing record); a cell is ``label, failed, na,
    identical, memories {A,B: {branch: {lines, bytes, sha}}}, reads [{variant,
    branch, repeat, outcome, correct, answer, gold, error, attribution,
    finish_reason}]``.  Every text in it may be untrusted model output.
    """

    title: str
    meta: dict[str, Any]
    headline: pd.DataFrame = field(default_factory=_frame)
    ranking: list[dict[str, Any]] = field(default_factory=list)
    comparisons: pd.DataFrame = field(default_factory=_frame)
    families: pd.DataFrame = field(default_factory=_frame)
    transforms: pd.DataFrame = field(default_factory=_frame)
    taxonomy: pd.DataFrame = field(default_factory=_frame)
    budget_curve: pd.DataFrame = field(default_factory=_frame)
    costs: pd.DataFrame = field(default_factory=_frame)
    cost_notes: list[str] = field(default_factory=list)
    drilldown: list[dict[str, Any]] = field(default_factory=list)
    drilldown_notes: list[str] = field(default_factory=list)
    attribution_labels: dict[str, str] = field(default_factory=dict)
    comparison_note: str = ""


@dataclass
class CompareInput:
    """Several runs compared on their shared source pairs.

    ``runs``: one dict per run (``label, path, created, conditions, budgets,
    readers, pairs_sha256, n_source_pairs``); ``systems``: ``run, reader,
    condition, budget, k, n, rate, low, high`` (joint J at identity on the shared
    pairs); ``comparisons``: as in ``ReportInput`` plus ``run_a, run_b,
    condition_a, condition_b, reader_a, reader_b``.
    """

    title: str
    runs: list[dict[str, Any]]
    systems: pd.DataFrame = field(default_factory=_frame)
    comparisons: pd.DataFrame = field(default_factory=_frame)
    notes: list[str] = field(default_factory=list)
    method: str = ""
