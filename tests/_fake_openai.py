"""A transport-level FAKE OpenAI-compatible server, for fault injection only.

The real behaviour of the client is tested against the real embedded llama.cpp server
(tests/audit/backends/test_backends_client.py).  This fake exists on purpose for what a real server will
not do on demand: 429 with Retry-After, 503, 500, 400, connection resets, slow answers,
content None with reasoning only, finish_reason "length", a server that ignores the JSON
schema.  It runs in-process on 127.0.0.1 (aiohttp.web) in the test's event loop.

Each request is scripted by its last message's content (the *scenario*): the scenario's
behaviours are consumed in order, the last one repeating.  ``Rule``s script requests
whose last message is not known in advance (an LLM writer's prompt holds the memory and
the chunk): the first rule whose substrings all occur in the request's messages (and
whose ``thinking`` matches ``chat_template_kwargs.enable_thinking``) answers.

``python -m tests._fake_openai RULES.json PORT_FILE BODY_LOG`` serves the rules of a JSON
file from a process of its own (for end-to-end runs of ``audit run``): it writes its
port to PORT_FILE once it listens, appends every request body to BODY_LOG as a JSON
line, and serves until it is terminated.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    """One scripted behaviour."""

    status: int = 200
    content: str | None = "ok"
    reasoning: str | None = None
    reasoning_field: str = "reasoning"
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    """Raw JSON body to return instead of a chat completion (error replies)."""
    delay_s: float = 0.0
    reset: bool = False
    """Close the connection without answering."""
    echo_authorization: bool = False
    """Put the Authorization header into the error body (a careless proxy)."""
    usage: dict[str, Any] | None = None
    """The ``usage`` object to return (default: small fixed counts)."""


@dataclass
class Rule:
    """Answers requests whose messages contain every one of ``contains``."""

    contains: list[str]
    replies: list[Reply]
    thinking: bool | None = None
    """Only requests with this ``chat_template_kwargs.enable_thinking`` (None: any)."""

    def matches(self, body: dict[str, Any]) -> bool:
        text = "\n".join(str(m.get("content")) for m in body.get("messages", []))
        if not all(part in text for part in self.contains):
            return False
        if self.thinking is None:
            return True
        kwargs = body.get("chat_template_kwargs") or {}
        return kwargs.get("enable_thinking") is self.thinking

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rule:
        return cls(
            contains=list(data["contains"]),
            replies=[Reply(**r) for r in data["replies"]],
            thinking=data.get("thinking"),
        )


class FakeOpenAI:
    """``async with FakeOpenAI() as fake:`` then ``fake.base_url`` is ``http://127.0.0.1:P/v1``."""

    def __init__(self, model: str = "fake-model") -> None:
        self.model = model
        self.scripts: dict[str, list[Reply]] = {}
        self.rules: list[Rule] = []
        self.body_log: Path | None = None
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.served_by_scenario: defaultdict[str, int] = defaultdict(int)
        self.health_status = 200
        self.models_payload: Any = None
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def script(self, scenario: str, *replies: Reply) -> None:
        self.scripts[scenario] = list(replies)

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=self.health_status)

    async def _models(self, request: web.Request) -> web.Response:
        payload = self.models_payload or {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "max_model_len": 4096}],
        }
        return web.json_response(payload)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        if self.body_log is not None:
            with self.body_log.open("a") as log:
                log.write(json.dumps(body) + "\n")
        scenario = body["messages"][-1]["content"]
        self.calls[scenario] += 1
        rule = next((r for r in self.rules if r.matches(body)), None)
        script = (
            rule.replies
            if rule is not None
            else self.scripts.get(scenario) or [Reply(content=f"echo:{scenario}")]
        )
        reply = script.pop(0) if len(script) > 1 else script[0]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.reset:
                assert request.transport is not None
                request.transport.abort()
                return web.Response(status=500)  # never reaches the client
            if reply.status != 200 or reply.body is not None:
                payload = reply.body
                if reply.echo_authorization:
                    payload = {
                        "error": {"message": f"bad auth {request.headers.get('Authorization')}"}
                    }
                return web.Response(
                    status=reply.status,
                    text=json.dumps(
                        payload
                        if payload is not None
                        else {"error": {"message": f"HTTP {reply.status}"}}
                    ),
                    headers={"Content-Type": "application/json", **reply.headers},
                )
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.reasoning is not None:
                message[reply.reasoning_field] = reply.reasoning
            self.served_by_scenario[scenario] += 1
            return web.json_response(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "model": self.model,
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": reply.finish_reason}
                    ],
                    "usage": reply.usage
                    if reply.usage is not None
                    else {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                },
                headers=reply.headers,
            )
        finally:
            self.in_flight -= 1


@contextmanager
def serving_in_thread(model: str) -> Iterator[FakeOpenAI]:
    """The fake server on an event loop of its own thread, for code (like the CLI) that
    runs its own event loop."""
    fake = FakeOpenAI(model=model)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()

    async def serve() -> None:
        async with fake:
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield fake
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


async def _serve_process(rules_file: Path, port_file: Path, body_log: Path) -> None:
    fake = FakeOpenAI()
    fake.rules = [Rule.from_json(r) for r in json.loads(rules_file.read_text())]
    fake.body_log = body_log
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with fake:
        port = fake.base_url.rsplit(":", 1)[1].split("/")[0]
        temp = port_file.with_suffix(".tmp")
        temp.write_text(port)
        temp.replace(port_file)  # the port appears whole
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(_serve_process(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
