"""Requests as offline batches: the exact request bodies and keys without a server, the
batch file's lines, and the answers of a batch output turned into cache entries.

A batch request is the body ``BackendClient`` would POST to ``/chat/completions``,
byte for byte the same JSON, and its ``custom_id`` is that request's cache key: an
answer imported under it is found by the live client exactly as if it had been sent.
The formats are the OpenAI Batch API's, which ``vllm run-batch`` reads and writes:
input lines ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}``,
output lines ``{"custom_id", "response": {"status_code", "body"}, "error"}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from audit.backends._cache import CanonicalRequest, ResponseCache
from audit.backends._client import BackendClient, completion_response
from audit.backends._config import BackendsConfig
from audit.backends._errors import BackendConfigError
from audit.backends._local import SMOLLM2
from compressors import ChatRequest, ChatResponse

DEFERRED = "deferred to a batch (audit batch export): no answer yet"
"""The error of a request an ``OfflineClient`` could not answer from the cache."""
CHAT_URL = "/v1/chat/completions"


def batch_model(config: BackendsConfig, name: str) -> str:
    """The served model id a backend's requests name: ``model`` as configured (a local
    backend's default is its embedded model); a server is never asked."""
    backend = config.get(name)
    if backend.model:
        return backend.model
    if backend.kind == "local":
        return backend.model_path.stem if backend.model_path else SMOLLM2.model_id
    raise BackendConfigError(
        "a batch names the served model in every request (it is part of the cache key), "
        "and no server is asked for it: set model = ... for this backend",
        source=config.source,
        field=f"backends.{name}.model",
    )


@dataclass
class OfflineClient:
    """A ``compressors.ChatClient`` that never sends: a request is answered from the cache,
    or recorded for the batch and answered with ``error`` set (``DEFERRED``).

    ``on_request(request, cached)`` is called for every request (the batch planner keeps
    its per-stream counts with it).  Identical requests are recorded once.
    """

    client: BackendClient
    cache: ResponseCache
    refused: dict[str, str] = field(default_factory=dict)
    """Keys a batch refused earlier: answered as refused (not exported again)."""
    deferred: dict[str, CanonicalRequest] = field(default_factory=dict)
    refused_asked: set[str] = field(default_factory=set)
    """Keys of ``refused`` that this replay asked for (a live run would send them)."""
    cached: int = 0
    requests: int = 0
    on_request: Callable[[ChatRequest, bool], None] | None = None

    @classmethod
    def of(
        cls, name: str, config: BackendsConfig, cache: ResponseCache, refused: dict[str, str]
    ) -> OfflineClient:
        backend = config.get(name)
        client = BackendClient(
            name,
            backend,
            base_urls=backend.base_url or ("http://batch.invalid",),
            model=batch_model(config, name),
        )
        return cls(client, cache, refused)

    @property
    def model(self) -> str | None:
        return self.client.model

    def canonical(self, request: ChatRequest) -> CanonicalRequest:
        return self.client.canonical(request)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.requests += 1
        canon = self.client.canonical(request)
        hit = self.cache.get(canon.key)
        if self.on_request is not None:
            self.on_request(request, hit is not None)
        if hit is not None:
            self.cached += 1
            return self.client.cached_answer(hit)
        why = self.refused.get(canon.key)
        if why is not None:
            self.refused_asked.add(canon.key)
            return ChatResponse(content=None, model=self.model, status=400, rejected=why)
        self.deferred.setdefault(canon.key, canon)
        return ChatResponse(content=None, model=self.model, error=DEFERRED)


def batch_line(request: CanonicalRequest) -> str:
    """One line of a batch input file: the body exactly as it would be sent."""
    body = json.loads(request.body)
    line = {"custom_id": request.key, "method": "POST", "url": CHAT_URL, "body": body}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class BatchAnswer:
    """One line of a batch output file."""

    key: str
    response: ChatResponse | None
    """The answer (status 200 with a chat completion), else None."""
    refused: str | None
    """Why the batch did not answer (its status and message), else None."""


def parse_output_line(text: str) -> BatchAnswer:
    """One output line (OpenAI Batch API / ``vllm run-batch``); ``ValueError`` saying what
    is wrong with it."""
    try:
        data: Any = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    key = data.get("custom_id")
    if not isinstance(key, str) or len(key) != 64 or not _is_hex(key):
        raise ValueError(f"custom_id {key!r} is not a cache key (64 hex digits)")
    response, failure = data.get("response"), data.get("error")
    if response is not None and not isinstance(response, dict):
        raise ValueError("response is not an object")
    status = response.get("status_code") if response else None
    if response is not None and not isinstance(status, int):
        raise ValueError("response.status_code is not an integer")
    body = response.get("body") if response else None
    if status == 200 and failure is None:
        answer = completion_response(body)
        if isinstance(answer, str):
            raise ValueError(f"a 200 response whose body is not a chat completion ({answer})")
        return BatchAnswer(key, answer, None)
    message = _error_text(failure if failure is not None else body)
    return BatchAnswer(key, None, f"HTTP {status}: {message}" if status else message)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)[:300]
        return str(error.get("message") or inner)[:300]
    return str(error)[:300] if error is not None else "no answer"
