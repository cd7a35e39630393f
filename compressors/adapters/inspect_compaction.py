"""inspect_ai's compaction: ``CompactionTrim``, ``CompactionEdit``, ``CompactionSummary``.

Each update runs inspect's own compaction handler over the memory's turns and the
chunk's, with the threshold at ``budget // 4`` tokens and inspect's defaults
otherwise.  When a strategy cannot get under it ("Compaction insufficient") the
memory is left as given: over the budget, the audit empties it and counts the
overflow.  The model inspect gets counts tokens as the adapters do (inspect's own
counter needs a download) and generates through the writer client
(``docs/adapters.md``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from compressors._registry import register
from compressors.adapters._base import (
    AdapterParams,
    ChatAdapter,
    LLMAdapterParams,
    count_text,
    count_tokens,
    flatten,
    threshold_tokens,
)
from histories import ChatTurn, ToolCall

if TYPE_CHECKING:
    from inspect_ai.model import ChatMessage as InspectMessage
    from inspect_ai.model import CompactionStrategy, Model

_INSUFFICIENT = "Compaction insufficient"


def to_inspect(turns: Sequence[ChatTurn]) -> list[InspectMessage]:
    """Our turns as inspect's messages (ids ``m0``, ``m1``, ...: deterministic)."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
    )
    from inspect_ai.tool import ToolCall as InspectToolCall

    functions = {call.id: call.function for turn in turns for call in turn.tool_calls}
    out: list[InspectMessage] = []
    for i, turn in enumerate(turns):
        mid = f"m{i}"
        if turn.role == "system":
            out.append(ChatMessageSystem(content=turn.content, id=mid))
        elif turn.role == "user":
            out.append(ChatMessageUser(content=turn.content, id=mid))
        elif turn.role == "summary":
            out.append(ChatMessageUser(content=turn.content, id=mid, metadata={"summary": True}))
        elif turn.role == "assistant":
            calls = [
                InspectToolCall(id=c.id, function=c.function, arguments=json.loads(c.arguments))
                for c in turn.tool_calls
            ]
            out.append(ChatMessageAssistant(content=turn.content, id=mid, tool_calls=calls or None))
        else:
            out.append(
                ChatMessageTool(
                    content=turn.content,
                    id=mid,
                    tool_call_id=turn.tool_call_id,
                    function=functions.get(turn.tool_call_id or ""),
                )
            )
    return out


def from_inspect(messages: Sequence[InspectMessage]) -> list[ChatTurn]:
    """inspect's messages as our turns (a summary is a user message marked so)."""
    turns: list[ChatTurn] = []
    for message in messages:
        text = message.text
        if message.role == "user":
            summary = bool((message.metadata or {}).get("summary"))
            turns.append(ChatTurn("summary" if summary else "user", text))
        elif message.role == "assistant":
            calls = tuple(
                ToolCall(c.id, c.function, json.dumps(c.arguments, separators=(",", ":")))
                for c in message.tool_calls or []
            )
            turns.append(ChatTurn("assistant", text, calls))
        elif message.role == "tool":
            turns.append(ChatTurn("tool", text, tool_call_id=message.tool_call_id))
        else:
            turns.append(ChatTurn("system", text))
    return turns


_PROVIDER = "memory_audit"
_registered: list[Any] = []


def _model(adapter: InspectAdapter, budget: int, repeat: int) -> Model:
    """An inspect ``Model`` over the audit (provider ``memory_audit``, registered on
    first use): our token count, and generation through the writer client."""
    from inspect_ai.model import GenerateConfig, ModelAPI, ModelOutput, get_model, modelapi

    if not _registered:

        class AuditModelAPI(ModelAPI):
            def __init__(
                self,
                model_name: str,
                base_url: str | None = None,
                api_key: str | None = None,
                config: GenerateConfig = GenerateConfig(),
                **model_args: Any,
            ) -> None:
                super().__init__(model_name, base_url, api_key, [], config)
                self.adapter: InspectAdapter = model_args["adapter"]
                self.budget: int = model_args["budget"]
                self.repeat: int = model_args["repeat"]

            async def generate(
                self, input: list[InspectMessage], tools: Any, tool_choice: Any, config: Any
            ) -> ModelOutput:
                messages = [
                    flatten(m.role, m.text, [(c.function, json.dumps(c.arguments)) for c in calls])
                    for m in input
                    for calls in [getattr(m, "tool_calls", None) or []]
                ]
                cap = self.adapter.request_cap(self.budget, config.max_tokens)
                content = await self.adapter.ask(messages, cap, self.repeat)
                return ModelOutput.from_content(model=self.model_name, content=content)

            async def count_tokens(self, input: Any, config: Any = None) -> int:
                if isinstance(input, str):
                    return count_text(input)
                return count_tokens(from_inspect(input))

            async def count_text_tokens(self, text: str) -> int:
                return count_text(text)

        _registered.append(modelapi(_PROVIDER)(AuditModelAPI))
    model = get_model(
        f"{_PROVIDER}/writer", memoize=False, adapter=adapter, budget=budget, repeat=repeat
    )
    # inspect counts the tool definitions as one user message holding their JSON; with
    # no tools that message is empty, 0 tokens to inspect's counter but a header line
    # to ours: no tools are no tokens (else the threshold is met 2 tokens early)
    count_tool_tokens = model.count_tool_tokens

    async def tool_tokens(tools: Any) -> int:
        return await count_tool_tokens(tools) if tools else 0

    model.count_tool_tokens = tool_tokens  # type: ignore[method-assign]
    return model


class InspectParams(AdapterParams):
    """``threshold=N``: the strategy's threshold in tokens (default budget // 4)."""

    threshold: int | None = Field(default=None, ge=1)


class InspectAdapter(ChatAdapter):
    extra = "inspect-ai"
    requires = ("inspect_ai",)
    version = "1"
    Params: ClassVar[type[BaseModel]] = InspectParams
    strategy_class: ClassVar[str] = ""
    """The ``inspect_ai.model`` strategy: given the threshold, the other params."""

    async def compact(
        self, turns: list[ChatTurn], query_keys: Sequence[str], budget: int, repeat: int
    ) -> list[ChatTurn]:
        import inspect_ai.model

        given = getattr(self.params, "threshold", None)
        options = self.params.model_dump(exclude={"threshold", "max_tokens"})
        strategy: CompactionStrategy = getattr(inspect_ai.model, self.strategy_class)(
            threshold=given or threshold_tokens(budget), **options
        )
        handler = inspect_ai.model.compaction(
            strategy, prefix=[], model=_model(self, budget, repeat)
        )
        try:
            kept, _summary = await handler.compact_input(to_inspect(turns))
        except RuntimeError as error:
            if not str(error).startswith(_INSUFFICIENT):
                raise
            return turns  # over the budget: the audit empties it and counts the overflow
        return from_inspect(kept)


class TrimParams(InspectParams):
    """``preserve=0.8``: the share of the conversation each pass keeps (inspect's default)."""

    preserve: float = Field(default=0.8, gt=0, le=1)


@register
class InspectTrim(InspectAdapter):
    name = "inspect_trim"
    library = "inspect_ai CompactionTrim"
    summary = "inspect_ai CompactionTrim: past budget/4 tokens, keeps the newest 80% of messages"
    Params = TrimParams
    strategy_class = "CompactionTrim"


class EditParams(InspectParams):
    """inspect's defaults: ``keep_tool_uses=3``, ``keep_tool_inputs=true``,
    ``keep_thinking_turns=1``."""

    keep_tool_uses: int = Field(default=3, ge=0)
    keep_tool_inputs: bool = True
    keep_thinking_turns: int | Literal["all"] = 1


@register
class InspectEdit(InspectAdapter):
    name = "inspect_edit"
    library = "inspect_ai CompactionEdit"
    summary = "inspect_ai CompactionEdit: past budget/4 tokens, clears old tool results"
    Params = EditParams
    strategy_class = "CompactionEdit"


class SummaryParams(InspectParams, LLMAdapterParams):
    """``instructions=TEXT``: added to inspect's default summary prompt (default none)."""

    instructions: str | None = None


@register
class InspectSummary(InspectAdapter):
    name = "inspect_summary"
    library = "inspect_ai CompactionSummary"
    summary = "inspect_ai CompactionSummary: past budget/4 tokens, a model summary"
    uses_llm = True
    Params = SummaryParams
    strategy_class = "CompactionSummary"
