"""What every adapter of a chat-memory library shares.

An adapter is a strict streaming updater: each update reads the memory back as chat
turns, appends the chunk's, lets the library compact them with its own logic and
defaults, and writes what is left back as transcript text.  A budget of B bytes is a
threshold of B // 4 tokens (``docs/adapters.md``).  LLM-backed adapters never open a
connection of their own: the library's model goes through the writer client the audit
injects (its cache, retries and NA accounting); a failed or refused request raises
``ChatUnavailableError``, even where a library would keep the error as a summary.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from abc import abstractmethod
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from compressors._chat import ChatMessage, ChatRequest, ask_writer
from compressors._protocol import ChunkView, Compressor
from histories import ChatTurn, MemoryAuditError, dump_chat, parse_chat

BYTES_PER_TOKEN = 4
"""The budget's exchange rate: a library's token threshold is ``budget // 4``."""

T = TypeVar("T")


class AdapterNotInstalledError(MemoryAuditError, ImportError):
    """The adapter's library is not installed; the message names the extra to install."""

    exit_code: ClassVar[int] = 1


def threshold_tokens(budget: int) -> int:
    """The library threshold a byte budget maps to."""
    return max(1, budget // BYTES_PER_TOKEN)


def count_tokens(turns: Sequence[ChatTurn]) -> int:
    """Tokens of ``turns``: a quarter of their UTF-8 bytes as transcript text, rounded up."""
    if not turns:
        return 0
    return math.ceil(len(dump_chat(turns).encode("utf-8")) / BYTES_PER_TOKEN)


def count_text(text: str) -> int:
    """Tokens of a text, at the same rate (for libraries that count text)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run an adapter's async update from synchronous code (the deterministic stage)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError("update() called inside an event loop: await aupdate() instead")


class AdapterParams(BaseModel):
    """Parameters every adapter takes besides the library's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMAdapterParams(AdapterParams):
    """An LLM-backed adapter's request cap: ``max_tokens=N`` per summary request
    (default: the library's own cap where it has one, else about budget/3 tokens,
    64 to 1,024, like the built-in writers)."""

    max_tokens: int | None = Field(default=None, ge=16, le=65_536)


class ChatAdapter(Compressor):
    """Base of the adapters: ``compact`` is the library call, the rest is shared."""

    extra: ClassVar[str] = ""
    """The optional extra that installs the library: ``pip install 'memory-audit[EXTRA]'``."""
    requires: ClassVar[tuple[str, ...]] = ()
    """Modules the adapter imports (checked without importing them)."""
    library: ClassVar[str] = ""
    """What is called, for listings: ``inspect_ai CompactionTrim``."""
    adapter = True
    Params: ClassVar[type[BaseModel]] = AdapterParams

    @classmethod
    def missing(cls) -> list[str]:
        """The required modules that are not installed (``a.b`` with no ``a`` among them:
        finding a submodule imports its parent, which raises when it is absent)."""
        return [name for name in cls.requires if not _findable(name)]

    @classmethod
    def installed(cls) -> bool:
        return not cls.missing()

    @classmethod
    def install_hint(cls) -> str:
        return f"pip install 'memory-audit[{cls.extra}]'"

    @classmethod
    def require(cls) -> None:
        """Raise ``AdapterNotInstalledError`` naming the extra when the library is missing."""
        absent = cls.missing()
        if absent:
            raise AdapterNotInstalledError(
                f"{cls.name} needs {', '.join(absent)}, which is not installed: "
                f"{cls.install_hint()}"
            )

    @classmethod
    def from_params(cls, raw: Mapping[str, Any]) -> Compressor:
        """Refuse at once, naming the extra, when the library is not installed."""
        cls.require()
        return super().from_params(raw)

    @abstractmethod
    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        """The library's compaction of the memory's turns followed by the chunk's."""

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        if self.uses_llm:
            raise TypeError(
                f"{self.name} calls a model: use aupdate (audit runs it asynchronously)"
            )
        return run_sync(self.aupdate(memory, chunk, query_keys, budget))

    async def aupdate(
        self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int, repeat: int = 0
    ) -> str:
        self.require()
        turns = [*parse_chat(memory), *chunk.messages]
        return dump_chat(await self.compact(turns, query_keys, budget, repeat))

    # --- the bridge to the writer client (LLM-backed adapters) -----------------

    def requested_cap(self) -> int | None:
        """The user's cap of every request (``max_tokens=N``), if given."""
        given = getattr(self.params, "max_tokens", None)
        return None if given is None else int(given)

    def request_cap(self, budget: int, library_cap: int | None = None) -> int:
        """``max_tokens`` of a summary request: the user's, else the library's, else
        about budget/3 tokens (64 to 1,024)."""
        given = self.requested_cap()
        if given is not None:
            return given
        if library_cap is not None:
            return library_cap
        return min(1024, max(64, budget // 3))

    async def ask(self, messages: Sequence[ChatMessage], max_tokens: int, repeat: int) -> str:
        """One model call through the injected writer client; failures raise
        ``ChatUnavailableError`` (NA), a refused request too."""
        request = ChatRequest(
            messages=list(messages),
            max_tokens=max_tokens,
            repeat=repeat,
            tag=f"writer:{self.label}",
        )
        return await ask_writer(self.client, self.name, request)


def flatten(role: str, content: str, calls: Sequence[tuple[str, str]] = ()) -> ChatMessage:
    """A library message as one of the three roles a writer client takes: a tool
    result becomes a user turn that says so, tool calls are written out."""
    text = content
    for function, arguments in calls:
        text += f"{chr(10) if text else ''}[called {function} {arguments}]"
    if role == "tool":
        return ChatMessage("user", f"[tool result]\n{text}")
    if role in ("system", "assistant"):
        return ChatMessage(role, text)  # type: ignore[arg-type]
    return ChatMessage("user", text)


def _findable(module: str) -> bool:
    """Whether ``module`` could be imported, found without importing it (only its
    parents are imported, as ``find_spec`` must)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is not installed
        return False
