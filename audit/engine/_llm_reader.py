"""The LLM reader: ask a model for the query keys' values, score strictly, classify.

The reader gets the public semantics, the memory and the query keys, and must
answer exactly ``{"values": {"<key>": "<string>" | null}}`` with exactly the
required keys.  Strict scoring needs a normal stop, that exact envelope and the
right values; lenient scoring also accepts a bare ``{key: value}`` map (normal
stop).  Every read gets exactly one outcome:

* ``na``: no answer (infrastructure failure after retries, or a request the server
  refused): never scored;
* ``pass`` / ``wrapper_only``: right values, strict / bare-map form;
* otherwise the exact reader's verdict on the same memory tells a memory that lost
  the evidence (``wrong_log``), a memory whose retention cannot be judged
  (``unparsed``: not a record log) and a reader that misread an adequate memory
  (``reader_error``).

The ``answer`` of a read is the values the reader gave in whatever form: a lenient
parse finds them in a code fence, among prose, in the reasoning field or before a
cut-off.  It never changes a score or an outcome; a failed read whose answer equals
gold is a *format failure* (right values, wrong form), the report's cause.

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
    "na", "unparsed", "wrong_log", "pass", "wrapper_only", "reader_error", "writer_truncated",
    "writer_empty", "writer_echo",
)  # fmt: skip
"""The outcomes an LLM read can have (``rundir.OUTCOMES`` says what each means)."""

_INSTRUCTIONS = """\
{semantics}

You read an agent's memory of a record log and report the current value of each query
key, applying the rules above to what the memory says. Answer with JSON only, exactly
{{"values": {{"<key>": "<string value>" or null}}}}, with exactly the query keys."""
"""The system message.  The rules come first: every prompt of an audit (the reader's and
every LLM writer's) starts with the same rules, so a server's prefix cache holds their
KV once for all of them (``docs/performance.md``, prefix cache)."""


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
    """Stable prefix first: the rules and the instructions (the system message, the same
    for every read), then the query keys (the same for every read of a pair), then the
    memory."""
    user = (
        f"Query keys: {json.dumps(list(query))}\n\n"
        f"Memory:\n{memory if memory else '(empty)'}\n\n"
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


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a key named twice (json's default keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")  # ambiguous: no answer
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


def _form(data: Any, keys: set[str]) -> ParsedAnswer:
    if isinstance(data, dict) and set(data) == {"values"} and isinstance(data["values"], dict):
        if set(data["values"]) == keys:
            return ParsedAnswer("envelope", data["values"])
        return ParsedAnswer("invalid", None)
    if isinstance(data, dict) and set(data) == keys:
        return ParsedAnswer("bare", data)
    return ParsedAnswer("invalid", None)


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
    return _form(data, set(query))


_SCAN_CHARS = 20_000
"""A lenient parse looks at most this far into a text (reasoning can be long)."""
_SCAN_TRIES = 200
"""... and tries at most this many opening braces."""


def _closed(text: str) -> str | None:
    """A JSON text cut off outside a string, closed: the open brackets closed in order
    (after a dangling comma is dropped); None when it is cut inside a string or is
    not cut at all."""
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and (not stack or stack.pop() != char):
            return None
    if in_string or not stack:
        return None
    return text.rstrip().rstrip(",") + "".join(reversed(stack))


def _lenient_in(text: str, keys: set[str]) -> dict[str, Any] | None:
    """The first answer-shaped JSON object in ``text`` (an envelope or a bare map of
    exactly the query keys, anywhere: in a code fence, among prose, nested), or the
    text's cut-off JSON closed; None when there is none."""
    text = text[:_SCAN_CHARS]
    decoder = json.JSONDecoder(object_pairs_hook=unique_object)
    start, tries = text.find("{"), 0
    first = start
    while start != -1 and tries < _SCAN_TRIES:
        tries += 1
        try:
            data, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            data = None
        parsed = _form(data, keys)
        if parsed.values is not None:
            return parsed.values
        start = text.find("{", start + 1)
    if first != -1:
        repaired = _closed(text[first:])
        if repaired is not None:
            try:
                parsed = _form(loads_unique(repaired), keys)
            except (ValueError, RecursionError):
                return None
            return parsed.values
    return None


def lenient_answer(response: ChatResponse, query: Sequence[str]) -> dict[str, Any] | None:
    """The values a model gave in any wrapper: the first answer-shaped object in its
    content, else in its reasoning text.  Used only to tell a format failure from a
    wrong answer; never part of a score."""
    keys = set(query)
    if response.content:
        found = _lenient_in(response.content, keys)
        if found is not None:
            return found
        if "{" in response.content:
            return None  # it answered in the content, with something else
    if response.reasoning:
        return _lenient_in(response.reasoning, keys)
    return None


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
    """One outcome per read.  ``response`` None, with ``error`` (an infrastructure
    failure after retries) or ``rejected`` (the server refused the request: the reader
    never answered) is NA, never scored 0."""
    if response is None or response.error is not None or response.rejected is not None:
        return ReaderVerdict("na", None, None, None)
    query = list(gold)
    parsed = parse_answer(response.content, query)
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
    # the values it gave, in any form: right ones make this failure a format failure
    answer = parsed.values if parsed.values is not None else lenient_answer(response, query)
    return ReaderVerdict(outcome, 0, 0, answer)
