"""Repeated compaction: adequacy and joint J by how many updates the prefix took.

A ``rechunk`` instance streams the same prefix in more, smaller chunks, so its
memory has been compacted more times before the same futures.  Per reader,
condition and budget, this scores each level (identity, then each rechunking) in
**blocks** (one instance of a source pair and repeat): adequacy passes when E_q on
both variants' memories after the reveal future gives gold, joint J when both
variants are read right after both futures.  Like every score (``docs/method.md``),
nothing leaves a block out: a memory the exact reader cannot judge (a summary) and an
NA read give the ``k``..``k_high`` bounds, and a compressor that raised is a failure.
"""

from __future__ import annotations

import pandas as pd

COMPACTION_LEVELS = ("identity", "rechunk")
"""The transforms the curve is drawn from."""


def compaction_curve(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (reader, condition, budget, transform, transform_index) of the
    identity and rechunk instances: ``adequacy_k``, ``_k_high``, ``_n`` and
    ``joint_J_k``, ``_k_high``, ``_n`` over blocks, and ``source_pairs``."""
    columns = ["reader", "condition", "budget", "transform", "transform_index"]
    frame = results[results["transform"].isin(COMPACTION_LEVELS)]
    if frame.empty:
        return pd.DataFrame(
            columns=[*columns, "source_pairs", "adequacy_k", "adequacy_k_high",
                     "adequacy_n", "joint_J_k", "joint_J_k_high", "joint_J_n"]
        )  # fmt: skip
    frame = frame.assign(
        transform_index=frame["transform_index"].where(frame["transform"] != "identity", -1)
    )
    block = [*columns, "pair_id", "repeat"]
    reveal = frame[frame["branch"] == "reveal"]
    # a compressor that raised left no adequate memory; an unjudged memory is either
    value = reveal["adequate"].astype(float).mask(reveal["outcome"] == "error", 0.0)
    grouped_adequacy = value.groupby([reveal[c] for c in block], observed=True)
    adequate_low = grouped_adequacy.agg(lambda s: int((s == 1).all()))
    adequate_high = grouped_adequacy.agg(lambda s: int(((s == 1) | s.isna()).all()))
    futures = frame[frame["branch"].isin(("reveal", "override"))]
    grouped = futures.groupby(block, observed=True)["correct"]
    low = grouped.agg(lambda s: int((s == 1).all()))
    high = grouped.agg(lambda s: int(((s == 1) | s.isna()).all()))
    blocks = pd.DataFrame(
        {
            "adequate_low": adequate_low,
            "adequate_high": adequate_high,
            "joint_low": low,
            "joint_high": high,
        }
    )
    blocks = blocks.reset_index()
    sources = frame.groupby(columns, observed=True)["source_pair_id"].nunique()
    out = blocks.groupby(columns, observed=True).agg(
        adequacy_k=("adequate_low", "sum"),
        adequacy_k_high=("adequate_high", "sum"),
        adequacy_n=("adequate_low", "size"),
        joint_J_k=("joint_low", "sum"),
        joint_J_k_high=("joint_high", "sum"),
        joint_J_n=("joint_low", "size"),
    )
    out["source_pairs"] = sources
    return out.reset_index().sort_values(columns, kind="stable").reset_index(drop=True)
