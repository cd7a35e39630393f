"""LLM-written memories: strict streaming updaters whose update is a model call.

* ``prose_high`` / ``prose_off``: the model rewrites a free-text memory, with
  thinking on / off (the backend maps ``thinking`` to its chat_template_kwargs).
* ``structured_high``: the model writes a record log under a JSON schema
  (``{"records": [...]}``, thinking on); a valid answer becomes canonical JSON lines
  the exact reader can resolve, so well-formed-but-wrong logs are counted
  (``wrong_log``), and anything else is kept verbatim and reads as ``unparsed``.

Like every condition they are target-aware (they see the query keys and the public
semantics) and future-hidden.  The prompt is ordered stable-prefix-first
(the rules, which every prompt of an audit starts with, the reader's too; the writer's
instructions; its budget; then the query, the memory and the new chunk) so a server's
prefix cache hits across conditions, budgets and the updates of every stream.

Token allowances.  ``answer_tokens`` is the allowance of the answer (the memory),
by default about budget/3 tokens.  A server counts a thinking model's reasoning
against the request's ``max_tokens`` (vLLM, like the OpenAI API, caps reasoning and
answer together), so a writer with thinking on asks for ``answer_tokens +
reasoning_tokens``: the reasoning has an allowance of its own and cannot starve the
answer.  ``max_tokens=N`` sets the request's whole cap instead, as sent.  A request
that fails after retries or that the server refuses raises
``ChatUnavailableError`` (the stream's reads are NA); an answer cut off at the limit
or empty is returned as it is, and the audit's LLM stage, which sees every answer's
finish reason, marks the memory written from it (``writer_truncated``,
``writer_empty``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compressors._chat import ChatMessage, ChatRequest, ask_writer
from compressors._memory import dump, unique_keys
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register
from histories import PUBLIC_SEMANTICS, RECORD_KINDS, RECORD_LIST_ADAPTER

_ROLE = """\
You maintain the memory of an agent that reads a long record log in chunks. You will
never see a chunk again: your memory is all that is kept. Later, someone will ask for
the current values of the query keys, possibly after more records arrive that you
cannot see now. Keep whatever you would need to answer then, not only now."""

_PROSE_INSTRUCTIONS = (
    "{semantics}\n\n"
    + _ROLE
    + """
Write the new memory as plain text within the byte budget below. Output only the
memory, nothing else.
Budget: at most {budget} bytes (UTF-8)."""
)

_STRUCTURED_INSTRUCTIONS = (
    "{semantics}\n\n"
    + _ROLE
    + """
Your memory is a record log: answer with a JSON object {{"records": [...]}} whose
records are copied exactly from the memory and the new chunk (same id, op and fields).
The canonical JSON of the kept records, one per line, must fit in the byte budget below.
Budget: at most {budget} bytes (UTF-8)."""
)
"""Every prompt starts with the rules (the LLM reader's too), then what is the same for
every writer, then this writer's format, and the budget last: a server's prefix cache
holds the longest stable prefix once, across conditions and budgets."""


def _record_schema() -> dict[str, Any]:
    """A flat JSON schema every record kind satisfies (constrained decoders handle it
    better than a discriminated union); pydantic validates the exact kinds after."""
    string = {"type": "string"}
    integer = {"type": "integer"}
    return {
        "type": "object",
        "properties": {
            "id": string,
            "op": {"enum": list(RECORD_KINDS)},
            "key": string,
            "value": string,
            "src": string,
            "selector": string,
            "options": {"type": "object", "additionalProperties": string},
            "target": string,
            "cond_key": string,
            "cond_value": string,
            "rev": integer,
            "expires": integer,
            "starts": integer,
            "now": integer,
            "delta": integer,
        },
        "required": ["id", "op"],
        "additionalProperties": False,
    }


RECORD_LOG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"records": {"type": "array", "items": _record_schema()}},
    "required": ["records"],
    "additionalProperties": False,
}


def structured_memory(content: str) -> str:
    """The model's answer as a memory: canonical JSON lines when it is a valid record
    log, else the raw text (which the exact reader reports as ``unparsed``).  A key
    named twice anywhere makes the answer invalid (which value was meant is unknown)."""
    try:
        data = json.loads(content, object_pairs_hook=unique_keys)
        records = RECORD_LIST_ADAPTER.validate_python(data["records"])
    except (ValueError, TypeError, KeyError, RecursionError, ValidationError):
        return content
    return dump(records)


class WriterParams(BaseModel):
    """``prose_off:answer_tokens=128``: the answer's token allowance (default ~budget/3);
    ``max_tokens=N``: the request's whole cap instead, as sent (nothing added to it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int | None = Field(default=None, ge=16, le=65_536)
    """The request's ``max_tokens`` exactly: with thinking on, reasoning counts against it."""
    answer_tokens: int | None = Field(default=None, ge=16, le=32_768)
    """The answer's allowance (default ~budget/3 tokens, 64 to 1,024)."""

    @model_validator(mode="after")
    def _one_cap(self) -> WriterParams:
        if self.max_tokens is not None and self.model_fields_set & {
            "answer_tokens",
            "reasoning_tokens",
        }:
            raise ValueError(
                "max_tokens is the request's whole cap: give it alone, or give "
                "answer_tokens and reasoning_tokens"
            )
        return self


REASONING_TOKENS = 4096
"""Default reasoning allowance of a writer with thinking on."""


class ThinkingWriterParams(WriterParams):
    """``prose_high:answer_tokens=400,reasoning_tokens=8192``: the answer's allowance and,
    added to it in the request, the reasoning's."""

    reasoning_tokens: int = Field(default=REASONING_TOKENS, ge=0, le=65_536)
    """The reasoning's allowance, added to the answer's."""


class _LLMWriter(Compressor):
    """Shared call path: build the prompt, ask the model, turn its answer into memory."""

    version = "3"
    """2: a reasoning allowance of its own; refused requests are NA.  3: the prompt laid
    out for a prefix cache (the rules first, the budget after the instructions)."""
    uses_llm = True
    Params = WriterParams
    thinking: ClassVar[bool | None] = None
    structured: ClassVar[bool] = False
    max_tokens: ClassVar[int] = 1024
    """Upper bound on the default answer allowance, ~budget/3 tokens (a token is at
    least ~3 bytes of memory), which keeps small models from rambling."""

    def token_allowance(self, budget: int) -> int:
        """``max_tokens`` of a request: ``max_tokens`` when given; else the answer's
        allowance, plus the reasoning's when thinking is on (a server counts both
        against ``max_tokens``)."""
        params = cast(WriterParams, self.params)
        if params.max_tokens is not None:
            return params.max_tokens
        tokens = params.answer_tokens or min(self.max_tokens, max(64, budget // 3))
        if self.thinking:
            tokens += int(getattr(params, "reasoning_tokens", 0))
        return tokens

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        raise TypeError(f"{self.name} calls a model: use aupdate (audit runs it asynchronously)")

    def messages(
        self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int
    ) -> list[ChatMessage]:
        template = _STRUCTURED_INSTRUCTIONS if self.structured else _PROSE_INSTRUCTIONS
        system = template.format(budget=budget, semantics=PUBLIC_SEMANTICS)
        new_records = chunk.text if not self.structured else "\n".join(
            r.canonical_json() for r in chunk.records
        )  # fmt: skip
        user = (
            f"Query keys: {json.dumps(list(query_keys))}\n\n"
            f"Current memory:\n{memory if memory else '(empty)'}\n\n"
            f"New records:\n{new_records}\n\n"
            "Write the new memory."
        )
        return [ChatMessage("system", system), ChatMessage("user", user)]

    async def aupdate(
        self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int, repeat: int = 0
    ) -> str:
        request = ChatRequest(
            messages=self.messages(memory, chunk, query_keys, budget),
            json_schema=RECORD_LOG_SCHEMA if self.structured else None,
            thinking=self.thinking,
            max_tokens=self.token_allowance(budget),
            repeat=repeat,
            tag=f"writer:{self.label}",
        )
        content = (await ask_writer(self.client, self.name, request)).strip()
        return structured_memory(content) if self.structured else content


@register
class ProseHigh(_LLMWriter):
    name = "prose_high"
    summary = "LLM writes a free-text memory, thinking on"
    thinking = True
    Params = ThinkingWriterParams


@register
class ProseOff(_LLMWriter):
    name = "prose_off"
    summary = "LLM writes a free-text memory, thinking off"
    thinking = False


@register
class StructuredHigh(_LLMWriter):
    name = "structured_high"
    summary = "LLM writes a schema-constrained record log (exact-readable), thinking on"
    thinking = True
    structured = True
    Params = ThinkingWriterParams
