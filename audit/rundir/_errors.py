"""Compressor errors: each distinct one once, with its count, where it first struck and
its traceback.

One bug can fail thousands of streams: each job counts its errors by kind (``JobLog``,
stored with the job), and the end of an invocation merges them in plan order
(``merge_errors``), so summary.json and run.log say the same whichever executor ran the
jobs.  The reads stay in the results as outcome ``error``, scored 0: never a smaller n.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

import compressors
import histories
from histories import MemoryAuditError

ErrorStage = Literal["deterministic", "llm"]


class ErrorSite(BaseModel):
    """Where an error first struck: the pair instance, the stream and the chunk."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pair_id: str
    """The pair instance (a transformed copy has an id of its own)."""
    transform: str
    variant: str | None = None
    """A or B; None when the stream is not known (the compressor raised after it)."""
    branch: str | None = None
    """``prefix`` (the history up to now), or the future being streamed (``reveal``,
    ``override``)."""
    chunk: int | None = None
    """The chunk's index in its stream (0: the first chunk of the prefix)."""
    records: list[str] = []
    """The kinds (``op``) of the chunk's records, in order."""

    def describe(self) -> str:
        """One line: ``pair X (identity), variant A, prefix chunk 2 (set, revoke)``."""
        parts = [f"pair {self.pair_id} ({self.transform})"]
        if self.variant is not None:
            parts.append(f"variant {self.variant}")
        if self.chunk is not None:
            kinds = f" (records: {', '.join(self.records)})" if self.records else ""
            parts.append(f"{self.branch or 'prefix'} chunk {self.chunk}{kinds}")
        return ", ".join(parts)


class CompressorError(BaseModel):
    """One distinct error of one condition: its kind, its count and its first site."""

    model_config = ConfigDict(extra="forbid")

    condition: str
    stage: ErrorStage
    type: str
    """The exception's class (``AttributeError``); errors are told apart by class and
    ``raised_at``, never by message (a message often names a key or a record)."""
    error: str
    """Its first message, as the results' ``error`` column holds it."""
    raised_at: str | None = None
    """The innermost frame of the traceback (``my_memory.py:14 in update``); None for
    an error a system reported itself (a ``cmd:`` program's ``{"error"}``)."""
    reads: int
    """Reads it failed (outcome ``error``, scored 0)."""
    streams: int = 1
    """Streams it stopped (each stream's reads are every branch of one variant, or both
    variants in the deterministic stage, which streams A and B together)."""
    first: ErrorSite
    traceback: str | None = None
    """The full traceback of the first; None for an error a system reported itself."""

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        return (self.condition, self.stage, self.type, self.raised_at)


def compressor_error(
    condition: str,
    stage: ErrorStage,
    error: BaseException,
    cause: str,
    site: ErrorSite,
    reads: int,
    source: str | None = None,
) -> CompressorError:
    """The record of one stream that ``error`` stopped (``cause``: its results text).

    ``source``: the file of the compressor's class; the innermost frame there is where
    it raised (the innermost of all is often in a library: pydantic's ``__getattr__``
    for ``r.key`` on a record with no key), else the innermost frame.
    """
    frames = traceback.extract_tb(error.__traceback__)
    own = [frame for frame in frames if source is not None and frame.filename == source]
    # on purpose, a system's own error (a ``cmd:`` program's): its message alone; one of
    # ours that passed through a plugin's code (``load`` of a memory it wrote) is where
    # the plugin went wrong, so it keeps its frames
    if isinstance(error, MemoryAuditError) and not (own and not _ours(source)):
        return CompressorError(condition=condition, stage=stage, type=type(error).__name__,
                               error=cause, reads=reads, first=site)  # fmt: skip
    found = own or list(frames)
    raised_at = f"{found[-1].filename}:{found[-1].lineno} in {found[-1].name}" if found else None
    return CompressorError(
        condition=condition, stage=stage, type=type(error).__name__, error=cause,
        raised_at=raised_at, reads=reads, first=site,
        traceback="".join(traceback.format_exception(error)).rstrip("\n"),
    )  # fmt: skip


_PACKAGES = tuple(
    f"{folder}{os.sep}"
    for folder in (Path(histories.__file__).parent, Path(compressors.__file__).parent,
                   Path(__file__).parents[1])  # (audit's own)
)  # fmt: skip


def _ours(source: str | None) -> bool:
    """Whether a compressor's file is this project's (a built-in or an adapter)."""
    return source is not None and source.startswith(_PACKAGES)


def merge_errors(groups: Iterable[Sequence[CompressorError]]) -> list[CompressorError]:
    """Each distinct error once, in the order first seen: counts summed, the first
    site, message and traceback kept."""
    merged: dict[tuple[str, str, str, str | None], CompressorError] = {}
    for group in groups:
        for found in group:
            kept = merged.get(found.key)
            if kept is None:
                merged[found.key] = found.model_copy()
            else:
                kept.reads += found.reads
                kept.streams += found.streams
    return list(merged.values())


class JobLog(BaseModel):
    """What a job leaves for run.log: its errors, each distinct one once, and other lines."""

    model_config = ConfigDict(extra="forbid")

    errors: list[CompressorError] = []
    lines: list[str] = []
    seconds: dict[str, float] = {}
    """Wall seconds each condition took in the job (costs.json), never in run.log: a
    slow compressor is found by name, and run.log stays the same on every machine."""

    def add(self, error: CompressorError) -> None:
        """Count one more stream stopped by ``error``, or keep it as a new kind."""
        self.errors[:] = merge_errors([self.errors, [error]])

    def __bool__(self) -> bool:
        return bool(self.errors or self.lines)

    def to_text(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_text(cls, text: str) -> JobLog:
        """A stored job log; a store written before logs were structured held plain
        text, which is kept as one line."""
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return cls(lines=[text])


def log_text(errors: Sequence[CompressorError], lines: Sequence[str]) -> str:
    """run.log: each distinct compressor error once (what, how often, where first, the
    traceback), then the jobs' other lines."""
    out: list[str] = []
    for number, found in enumerate(errors, start=1):
        out += [
            f"compressor error {number} of {len(errors)}: {found.condition} ({found.stage} stage)",
            f"  error: {found.error}",
            *([f"  raised at: {found.raised_at}"] if found.raised_at else []),
            f"  first: {found.first.describe()}",
            f"  count: {found.reads} reads failed (scored 0), {found.streams} stream(s) stopped",
            found.traceback or "  (reported by the system itself: no traceback)",
            "",
        ]
    return "\n".join(out + list(lines)).rstrip("\n") + "\n"


def summary_errors(errors: Sequence[CompressorError]) -> list[dict[str, object]]:
    """summary.json's ``compressor_errors``: every distinct error, its traceback included."""
    return [found.model_dump(mode="json") for found in errors]
