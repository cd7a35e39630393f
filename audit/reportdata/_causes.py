"""Why each failed read failed: the cause shown beside it in the report.

Causes (key -> label): the memory lost the evidence (``dropped``: the exact reader
cannot get the answer from it), the memory holds a record that never was in the
history (``written_wrong``), the memory is adequate but the reader answered wrong
(``misread``), right values outside the envelope (``wrapper_only``), an
infrastructure failure (``na``), or the compressor raised (``compressor_error``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from audit.rundir import MemoryStore, SourcePairs
from audit.scoring import IDENTITY
from compressors import load
from histories import RenderParseError

ATTRIBUTIONS = {
    "dropped": "evidence dropped by the compressor",
    "written_wrong": "written wrong",
    "misread": "retained but misread",
    "wrapper_only": "wrapper-only",
    "na": "NA",
    "compressor_error": "compressor raised",
}
"""Why a read failed (key -> label shown in the report)."""


def _history_lines(pair: Any, variant: str, branch: str) -> frozenset[str]:
    return frozenset(r.canonical_json() for r in pair.history(variant, branch))


def invented_records(memory: str, known: frozenset[str]) -> bool:
    """True when a line of the memory is a record that never was in the history.

    Lines that are no record at all (prose, garbage) are not counted here: they make
    a memory unreadable to the exact reader, which is "evidence dropped".
    """
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
