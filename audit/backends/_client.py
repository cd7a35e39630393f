"""The chat client: ``compressors.ChatClient`` over any OpenAI-compatible server.

A request is answered by an identical one in flight, the response cache, or the server
(retried within ``retry_budget_s``); an infrastructure failure after the retries is a
response with ``error`` set (NA), never a wrong answer, and a 400/413/422 is ``rejected``
(an outcome).  Only configured base URLs are contacted, bodies are read under size and
time limits, and the API key is scrubbed from all the client returns (docs/backends.md,
docs/security.md).  aiohttp, not httpx or the openai SDK: the client must not be the
bottleneck of a fast GPU server (``benchmarks/bench_client.py``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
from yarl import URL

from audit.backends._cache import CanonicalRequest, ResponseCache, canonical_request
from audit.backends._config import BackendConfig
from audit.backends._errors import BackendStartError
from audit.backends._secrets import Scrubber, has_control_characters, scrub_answer
from audit.backends._wire import (
    chat_body,
    completion_answer,
    context_length,
    error_message,
    model_entries,
    parse_completion,
)
from audit.counters import ClientCounters
from compressors import ChatRequest, ChatResponse

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Retried (any other 5xx is retried too)."""
REJECTED_STATUS = frozenset({400, 413, 422})
"""The request itself is invalid for this server (e.g. context too long): an outcome."""
MEMO_LIMIT = 65_536
"""Answers kept in memory by a client without a cache (oldest dropped first)."""
GET_TIMEOUT_S = 30.0
"""``GET /health`` and ``/models`` (preflight, model discovery): small, quick answers."""


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
    final: bool = False
    """A failure that retrying cannot mend (a body too large, a stalled body, a request
    that cannot be built): NA at once."""
    location: str | None = None
    """A redirect's ``Location`` (never followed)."""


class BackendClient:
    """A ``compressors.ChatClient`` for one configured backend.

    Create it with ``open_backend`` (which also starts and stops the local server); use
    ``chat()`` from one event loop.  ``stats`` counts its requests.
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
        identity: str = "",
    ) -> None:
        if not base_urls:
            raise BackendStartError(f"backend {name!r}: no base URL")
        if api_key is not None and has_control_characters(api_key):
            raise BackendStartError(
                f"backend {name!r}: the API key holds a line break or another control "
                "character (not an HTTP header value)"
            )
        self.name = name
        self.backend = backend
        self.base_urls = tuple(u.rstrip("/") for u in base_urls)
        self.model = model
        self.cache = cache
        self.stats = ClientCounters()
        self.max_model_len: int | None = None
        self.identity = identity
        """What the served model is beyond its name (the local GGUF's content hash): part of
        every cache key, so two files served under one name never share answers."""
        self._api_key = api_key
        self._scrubber = Scrubber(api_key)
        self._endpoints: list[_Endpoint] = []
        self._inflight: dict[str, asyncio.Future[ChatResponse]] = {}
        self._memo: dict[str, ChatResponse] = {}
        """Without a cache, this run's answers (bounded): a repeated request is sent once."""
        self._semaphore = asyncio.Semaphore(backend.max_concurrency * len(self.base_urls))

    def __repr__(self) -> str:  # never the key
        return f"BackendClient({self.name!r}, model={self.model!r}, urls={list(self.base_urls)})"

    def scrub(self, text: str) -> str:
        """``text`` with the API key, and every 8+ character piece of it, replaced by
        ``***`` (for anything shown or stored)."""
        return self._scrubber(text)

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the sessions; find the served model when none is configured."""
        if self._endpoints:
            return
        backend = self.backend
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        timeout = aiohttp.ClientTimeout(
            total=backend.request_timeout_s, sock_connect=backend.connect_timeout_s
        )
        for url in self.base_urls:
            limit = backend.max_concurrency
            connector = aiohttp.TCPConnector(
                limit=limit, limit_per_host=limit, keepalive_timeout=60, ttl_dns_cache=300
            )
            session = aiohttp.ClientSession(
                connector=connector, headers=headers, timeout=timeout, trust_env=False
            )
            self._endpoints.append(_Endpoint(url, session))
        if self.model is None:
            self.model = await self._discover_model()

    async def aclose(self) -> None:
        """Close the sessions and flush the cache."""
        for endpoint in self._endpoints:
            await endpoint.session.close()
        self._endpoints = []
        if self.cache is not None:
            self.cache.flush()

    async def __aenter__(self) -> BackendClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get_json(self, base_url: str, path: str) -> tuple[int | None, Any, str]:
        """GET ``base_url + path`` with this backend's headers: (status, JSON or None, text).

        Status None: no usable answer (unreachable, timed out, too large), the text says
        why.  A redirect is refused (its text names the origin).  Everything returned is
        scrubbed of the API key."""
        if not self._endpoints:
            raise BackendStartError(f"backend {self.name!r} is not started")
        attempt = await self._request(
            self._endpoints[0].session, "GET", base_url, URL(base_url + path, encoded=True),
            None, min(GET_TIMEOUT_S, self.backend.request_timeout_s),
            "the limit of a preflight request",
        )  # fmt: skip
        status = attempt.status
        if attempt.failure is not None:
            return None, None, self.scrub(attempt.failure)
        if status is not None and 300 <= status < 400:
            return status, None, self.scrub(_redirect_refused(base_url, attempt.location))
        text = self.scrub(attempt.payload.decode("utf-8", "replace"))
        try:
            return status, self._scrubber.deep(json.loads(attempt.payload)), text
        except (ValueError, RecursionError):
            return status, None, text

    async def _discover_model(self) -> str:
        url = self.base_urls[0]
        status, data, text = await self.get_json(url, "/models")
        entries = model_entries(data)
        if status != 200 or not entries:
            got = f"HTTP {status}: {text[:200]!r}" if status is not None else text
            raise BackendStartError(
                f"backend {self.name!r}: {url}/models: expected a model list, got {got}; "
                "set model = ... in the configuration"
            )
        served = {model: entry for model, entry in entries.items() if entry.get("id") == model}
        if len(served) > 1:
            raise BackendStartError(
                f"backend {self.name!r}: {url} serves {len(served)} models "
                f"({', '.join(served)}); set model = ... in the configuration"
            )
        ((model, entry),) = served.items()
        self.max_model_len = context_length(entry)
        return model

    # -- the request path ---------------------------------------------------------------------

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The exact JSON body sent for ``request`` (also what the cache key hashes)."""
        return chat_body(self.backend, self.model, request)

    def canonical(self, request: ChatRequest) -> CanonicalRequest:
        """The request in canonical form, with its cache key."""
        return canonical_request(
            self.request_body(request), repeat=request.repeat, tag=request.tag,
            identity=self.identity,
        )  # fmt: skip

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request``: in-flight twin, cache, or server (see the module docstring)."""
        answer = await self._answer(request)
        self.stats.answered += 1
        return answer

    async def _answer(self, request: ChatRequest) -> ChatResponse:
        if not self._endpoints:
            await self.start()
        stats = self.stats
        stats.requests += 1
        canon = self.canonical(request)
        key = canon.key
        inflight = self._inflight
        while (pending := inflight.get(key)) is not None:
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
                # scrubbed again: an entry may predate scrubbing
                return scrub_answer(hit, self._scrubber) if self._scrubber else hit
        elif (earlier := self._memo.get(key)) is not None:
            stats.deduplicated += 1
            return replace(earlier, deduplicated=True, attempts=0, latency_s=0.0)
        shared: asyncio.Future[ChatResponse] = asyncio.get_running_loop().create_future()
        inflight[key] = shared
        try:
            answer = await self._send(canon)
            self._keep(canon, answer)
        except BaseException:
            shared.cancel()  # twins waiting on it ask for themselves
            raise
        finally:
            del inflight[key]
        shared.set_result(answer)
        return answer

    def _keep(self, canon: CanonicalRequest, answer: ChatResponse) -> None:
        """An answer into the cache (or, without one, the bounded memo); a failed or
        rejected request only into the cache's miss log."""
        answered = answer.error is None and answer.rejected is None
        if self.cache is not None:
            if answered:
                self.cache.put(canon, answer)
            else:
                self.cache.record_miss(canon)
        elif answered:
            memo = self._memo
            if len(memo) >= MEMO_LIMIT:
                del memo[next(iter(memo))]
            memo[canon.key] = answer

    async def _send(self, canon: CanonicalRequest) -> ChatResponse:
        backend, stats = self.backend, self.stats
        async with self._semaphore:
            # counted and timed from the moment a slot is free: a request waiting behind
            # others (one slot of a reproducible server) has not been sent yet, and its
            # retry budget is not spent by the wait
            stats.sent += 1
            started = time.monotonic()
            deadline = started + backend.retry_budget_s
            attempts = 0
            while True:
                endpoint = self._pick()
                attempts += 1
                stats.attempts += 1
                left = deadline - time.monotonic()
                cut = left if left < backend.request_timeout_s else None
                attempt = await self._post(endpoint, canon.body, cut)
                status = attempt.status
                if status is not None:
                    stats.status_counts[status] = stats.status_counts.get(status, 0) + 1
                verdict = self._verdict(endpoint.base_url, attempt, started, attempts)
                if isinstance(verdict, ChatResponse):
                    return verdict
                failure, retryable = verdict
                if retryable and attempts > backend.max_retries:
                    failure += f" (gave up after {attempts} attempts)"
                elif retryable:
                    left = deadline - time.monotonic()
                    wait = attempt.retry_after
                    if wait is not None and wait > left:
                        failure += (
                            f" (the server asked to retry after {wait:g} s, beyond the retry "
                            f"budget of {backend.retry_budget_s:g} s: {max(left, 0):.1f} s "
                            f"left after {attempts} attempts)"
                        )
                    elif (delay := self._backoff(attempts, wait)) > left:
                        failure += (
                            f" (retry budget of {backend.retry_budget_s:g} s spent after "
                            f"{attempts} attempts)"
                        )
                    else:
                        stats.retries += 1
                        await asyncio.sleep(delay)
                        continue
                stats.failed += 1
                return ChatResponse(
                    content=None, model=self.model, error=self.scrub(failure), status=status,
                    attempts=attempts, latency_s=time.monotonic() - started,
                )  # fmt: skip

    def _verdict(
        self, url: str, attempt: _Attempt, started: float, attempts: int
    ) -> ChatResponse | tuple[str, bool]:
        """What one attempt gave: the answer (or the server's rejection), else why it
        failed and whether another attempt may mend it."""
        status = attempt.status
        if attempt.failure is not None:
            return attempt.failure, not attempt.final
        if status == 200:
            answer = self._parse(attempt.payload)
            if isinstance(answer, str):
                return f"{url}: malformed 200 response: {answer}", True
            return replace(answer, attempts=attempts, latency_s=time.monotonic() - started)
        if status is not None and 300 <= status < 400:
            # never to an origin that is not configured (nor, simply, to any other URL)
            return f"{url}: HTTP {status}: " + _redirect_refused(url, attempt.location), False
        message = error_message(attempt.payload)
        if status in REJECTED_STATUS:
            self.stats.rejected += 1
            return ChatResponse(
                content=None, model=self.model, status=status, rejected=self.scrub(message),
                attempts=attempts, latency_s=time.monotonic() - started,
            )  # fmt: skip
        # 401/403/404...: retrying cannot help, and it is not the answer's fault
        retryable = status is None or status in RETRYABLE_STATUS or status >= 500
        return f"{url}: HTTP {status}: {message}", retryable

    def _parse(self, payload: bytes) -> ChatResponse | str:
        """The answer of a 200, scrubbed and counted; or why the body is not a chat
        completion."""
        completion = parse_completion(payload)
        if isinstance(completion, str):
            return completion
        answer = completion_answer(completion, self.model)
        if self._scrubber:
            answer = scrub_answer(answer, self._scrubber)
        stats, reasoning = self.stats, answer.reasoning
        stats.prompt_tokens += answer.usage.get("prompt_tokens", 0)
        stats.completion_tokens += answer.usage.get("completion_tokens", 0)
        if reasoning:
            stats.reasoning_chars += len(reasoning)
            if not answer.content:
                stats.reasoning_only += 1
        if answer.finish_reason == "length":
            stats.length_cutoffs += 1
        return answer

    def _pick(self) -> _Endpoint:
        endpoints = self._endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        now = time.monotonic()
        healthy = [e for e in endpoints if e.down_until <= now] or endpoints
        return min(healthy, key=lambda e: e.outstanding)

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after + random.uniform(0, 0.1 * max(retry_after, 0.1))
        b = self.backend
        ceiling = min(b.backoff_max_s, b.backoff_initial_s * 2 ** (attempts - 1))
        return random.uniform(ceiling / 2, ceiling)

    # -- one HTTP exchange --------------------------------------------------------------------

    async def _post(
        self, endpoint: _Endpoint, body: bytes, timeout_s: float | None = None
    ) -> _Attempt:
        """One POST; ``timeout_s`` shortens the attempt to what the retry budget has left."""
        endpoint.outstanding += 1
        try:
            attempt = await self._request(
                endpoint.session, "POST", endpoint.base_url, endpoint.chat_url, body, timeout_s
            )
        finally:
            endpoint.outstanding -= 1
        if attempt.status is None and not attempt.final:  # the connection failed
            endpoint.failures += 1
            pause = min(self.backend.backoff_max_s, 2.0 ** (endpoint.failures - 1))
            endpoint.down_until = time.monotonic() + pause
        else:
            endpoint.failures = 0
        return attempt

    async def _request(
        self,
        session: aiohttp.ClientSession,
        method: str,
        base_url: str,
        url: URL,
        body: bytes | None,
        timeout_s: float | None,
        which: str = "what the retry budget had left",
    ) -> _Attempt:
        """One HTTP exchange, never raising for the network's sake: redirects are not
        followed, the body is read under the size cap and the body timeouts, and every
        failure is a specific sentence (what, from where, which setting)."""
        backend = self.backend
        options: dict[str, Any] = {}
        if timeout_s is not None:  # (passing timeout=None would mean no timeout at all)
            options["timeout"] = aiohttp.ClientTimeout(
                total=max(timeout_s, 0.001), sock_connect=backend.connect_timeout_s
            )
        else:
            timeout_s, which = backend.request_timeout_s, "request_timeout_s"
        try:
            async with session.request(
                method, url, data=body, allow_redirects=False, **options
            ) as response:
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"))
                location = response.headers.get("Location")
                payload = await self._read_body(response, base_url)
        except aiohttp.ConnectionTimeoutError:
            return _Attempt(
                None,
                failure=f"{base_url}: timeout: could not connect within "
                f"{backend.connect_timeout_s:g} s (connect_timeout_s)",
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            if isinstance(error, TimeoutError):
                detail = f"timeout: no complete answer within {timeout_s:.3g} s ({which})"
            else:
                text = str(error)
                detail = f"{type(error).__name__}: {text}" if text else type(error).__name__
            return _Attempt(None, failure=f"{base_url}: {detail}")
        except ValueError as error:  # the request cannot be built (a URL, a header)
            return _Attempt(
                None,
                failure=f"{base_url}: cannot send the request ({type(error).__name__}: {error})",
                final=True,
            )
        if isinstance(payload, str):
            return _Attempt(status, failure=payload, final=True)
        return _Attempt(status, payload, retry_after, location=location)

    async def _read_body(self, response: aiohttp.ClientResponse, base_url: str) -> bytes | str:
        """The body, or why it was abandoned: larger than ``max_response_bytes`` (it is
        never held whole), a pause over ``read_idle_timeout_s``, or longer in coming than
        ``body_timeout_s``.  A server that answers without streaming has the whole answer
        when it sends the headers, so neither limit can cut a slow generation short."""
        backend = self.backend
        cap = backend.max_response_bytes
        declared = response.content_length
        if declared is not None and declared > cap:
            return (
                f"{base_url}: response larger than {cap} bytes (Content-Length {declared}; "
                "max_response_bytes)"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + backend.body_timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            wait = min(backend.read_idle_timeout_s, deadline - loop.time())
            scope = asyncio.timeout(max(wait, 0.0))
            try:
                async with scope:
                    chunk = await response.content.readany()
            except TimeoutError:
                if not scope.expired():
                    raise  # the attempt's own limit (request_timeout_s), not ours
                if wait < backend.read_idle_timeout_s:
                    return (
                        f"{base_url}: the response body took longer than "
                        f"{backend.body_timeout_s:g} s after its headers, {size} bytes in "
                        "(body_timeout_s): the server trickles it"
                    )
                return (
                    f"{base_url}: no bytes for {backend.read_idle_timeout_s:g} s from "
                    f"{base_url} after {size} bytes of the response body "
                    "(read_idle_timeout_s): the server stalled"
                )
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > cap:
                return f"{base_url}: response larger than {cap} bytes (max_response_bytes)"
            chunks.append(chunk)


def _redirect_refused(base_url: str, location: str | None) -> str:
    """Why a redirect was not followed, naming where it pointed (its origin only)."""
    if not location:
        return "a redirect without a Location, refused"
    try:
        target = URL(base_url).join(URL(location))
        port = f":{target.explicit_port}" if target.explicit_port is not None else ""
        origin = f"{target.scheme}://{target.host}{port}"
    except ValueError:
        origin = "a malformed Location"
    return (
        f"redirect to {origin} refused: requests go only to the configured base URL "
        "(redirects are never followed)"
    )


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
