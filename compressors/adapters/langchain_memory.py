"""LangChain: ``trim_messages`` and the agents' ``SummarizationMiddleware``.

* ``langchain_trim`` calls ``langchain_core.messages.trim_messages`` on the memory's
  turns and the chunk's with ``max_tokens = budget // 4`` and LangChain's defaults
  (``strategy="last"``, no ``start_on``/``end_on``, ``allow_partial=False``,
  ``include_system=False``); trim_messages has no default token counter, and the
  adapter gives it the adapters' count (a quarter of the transcript's bytes).
* ``langchain_summary`` runs ``SummarizationMiddleware.abefore_model`` (what a
  LangChain agent runs before each model call) with ``trigger=("tokens",
  budget // 4)``: the middleware's default trigger is none (it never summarizes);
  every other parameter keeps its default (``keep=("messages", 20)``,
  ``trim_tokens_to_summarize=4000``, LangChain's summary prompt).  Its model is a
  LangChain chat model answered by the ``--writer`` backend through the audit's
  client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from compressors._registry import register
from compressors.adapters._base import (
    AdapterParams,
    ChatAdapter,
    LLMAdapterParams,
    threshold_tokens,
)
from histories import ChatTurn

MessageType = Literal["human", "ai", "tool", "system"]


class TrimParams(AdapterParams):
    """trim_messages' own parameters, at its defaults; ``max_tokens`` defaults to budget // 4."""

    max_tokens: int | None = Field(default=None, ge=1)
    strategy: Literal["first", "last"] = "last"
    start_on: MessageType | None = None
    end_on: MessageType | None = None
    allow_partial: bool = False
    include_system: bool = False


@register
class LangChainTrim(ChatAdapter):
    name = "langchain_trim"
    library = "langchain_core trim_messages"
    summary = "LangChain trim_messages: the newest whole messages within budget/4 tokens"
    extra = "langchain"
    requires = ("langchain_core",)
    Params: ClassVar[type[BaseModel]] = TrimParams

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        from langchain_core.messages import trim_messages

        from compressors.adapters._lc import from_langchain, to_langchain, token_counter

        params = self.params
        assert isinstance(params, TrimParams)
        kept = trim_messages(
            to_langchain(turns),
            max_tokens=params.max_tokens or threshold_tokens(budget),
            token_counter=token_counter,
            **params.model_dump(exclude={"max_tokens"}),
        )
        return from_langchain(kept)


class SummaryParams(LLMAdapterParams):
    """``trigger_tokens`` (default budget // 4), ``keep_messages`` (LangChain's default
    20) or ``keep_tokens``, ``trim_tokens_to_summarize`` (default 4000)."""

    trigger_tokens: int | None = Field(default=None, ge=1)
    keep_messages: int | None = Field(default=None, ge=0)
    keep_tokens: int | None = Field(default=None, ge=0)
    trim_tokens_to_summarize: int | None = Field(default=4000, ge=1)


@register
class LangChainSummary(ChatAdapter):
    name = "langchain_summary"
    library = "langchain SummarizationMiddleware"
    summary = "LangChain SummarizationMiddleware: past budget/4 tokens, summary + last 20"
    extra = "langchain"
    requires = ("langchain", "langchain_core")
    uses_llm = True
    Params: ClassVar[type[BaseModel]] = SummaryParams

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        from langchain.agents.middleware import SummarizationMiddleware

        from compressors.adapters._lc import (
            AuditChatModel,
            from_langchain,
            to_langchain,
            token_counter,
        )

        params = self.params
        assert isinstance(params, SummaryParams)
        keep: Any = ("messages", 20)
        if params.keep_tokens is not None:
            keep = ("tokens", params.keep_tokens)
        elif params.keep_messages is not None:
            keep = ("messages", params.keep_messages)
        middleware = SummarizationMiddleware(
            model=AuditChatModel(adapter=self, budget=budget, repeat=repeat),
            trigger=("tokens", params.trigger_tokens or threshold_tokens(budget)),
            keep=keep,
            token_counter=token_counter,
            trim_tokens_to_summarize=params.trim_tokens_to_summarize,
        )
        messages = to_langchain(turns)
        state: Any = {"messages": messages}
        update = await middleware.abefore_model(state, None)  # type: ignore[arg-type]
        if update is None:
            return turns
        return from_langchain(update["messages"][1:])  # after RemoveMessage(REMOVE_ALL)
