"""What a hostile or broken server can do to the client, and what comes back instead.

Every server here is a real HTTP server on 127.0.0.1 (aiohttp.web, in a thread of its own,
``RawServer``), scripted per test to do what a real model server will not do on demand:
answer 200 with a body that is not a chat completion, redirect elsewhere, send an endless
body, stall or trickle after its headers, never answer, ask for a retry after an hour.
The client under test is the real ``BackendClient``; the LLM stage's writer path runs
through ``audit run``.  Each case ends in NA with a named cause, never in a wrong answer,
a traceback or an unbounded wait.
"""

from __future__ import annotations

import asyncio
import csv
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from audit.backends import BackendClient, BackendConfig, BackendStartError, ResponseCache
from audit.cli import app
from audit.engine._llm_stage import WriterLog
from compressors import ChatMessage, ChatRequest, ChatResponse, ChatUnavailableError
from tests._rows import result_csv

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
runner = CliRunner()


class RawServer:
    """An aiohttp.web server on 127.0.0.1 in a thread of its own, with the given routes;
    it counts requests per path and bytes written by streaming handlers."""

    def __init__(self, routes: dict[tuple[str, str], Handler]) -> None:
        self.routes = routes
        self.calls: dict[str, int] = {}
        self.written = 0
        self.base_url = ""
        self.origin = ""
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def count(self, request: web.Request) -> None:
        self.calls[request.path] = self.calls.get(request.path, 0) + 1

    def __enter__(self) -> RawServer:
        ready = threading.Event()

        async def serve() -> None:
            self._stop = asyncio.Event()
            application = web.Application()
            for (method, path), handler in self.routes.items():

                async def counted(request: web.Request, handler: Handler = handler) -> Any:
                    self.count(request)
                    return await handler(request)

                application.router.add_route(method, path, counted)
            runner_ = web.AppRunner(application, access_log=None, shutdown_timeout=0.2)
            await runner_.setup()
            site = web.TCPSite(runner_, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.origin = f"http://127.0.0.1:{port}"
            self.base_url = f"{self.origin}/v1"
            ready.set()
            await self._stop.wait()
            await runner_.cleanup()

        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(serve(),), daemon=True
        )
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        assert self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._loop.close()


def completion(message: Any = None, **extra: Any) -> dict[str, Any]:
    """A chat completion body; ``message`` replaces the message object as given."""
    if message is None:
        message = {"role": "assistant", "content": "fine"}
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **extra,
    }


def answering(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return web.Response(
            status=status,
            body=raw,
            headers={"Content-Type": "application/json", **(headers or {})},
        )

    return handle


def models(model: str = "m") -> Handler:
    return answering({"object": "list", "data": [{"id": model, "max_model_len": 4096}]})


def client_of(url: str, cache: ResponseCache | None = None, **fields: Any) -> BackendClient:
    settings: dict[str, Any] = {
        "base_url": url,
        "backoff_initial_s": 0.01,
        "backoff_max_s": 0.05,
        "max_retries": 1,
        "request_timeout_s": 10.0,
        **fields,
    }
    backend = BackendConfig(**settings)
    return BackendClient("hostile", backend, base_urls=backend.base_url, model="m", cache=cache)


def ask(text: str = "q") -> ChatRequest:
    return ChatRequest(messages=[ChatMessage("user", text)])


def chat_once(client: BackendClient, request: ChatRequest | None = None) -> ChatResponse:
    async def scenario() -> ChatResponse:
        async with client:
            return await client.chat(request or ask())

    return asyncio.run(scenario())


# -- item 4: a 200 that is not a chat completion is NA with its cause ---------------------------


MALFORMED = [
    ({"choices": [{"message": "x"}]}, "choices[0].message is not an object"),
    (completion({"content": "a", "reasoning": 5}), "choices[0].message.reasoning is not a string"),
    (completion({"content": {"text": "a"}}), "choices[0].message.content is not a string"),
    (completion({"content": "a", "reasoning_content": ["x"]}), "choices[0].message.reasoning_content is not a string"),
    ({"choices": []}, "choices is empty"),
    ({"choices": [5]}, "choices[0] is not an object"),
    ({"choices": [{"finish_reason": "stop"}]}, "choices[0].message is missing"),
    ({"choices": [{"message": {}, "finish_reason": 3}]}, "choices[0].finish_reason is not a string"),
    ([1, 2], "the body is not an object"),
    (b"<html>502 from a proxy</html>", "the body is not JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "cause"), MALFORMED)
def test_a_malformed_200_is_na_with_its_cause_and_never_cached(
    tmp_path: Path, body: Any, cause: str
):
    with RawServer({("POST", "/v1/chat/completions"): answering(body)}) as server:
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            answer = chat_once(client_of(server.base_url, cache))
            assert cache.stats().entries == 0
        assert server.calls["/v1/chat/completions"] == 2  # retried once: a proxy may recover
    assert answer.error is not None, answer
    assert f"malformed 200 response: {cause}" in answer.error
    assert answer.content is None
    assert answer.rejected is None


def test_a_well_formed_200_still_reads_leniently_what_is_informational():
    body = completion({"content": "ok", "reasoning": "because"}, usage="junk", model=7)
    with RawServer({("POST", "/v1/chat/completions"): answering(body)}) as server:
        answer = chat_once(client_of(server.base_url))
    assert answer.error is None
    assert (answer.content, answer.reasoning, answer.model, dict(answer.usage)) == (
        "ok",
        "because",
        "m",  # the configured model: a server's non-string model name is ignored
        {},
    )


class Raising:
    """A chat client that fails the way a client bug would: by raising."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        raise TypeError("'int' object is not subscriptable")


def test_the_writer_log_makes_a_raising_client_na_not_a_compressor_error():
    with pytest.raises(ChatUnavailableError, match="chat client failed: TypeError"):
        asyncio.run(WriterLog(Raising()).chat(ask()))


LLM_RUN = ["run", "--preset", "cca-pilot", "--conditions", "frontier", "--transforms",
           "identity", "--workers", "1", "--quiet", "--budget", "600", "--llm-sample", "1",
           "--repeats", "1", "--llm-transforms", "identity", "--llm-conditions", "prose_off"]  # fmt: skip


def writer_rows(tmp_path: Path, url: str, extra: str = "") -> tuple[Any, list[dict[str, str]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "audit.toml"
    config.write_text(
        f'cache_path = "{tmp_path / "responses.sqlite"}"\n'
        f'[backends.w]\nbase_url = "{url}"\nmodel = "m"\nmax_retries = 1\n'
        f"backoff_initial_s = 0.01\nbackoff_max_s = 0.02\n{extra}"
    )
    out = tmp_path / "run"
    result = runner.invoke(
        app, [*LLM_RUN, "--writer", "w", "--config", str(config), "--out", str(out)]
    )
    if result.exit_code not in (0, 3):  # 3: the run is incomplete (reads NA for want of a server)
        return result, []
    with result_csv(out).open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["condition"] == "prose_off"]
    return result, rows


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ({"choices": [{"message": "x"}]}, "message is not an object"),
        (completion({"content": "memo", "reasoning": 5}), "message.reasoning is not a string"),
        (completion({"content": {"records": []}}), "message.content is not a string"),
    ],
)
def test_a_malformed_writer_answer_is_na_like_a_502_never_wrong(
    tmp_path: Path, body: Any, cause: str
):
    with RawServer({("POST", "/v1/chat/completions"): answering(body)}) as server:
        result, rows = writer_rows(tmp_path / "malformed", server.base_url)
    assert result.exit_code == 3, result.output  # incomplete, like an outage: not a result
    assert "NA for want of a server" in result.output
    with RawServer({("POST", "/v1/chat/completions"): answering({}, status=502)}) as server:
        result, gateway = writer_rows(tmp_path / "502", server.base_url)
    assert result.exit_code == 3, result.output
    assert len(rows) == len(gateway) == 6  # the exact reader's reads of the written memory
    for row in rows + gateway:
        assert (row["outcome"], row["correct"]) == ("na", ""), row
    assert all(f"malformed 200 response: choices[0].{cause}" in r["error"] for r in rows), rows
    assert all("HTTP 502" in r["error"] for r in gateway)


def test_a_bad_port_or_a_key_with_a_line_break_stops_the_run_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    result, _ = writer_rows(tmp_path / "port", "http://127.0.0.1:99999/v1")
    assert result.exit_code == 2, result.output
    assert "backends.w.base_url" in result.output
    assert "port out of range 1-65535" in result.output
    assert "Traceback" not in result.output
    key = "sk-line-break-0123456789\r\nX-Injected: 1"
    monkeypatch.setenv("W_KEY", key)
    with RawServer({("POST", "/v1/chat/completions"): answering(completion())}) as server:
        result, _ = writer_rows(tmp_path / "key", server.base_url, 'api_key_env = "W_KEY"\n')
        assert server.calls == {}
    assert result.exit_code == 2, result.output
    assert "backends.w.api_key_env" in result.output
    assert "line break" in result.output
    assert "sk-line-break" not in result.output


# -- item 8: never a request to an origin that is not configured --------------------------------


def redirecting(target: str, status: int = 307) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(status=status, headers={"Location": target})

    return handle


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_refused_and_nothing_goes_there(
    tmp_path: Path, status: int
):
    elsewhere = {
        ("POST", "/v1/chat/completions"): answering(completion({"content": "from elsewhere"})),
        ("GET", "/v1/models"): models("elsewhere-model"),
    }
    with RawServer(elsewhere) as other:
        configured = {
            ("POST", "/v1/chat/completions"): redirecting(
                f"{other.base_url}/chat/completions", status
            ),
            ("GET", "/v1/models"): redirecting(f"{other.base_url}/models", status),
        }
        with RawServer(configured) as server, ResponseCache(tmp_path / "c.sqlite") as cache:
            answer = chat_once(client_of(server.base_url, cache))
            assert cache.stats().entries == 0
            discovering = BackendClient(
                "hostile", BackendConfig(base_url=server.base_url), base_urls=[server.base_url],
                model=None,
            )  # fmt: skip
            with pytest.raises(BackendStartError, match=r"redirect to .* refused"):
                chat_once(discovering)
        assert other.calls == {}  # no prompt, no key, no GET ever reached it
    assert answer.error is not None
    assert f"HTTP {status}: redirect to {other.origin} refused" in answer.error
    assert answer.attempts == 1  # not retried


def test_a_same_origin_redirect_is_refused_too():
    with RawServer({("POST", "/v1/chat/completions"): redirecting("/v2/chat/completions")}) as s:
        answer = chat_once(client_of(s.base_url))
        assert s.calls == {"/v1/chat/completions": 1}
    assert answer.error is not None
    assert f"redirect to {s.origin} refused" in answer.error


# -- item 11: an endless body is abandoned at the cap ----------------------------------------


def test_an_endless_body_is_abandoned_at_max_response_bytes():
    server: RawServer

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"choices": [{"message": {"content": "')
        chunk = b"x" * 65536
        while True:  # until the client goes away
            await response.write(chunk)
            server.written += len(chunk)

    with RawServer({("POST", "/v1/chat/completions"): endless}) as server:
        started = time.monotonic()
        answer = chat_once(client_of(server.base_url, max_response_bytes=1 << 20))
        elapsed = time.monotonic() - started
        time.sleep(0.2)
        written = server.written
    assert answer.error is not None
    assert "response larger than 1048576 bytes" in answer.error
    assert answer.attempts == 1  # the same server would send the same flood
    assert elapsed < 5
    assert written < 16 << 20  # abandoned as it streamed, not read to the end


def test_a_declared_body_over_the_cap_is_refused_before_reading():
    big = completion({"content": "y" * 5000})
    with RawServer({("POST", "/v1/chat/completions"): answering(big)}) as server:
        answer = chat_once(client_of(server.base_url, max_response_bytes=1024))
    assert answer.error is not None
    assert "response larger than 1024 bytes (Content-Length" in answer.error


# -- item 13: stalls, trickles and timeouts are quick and say what happened ---------------------


def stalling(trickle_s: float | None) -> Handler:
    """Headers and a first byte at once; then nothing (``None``) or a byte every
    ``trickle_s`` seconds."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b"{")
        while True:
            await asyncio.sleep(trickle_s if trickle_s is not None else 3600)
            await response.write(b" ")

    return handle


def test_a_body_that_stalls_is_na_after_the_idle_timeout_naming_it():
    with RawServer({("POST", "/v1/chat/completions"): stalling(None)}) as server:
        started = time.monotonic()
        answer = chat_once(client_of(server.base_url, read_idle_timeout_s=0.5))
        elapsed = time.monotonic() - started
    assert answer.error is not None
    assert f"no bytes for 0.5 s from {server.base_url}" in answer.error
    assert "read_idle_timeout_s" in answer.error
    assert answer.attempts == 1
    assert elapsed < 3


def test_a_body_that_trickles_is_na_after_the_body_timeout():
    with RawServer({("POST", "/v1/chat/completions"): stalling(0.1)}) as server:
        started = time.monotonic()
        client = client_of(server.base_url, read_idle_timeout_s=0.5, body_timeout_s=1.0)
        answer = chat_once(client)
        elapsed = time.monotonic() - started
    assert answer.error is not None
    assert "took longer than 1 s after its headers" in answer.error
    assert "body_timeout_s" in answer.error
    assert elapsed < 4


def test_a_timeout_says_which_limit_it_hit():
    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3600)
        raise AssertionError

    with RawServer({("POST", "/v1/chat/completions"): silent}) as server:
        answer = chat_once(client_of(server.base_url, request_timeout_s=0.3, max_retries=0))
    assert answer.error is not None
    assert "no detail" not in answer.error
    assert "timeout: no complete answer within 0.3 s (request_timeout_s)" in answer.error


def test_a_retry_after_beyond_the_budget_gives_up_at_once_and_says_so():
    later = answering({"error": {"message": "busy"}}, status=429, headers={"Retry-After": "3600"})
    with RawServer({("POST", "/v1/chat/completions"): later}) as server:
        started = time.monotonic()
        answer = chat_once(client_of(server.base_url, retry_budget_s=20, max_retries=5))
        elapsed = time.monotonic() - started
        assert server.calls["/v1/chat/completions"] == 1
    assert answer.error is not None
    assert "server asked to retry after 3600 s, beyond the retry budget of 20 s" in answer.error
    assert elapsed < 2


# -- item 16: `audit backends check` against a broken server ----------------------------------


def check(tmp_path: Path, url: str, model: str | None = "m") -> Any:
    config = tmp_path / "audit.toml"
    config.write_text(
        f'[backends.b]\nbase_url = "{url}"\n'
        + (f'model = "{model}"\n' if model else "")
        + "max_retries = 0\nrequest_timeout_s = 5\n"
    )
    return runner.invoke(app, ["backends", "check", "b", "--config", str(config)])


JUNK_MODELS = [
    b"<html>not json</html>",
    b'"a string"',
    b'{"data": "x"}',
    b'{"data": [5, {"id": 3}, {"id": "m", "aliases": 5, "max_model_len": true}]}',
    b'{"data": [{"id": "m", "aliases": [1, {"a": 2}], "meta": {"n_ctx": "big"}}]}',
]


@pytest.mark.parametrize("payload", JUNK_MODELS)
@pytest.mark.parametrize("model", ["m", None])
def test_backends_check_reports_a_malformed_server_without_a_traceback(
    tmp_path: Path, payload: bytes, model: str | None
):
    routes = {
        ("GET", "/health"): answering(b""),
        ("GET", "/v1/models"): answering(payload),
        ("POST", "/v1/chat/completions"): answering({"choices": [{"message": "x"}]}),
    }
    with RawServer(routes) as server:
        result = check(tmp_path, server.base_url, model)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines, result.output
    assert all(line.startswith(("ok   b ", "FAIL b ")) for line in lines), result.output
    assert any(line.startswith("FAIL") for line in lines)
    if model is None and b'"id": "m"' not in payload:
        assert lines == [lines[0]]
        assert lines[0].startswith("FAIL b start: ")
        assert "expected a model list" in lines[0]
    else:
        schema = next(line for line in lines if " json_schema: " in line)
        assert (
            "malformed: expected a chat completion, but choices[0].message is not an object"
            in schema
        )


def test_backends_check_of_an_unreachable_backend_says_so_and_never_ok(tmp_path: Path):
    result = check(tmp_path, "http://127.0.0.1:9/v1")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert not any(line.startswith("ok") for line in lines), result.output
    assert lines[0].startswith("FAIL b start: http://127.0.0.1:9/v1: unreachable")
    assert "unreachable" in lines[1]


def test_backends_check_of_a_bad_port_is_one_clean_line(tmp_path: Path):
    result = check(tmp_path, "http://127.0.0.1:99999/v1")
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "backends.b.base_url" in result.output
    assert "port out of range" in result.output


@contextmanager
def models_server(payload: bytes) -> Iterator[RawServer]:
    with RawServer({("GET", "/v1/models"): answering(payload)}) as server:
        yield server


def opened(client: BackendClient) -> BackendClient:
    async def scenario() -> None:
        async with client:
            pass

    asyncio.run(scenario())
    return client


def test_model_discovery_skips_junk_entries_and_refuses_a_list_without_a_model():
    with models_server(b'{"data": [5, {"id": 3}, {"id": "m", "aliases": 5}]}') as server:
        client = BackendClient(
            "d", BackendConfig(base_url=server.base_url), base_urls=[server.base_url], model=None
        )
        assert opened(client).model == "m"
        assert client.max_model_len is None
    with models_server(b'{"data": [{"id": 5}]}') as server:
        client = BackendClient(
            "d", BackendConfig(base_url=server.base_url), base_urls=[server.base_url], model=None
        )
        with pytest.raises(BackendStartError, match="expected a model list"):
            opened(client)
