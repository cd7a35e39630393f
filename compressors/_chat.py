"""The chat-client seam: how an LLM-based compressor calls a model without importing audit.

``audit``'s backends implement ``ChatClient`` and inject it into compressors that
declare ``uses_llm = True``; a plugin needs only this module to talk to a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from histories import MemoryAuditError

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion request, described by what it asks (not how it is sent)."""

    messages: Sequence[ChatMessage]
    json_schema: Mapping[str, Any] | None = None
    """Ask for structured output matching this JSON schema, when the backend honours it."""
    thinking: bool | None = None
    """Ask for reasoning on/off; the backend maps it to its chat_template_kwargs."""
    max_tokens: int | None = None
    repeat: int = 0
    """Repeat index: part of the cache key, so repeats are independent samples."""
    tag: str = ""
    """Who asks (e.g. ``writer:prose_high@2``): the compressor name and version."""


@dataclass(frozen=True)
class ChatResponse:
    """What came back.  ``error`` set means an infrastructure failure after retries (NA).

    The answer is ``content`` only; ``reasoning`` is the thinking text when the server
    returned one (an answer that landed only there is an outcome, not NA), and a
    ``finish_reason`` of ``"length"`` is a cut-off (also an outcome).
    """

    content: str | None
    reasoning: str | None = None
    finish_reason: str | None = None
    model: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    cached: bool = False
    latency_s: float = 0.0
    status: int | None = None
    """HTTP status of the last attempt (``None``: no HTTP answer, or a cache hit)."""
    rejected: str | None = None
    """The server refused the request as invalid (HTTP 400/413/422, e.g. the prompt
    exceeds the context): an outcome of the request, not NA; not retried, not cached."""
    deduplicated: bool = False
    """Answered by an identical request already in flight (sent once)."""
    attempts: int = 0
    """HTTP attempts made for this answer (0 for cache hits and deduplicated requests)."""


@runtime_checkable
class ChatClient(Protocol):
    """Anything that can answer a ChatRequest (a vLLM server, the embedded model, ...)."""

    async def chat(self, request: ChatRequest) -> ChatResponse: ...


class ChatUnavailableError(MemoryAuditError, RuntimeError):
    """Raised by an LLM compressor when its chat call failed for infrastructure reasons;
    the audit records the affected reads as NA, never as wrong."""


async def ask_writer(client: ChatClient | None, name: str, request: ChatRequest) -> str:
    """The content of one writer call by compressor ``name``; no client, a failure after
    retries or a refused request raises ``ChatUnavailableError`` (NA)."""
    if client is None:
        raise ChatUnavailableError(f"{name}: no writer backend was given (--writer)")
    response = await client.chat(request)
    if response.error is not None:
        raise ChatUnavailableError(f"{name}: {response.error}")
    if response.rejected is not None:  # the server refused the request: not an answer
        raise ChatUnavailableError(
            f"{name}: request refused (HTTP {response.status}): {response.rejected}"
        )
    return response.content or ""
