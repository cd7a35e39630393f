"""LlamaIndex: ``ChatSummaryMemoryBuffer``, its summary memory buffer.

Each update loads the memory's turns and the chunk's into a
``ChatSummaryMemoryBuffer`` (``token_limit = budget // 4``, LlamaIndex's own
summarize prompt) and calls ``aget()``, which is where the buffer summarizes: it
keeps the newest messages that fit the token limit and asks its LLM to summarize
the rest, into a system message that leads the history (the running summary,
summarized again with older turns next time).  The buffer counts only the messages'
text (not their tool calls), with the adapters' count (a quarter of the bytes).
Its LLM is a LlamaIndex ``CustomLLM`` answered by the ``--writer`` backend through
the audit's client.  (``ChatSummaryMemoryBuffer`` is marked deprecated in favour of
``Memory``, which has no summary block; it is still the summary buffer LlamaIndex
ships.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from compressors._chat import ChatMessage as Plain
from compressors._registry import register
from compressors.adapters._base import (
    BYTES_PER_TOKEN,
    ChatAdapter,
    LLMAdapterParams,
    flatten,
    threshold_tokens,
)
from histories import ChatTurn, ToolCall


def _tokenize(text: str) -> list[int]:
    """A tokenizer_fn counting a token per four UTF-8 bytes (its length is all that counts)."""
    return [0] * -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


class LlamaParams(LLMAdapterParams):
    """``token_limit`` (default budget // 4)."""

    token_limit: int | None = Field(default=None, ge=1)


@register
class LlamaIndexSummary(ChatAdapter):
    name = "llamaindex_summary"
    library = "llama_index ChatSummaryMemoryBuffer"
    summary = "LlamaIndex ChatSummaryMemoryBuffer: recent messages + summary, budget/4 tokens"
    extra = "llama-index"
    requires = ("llama_index.core",)
    uses_llm = True
    Params: ClassVar[type[BaseModel]] = LlamaParams

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        from llama_index.core.memory import ChatSummaryMemoryBuffer

        params = self.params
        assert isinstance(params, LlamaParams)
        buffer = ChatSummaryMemoryBuffer.from_defaults(
            llm=_llm(self, budget, repeat, asyncio.get_running_loop()),
            token_limit=params.token_limit or threshold_tokens(budget),
            tokenizer_fn=_tokenize,
        )
        buffer.set(_to_llama(turns))
        return _from_llama(await buffer.aget())


def _to_llama(turns: Sequence[ChatTurn]) -> list[Any]:
    from llama_index.core.llms import ChatMessage, MessageRole

    out = []
    for turn in turns:
        kwargs: dict[str, Any] = {}
        if turn.tool_calls:
            kwargs["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function, "arguments": c.arguments},
                }
                for c in turn.tool_calls
            ]
        if turn.tool_call_id is not None:
            kwargs["tool_call_id"] = turn.tool_call_id
        role = {
            "user": MessageRole.USER,
            "assistant": MessageRole.ASSISTANT,
            "tool": MessageRole.TOOL,
            "system": MessageRole.SYSTEM,
            "summary": MessageRole.SYSTEM,
        }[turn.role]
        out.append(ChatMessage(role=role, content=turn.content, additional_kwargs=kwargs))
    return out


def _from_llama(messages: Sequence[Any]) -> list[ChatTurn]:
    """The buffer's history as turns: a system message is its summary."""
    turns = []
    for message in messages:
        role = str(message.role.value)
        text = message.content or ""
        kwargs = message.additional_kwargs
        if role == "system":
            turns.append(ChatTurn("summary", text))
        elif role == "tool":
            turns.append(ChatTurn("tool", text, tool_call_id=kwargs.get("tool_call_id")))
        elif role == "assistant":
            calls = tuple(
                ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in kwargs.get("tool_calls", [])
            )
            turns.append(ChatTurn("assistant", text, calls))
        else:
            turns.append(ChatTurn("user", text))
    return turns


def _llm(adapter: ChatAdapter, budget: int, repeat: int, loop: asyncio.AbstractEventLoop) -> Any:
    """A LlamaIndex LLM answered by the audit's writer client.  The buffer calls it
    synchronously from a worker thread (``aget`` runs ``get`` in one): each call is
    handed to the audit's event loop and waited for."""
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        CompletionResponse,
        LLMMetadata,
    )
    from llama_index.core.llms import CustomLLM

    async def ask(messages: Sequence[Any]) -> str:
        flat = [flatten(str(m.role.value), m.content or "", []) for m in messages]
        return await adapter.ask(flat, adapter.request_cap(budget), repeat)

    class AuditLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="memory-audit-writer", is_chat_model=True)

        def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            text = asyncio.run_coroutine_threadsafe(ask(messages), loop).result()
            return ChatResponse(message=ChatMessage(role="assistant", content=text))

        async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
            text = await ask(messages)
            return ChatResponse(message=ChatMessage(role="assistant", content=text))

        def complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:

            async def one() -> str:
                return await adapter.ask(
                    [Plain("user", prompt)], adapter.request_cap(budget), repeat
                )

            return CompletionResponse(text=asyncio.run_coroutine_threadsafe(one(), loop).result())

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError("the audit does not stream")

    return AuditLLM()
