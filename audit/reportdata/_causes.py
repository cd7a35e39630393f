"""Why each failed read failed: the cause shown beside it in the report.

Every failed (or NA) read at identity gets exactly one cause, from its outcome
(``CAUSE_OF_OUTCOME``), so that a reader's failure is never blamed on the memory and
the other way round.  docs/reports.md lists the causes; their keys stay those of
earlier reports (``taxonomy.csv``'s ``cause_<key>`` columns).
"""

from __future__ import annotations

import json
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
    "wrapper_only": "format failure",
    "undetermined": "undetermined (not a record log)",
    "writer_failed": "writer cut off, empty or echoing",
    "compressor_error": "compressor raised",
    "na": "infrastructure (NA)",
}
"""Why a read failed (key -> label shown in the report)."""

CAUSE_HELP = {
    "dropped": "the memory is a record log and E_q on it gives a wrong answer",
    "written_wrong": "as dropped, and a line of the memory is a well-formed record that "
    "never was in the history",
    "misread": "E_q on the memory is right; the LLM reader answered wrong",
    "wrapper_only": "right values in a wrong form (bare map, code fence, prose around the "
    "JSON, only in the reasoning field, cut off after them)",
    "undetermined": "the memory is not a record log (prose): whether it kept the evidence "
    "cannot be told",
    "writer_failed": "an LLM writer's answer on the memory's stream was cut off at its token "
    "limit or empty, or its memory repeats its prompt's instructions",
    "compressor_error": "the compressor raised",
    "na": "no answer after retries, or a request the server refused: not scored",
}
"""What each cause means (the report's column help)."""

CAUSE_OF_OUTCOME = {
    "wrong_log": "dropped",
    "reader_error": "misread",
    "wrapper_only": "wrapper_only",
    "unparsed": "undetermined",
    "writer_truncated": "writer_failed",
    "writer_empty": "writer_failed",
    "writer_echo": "writer_failed",
    "error": "compressor_error",
    "na": "na",
}
"""The cause of a failed read with each outcome (``dropped`` may be refined into
``written_wrong``, and a reader's failure with the right values is a format failure);
a read whose score is NA is ``na`` whatever its outcome."""

READER_FAILURES = frozenset({"reader_error", "wrong_log", "unparsed"})
"""Outcomes of a failed read whose answer may still hold the right values."""


def _same_values(answer: object, gold: object) -> bool:
    """Whether two JSON answers (``{key: value}``) hold the same values."""
    if not isinstance(answer, str) or not isinstance(gold, str):
        return False
    try:
        mine, right = json.loads(answer), json.loads(gold)
    except ValueError:
        return False
    return isinstance(mine, dict) and mine == right


def right_values(failed: pd.DataFrame) -> pd.Series:
    """Per failed read: a reader's failure (``READER_FAILURES``) whose answer equals gold."""
    if "answer" not in failed or "gold" not in failed:
        return pd.Series(False, index=failed.index)
    candidates = failed[failed["outcome"].astype(str).isin(READER_FAILURES)]
    same = [
        _same_values(a, g)
        for a, g in zip(candidates["answer"].tolist(), candidates["gold"].tolist(), strict=True)
    ]
    return pd.Series(same, index=candidates.index, dtype=bool).reindex(
        failed.index, fill_value=False
    )


def _history_lines(pair: Any, variant: str, branch: str) -> frozenset[str]:
    return frozenset(r.canonical_line for r in pair.history(variant, branch))  # kept per record


def invented_records(memory: str, known: frozenset[str]) -> bool:
    """True when a line of the memory is a record that never was in the history.

    Lines that are no record at all (prose, garbage) are not counted here (a memory
    with such lines is no record log: its cause is "undetermined", never checked here).
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
    cause = failed["outcome"].astype(str).map(CAUSE_OF_OUTCOME)
    # an outcome with no declared cause (none today: a test checks) goes by the memory
    adequate = failed["adequate"]
    cause = cause.fillna(
        pd.Series(
            np.select([adequate == 1, adequate == 0], ["misread", "dropped"], "undetermined"),
            index=failed.index,
        )
    )
    cause[right_values(failed)] = "wrapper_only"
    cause[failed["correct"].isna()] = "na"
    result = pd.Series(cause.to_numpy(), index=failed.index, name="attribution", dtype=object)
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
