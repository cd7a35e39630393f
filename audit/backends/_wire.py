"""The OpenAI chat-completions format, both ways, with no I/O: the body sent for a request
and what an answer must be before it is believed.

Every sampling parameter is sent explicitly (vLLM would otherwise apply the model's
generation_config defaults); a JSON schema goes in ``response_format`` (``json_schema``),
never in the removed ``guided_*`` fields.  A 200 whose body is not a chat completion
(``choices[0].message`` not an object, a ``content`` that is not a string...) is named
(``parse_completion``), so the client can make it NA, never an empty or wrong answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from audit.backends._config import BackendConfig
from compressors import ChatRequest, ChatResponse


def chat_body(backend: BackendConfig, model: str | None, request: ChatRequest) -> dict[str, Any]:
    """The exact JSON body sent for ``request`` (also what the cache key hashes)."""
    b = backend
    body: dict[str, Any] = {
        "model": model,
        "temperature": b.temperature,
        "top_p": b.top_p,
        "presence_penalty": b.presence_penalty,
        "frequency_penalty": b.frequency_penalty,
        "n": 1,
        "stream": False,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "max_tokens": request.max_tokens or b.max_tokens,
        "seed": b.seed + request.repeat,
    }
    schema = request.json_schema
    if schema is not None and b.structured_output == "json_schema":
        title = str(schema.get("title") or "answer")
        name = "".join(c if c.isalnum() or c in "_-" else "_" for c in title)
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": name[:64] or "answer", "schema": dict(schema), "strict": True},
        }
    elif schema is not None and b.structured_output == "structured_outputs":
        body["structured_outputs"] = {"json": dict(schema)}
    elif schema is not None and b.structured_output == "json_object":
        body["response_format"] = {"type": "json_object"}
    if b.api_dialect == "vllm":
        body.update(top_k=b.top_k, min_p=b.min_p, repetition_penalty=b.repetition_penalty)
        kwargs = b.template_kwargs(request.thinking)
        if kwargs:
            body["chat_template_kwargs"] = kwargs
    body.update(b.body_fields)
    return body


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _Message(_Strict):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class _Choice(_Strict):
    message: _Message
    finish_reason: str | None = None


class Completion(_Strict):
    """The part of an OpenAI chat completion the audit reads, validated: anything else in
    a 200 is a malformed answer (NA), not an empty or wrong one.  ``model`` and ``usage``
    are informational and read leniently."""

    choices: list[_Choice] = Field(min_length=1)
    model: Any = None
    usage: Any = None


_SHAPE = {
    "model_type": "is not an object",
    "dict_type": "is not an object",
    "string_type": "is not a string",
    "list_type": "is not a list",
    "missing": "is missing",
    "too_short": "is empty",
}


def parse_completion(payload: bytes) -> Completion | str:
    """The validated completion, or why ``payload`` is not one (``choices[0].message is
    not an object``, ``not JSON``...): a text for the error message, never the body."""
    try:
        return Completion.model_validate_json(payload)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            return "the body is not JSON"
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        what = _SHAPE.get(first["type"], "is invalid")
        return f"{where.lstrip('.') or 'the body'} {what}"


def completion_answer(completion: Completion, model: str | None) -> ChatResponse:
    """A validated chat completion as a ``ChatResponse``.  The answer is ``content``; the
    reasoning text is ``reasoning`` (older servers: ``reasoning_content``); the served
    model, else ``model``."""
    choice = completion.choices[0]
    message = choice.message
    reasoning = message.reasoning if message.reasoning is not None else message.reasoning_content
    served = completion.model if isinstance(completion.model, str) and completion.model else None
    return ChatResponse(
        content=message.content,
        reasoning=reasoning,
        finish_reason=choice.finish_reason,
        model=served or model,
        usage=_usage(completion.usage),
        status=200,
    )


def completion_response(data: Any, model: str | None = None) -> ChatResponse | str:
    """A chat completion given as decoded JSON (a batch output line's body) as a
    ``ChatResponse``, validated exactly as a live answer is; or why it is not one."""
    completion = parse_completion(json.dumps(data).encode())
    return completion if isinstance(completion, str) else completion_answer(completion, model)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _usage(raw: object) -> dict[str, int]:
    """The integer counts of ``usage``, and ``reasoning_tokens`` from
    ``completion_tokens_details`` when the server reports it (a part of
    ``completion_tokens``, which counts reasoning and answer together)."""
    if not isinstance(raw, Mapping):
        return {}
    usage = {k: v for k, v in raw.items() if _count(v)}
    details = raw.get("completion_tokens_details")
    if isinstance(details, Mapping) and _count(details.get("reasoning_tokens")):
        usage["reasoning_tokens"] = details["reasoning_tokens"]
    return usage


def model_entries(data: object) -> dict[str, Mapping[str, Any]]:
    """A ``/v1/models`` answer's entries by id (and alias): ``{}`` for anything that is not
    a model list.  Lenient: an entry without a string id, or junk aliases, are skipped."""
    if not isinstance(data, Mapping) or not isinstance(data.get("data"), list):
        return {}
    entries: dict[str, Mapping[str, Any]] = {}
    for entry in data["data"]:
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str) and entry["id"]:
            entries.setdefault(entry["id"], entry)
    for entry in data["data"]:
        aliases = entry.get("aliases") if isinstance(entry, Mapping) else None
        if isinstance(aliases, list) and entry.get("id") in entries:
            for alias in aliases:
                if isinstance(alias, str) and alias:
                    entries.setdefault(alias, entry)
    return entries


def context_length(entry: Mapping[str, Any]) -> int | None:
    """A ``/v1/models`` entry's context length: vLLM ``max_model_len``, llama.cpp ``n_ctx``."""
    meta = entry.get("meta")
    n_ctx = meta.get("n_ctx") if isinstance(meta, Mapping) else None
    for value in (entry.get("max_model_len"), n_ctx):
        if _count(value) and value > 0:
            return value
    return None


def error_text(data: object) -> str | None:
    """The message an error body (decoded JSON) gives: ``error.message``, ``error``,
    ``detail``...; None when it gives none."""
    if not isinstance(data, Mapping):
        return None
    inner = data.get("error", data)
    if isinstance(inner, Mapping):
        return str(inner.get("message") or inner.get("detail") or inner)
    if isinstance(inner, str):
        return inner
    detail = data.get("detail") or data.get("message")
    return str(detail) if detail else None


def error_message(payload: bytes) -> str:
    """The message of an HTTP error's body, at most 300 characters."""
    text = payload[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "(empty body)"
    return (error_text(data) or text.strip())[:300]
