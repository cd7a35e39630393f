"""The chat client: ``compressors.ChatClient`` over any OpenAI-compatible server.

One long-lived aiohttp session per base URL (explicit connection limits and timeouts), one
semaphore for concurrency, requests spread over several base URLs by least outstanding
requests.  Every sampling parameter is sent explicitly (vLLM would otherwise apply the
model's generation_config defaults); a JSON schema goes in ``response_format``
(``json_schema``), never in the removed ``guided_*`` fields.

A request is answered, in order, by: an identical request already in flight (sent once,
``deduplicated``), the response cache (``cached``), or the server, with retries for
connection errors, timeouts, 408, 429 and 5xx (jittered exponential back-off, honouring
``Retry-After``, within ``retry_budget_s``).  After the retries an infrastructure failure
is a response with ``error`` set (NA), never a wrong answer; a 400/413/422 is recorded as
``rejected`` (an outcome) and not retried.  Only answers are cached.

Why aiohttp rather than httpx or the openai SDK: measured on the same loopback server,
the client must not be the bottleneck of a fast GPU server (see ``benchmarks/``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from yarl import URL

from audit.backends._cache import CanonicalRequest, ResponseCache, canonical_request
from audit.backends._config import BackendConfig
from audit.backends._errors import BackendStartError
from compressors import ChatRequest, ChatResponse

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Retried (any other 5xx is retried too)."""
REJECTED_STATUS = frozenset({400, 413, 422})
MEMO_LIMIT = 65_536
"""Answers kept in memory by a client without a cache (oldest dropped first)."""
"""The request itself is invalid for this server (e.g. context too long): an outcome."""


@dataclass
class ClientStats:
    """Counters for one client (one backend), for the run summary."""

    requests: int = 0
    """``chat()`` calls."""
    cache_hits: int = 0
    """Answered from the cache: not sent."""
    deduplicated: int = 0
    """Answered by an identical request of this run (in flight, or earlier without a
    cache): not sent."""
    sent: int = 0
    """Distinct requests that went to a server."""
    attempts: int = 0
    """HTTP attempts, retries included."""
    retries: int = 0
    failed: int = 0
    """Infrastructure failures after retries (NA)."""
    rejected: int = 0
    """Requests the server refused as invalid (4xx outcome)."""
    length_cutoffs: int = 0
    """Answers cut off at ``max_tokens`` (finish_reason ``length``)."""
    reasoning_only: int = 0
    """Answers with no content but reasoning text."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_chars: int = 0
    status_counts: dict[int, int] = field(default_factory=dict)

    @property
    def saved(self) -> int:
        """Requests not sent thanks to the cache and in-flight deduplication."""
        return self.cache_hits + self.deduplicated

    def summary(self) -> str:
        """One line for the run summary."""
        line = (
            f"{self.requests} requests: {self.sent} sent, {self.cache_hits} from cache, "
            f"{self.deduplicated} deduplicated ({self.saved} saved)"
        )
        extra = []
        if self.retries:
            extra.append(f"{self.retries} retries")
        if self.failed:
            extra.append(f"{self.failed} failed (NA)")
        if self.rejected:
            extra.append(f"{self.rejected} rejected")
        if self.length_cutoffs:
            extra.append(f"{self.length_cutoffs} cut off at max_tokens")
        if self.reasoning_only:
            extra.append(f"{self.reasoning_only} answered only in reasoning")
        return line + ("; " + ", ".join(extra) if extra else "")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["saved"] = self.saved
        data["status_counts"] = {str(k): v for k, v in self.status_counts.items()}
        return data


class _Endpoint:
    """One base URL: its session and its load."""

    __slots__ = ("base_url", "chat_url", "down_until", "failures", "outstanding", "session")

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self.chat_url = URL(f"{base_url}/chat/completions", encoded=True)
        self.session = session
        self.outstanding = 0
        self.failures = 0
        """Consecutive connection failures: while ``down_until`` is ahead, others are preferred."""
        self.down_until = 0.0


@dataclass(frozen=True)
class _Attempt:
    status: int | None
    payload: bytes = b""
    retry_after: float | None = None
    failure: str | None = None


class BackendClient:
    """A ``compressors.ChatClient`` for one configured backend.

    Create it with ``open_backend`` (which also starts and stops the local server); use
    ``chat()`` from one event loop.
    """

    def __init__(
        self,
        name: str,
        backend: BackendConfig,
        *,
        base_urls: Sequence[str],
        model: str | None,
        api_key: str | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        if not base_urls:
            raise BackendStartError(f"backend {name!r}: no base URL")
        self.name = name
        self.backend = backend
        self.base_urls = tuple(u.rstrip("/") for u in base_urls)
        self.model = model
        self.cache = cache
        self.stats = ClientStats()
        self.max_model_len: int | None = None
        self._api_key = api_key
        self._endpoints: list[_Endpoint] = []
        self._inflight: dict[str, asyncio.Future[ChatResponse]] = {}
        self._memo: dict[str, ChatResponse] = {}
        """Without a cache, this run's answers (bounded): a repeated request is sent once."""
        self._semaphore = asyncio.Semaphore(backend.max_concurrency * len(self.base_urls))
        self._base: dict[str, Any] = self._sampling() if model is not None else {}
        """Every body's fixed fields; known before ``start`` when the model is given (a
        batch export builds bodies without a server)."""
        self._started = False

    def __repr__(self) -> str:  # never the key
        return f"BackendClient({self.name!r}, model={self.model!r}, urls={list(self.base_urls)})"

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the sessions; find the served model when none is configured."""
        if self._started:
            return
        backend = self.backend
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        timeout = aiohttp.ClientTimeout(
            total=backend.request_timeout_s, sock_connect=backend.connect_timeout_s
        )
        for url in self.base_urls:
            connector = aiohttp.TCPConnector(
                limit=backend.max_concurrency,
                limit_per_host=backend.max_concurrency,
                keepalive_timeout=60,
                ttl_dns_cache=300,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                headers=headers,
                timeout=timeout,
                raise_for_status=False,
                auto_decompress=True,
                trust_env=False,
            )
            self._endpoints.append(_Endpoint(url, session))
        self._started = True
        if self.model is None:
            self.model = await self._discover_model()
        self._base = self._sampling()

    async def aclose(self) -> None:
        """Wait for nothing; close the sessions and flush the cache."""
        for endpoint in self._endpoints:
            await endpoint.session.close()
        self._endpoints = []
        self._started = False
        if self.cache is not None:
            self.cache.flush()

    async def __aenter__(self) -> BackendClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get_json(self, base_url: str, path: str) -> tuple[int | None, Any, str]:
        """GET ``base_url + path`` with this backend's headers: (status, JSON or None, text)."""
        session = self._endpoints[0].session if self._endpoints else None
        if session is None:
            raise BackendStartError(f"backend {self.name!r} is not started")
        try:
            async with session.get(
                URL(base_url + path, encoded=True),
                timeout=aiohttp.ClientTimeout(total=min(30.0, self.backend.request_timeout_s)),
            ) as response:
                text = await response.text(errors="replace")
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            return None, None, self._scrub(f"{type(error).__name__}: {error}")
        try:
            return status, json.loads(text), text
        except ValueError:
            return status, None, text

    async def _discover_model(self) -> str:
        url = self.base_urls[0]
        status, data, text = await self.get_json(url, "/models")
        ids = _model_ids(data)
        if len(ids) == 1:
            self.max_model_len = context_length(data["data"][0])
        if status != 200 or not ids:
            raise BackendStartError(
                f"backend {self.name!r}: {url}/models: expected a model list, got "
                f"{status or 'no answer'} {text[:200]!r}; set model = ... in the configuration"
            )
        if len(ids) > 1:
            raise BackendStartError(
                f"backend {self.name!r}: {url} serves {len(ids)} models ({', '.join(ids)}); "
                "set model = ... in the configuration"
            )
        return ids[0]

    # -- the request path ---------------------------------------------------------------------

    def _sampling(self) -> dict[str, Any]:
        b = self.backend
        base: dict[str, Any] = {
            "model": self.model,
            "temperature": b.temperature,
            "top_p": b.top_p,
            "presence_penalty": b.presence_penalty,
            "frequency_penalty": b.frequency_penalty,
            "n": 1,
            "stream": False,
        }
        if b.api_dialect == "vllm":
            base["top_k"] = b.top_k
            base["min_p"] = b.min_p
            base["repetition_penalty"] = b.repetition_penalty
        return base

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (also what the cache key hashes)."""
        b = self.backend
        body = dict(self._base)
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
        body["max_tokens"] = request.max_tokens or b.max_tokens
        body["seed"] = b.seed + request.repeat
        if request.json_schema is not None and b.structured_output != "none":
            mode = b.structured_output
            if mode == "json_schema":
                schema = dict(request.json_schema)
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": _schema_name(schema),
                        "schema": schema,
                        "strict": True,
                    },
                }
            elif mode == "structured_outputs":
                body["structured_outputs"] = {"json": dict(request.json_schema)}
            else:
                body["response_format"] = {"type": "json_object"}
        if b.api_dialect == "vllm":
            kwargs = b.template_kwargs(request.thinking)
            if kwargs:
                body["chat_template_kwargs"] = kwargs
        return body

    def canonical(self, request: ChatRequest) -> CanonicalRequest:
        """The request in canonical form, with its cache key."""
        return canonical_request(self.request_body(request), repeat=request.repeat, tag=request.tag)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request``: in-flight twin, cache, or server (see the module docstring)."""
        if not self._started:
            await self.start()
        stats = self.stats
        stats.requests += 1
        canon = canonical_request(
            self.request_body(request), repeat=request.repeat, tag=request.tag
        )
        key = canon.key
        inflight = self._inflight
        while True:
            pending = inflight.get(key)
            if pending is None:
                break
            try:
                answer = await asyncio.shield(pending)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if pending.cancelled() and task is not None and not task.cancelling():
                    continue  # the request we waited for was abandoned: ask ourselves
                raise
            stats.deduplicated += 1
            return replace(answer, deduplicated=True, attempts=0, latency_s=0.0)
        cache = self.cache
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                stats.cache_hits += 1
                return _from_cache(hit)
        else:
            earlier = self._memo.get(key)
            if earlier is not None:
                stats.deduplicated += 1
                return replace(earlier, deduplicated=True, attempts=0, latency_s=0.0)
        shared: asyncio.Future[ChatResponse] = asyncio.get_running_loop().create_future()
        inflight[key] = shared
        try:
            answer = await self._fetch(canon)
        except BaseException:
            shared.cancel()  # twins waiting on it ask for themselves
            raise
        finally:
            del inflight[key]
        shared.set_result(answer)
        return answer

    async def _fetch(self, canon: CanonicalRequest) -> ChatResponse:
        answer = await self._send(canon)
        answered = answer.error is None and answer.rejected is None
        cache = self.cache
        if cache is not None:
            if answered:
                cache.put(canon, _to_cache(answer))
            else:
                cache.record_miss(canon)
        elif answered:
            memo = self._memo
            if len(memo) >= MEMO_LIMIT:
                del memo[next(iter(memo))]
            memo[canon.key] = answer
        return answer

    async def _send(self, canon: CanonicalRequest) -> ChatResponse:
        stats = self.stats
        stats.sent += 1
        backend = self.backend
        started = time.monotonic()
        deadline = started + backend.retry_budget_s
        attempts = 0
        async with self._semaphore:
            while True:
                endpoint = self._pick()
                attempts += 1
                stats.attempts += 1
                remaining = deadline - time.monotonic()
                attempt = await self._post(
                    endpoint,
                    canon.body,
                    remaining if remaining < backend.request_timeout_s else None,
                )
                status = attempt.status
                if status is not None:
                    stats.status_counts[status] = stats.status_counts.get(status, 0) + 1
                if status == 200:
                    answer = self._parse(attempt.payload, started, attempts)
                    if answer is not None:
                        return answer
                    failure = f"{endpoint.base_url}: malformed 200 response " + repr(
                        attempt.payload[:120]
                    )
                elif status in REJECTED_STATUS:
                    stats.rejected += 1
                    return ChatResponse(
                        content=None,
                        model=self.model,
                        status=status,
                        rejected=_error_message(attempt.payload),
                        attempts=attempts,
                        latency_s=time.monotonic() - started,
                    )
                elif status is not None and status not in RETRYABLE_STATUS and status < 500:
                    # 401/403/404...: retrying cannot help, and it is not the answer's fault
                    return self._failure(
                        f"{endpoint.base_url}: HTTP {status}: {_error_message(attempt.payload)}",
                        status,
                        started,
                        attempts,
                    )
                else:
                    failure = attempt.failure or (
                        f"{endpoint.base_url}: HTTP {status}: {_error_message(attempt.payload)}"
                    )
                if attempts > backend.max_retries:
                    return self._failure(
                        f"{failure} (gave up after {attempts} attempts)",
                        status,
                        started,
                        attempts,
                    )
                delay = self._backoff(attempts, attempt.retry_after)
                if time.monotonic() + delay > deadline:
                    return self._failure(
                        f"{failure} (retry budget of {backend.retry_budget_s:g}s spent "
                        f"after {attempts} attempts)",
                        status,
                        started,
                        attempts,
                    )
                stats.retries += 1
                await asyncio.sleep(delay)

    def _failure(
        self, message: str, status: int | None, started: float, attempts: int
    ) -> ChatResponse:
        self.stats.failed += 1
        return ChatResponse(
            content=None,
            model=self.model,
            error=self._scrub(message),
            status=status,
            attempts=attempts,
            latency_s=time.monotonic() - started,
        )

    def _pick(self) -> _Endpoint:
        endpoints = self._endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        now = time.monotonic()
        healthy = [e for e in endpoints if e.down_until <= now] or endpoints
        return min(healthy, key=lambda e: e.outstanding)

    async def _post(
        self, endpoint: _Endpoint, body: bytes, timeout_s: float | None = None
    ) -> _Attempt:
        """One POST; ``timeout_s`` shortens the attempt to what the retry budget has left."""
        endpoint.outstanding += 1
        options: dict[str, Any] = {}
        if timeout_s is not None:  # (passing timeout=None would mean no timeout at all)
            options["timeout"] = aiohttp.ClientTimeout(
                total=max(timeout_s, 0.001), sock_connect=self.backend.connect_timeout_s
            )
        try:
            async with endpoint.session.post(endpoint.chat_url, data=body, **options) as response:
                payload = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            endpoint.failures += 1
            pause = min(self.backend.backoff_max_s, 2.0 ** (endpoint.failures - 1))
            endpoint.down_until = time.monotonic() + pause
            kind = "timeout" if isinstance(error, TimeoutError) else type(error).__name__
            detail = str(error) or "no detail"
            return _Attempt(None, failure=f"{endpoint.base_url}: {kind}: {detail}")
        finally:
            endpoint.outstanding -= 1
        endpoint.failures = 0
        return _Attempt(status, payload, _retry_after(retry_after))

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        b = self.backend
        if retry_after is not None:
            return retry_after + random.uniform(0, 0.1 * max(retry_after, 0.1))
        ceiling = min(b.backoff_max_s, b.backoff_initial_s * 2 ** (attempts - 1))
        return random.uniform(ceiling / 2, ceiling)

    def _parse(self, payload: bytes, started: float, attempts: int) -> ChatResponse | None:
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        answer = completion_response(data, self.model)
        if answer is None:
            return None
        usage, reasoning = answer.usage, answer.reasoning
        stats = self.stats
        stats.prompt_tokens += usage.get("prompt_tokens", 0)
        stats.completion_tokens += usage.get("completion_tokens", 0)
        if reasoning:
            stats.reasoning_chars += len(reasoning)
            if not answer.content:
                stats.reasoning_only += 1
        if answer.finish_reason == "length":
            stats.length_cutoffs += 1
        return replace(answer, attempts=attempts, latency_s=time.monotonic() - started)

    def _scrub(self, text: str) -> str:
        key = self._api_key
        return text.replace(key, "***") if key else text

    def scrub(self, text: str) -> str:
        """``text`` with the API key replaced by ``***`` (for anything shown or stored)."""
        return self._scrub(text)


def completion_response(data: Any, model: str | None = None) -> ChatResponse | None:
    """A chat completion (the decoded JSON body of a 200) as a ``ChatResponse``; None when
    it is not one.  The answer is ``content``; the reasoning text is ``reasoning`` (older
    servers: ``reasoning_content``)."""
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content")
        reasoning = message.get("reasoning")
        if reasoning is None:
            reasoning = message.get("reasoning_content")
        finish = choice.get("finish_reason")
        served = data.get("model")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return ChatResponse(
        content=content if isinstance(content, str) else None,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        finish_reason=finish if isinstance(finish, str) else None,
        model=str(served or model),
        usage=_usage(data.get("usage")),
        status=200,
    )


def _schema_name(schema: Mapping[str, Any]) -> str:
    title = schema.get("title")
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(title or "answer"))
    return name[:64] or "answer"


def _usage(raw: object) -> dict[str, int]:
    """The integer counts of ``usage``, and ``reasoning_tokens`` from
    ``completion_tokens_details`` when the server reports it (a part of
    ``completion_tokens``, which counts reasoning and answer together)."""
    if not isinstance(raw, Mapping):
        return {}
    usage = {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}
    details = raw.get("completion_tokens_details")
    if isinstance(details, Mapping):
        reasoning = details.get("reasoning_tokens")
        if isinstance(reasoning, int) and not isinstance(reasoning, bool):
            usage["reasoning_tokens"] = reasoning
    return usage


def _model_ids(data: object) -> list[str]:
    if not isinstance(data, Mapping) or not isinstance(data.get("data"), list):
        return []
    return [str(m["id"]) for m in data["data"] if isinstance(m, Mapping) and "id" in m]


def context_length(entry: Mapping[str, Any]) -> int | None:
    """A ``/v1/models`` entry's context length: vLLM ``max_model_len``, llama.cpp ``n_ctx``."""
    value = entry.get("max_model_len")
    if isinstance(value, int):
        return value
    meta = entry.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get("n_ctx"), int):
        return int(meta["n_ctx"])
    return None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(payload: bytes) -> str:
    text = payload[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "(empty body)"
    if isinstance(data, Mapping):
        error = data.get("error", data)
        if isinstance(error, Mapping):
            message = error.get("message") or error.get("detail") or error
            return str(message)[:300]
        if isinstance(error, str):
            return error[:300]
        detail = data.get("detail") or data.get("message")
        if detail:
            return str(detail)[:300]
    return text.strip()[:300]


def to_cache(answer: ChatResponse) -> dict[str, Any]:
    """What the cache keeps of an answer."""
    return _to_cache(answer)


def from_cache(hit: Mapping[str, Any]) -> ChatResponse:
    """A cached answer as a ``ChatResponse`` (``cached`` set)."""
    return _from_cache(hit)


def _to_cache(answer: ChatResponse) -> dict[str, Any]:
    return {
        "content": answer.content,
        "reasoning": answer.reasoning,
        "finish_reason": answer.finish_reason,
        "model": answer.model,
        "usage": dict(answer.usage),
    }


def _from_cache(hit: Mapping[str, Any]) -> ChatResponse:
    return ChatResponse(
        content=hit.get("content"),
        reasoning=hit.get("reasoning"),
        finish_reason=hit.get("finish_reason"),
        model=hit.get("model"),
        usage=hit.get("usage") or {},
        cached=True,
    )
