"""mem0: extraction memory (``mem0ai``'s ``AsyncMemory.add``), offline.

The memory is mem0's store: the memories it holds, one per line, oldest first.  Each
update builds an ``AsyncMemory`` over a local vector store (Qdrant in memory) and an
in-memory history database, puts the memory's lines back into it with mem0's own
verbatim add (``add(..., infer=False)``: one memory per line), then adds the chunk's
messages with ``add(messages)``: mem0's extraction pipeline, which retrieves the
stored memories nearest to the messages, asks its LLM for the facts to add, and
stores the new ones (mem0 2.2 only ever adds: an update never edits or deletes a
memory).  What the store holds afterwards is the new memory; over the budget it is
emptied and counted, as for every condition (mem0 has no budget of its own).

Offline, with two stated substitutions (``docs/adapters.md``):

* its LLM answers through the audit's writer client (``--writer``), never OpenAI;
* its embedder is a local one, ``HashEmbedder``: signed feature hashing of the
  text's words (a bag of words, no model, no download, the same vector on every
  machine).  Retrieval by shared words is weaker than a hosted embedding model's:
  the condition's name says so (``mem0_local``), and so does every result's.

mem0's telemetry is switched off (``MEM0_TELEMETRY=False``) and its home directory
(``MEM0_DIR``) goes to a temporary directory unless set, before mem0 is imported.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel

from compressors._chat import ChatMessage, ChatUnavailableError
from compressors._registry import register
from compressors.adapters._base import ChatAdapter, LLMAdapterParams, flatten
from histories import ChatTurn

USER = "memory-audit"
"""The ``user_id`` every memory is stored under (one store per stream)."""

DIMENSIONS = 256
"""The local embedder's vector length."""

_WORD = re.compile(r"[0-9a-z]+(?:[_\-.][0-9a-z]+)*")


class HashEmbedder:
    """A local embedder: each word (and each part of a ``snake_case`` or dotted word)
    hashed with BLAKE2b to a signed unit in ``DIMENSIONS`` slots, the sum normalized.
    Texts that share words are near; nothing else is."""

    def embed(self, text: Any, memory_action: str | None = None) -> list[float]:
        vector = [0.0] * DIMENSIONS
        for word in _words(str(text)):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "big") % DIMENSIONS
            vector[slot] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0:
            vector[0], norm = 1.0, 1.0  # an empty text: one fixed direction, never zero
        return [v / norm for v in vector]

    def embed_batch(self, texts: Sequence[Any], memory_action: str = "add") -> list[list[float]]:
        return [self.embed(text, memory_action) for text in texts]


def _words(text: str) -> list[str]:
    words = []
    for word in _WORD.findall(text.lower()):
        words.append(word)
        parts = re.split(r"[_\-.]", word)
        if len(parts) > 1:
            words.extend(parts)
    return words


def _offline() -> None:
    """No telemetry and no notices (each would reach the internet: PostHog, GitHub),
    and mem0's home in a temporary directory unless one is set.  The switch is read
    when mem0 is imported, and again from its modules' globals: both are set."""
    os.environ["MEM0_TELEMETRY"] = "False"
    if not os.environ.get("MEM0_DIR"):
        os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="memory-audit-mem0-")
    import mem0.memory.main
    import mem0.memory.telemetry

    mem0.memory.telemetry.MEM0_TELEMETRY = False
    mem0.memory.main.MEM0_TELEMETRY = False


class Mem0Params(LLMAdapterParams):
    """``custom_instructions=TEXT``: mem0's own (added to its extraction prompt; none)."""

    custom_instructions: str | None = None


def dump_store(memories: Sequence[str]) -> str:
    """mem0's memories as the memory: one per line (a line break inside one is a space)."""
    return "\n".join(" ".join(m.split("\n")) for m in memories if m.strip())


def load_store(memory: str) -> list[str]:
    return [line for line in memory.split("\n") if line.strip()]


@register
class Mem0Memory(ChatAdapter):
    name = "mem0_local"
    library = "mem0ai AsyncMemory.add (local embeddings)"
    summary = "mem0: facts its LLM extracts, in a local store; word-hash embeddings (weaker)"
    extra = "mem0"
    requires = ("mem0", "qdrant_client")
    uses_llm = True
    version = "1"
    Params: ClassVar[type[BaseModel]] = Mem0Params

    async def aupdate(
        self,
        memory: str,
        chunk: Any,
        query_keys: Sequence[str],
        budget: int,
        repeat: int = 0,
    ) -> str:
        """The memory is the store's lines, not a transcript: mem0 is handed the
        chunk's chat form and the stored memories."""
        self.require()
        kept = await self.store(load_store(memory), list(chunk.messages), budget, repeat)
        return dump_store(kept)

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        raise NotImplementedError("mem0 keeps a store, not a transcript: see aupdate")

    async def store(
        self, memories: list[str], turns: list[ChatTurn], budget: int, repeat: int
    ) -> list[str]:
        """Put ``memories`` back into a fresh mem0 store, add the turns, return the store."""
        _offline()
        from mem0 import AsyncMemory
        from mem0.configs.base import MemoryConfig
        from mem0.exceptions import LLMError
        from qdrant_client import QdrantClient

        params = self.params
        assert isinstance(params, Mem0Params)
        config = MemoryConfig(
            vector_store={
                "provider": "qdrant",
                "config": {
                    "collection_name": "memory_audit",
                    "embedding_model_dims": DIMENSIONS,
                    "client": QdrantClient(location=":memory:"),
                },
            },
            # placeholders, replaced below before any call: nothing reaches OpenAI
            llm={"provider": "openai", "config": {"api_key": "unused"}},
            embedder={"provider": "openai", "config": {"api_key": "unused"}},
            history_db_path=":memory:",
            custom_instructions=params.custom_instructions,
        )
        mem = AsyncMemory(config)
        try:
            mem.embedding_model = HashEmbedder()
            mem.llm = _llm(self, budget, repeat, asyncio.get_running_loop())
            order: list[str] = []
            if memories:
                old = await mem.add(
                    [{"role": "user", "content": m} for m in memories], user_id=USER, infer=False
                )
                order += [r["id"] for r in old["results"]]
            messages = [_message(t) for t in turns]
            try:
                added = await mem.add([m for m in messages if m is not None], user_id=USER)
            except LLMError as error:  # mem0 wraps the writer's failure: NA, not an error
                if isinstance(error.__cause__, ChatUnavailableError):
                    raise error.__cause__ from None
                raise
            order += [r["id"] for r in added["results"]]
            listed = await mem.get_all(filters={"user_id": USER}, top_k=len(order) + 1000)
        finally:
            mem.close()
        items = listed["results"] if isinstance(listed, dict) else listed
        rank = {memory_id: i for i, memory_id in enumerate(order)}
        items = sorted(items, key=lambda m: (rank.get(m["id"], len(rank)), m["memory"]))
        return [str(m["memory"]) for m in items]


def _message(turn: ChatTurn) -> dict[str, str] | None:
    """A chat turn as mem0 takes it (``role``, ``content``), as the writer client takes
    it (``flatten``); an empty turn is none, but a summary."""
    flat = flatten(turn.role, turn.content, [(c.function, c.arguments) for c in turn.tool_calls])
    if not flat.content and turn.role != "summary":
        return None
    return {"role": flat.role, "content": flat.content}


def _llm(adapter: ChatAdapter, budget: int, repeat: int, loop: asyncio.AbstractEventLoop) -> Any:
    """mem0's LLM, answered by the audit's writer client.  mem0 calls it from a worker
    thread (``asyncio.to_thread``): each call is handed to the audit's loop and awaited."""
    from mem0.llms.base import LLMBase

    class WriterLLM(LLMBase):  # type: ignore[misc]
        def __init__(self) -> None:
            self.config = None

        def generate_response(
            self,
            messages: list[dict[str, str]],
            response_format: Any = None,
            tools: Any = None,
            tool_choice: str = "auto",
            **kwargs: Any,
        ) -> str:
            flat = [
                ChatMessage("system" if m["role"] == "system" else "user", m["content"])
                if m["role"] != "assistant"
                else ChatMessage("assistant", m["content"])
                for m in messages
            ]
            cap = adapter.request_cap(budget)
            ask = adapter.ask(flat, cap, repeat)
            return asyncio.run_coroutine_threadsafe(ask, loop).result()

    return WriterLLM()
