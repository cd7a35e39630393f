"""The compressor protocol: a strict streaming updater m' = U(m, chunk, query_keys; budget).

*Strict* means the memory string is the only state carried from chunk to chunk: an
updater must not keep anything on ``self`` between calls.  The writer is
*target-aware* (it sees the query keys and the public semantics of the record
kinds) and *future-hidden* (it never sees the future, the gold answer or the family).

*Archive* conditions are a second, clearly labelled kind: at answer time they may
re-read the raw history (extra storage), so they are ceilings, not memories.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from compressors._chat import ChatClient
from histories import (
    ChatTurn,
    MemoryAuditError,
    Record,
    RenderStyle,
    chat_messages,
    render_records,
)

CompressorKind = Literal["strict", "archive", "probe"]


class ChunkView:
    """One chunk of history as a compressor sees it: the records, and (rendered on
    first use) the text of the pair's rendering, for writers that read text, and its
    chat form (``messages``), for adapters of chat-memory libraries.

    A view is immutable, so the audit builds one per chunk of a pair and shows it to
    every condition: what is derived from it on first use is derived once.  ``seed``
    picks a prose rendering's phrasings and the chat form's wording: one seed for the
    chunk, or one per record (the audit gives one per record: the CRC-32 of its
    canonical line, so a seed tells a compressor nothing the record does not).
    """

    __slots__ = ("_lines", "_messages", "_seed", "_seed_of", "_sizes", "_text", "records", "style")

    def __init__(
        self,
        records: Sequence[Record],
        style: RenderStyle = "json",
        seed: int | Sequence[int] | Callable[[], Sequence[int]] = 0,
    ) -> None:
        self.records = tuple(records)
        self.style: RenderStyle = style
        self._seed_of = seed if callable(seed) else None
        self._seed: int | Sequence[int] = 0 if callable(seed) else seed
        self._text: str | None = None
        self._lines: tuple[str, ...] | None = None
        self._sizes: tuple[int, ...] | None = None
        self._messages: tuple[ChatTurn, ...] | None = None

    @property
    def seed(self) -> int | Sequence[int]:
        """The phrasing seed(s); a callable given instead is called on first use (the
        audit's per-record seeds cost a hash per record, paid only by what reads prose
        or the chat form)."""
        if self._seed_of is not None:
            self._seed, self._seed_of = tuple(self._seed_of()), None
        return self._seed

    @property
    def text(self) -> str:
        if self._text is None:
            # only prose reads the seeds: json and log never pay for them
            seed = self.seed if self.style == "prose" else 0
            self._text = render_records(self.records, self.style, seed)
        return self._text

    @property
    def messages(self) -> tuple[ChatTurn, ...]:
        """The chunk as chat turns (``histories.chat_messages``): a request, a call of
        the tool ``read_log``, its result (the records in the pair's rendering) and an
        acknowledgement, worded by the records' seeds."""
        if self._messages is None:
            self._messages = chat_messages(self.records, self.style, self.seed)
        return self._messages

    @property
    def lines(self) -> tuple[str, ...]:
        """Each record's canonical JSON line: what a record-log memory stores."""
        if self._lines is None:
            self._lines = tuple(r.canonical_line for r in self.records)
        return self._lines

    @property
    def sizes(self) -> tuple[int, ...]:
        """UTF-8 bytes of each of ``lines``."""
        if self._sizes is None:
            self._sizes = tuple(r.canonical_size for r in self.records)
        return self._sizes


class NoParams(BaseModel):
    """Compressors without parameters accept none (a typo is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class InvalidParamsError(MemoryAuditError, ValueError):
    """Bad ``name:key=value`` parameters; the message names the compressor and field."""


class Compressor(ABC):
    """Base class of every memory condition.  Subclass, set the class attributes,
    implement ``update`` (and ``recall`` for archives)."""

    name: ClassVar[str] = ""
    """The condition id used on the command line."""
    version: ClassVar[str] = "1"
    """Goes into every result row and cache key: bump it when behaviour changes."""
    kind: ClassVar[CompressorKind] = "strict"
    uses_llm: ClassVar[bool] = False
    needs_llm_reader: ClassVar[bool] = False
    """True for conditions whose memory only an LLM can read (skipped by exact-only runs)."""
    budgeted: ClassVar[bool] = True
    """False for archives that ignore the byte budget (they are labelled extra storage)."""
    order_invariant: ClassVar[bool] = False
    """A claim the audit checks: the memory holds the same lines whatever order the log
    arrived in (under every prefix permutation, the memory is the identity memory up to
    line order).  Log order carries no meaning, so a condition whose design ignores it
    should say so."""
    adapter: ClassVar[bool] = False
    """True for adapters of a third-party memory library (``compressors.adapters``): an
    optional extra, never part of the default audit."""
    summary: ClassVar[str] = ""
    """One line for ``audit compressors``."""
    heuristic: ClassVar[str] = "shortcut"
    """Probes: the kind of heuristic, as the audit names it ("naming", "order", ...)."""
    exploits: ClassVar[str] = ""
    """Probes: the regularity of the data the heuristic exploits, in a few words."""
    broken_by: ClassVar[tuple[str, ...]] = ()
    """Probes: the transforms that break that regularity (``rename``, ``relabel``,
    ``permute``, ``rerev``, ``revalue`` ...): the audit's advice when a probe does as
    well as a condition names the ones a run lacks."""
    Params: ClassVar[type[BaseModel]] = NoParams
    """A pydantic model of the compressor's own parameters (``name:key=value``)."""

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()
        self.client: ChatClient | None = None

    @classmethod
    def from_params(cls, raw: Mapping[str, Any]) -> Compressor:
        """Build from command-line parameters, validated by ``Params``."""
        try:
            return cls(cls.Params.model_validate(dict(raw)))
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "parameters"
            raise InvalidParamsError(f"{cls.name}: parameter {field}: {first['msg']}") from None

    @property
    def label(self) -> str:
        """Name plus version, as stored in results."""
        return f"{self.name}@{self.version}"

    @abstractmethod
    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        """Return the new memory after seeing ``chunk``.  Pure: same inputs, same output."""

    async def aupdate(
        self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int, repeat: int = 0
    ) -> str:
        """Async form, used for LLM writers (``repeat`` makes repeats independent)."""
        return self.update(memory, chunk, query_keys, budget)

    def finish(self) -> None:
        """The end of the streams this object served (one cell of a job, or one LLM
        unit).  An external system's adapter ends its process here and raises
        ``ChatUnavailableError`` when it broke its protocol on the way (an answer no
        update asked for): the audit then records every read of those streams as NA.
        Nothing by default."""
        return None


class ArchiveCompressor(Compressor):
    """An archive condition: at answer time it may re-read the raw history."""

    kind: ClassVar[CompressorKind] = "archive"

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        """Archives keep no memory of their own while streaming."""
        return memory

    @abstractmethod
    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        """What the reader is shown at answer time, built from the raw history so far."""
