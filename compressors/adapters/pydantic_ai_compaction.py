"""Pydantic AI: the compaction strategies of ``pydantic-ai-harness``.

Each update runs the strategy's own ``before_model_request`` hook over the memory's
turns and the chunk's, as Pydantic AI messages, with the token trigger at
``budget // 4`` and the harness's defaults otherwise; what the hook leaves in the
run's history is the memory.  Its tokenizer counts four UTF-8 bytes a token; its
model is a ``FunctionModel`` answered by the ``--writer`` backend.  What is audited
and why, and what is not: ``docs/adapters.md``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field

from compressors._chat import ChatMessage
from compressors._registry import register
from compressors.adapters._base import (
    AdapterParams,
    ChatAdapter,
    LLMAdapterParams,
    count_text,
    flatten,
    threshold_tokens,
)
from histories import ChatTurn, ToolCall

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

SUMMARY_KEY = "pydantic-ai-harness.compaction.summary.v1"
"""``CompactionPart.metadata`` key of a summary ``SummarizingCompaction`` wrote."""

LOG_FILE = "log"
"""The file ``pydantic_dedup``'s ``file_key`` gives every ``read_log`` call."""


def to_pydantic(turns: Sequence[ChatTurn]) -> list[ModelMessage]:
    """Our turns as Pydantic AI messages, one message per turn."""
    from pydantic_ai.messages import (
        CompactionPart,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    functions = {call.id: call.function for turn in turns for call in turn.tool_calls}
    out: list[ModelMessage] = []
    for turn in turns:
        if turn.role == "system":
            out.append(ModelRequest(parts=[SystemPromptPart(turn.content)]))
        elif turn.role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(turn.content)]))
        elif turn.role == "summary":
            part = CompactionPart(content=turn.content, metadata={SUMMARY_KEY: True})
            out.append(ModelRequest(parts=[part]))
        elif turn.role == "assistant":
            parts: list[Any] = [TextPart(turn.content)] if turn.content else []
            parts += [
                ToolCallPart(c.function, json.loads(c.arguments), tool_call_id=c.id)
                for c in turn.tool_calls
            ]
            out.append(ModelResponse(parts=parts))
        else:
            call_id = turn.tool_call_id or ""
            out.append(
                ModelRequest(
                    parts=[ToolReturnPart(functions.get(call_id, ""), turn.content, call_id)]
                )
            )
    return out


def from_pydantic(messages: Sequence[ModelMessage]) -> list[ChatTurn]:
    """Pydantic AI messages as our turns: a request's parts are a turn each, a
    response is one assistant turn; the harness's summary is a summary turn."""
    from pydantic_ai.messages import (
        CompactionPart,
        ModelRequest,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    turns: list[ChatTurn] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            text = "\n".join(p.content for p in message.parts if isinstance(p, TextPart))
            calls = tuple(
                ToolCall(p.tool_call_id, p.tool_name, _arguments(p))
                for p in message.parts
                if isinstance(p, ToolCallPart)
            )
            turns.append(ChatTurn("assistant", text, calls))
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                turns.append(ChatTurn("system", part.content))
            elif isinstance(part, UserPromptPart):
                content = part.content
                text = content if isinstance(content, str) else "\n".join(map(str, content))
                turns.append(ChatTurn("user", text))
            elif isinstance(part, ToolReturnPart):
                turns.append(
                    ChatTurn("tool", part.model_response_str(), tool_call_id=part.tool_call_id)
                )
            elif isinstance(part, CompactionPart):
                turns.append(ChatTurn("summary", part.content or ""))
            elif isinstance(part, RetryPromptPart):
                turns.append(ChatTurn("user", part.model_response()))
    return turns


def _arguments(part: ToolCallPart) -> str:
    return json.dumps(part.args_as_dict(), separators=(",", ":"))


def _model(adapter: ChatAdapter, budget: int, repeat: int) -> FunctionModel:
    """The run's model: a ``FunctionModel`` answered by the audit's writer client."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        flat: list[ChatMessage] = []
        if info.instructions:
            flat.append(ChatMessage("system", info.instructions))
        for turn in from_pydantic(messages):
            role = "user" if turn.role == "summary" else turn.role
            calls = [(c.function, c.arguments) for c in turn.tool_calls]
            flat.append(flatten(role, turn.content, calls))
        settings = info.model_settings or {}
        cap = adapter.request_cap(budget, settings.get("max_tokens"))
        content = await adapter.ask(flat, cap, repeat)
        return ModelResponse(parts=[TextPart(content)], model_name="memory-audit-writer")

    return FunctionModel(answer, model_name="memory-audit-writer")


class HarnessParams(AdapterParams):
    """``max_tokens=N``: the strategy's token trigger (default budget // 4)."""

    max_tokens: int | None = Field(default=None, ge=1)


class HarnessAdapter(ChatAdapter):
    extra = "pydantic-ai"
    requires = ("pydantic_ai", "pydantic_ai_harness")
    version = "1"
    Params: ClassVar[type[BaseModel]] = HarnessParams
    strategy_class: ClassVar[str] = ""
    """The ``pydantic_ai_harness.compaction`` class: given the trigger, the other params."""
    strategy_args: ClassVar[dict[str, Any]] = {}
    trigger_param: ClassVar[str] = "max_tokens"
    """The parameter that overrides the trigger of budget // 4 tokens."""

    def strategy(self, trigger: int) -> Any:
        from pydantic_ai_harness import compaction

        given = self.params.model_dump(exclude={self.trigger_param, "max_tokens"})
        keyword = "max_part_tokens" if self.trigger_param == "max_part_tokens" else "max_tokens"
        return getattr(compaction, self.strategy_class)(
            **{keyword: trigger}, **given, **self.strategy_args, tokenizer=count_text
        )

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        from opentelemetry.trace import NoOpTracer
        from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
        from pydantic_ai.tools import RunContext
        from pydantic_ai.usage import RunUsage

        strategy = self.strategy(self.trigger(budget))
        model = _model(self, budget, repeat)
        messages = to_pydantic(turns)
        ctx = RunContext[None](
            deps=None, model=model, usage=RunUsage(), messages=messages, tracer=NoOpTracer()
        )
        request = ModelRequestContext(
            model=model,
            messages=list(messages),
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )
        await strategy.before_model_request(ctx, request)
        return from_pydantic(ctx.messages)  # the run's history, as the hook left it

    def trigger(self, budget: int) -> int:
        given = getattr(self.params, self.trigger_param, None)
        return int(given) if given else threshold_tokens(budget)


class WindowParams(HarnessParams):
    """The harness's defaults: ``keep_messages=40``, ``keep_tokens`` none,
    ``preserve_first_user_message=true``."""

    keep_messages: int = Field(default=40, ge=0)
    keep_tokens: int | None = Field(default=None, ge=0)
    preserve_first_user_message: bool = True


@register
class PydanticWindow(HarnessAdapter):
    name = "pydantic_window"
    library = "pydantic_ai_harness SlidingWindowCompaction"
    summary = "Pydantic AI SlidingWindowCompaction: past budget/4 tokens, the last 40 messages"
    Params = WindowParams
    strategy_class = "SlidingWindowCompaction"


class ClearParams(HarnessParams):
    """The harness's defaults: ``keep_pairs=3``, ``clear_tool_inputs=false``."""

    keep_pairs: int = Field(default=3, ge=0)
    clear_tool_inputs: bool = False


@register
class PydanticClear(HarnessAdapter):
    name = "pydantic_clear"
    library = "pydantic_ai_harness ClearToolResults"
    summary = "Pydantic AI ClearToolResults: past budget/4 tokens, blanks all but 3 tool results"
    Params = ClearParams
    strategy_class = "ClearToolResults"


def _log_file(call: ToolCallPart) -> str | None:
    """``file_key``: every ``read_log`` call reads the one log file."""
    return LOG_FILE if call.tool_name == "read_log" else None


@register
class PydanticDedup(HarnessAdapter):
    name = "pydantic_dedup"
    library = "pydantic_ai_harness DeduplicateFileReads"
    summary = "Pydantic AI DeduplicateFileReads: past budget/4 tokens, the newest read_log kept"
    strategy_class = "DeduplicateFileReads"
    strategy_args: ClassVar[dict[str, Any]] = {"file_key": _log_file}


class ClampParams(AdapterParams):
    """``max_part_tokens`` (default budget // 4), the harness's ``keep_head_chars=2000``
    and ``keep_tail_chars=2000``."""

    max_part_tokens: int | None = Field(default=None, ge=1)
    keep_head_chars: int = Field(default=2000, ge=0)
    keep_tail_chars: int = Field(default=2000, ge=0)


@register
class PydanticClamp(HarnessAdapter):
    name = "pydantic_clamp"
    library = "pydantic_ai_harness ClampOversizedMessages"
    summary = "Pydantic AI ClampOversizedMessages: cuts a part over budget/4 tokens"
    Params = ClampParams
    strategy_class = "ClampOversizedMessages"
    trigger_param = "max_part_tokens"


class SummaryParams(LLMAdapterParams):
    """``trigger_tokens`` (default budget // 4), the harness's ``keep_messages=20`` or
    ``keep_tokens``, ``incremental=true``, ``tool_return_max_chars=500``."""

    trigger_tokens: int | None = Field(default=None, ge=1)
    keep_messages: int = Field(default=20, ge=0)
    keep_tokens: int | None = Field(default=None, ge=0)
    incremental: bool = True
    tool_return_max_chars: int | None = Field(default=500, ge=1)


@register
class PydanticSummary(HarnessAdapter):
    name = "pydantic_summary"
    library = "pydantic_ai_harness SummarizingCompaction"
    summary = "Pydantic AI SummarizingCompaction: past budget/4 tokens, summary + last 20"
    uses_llm = True
    Params = SummaryParams
    strategy_class = "SummarizingCompaction"
    trigger_param = "trigger_tokens"
