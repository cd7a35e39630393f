"""A fault-injecting OpenAI-compatible HTTP proxy, for the fault tests.

A real aiohttp server on 127.0.0.1 (its own thread and event loop, so the code under test
can run ``asyncio.run`` in the main thread) in front of a real upstream server (the
embedded llama.cpp server, or any OpenAI-compatible one).  ``POST .../chat/completions``
requests are answered with a fault at a configurable, seeded rate; everything else, and
every request not chosen for a fault, is forwarded unchanged (method, path, headers
including ``Authorization``, body) and the upstream's status, body and content type come
back unchanged.

Faults, in two classes:

- transport faults (``TRANSPORT_FAULTS``), which a client must retry and which become NA
  only when retries are exhausted: ``http_500``, ``http_502``, ``http_503``, ``http_429``
  (with ``Retry-After``), ``reset`` (the connection is closed without an answer), ``hang``
  (no answer for ``hang_s``, past the client's timeout), ``truncated_body`` (a 200 whose
  JSON body is cut in half: not a chat completion at all);
- model-output faults (``MODEL_FAULTS``), a well-formed 200 whose answer is bad, which a
  client must pass on as the answer (an outcome of the read, never NA):
  ``truncated_content`` (the content JSON cut in half, ``finish_reason`` ``length``),
  ``empty_content`` (content ``""``), ``reasoning_only`` (content ``None``, the answer in
  the ``reasoning`` field).

Decisions are deterministic: attempt ``n`` of a request (identified by ``request_digest``:
its messages and seed) gets ``decide(digest, n)``, from ``seed`` alone, whatever the order
in which concurrent requests arrive.  A test can therefore predict the plan (``plan``) and
choose a seed.  Every attempt is logged (``events``).

Every attempt not faulted before the upstream is forwarded and computed there (nothing
is kept between attempts), so a retried read is really asked again.
``require_api_key`` makes the proxy refuse any other ``Authorization`` with a 401 whose
message echoes the header it got (as a careless proxy does).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

TRANSPORT_FAULTS = (
    "http_500",
    "http_502",
    "http_503",
    "http_429",
    "reset",
    "hang",
    "truncated_body",
)
MODEL_FAULTS = ("truncated_content", "empty_content", "reasoning_only")
ALL_FAULTS = TRANSPORT_FAULTS + MODEL_FAULTS

_HOP_BY_HOP = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "accept-encoding",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    }
)


def request_digest(messages: Sequence[Mapping[str, Any]], seed: Any) -> str:
    """The identity of a chat request for fault decisions: its messages and its seed."""
    text = json.dumps({"messages": list(messages), "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Event:
    """One attempt seen by the proxy."""

    digest: str | None
    attempt: int
    """1 for the first attempt of this request, 2 for the first retry, ..."""
    fault: str | None
    """The injected fault, or None: forwarded unchanged."""
    status: int | None
    """What the client was sent (None: nothing, the connection was reset or hung)."""


@dataclass
class FaultProxy:
    """``with FaultProxy(upstream_base_url, rate=0.3, seed=1) as proxy:`` then ``proxy.base_url``.

    ``upstream``: the upstream API root, e.g. ``http://127.0.0.1:8080/v1``; the proxy
    serves the same paths (``proxy.base_url`` ends in the same path).
    """

    upstream: str
    rate: float = 0.0
    seed: int = 0
    faults: Mapping[str, float] | Sequence[str] = ALL_FAULTS
    """The faults to draw from: names (equal weights) or name -> weight."""
    hang_s: float = 5.0
    retry_after_s: int = 1
    require_api_key: str | None = None
    upstream_timeout_s: float = 900.0
    events: list[Event] = field(default_factory=list)
    authorization_seen: list[str | None] = field(default_factory=list)
    upstream_calls: int = 0
    upstream_chats: int = 0
    """Of ``upstream_calls``, the chat completions (the rest: ``/models``, ``/health``)."""
    base_url: str = ""

    def __post_init__(self) -> None:
        weights = (
            dict(self.faults)
            if isinstance(self.faults, Mapping)
            else dict.fromkeys(self.faults, 1.0)
        )
        unknown = set(weights) - set(ALL_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults: {sorted(unknown)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")
        self._kinds = [k for k in weights if weights[k] > 0]
        self._weights = [weights[k] for k in self._kinds]
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None
        upstream = self.upstream.rstrip("/")
        self._upstream_root, _, path = upstream.partition("//")[2].partition("/")
        self._upstream_origin = upstream.split("//", 1)[0] + "//" + self._upstream_root
        self._prefix = "/" + path if path else ""

    # -- decisions ------------------------------------------------------------------------

    def decide(self, digest: str, attempt: int) -> str | None:
        """The fault for attempt ``attempt`` (1-based) of the request ``digest``, or None."""
        if self.rate <= 0 or not self._kinds:
            return None
        rng = random.Random(hashlib.sha256(f"{self.seed}|{digest}|{attempt}".encode()).digest())
        if rng.random() >= self.rate:
            return None
        return rng.choices(self._kinds, weights=self._weights)[0]

    def plan(self, digest: str, max_attempts: int) -> list[str | None]:
        """What a client with ``max_attempts`` attempts will meet: faults until the first
        attempt that is answered (forwarded or a model fault), or all transport faults."""
        out: list[str | None] = []
        for attempt in range(1, max_attempts + 1):
            fault = self.decide(digest, attempt)
            out.append(fault)
            if fault is None or fault in MODEL_FAULTS:
                break
        return out

    def attempts(self) -> dict[str, list[Event]]:
        """The logged attempts per request digest, in order."""
        with self._lock:
            events = list(self.events)
        by: dict[str, list[Event]] = {}
        for event in events:
            if event.digest is not None:
                by.setdefault(event.digest, []).append(event)
        return by

    # -- life cycle -----------------------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            self._stop = asyncio.Event()
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            try:
                self._session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self.upstream_timeout_s),
                    auto_decompress=False,
                    trust_env=False,
                )
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                self.base_url = f"http://127.0.0.1:{port}{self._prefix}"
            except BaseException as error:  # reported to start()
                failure.append(error)
                ready.set()
                return
            ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()
                await self._session.close()

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(serve(),), daemon=True, name="fault-proxy"
        )
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the fault proxy did not start")
        if failure:
            raise RuntimeError(f"the fault proxy did not start: {failure[0]!r}")
        return self.base_url

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)
        thread.join(30)
        loop.close()
        self._loop = self._thread = None

    def reset(self, *, rate: float | None = None, seed: int | None = None) -> None:
        """Forget the attempt counts and the log ; optionally a new rate/seed."""
        with self._lock:
            self._attempts.clear()
            self.events.clear()
            self.authorization_seen.clear()
            if rate is not None:
                self.rate = rate
            if seed is not None:
                self.seed = seed

    # -- serving --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        authorization = request.headers.get("Authorization")
        with self._lock:
            self.authorization_seen.append(authorization)
        if self.require_api_key is not None and authorization != f"Bearer {self.require_api_key}":
            return web.json_response(
                {"error": {"message": f"invalid credentials: {authorization}", "code": 401}},
                status=401,
            )
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            status, content_type, payload, headers = await self._forward(request, body)
            return web.Response(
                status=status, body=payload, headers={"Content-Type": content_type, **headers}
            )
        try:
            parsed = json.loads(body)
            digest: str | None = request_digest(parsed.get("messages") or [], parsed.get("seed"))
        except (ValueError, AttributeError):
            digest = None
        with self._lock:
            attempt = 1
            if digest is not None:
                self._attempts[digest] += 1
                attempt = self._attempts[digest]
        fault = self.decide(digest, attempt) if digest is not None else None

        def log(status: int | None) -> None:
            with self._lock:
                self.events.append(Event(digest, attempt, fault, status))

        if fault in ("http_500", "http_502", "http_503", "http_429"):
            status = int(fault.removeprefix("http_"))
            headers = {"Retry-After": str(self.retry_after_s)} if status == 429 else {}
            log(status)
            return web.json_response(
                {"error": {"message": f"injected {status}", "type": "fault_proxy"}},
                status=status,
                headers=headers,
            )
        if fault == "reset":
            log(None)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client
        if fault == "hang":
            log(None)
            await asyncio.sleep(self.hang_s)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=504)
        with self._lock:
            self.upstream_chats += 1
        status, content_type, payload, headers = await self._forward(request, body)
        if fault is not None and status == 200:
            payload = _corrupt(fault, payload)
        elif fault is not None:  # the upstream failed by itself: pass that on, unchanged
            fault = None
        log(status)
        return web.Response(
            status=status, body=payload, headers={"Content-Type": content_type, **headers}
        )

    async def _forward(
        self, request: web.Request, body: bytes
    ) -> tuple[int, str, bytes, dict[str, str]]:
        return await self._upstream(request, body)

    async def _upstream(
        self, request: web.Request, body: bytes
    ) -> tuple[int, str, bytes, dict[str, str]]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        with self._lock:
            self.upstream_calls += 1
        try:
            async with self._session.request(
                request.method, self._upstream_origin + request.path_qs, data=body, headers=headers
            ) as response:
                payload = await response.read()
                kept = {k: v for k, v in response.headers.items() if k.lower() in ("retry-after",)}
                return (
                    response.status,
                    response.headers.get("Content-Type", "application/json"),
                    payload,
                    kept,
                )
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            message = {"error": {"message": f"upstream unreachable: {type(error).__name__}"}}
            return 502, "application/json", json.dumps(message).encode(), {}


def _corrupt(fault: str, payload: bytes) -> bytes:
    if fault == "truncated_body":
        return payload[: max(1, len(payload) // 2)]
    try:
        data = json.loads(payload)
        choice = data["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return payload
    content = message.get("content") or ""
    if fault == "truncated_content":
        message["content"] = content[: len(content) // 2]
        choice["finish_reason"] = "length"
    elif fault == "empty_content":
        message["content"] = ""
    elif fault == "reasoning_only":
        message["content"] = None
        message["reasoning"] = content or "(the answer went to the reasoning field)"
    return json.dumps(data).encode()
