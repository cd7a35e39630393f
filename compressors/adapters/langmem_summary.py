"""langmem: ``summarize_messages`` with its running summary carried as the memory.

The memory is langmem's state: the running summary (a ``summary`` turn) and the
messages it has not summarized yet.  Each update rebuilds a ``RunningSummary`` from
the summary turn (nothing of it is summarized again: its messages are gone), appends
the chunk's messages and calls ``asummarize_messages`` with ``max_tokens = budget //
4`` (the tokens of what it returns), ``max_tokens_before_summary`` at its default
(``max_tokens``) and ``max_summary_tokens`` at its default 256, lowered to half of
``max_tokens`` when the budget is small (langmem refuses a summary allowance of
``max_tokens`` or more).  As langmem advises, the summary request is capped at
``max_summary_tokens``.  The model is a LangChain chat model answered by the
``--writer`` backend through the audit's client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, Field

from compressors._registry import register
from compressors.adapters._base import ChatAdapter, LLMAdapterParams, threshold_tokens
from histories import ChatTurn

DEFAULT_SUMMARY_TOKENS = 256
"""langmem's default ``max_summary_tokens``."""


class LangmemParams(LLMAdapterParams):
    """``max_tokens`` here is langmem's own (default budget // 4), not a request cap:
    ``max_summary_tokens`` (default 256) caps the summary request."""

    max_tokens: int | None = Field(default=None, ge=2)
    max_tokens_before_summary: int | None = Field(default=None, ge=1)
    max_summary_tokens: int | None = Field(default=None, ge=1)


@register
class LangmemSummary(ChatAdapter):
    name = "langmem_summary"
    library = "langmem summarize_messages"
    summary = "langmem summarize_messages: running summary + recent messages, budget/4 tokens"
    extra = "langmem"
    requires = ("langmem", "langchain_core")
    uses_llm = True
    Params: ClassVar[type[BaseModel]] = LangmemParams

    def requested_cap(self) -> int | None:
        return None  # langmem's max_summary_tokens caps the request (its model is bound)

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        from langchain_core.messages import SystemMessage
        from langmem.short_term import RunningSummary, asummarize_messages

        from compressors.adapters._lc import (
            AuditChatModel,
            from_langchain,
            to_langchain,
            token_counter,
        )

        params = self.params
        assert isinstance(params, LangmemParams)
        summaries = [t for t in turns if t.role == "summary"]
        rest = [t for t in turns if t.role != "summary"]
        running = RunningSummary(summaries[-1].content, set(), None) if summaries else None
        max_tokens = params.max_tokens or threshold_tokens(budget)
        summary_tokens = params.max_summary_tokens or min(
            DEFAULT_SUMMARY_TOKENS, max(1, max_tokens // 2)
        )
        model = AuditChatModel(
            adapter=self, budget=budget, repeat=repeat, max_tokens=summary_tokens
        )
        result = await asummarize_messages(
            to_langchain(rest),
            running_summary=running,
            model=model,
            max_tokens=max_tokens,
            max_tokens_before_summary=params.max_tokens_before_summary,
            max_summary_tokens=summary_tokens,
            token_counter=token_counter,
        )
        if result.running_summary is None:  # nothing summarized, ever
            return rest
        kept = [
            m
            for m in result.messages
            if not (isinstance(m, SystemMessage) and m.id is None)  # langmem's summary message
        ]
        return [ChatTurn("summary", result.running_summary.summary), *from_langchain(kept)]
