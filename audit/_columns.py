"""The columns of a run's results (results.csv, results.parquet, the run store).

One row per read.  Every column has one Arrow type, so a job's rows travel from a
worker to the store as a typed table, and results.csv, results.parquet and the
summary all see the same values: a count or score is an integer or empty (not
applicable, or NA); text is text, and an empty string stays apart from empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

RESULT_COLUMNS = (
    "job_key",
    "pair_id",
    "source_pair_id",
    "family",
    "variant",
    "branch",
    "repeat",
    "condition",
    "compressor",
    "kind",
    "budget",
    "reader",
    "transform",
    "transform_index",
    "outcome",
    "correct",
    "adequate",
    "memory_bytes",
    "memory_sha256",
    "collision",
    "overflow",
    "equivariant",
    "answer",
    "gold",
    "error",
    "reader_model",
    "writer_model",
    "correct_lenient",
    "finish_reason",
    "reasoning_chars",
    "tokens_prompt",
    "tokens_completion",
    "latency_s",
    "cache_hit",
    "raw_answer",
)
"""Columns of results.csv, one row per read."""

INTEGER_COLUMNS = frozenset(
    {"budget", "repeat", "transform_index", "correct", "adequate", "memory_bytes", "collision",
     "overflow", "equivariant", "correct_lenient", "reasoning_chars", "tokens_prompt",
     "tokens_completion", "cache_hit"}
)  # fmt: skip
"""Counts and 0/1 scores; empty (None) where not applicable or NA."""
FLOAT_COLUMNS = frozenset({"latency_s"})

RESULT_SCHEMA = pa.schema(
    [
        (name, pa.int64() if name in INTEGER_COLUMNS
         else pa.float64() if name in FLOAT_COLUMNS else pa.string())
        for name in RESULT_COLUMNS
    ]
)  # fmt: skip


def results_table(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows (value lists in RESULT_COLUMNS order) -> a table of RESULT_SCHEMA."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(RESULT_COLUMNS)
    arrays = []
    for values, column in zip(columns, RESULT_SCHEMA, strict=True):
        try:
            arrays.append(pa.array(values, type=column.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise TypeError(f"results column {column.name}: {error}") from None
    return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)
