"""The columns of a run's results (results.csv, results.parquet, the run store).

One row per read.  Every column has one Arrow type, so a job's rows travel from a
worker to the store as a typed table, and results.csv, results.parquet and the
summary all see the same values: a count or score is an integer or empty (not
applicable, or NA); text is text, and an empty string stays apart from empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from histories import WRONG_ANSWERS

Outcome = Literal[
    "pass", "wrong_log", "unparsed", "reader_error", "wrapper_only", "writer_truncated",
    "writer_empty", "writer_echo", "na", "error",
]  # fmt: skip
OUTCOMES: dict[Outcome, str] = {
    "pass": "the reader answered right (strict: the exact envelope, a normal stop)",
    "wrong_log": "the memory is a well-formed record log, but E_q on it gives a wrong answer",
    "unparsed": "the memory is no record log the exact reader can parse",
    "reader_error": "the memory is adequate (E_q on it is right) but the LLM reader answered wrong",
    "wrapper_only": "right values in a bare {key: value} map (counted by the lenient score)",
    "writer_truncated": "an LLM writer's answer on this memory's stream was cut off at its "
    "token limit: the compressor failed (scored 0; not a wrong log)",
    "writer_empty": "an LLM writer answered nothing (empty content) on this memory's stream: "
    "the compressor failed (scored 0; not a wrong log)",
    "writer_echo": "an LLM writer's memory repeats its prompt's instructions (at least half "
    "of its runs of 8 words are theirs) instead of keeping the history: the compressor "
    "failed (scored 0; not a wrong log)",
    "na": "an infrastructure failure after retries, or a request the server refused "
    "(HTTP 400/413/422): not scored",
    "error": "the compressor raised",
}
"""Every value of the ``outcome`` column, with its meaning: exactly one per read.  A
``reader_error``, ``wrong_log`` or ``unparsed`` read whose ``answer`` (the values the
reader gave, found in any form) equals gold had the right values in a wrong form: the
report's cause "format failure"."""

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
    "writer_finish_reason",
    "writer_reasoning_tokens",
    "writer_content_tokens",
    "writer_reasoning_chars",
    "wrong_answer",
)
"""Columns of results.csv, one row per read (new columns go at the end)."""

INTEGER_COLUMNS = frozenset(
    {"budget", "repeat", "transform_index", "correct", "adequate", "memory_bytes", "collision",
     "overflow", "equivariant", "correct_lenient", "reasoning_chars", "tokens_prompt",
     "tokens_completion", "cache_hit", "writer_reasoning_tokens", "writer_content_tokens",
     "writer_reasoning_chars"}
)  # fmt: skip
"""Counts and 0/1 scores; empty (None) where not applicable or NA."""
FLOAT_COLUMNS = frozenset({"latency_s"})
CODED_COLUMNS: dict[str, pa.Array] = {"wrong_answer": pa.array(list(WRONG_ANSWERS))}
"""Columns of a small closed vocabulary: an int8 code per row into this dictionary (the
same in every table), names in results.csv and in a frame."""

RESULT_SCHEMA = pa.schema(
    [
        (name, pa.int64() if name in INTEGER_COLUMNS
         else pa.float64() if name in FLOAT_COLUMNS
         else pa.dictionary(pa.int8(), pa.string()) if name in CODED_COLUMNS
         else pa.string())
        for name in RESULT_COLUMNS
    ]
)  # fmt: skip


def coded(name: str, values: Sequence[str | None]) -> pa.DictionaryArray:
    """Names of a ``CODED_COLUMNS`` column -> its codes (a name outside it is a bug)."""
    import pyarrow.compute as pc

    vocabulary = CODED_COLUMNS[name]
    names = pa.array(values, pa.string())
    codes = pc.index_in(names, value_set=vocabulary)
    if codes.null_count != names.null_count:
        unknown = {str(v) for v in values if v is not None} - set(vocabulary.to_pylist())
        raise ValueError(f"not a {name}: {sorted(unknown)}")
    return pa.DictionaryArray.from_arrays(codes.cast(pa.int8()), vocabulary)


def conformed(table: pa.Table) -> pa.Table:
    """A stored job table of an earlier version of this format, without the columns
    added since (they come last): those columns empty."""
    for field in list(STORED_SCHEMA)[table.num_columns :]:
        table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table


def results_table(rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Rows (value lists in RESULT_COLUMNS order) -> a table of RESULT_SCHEMA."""
    builder = ColumnBuilder((), RESULT_COLUMNS)
    builder.add_group((), rows)
    return builder.table()


class ColumnBuilder:
    """Rows collected column by column, in groups that share most of their values.

    A deterministic job writes six reads per (condition, instance) that differ only in
    a dozen columns: ``add_group`` takes the shared values once and the varying ones as
    per-row lists.  The table is assembled without transposing rows, and a shared
    value becomes a column by one ``take`` instead of one conversion per row.
    """

    def __init__(self, shared: Sequence[str], varying: Sequence[str]) -> None:
        wrong = ((set(shared) | set(varying)) - set(RESULT_COLUMNS)) or set(shared) & set(varying)
        if wrong:  # unknown columns, or columns named on both sides
            raise ValueError(f"bad column split: {sorted(wrong)}")
        self.shared: dict[str, list[Any]] = {name: [] for name in shared}
        self.varying = tuple(varying)
        self.varying_rows: list[Sequence[Any]] = []
        self.sizes: list[int] = []

    def add_group(self, shared: Sequence[Any], varying: Sequence[Sequence[Any]]) -> None:
        """One group: its shared values (in ``shared`` order) and, per row, the varying
        values (in ``varying`` order)."""
        for column, value in zip(self.shared.values(), shared, strict=True):
            column.append(value)
        self.varying_rows.extend(varying)
        self.sizes.append(len(varying))

    def extend(self, other: ColumnBuilder) -> None:
        """Append another builder's groups (the same columns)."""
        for column, more in zip(self.shared.values(), other.shared.values(), strict=True):
            column.extend(more)
        self.varying_rows.extend(other.varying_rows)
        self.sizes.extend(other.sizes)

    def __len__(self) -> int:
        return len(self.varying_rows)

    def rows(self) -> list[list[Any]]:
        """The rows, as value lists in RESULT_COLUMNS order."""
        index = {name: i for i, name in enumerate(RESULT_COLUMNS)}
        rows: list[list[Any]] = []
        groups = (g for g, size in enumerate(self.sizes) for _ in range(size))
        for group, values in zip(groups, self.varying_rows, strict=True):
            row: list[Any] = [None] * len(RESULT_COLUMNS)
            for name, column in self.shared.items():
                row[index[name]] = column[group]
            for name, value in zip(self.varying, values, strict=True):
                row[index[name]] = value
            rows.append(row)
        return rows

    def table(self) -> pa.Table:
        """A table of RESULT_SCHEMA (columns named nowhere are empty)."""
        n = len(self)
        groups = pa.array(np.repeat(np.arange(len(self.sizes), dtype=np.int64), self.sizes))
        # strict: every row has as many values as there are varying columns
        transposed = list(zip(*self.varying_rows, strict=True)) if n else [()] * len(self.varying)
        varying = dict(zip(self.varying, transposed, strict=True))
        arrays = []
        for column in RESULT_SCHEMA:
            try:
                if column.name in CODED_COLUMNS:
                    arrays.append(coded(column.name, varying.get(column.name, [None] * n)))
                elif column.name in varying:
                    arrays.append(pa.array(varying[column.name], type=column.type))
                elif column.name in self.shared:
                    once = pa.array(self.shared[column.name], type=column.type)
                    arrays.append(once.take(groups))
                else:
                    arrays.append(pa.nulls(n, type=column.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as error:
                raise TypeError(f"results column {column.name}: {error}") from None
        return pa.Table.from_arrays(arrays, schema=RESULT_SCHEMA)


REFUSED_PREFIX = "request refused"
"""How a refused request's error begins: an NA a resume does not retry."""


def retryable_na_keys(table: pa.Table) -> set[str]:
    """Job keys of rows that are NA for want of a server (not a refused request)."""
    import pyarrow.compute as pc

    if not table.num_rows:
        return set()
    error = pc.fill_null(table["error"], "")
    na = pc.and_(
        pc.fill_null(pc.equal(table["outcome"], "na"), False),
        pc.invert(pc.starts_with(error, REFUSED_PREFIX)),
    )
    return {str(key) for key in pc.unique(table["job_key"].filter(na)).to_pylist()}


CATEGORICAL = (
    "condition", "transform", "family", "branch", "variant", "outcome", "source_pair_id",
    "pair_id",
)  # fmt: skip
"""The stored text columns a loaded run holds as categories (each a handful of values
over every row): read from results.parquet as dictionaries, never as a string a row."""

OBJECT_TEXT = ("answer", "gold", "error", "memory_sha256", "raw_answer", "finish_reason")
"""The text columns a loaded run holds as Python strings or None (their values are
compared and shown one by one); read as dictionaries too, where stored as text."""

MEMORY_ID = "memory_id"
"""The stored form of ``memory_sha256``: the memory's position in its job's block of
distinct memories in the store (``store.sqlite``), which keeps each one's sha256."""

STORED_SCHEMA = pa.schema(
    [
        pa.field(MEMORY_ID, pa.int32()) if field.name == "memory_sha256" else field
        for field in RESULT_SCHEMA
    ]
)
"""results.parquet's columns: RESULT_SCHEMA with the 64-character digest, which was
94 % of the file, as a small integer into the store's memory table."""


def stored_table(table: pa.Table, shas: Sequence[str]) -> pa.Table:
    """A RESULT_SCHEMA table -> STORED_SCHEMA, given its job's distinct memories' shas
    in block order (every digest in the table must be one of them)."""
    import pyarrow.compute as pc

    digests = table["memory_sha256"]
    ids = pc.index_in(digests, value_set=pa.array(list(shas), pa.string())).cast(pa.int32())
    if ids.null_count != digests.null_count:
        raise ValueError("a result row names a memory its job did not keep")
    at = RESULT_SCHEMA.get_field_index("memory_sha256")
    return table.set_column(at, pa.field(MEMORY_ID, pa.int32()), ids)


def result_table(table: pa.Table, shas: pa.StringArray | None) -> pa.Table:
    """A STORED_SCHEMA table of one job -> RESULT_SCHEMA, the digests looked up in its
    job's ``shas`` (None, or fewer than the rows name: the store cannot say, and the
    digests stay empty)."""
    at = table.schema.get_field_index(MEMORY_ID)
    try:
        digests = shas.take(table[MEMORY_ID]) if shas is not None else None
    except IndexError:  # pa.ArrowIndexError is one
        digests = None
    if digests is None:
        digests = pa.nulls(table.num_rows, pa.string())
    return table.set_column(at, pa.field("memory_sha256", pa.string()), digests)
