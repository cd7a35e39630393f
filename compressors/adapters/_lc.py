"""LangChain messages and a LangChain chat model over the audit's writer client
(shared by the ``langchain`` and ``langmem`` adapters; imported only when one runs).

``AuditChatModel`` is a ``BaseChatModel`` whose every call goes through the writer
client the audit injects (``ChatAdapter.ask``): the audit's cache, retries,
deduplication and NA accounting, and the ``--writer`` backend's own sampling
parameters.  A ``max_tokens`` bound on the model (``model.bind(max_tokens=N)``,
langmem's advice for ``max_summary_tokens``) caps the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult

from compressors.adapters._base import ChatAdapter, count_tokens, flatten
from histories import ChatTurn, ToolCall

SUMMARY_SOURCE = "summarization"
"""``additional_kwargs["lc_source"]`` of LangChain's summary message."""


def to_langchain(turns: Sequence[ChatTurn]) -> list[BaseMessage]:
    """Our turns as LangChain messages (ids ``m0``, ``m1``, ...: deterministic)."""
    out: list[BaseMessage] = []
    for i, turn in enumerate(turns):
        mid = f"m{i}"
        if turn.role == "system":
            out.append(SystemMessage(content=turn.content, id=mid))
        elif turn.role == "user":
            out.append(HumanMessage(content=turn.content, id=mid))
        elif turn.role == "summary":
            out.append(
                HumanMessage(
                    content=turn.content, id=mid, additional_kwargs={"lc_source": SUMMARY_SOURCE}
                )
            )
        elif turn.role == "assistant":
            calls = [
                {
                    "name": c.function,
                    "args": json.loads(c.arguments),
                    "id": c.id,
                    "type": "tool_call",
                }
                for c in turn.tool_calls
            ]
            out.append(AIMessage(content=turn.content, id=mid, tool_calls=calls))
        else:
            out.append(
                ToolMessage(content=turn.content, id=mid, tool_call_id=turn.tool_call_id or "")
            )
    return out


def from_langchain(messages: Sequence[BaseMessage]) -> list[ChatTurn]:
    """LangChain messages as our turns (its summary message becomes a summary turn)."""
    turns: list[ChatTurn] = []
    for message in messages:
        text = message.text
        if isinstance(message, HumanMessage):
            summary = message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE
            turns.append(ChatTurn("summary" if summary else "user", text))
        elif isinstance(message, AIMessage):
            calls = tuple(
                ToolCall(c["id"] or "", c["name"], json.dumps(c["args"], separators=(",", ":")))
                for c in message.tool_calls
            )
            turns.append(ChatTurn("assistant", text, calls))
        elif isinstance(message, ToolMessage):
            turns.append(ChatTurn("tool", text, tool_call_id=message.tool_call_id or None))
        elif isinstance(message, SystemMessage):
            turns.append(ChatTurn("system", text))
        else:
            turns.append(ChatTurn("user", text))
    return turns


def token_counter(messages: Iterable[Any]) -> int:
    """The adapters' token count (a quarter of the transcript's bytes) of LangChain messages."""
    return count_tokens(from_langchain(list(messages)))


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}.get(
        message.type, "user"
    )


class AuditChatModel(BaseChatModel):
    """A LangChain chat model answered by the audit's writer client."""

    adapter: Any
    budget: int
    repeat: int = 0
    max_tokens: int | None = None
    """The library's own cap (``None``: the adapter's default)."""

    @property
    def _llm_type(self) -> str:
        return "memory-audit-writer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the audit calls the model asynchronously (ainvoke)")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        adapter: ChatAdapter = self.adapter
        flat = [
            flatten(
                _role(m),
                m.text,
                [(c["name"], json.dumps(c["args"])) for c in getattr(m, "tool_calls", [])],
            )
            for m in messages
        ]
        cap = adapter.request_cap(self.budget, kwargs.get("max_tokens") or self.max_tokens)
        content = await adapter.ask(flat, cap, self.repeat)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=content))])
