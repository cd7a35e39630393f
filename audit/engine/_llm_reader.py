"""The LLM reader: ask a model for the query keys' values, score strictly, classify.

The reader gets the public semantics, the memory and the query keys, and must
answer exactly ``{"values": {"<key>": "<string>" | null}}`` with exactly the
required keys.  Strict scoring needs a normal stop, that exact envelope and the
right values; lenient scoring also accepts a bare ``{key: value}`` map.  Every read
gets exactly one outcome, and the exact reader's verdict on the same memory tells
a memory that lost the evidence (``wrong_log`` / ``unparsed``) from a reader that
misread an adequate one (``reader_error``).

JSON from a model is parsed with duplicate keys refused: ``{"k": "x", "k": "y"}``
is no answer (the last value winning would let a wrong first value pass).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from audit.engine._exact import ExactRead
from audit.rundir import Outcome
from compressors import ChatMessage, ChatRequest, ChatResponse
from histories import PUBLIC_SEMANTICS

READER_OUTCOMES: tuple[Outcome, ...] = (
    "na", "unparsed", "wrong_log", "pass", "wrapper_only", "reader_error",
)  # fmt: skip
"""The outcomes an LLM read can have (``rundir.OUTCOMES`` says what each means)."""

_INSTRUCTIONS = """\
You read an agent's memory of a record log and report the current value of each query
key, applying the rules below to what the memory says. Answer with JSON only, exactly
{{"values": {{"<key>": "<string value>" or null}}}}, with exactly the query keys.

{semantics}"""


def answer_schema(query: Sequence[str]) -> dict[str, Any]:
    """The strict envelope as a JSON schema (sent when the backend honours schemas)."""
    return {
        "type": "object",
        "properties": {
            "values": {
                "type": "object",
                "properties": {key: {"type": ["string", "null"]} for key in query},
                "required": list(query),
                "additionalProperties": False,
            }
        },
        "required": ["values"],
        "additionalProperties": False,
    }


def reader_request(
    memory: str,
    query: Sequence[str],
    *,
    use_schema: bool = True,
    repeat: int = 0,
    max_tokens: int = 256,
    tag: str = "reader",
) -> ChatRequest:
    """Stable prefix first: instructions and semantics, then the memory, then the query."""
    user = (
        f"Memory:\n{memory if memory else '(empty)'}\n\n"
        f"Query keys: {json.dumps(list(query))}\n"
        'Answer with {"values": {...}} only.'
    )
    return ChatRequest(
        messages=[
            ChatMessage("system", _INSTRUCTIONS.format(semantics=PUBLIC_SEMANTICS)),
            ChatMessage("user", user),
        ],
        json_schema=answer_schema(query) if use_schema else None,
        thinking=False,
        max_tokens=max_tokens,
        repeat=repeat,
        tag=tag,
    )


class DuplicateKeyError(ValueError):
    """A JSON object names a key twice: ambiguous, so no answer."""


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a key named twice (json's default keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        out[key] = value
    return out


def loads_unique(text: str) -> Any:
    """``json.loads`` with duplicate keys refused (raises ValueError)."""
    return json.loads(text, object_pairs_hook=unique_object)


@dataclass(frozen=True)
class ParsedAnswer:
    """What the model's content says, before comparing with gold."""

    form: Literal["envelope", "bare", "invalid"]
    values: dict[str, Any] | None


def parse_answer(content: str | None, query: Sequence[str]) -> ParsedAnswer:
    """``envelope`` only for exactly {"values": {exactly the query keys}}; ``bare`` for a
    map of exactly the query keys; anything else (text, truncated JSON, extra or
    missing keys, a key named twice anywhere) is ``invalid``."""
    if not content:
        return ParsedAnswer("invalid", None)
    try:
        data = loads_unique(content)
    except (ValueError, RecursionError):
        return ParsedAnswer("invalid", None)
    keys = set(query)
    if isinstance(data, dict) and set(data) == {"values"} and isinstance(data["values"], dict):
        if set(data["values"]) == keys:
            return ParsedAnswer("envelope", data["values"])
        return ParsedAnswer("invalid", None)
    if isinstance(data, dict) and set(data) == keys:
        return ParsedAnswer("bare", data)
    return ParsedAnswer("invalid", None)


def _values_right(values: Mapping[str, Any], gold: Mapping[str, str | None]) -> bool:
    return all(
        (isinstance(values[key], str) or values[key] is None) and values[key] == gold[key]
        for key in gold
    )


@dataclass(frozen=True)
class ReaderVerdict:
    outcome: Outcome
    correct: int | None
    """Strict: 1/0, None for NA."""
    correct_lenient: int | None
    answer: dict[str, Any] | None


def judge(
    response: ChatResponse | None, gold: Mapping[str, str | None], exact: ExactRead
) -> ReaderVerdict:
    """One outcome per read.  ``response`` None or with ``error`` is NA (infrastructure
    failure after retries), never scored 0."""
    if response is None or response.error is not None:
        return ReaderVerdict("na", None, None, None)
    parsed = parse_answer(response.content, list(gold))
    stopped = response.finish_reason == "stop"
    right = parsed.values is not None and _values_right(parsed.values, gold)
    if stopped and right and parsed.form == "envelope":
        return ReaderVerdict("pass", 1, 1, parsed.values)
    if stopped and right and parsed.form == "bare":
        return ReaderVerdict("wrapper_only", 0, 1, parsed.values)
    if exact.outcome == "unparsed":
        outcome: Outcome = "unparsed"
    elif not exact.adequate:
        outcome = "wrong_log"
    else:
        outcome = "reader_error"
    return ReaderVerdict(outcome, 0, 0, parsed.values)
