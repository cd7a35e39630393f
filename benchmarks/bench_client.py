"""The LLM read path against a fast OpenAI-compatible server: is the client the bottleneck?

Run: ``python benchmarks/bench_client.py [--requests 6000] [--rounds 3] [--delays 0,0.05]``.

A minimal HTTP/1.1 server (raw asyncio, keep-alive, a canned chat completion, optionally
delayed) runs in a subprocess on 127.0.0.1; every client below sends the same distinct
~1 KB requests at concurrency 32, and the median of ``--rounds`` interleaved rounds is
printed as requests per second:

- ``raw aiohttp``: a bare asyncio + aiohttp loop (json.dumps, POST, json.loads): the ceiling;
- ``toolkit read path``: ``BackendClient.chat`` end to end: canonical request and key, cache
  lookup (SQLite, WAL), in-flight dedup, POST, parse, answer persisted in the cache;
- ``toolkit, no cache``: the same without the cache;
- ``openai SDK (default)`` and ``openai SDK (aiohttp)``: ``AsyncOpenAI(max_retries=0)`` with
  its default httpx client and with ``DefaultAioHttpClient`` (when ``openai`` is installed);
- ``httpx``: a bare httpx.AsyncClient loop (when installed);
- ``inspect_ai``: an ``inspect eval`` of the same requests, run with the Python given by
  ``--inspect-python`` (a separate venv; skipped when not given).

Then the requests saved: the same requests again (all cache hits, 0 sent) and every request
twice at once (half deduplicated in flight).  The ratios printed are the issue's targets:
toolkit >= 0.5x raw aiohttp, and >= 10x inspect_ai; the ratio to the openai SDK is why the
client is built on aiohttp directly (docs/backends.md, Speed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from audit.backends import BackendClient, BackendConfig, ResponseCache
from compressors import ChatMessage, ChatRequest

CONCURRENCY = 32
MODEL = "bench-model"
ANSWER = json.dumps({"values": {"k1": "v1"}})
RESPONSE_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 12, "total_tokens": 312},
    }
).encode()

# -- the server (runs in its own process) ------------------------------------------------


def serve(delay: float) -> None:
    """A minimal keep-alive HTTP/1.1 server: every POST gets the canned completion."""
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
        + f"Content-Length: {len(RESPONSE_BODY)}\r\n\r\n".encode()
        + RESPONSE_BODY
    )

    class Protocol(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while True:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buffer[:end].lower()
                at = head.find(b"content-length:")
                length = (
                    int(
                        head[
                            at + 15 : head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0 else None
                        ]
                    )
                    if at >= 0
                    else 0
                )
                if len(self.buffer) < end + 4 + length:
                    return
                self.buffer = self.buffer[end + 4 + length :]
                if delay:
                    loop.call_later(delay, self._send)
                else:
                    self.transport.write(response)

        def _send(self) -> None:
            if not self.transport.is_closing():
                self.transport.write(response)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(Protocol, "127.0.0.1", 0, backlog=1024))
    print(server.sockets[0].getsockname()[1], flush=True)
    loop.run_forever()


class Server:
    def __init__(self, delay: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(delay)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url = f"http://127.0.0.1:{int(self.process.stdout.readline())}/v1"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# -- the requests ----------------------------------------------------------------------------

INSTRUCTIONS = textwrap.dedent(
    """\
    You read an agent's memory and answer the query keys. Records: set, copy, choose,
    revoke, replay, tick. The highest live revision wins; revoked and expired records do
    not count; a dependency that is missing makes the answer null. Answer exactly
    {"values": {"<key>": "<string>" | null}} with exactly the required keys.
    """
)


def make_messages(i: int) -> list[dict[str, str]]:
    memory = "\n".join(
        json.dumps({"id": f"r{i}-{j}", "op": "set", "key": f"k{j}", "value": f"v{i}-{j}", "rev": j})
        for j in range(6)
    )
    return [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": f"Memory:\n{memory}\n\nQuery keys: k1, k3 (request {i})"},
    ]


# -- the clients -----------------------------------------------------------------------------

Runner = Callable[[str, list[list[dict[str, str]]]], Awaitable[int]]


async def workers(items: list[Any], handle: Callable[[Any], Awaitable[None]]) -> None:
    queue = iter(items)

    async def worker() -> None:
        for item in queue:
            await handle(item)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def raw_aiohttp(base_url: str, requests: list[list[dict[str, str]]]) -> int:
    url = f"{base_url}/chat/completions"
    ok = 0
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def handle(messages: list[dict[str, str]]) -> None:
            nonlocal ok
            body = json.dumps(
                {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 64}
            ).encode()
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as r:
                data = json.loads(await r.read())
            ok += data["choices"][0]["message"]["content"] == ANSWER

        await workers(requests, handle)
    return ok


def chat_requests(requests: list[list[dict[str, str]]], repeat: int = 0) -> list[Any]:
    return [
        ChatRequest(
            messages=[ChatMessage(m["role"], m["content"]) for m in messages],  # type: ignore[arg-type]
            max_tokens=64,
            repeat=repeat,
            tag="reader@bench",
        )
        for messages in requests
    ]


def toolkit_client(base_url: str, cache: Any) -> Any:
    backend = BackendConfig(base_url=base_url, model=MODEL, max_concurrency=CONCURRENCY)
    return BackendClient("bench", backend, base_urls=backend.base_url, model=MODEL, cache=cache)


async def toolkit(
    base_url: str, requests: list[list[dict[str, str]]], *, cached: bool = True
) -> int:
    prepared = chat_requests(requests)
    ok = 0
    with tempfile.TemporaryDirectory() as tmp:
        cache = ResponseCache(Path(tmp) / "bench.sqlite") if cached else None
        async with toolkit_client(base_url, cache) as client:

            async def handle(request: Any) -> None:
                nonlocal ok
                answer = await client.chat(request)
                ok += answer.content == ANSWER

            await workers(prepared, handle)
            assert client.stats.sent == len(requests), client.stats
        if cache is not None:
            cache.close()  # the answers are persisted before the clock stops
    return ok


async def toolkit_no_cache(base_url: str, requests: list[list[dict[str, str]]]) -> int:
    return await toolkit(base_url, requests, cached=False)


async def openai_default(base_url: str, requests: list[list[dict[str, str]]]) -> int:
    return await _openai(base_url, requests, aiohttp_transport=False)


async def openai_aiohttp(base_url: str, requests: list[list[dict[str, str]]]) -> int:
    return await _openai(base_url, requests, aiohttp_transport=True)


async def _openai(
    base_url: str, requests: list[list[dict[str, str]]], *, aiohttp_transport: bool
) -> int:
    import openai

    kwargs: dict[str, Any] = {"base_url": base_url, "api_key": "none", "max_retries": 0}
    if aiohttp_transport:
        kwargs["http_client"] = openai.DefaultAioHttpClient()
    ok = 0
    async with openai.AsyncOpenAI(**kwargs) as client:

        async def handle(messages: list[dict[str, str]]) -> None:
            nonlocal ok
            answer = await client.chat.completions.create(
                model=MODEL,
                messages=messages,
                temperature=0,
                max_tokens=64,  # type: ignore[arg-type]
            )
            ok += answer.choices[0].message.content == ANSWER

        await workers(requests, handle)
    return ok


async def raw_httpx(base_url: str, requests: list[list[dict[str, str]]]) -> int:
    import httpx

    ok = 0
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:

        async def handle(messages: list[dict[str, str]]) -> None:
            nonlocal ok
            body = json.dumps(
                {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 64}
            ).encode()
            r = await client.post(
                "/chat/completions", content=body, headers={"Content-Type": "application/json"}
            )
            ok += json.loads(r.content)["choices"][0]["message"]["content"] == ANSWER

        await workers(requests, handle)
    return ok


INSPECT_SCRIPT = """
import json, sys, time
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.solver import generate
from inspect_ai.model import GenerateConfig
requests = json.load(open(sys.argv[1]))
samples = [Sample(input=m[1]["content"], target="x") for m in requests]
task = Task(dataset=samples, solver=[generate()], config=GenerateConfig(temperature=0, max_tokens=64))
started = time.perf_counter()
log = eval(task, model="openai-api/bench/bench-model", max_connections=32, display="none",
           log_dir=sys.argv[2], max_retries=0, score=False)[0]
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "samples": len(log.samples or []), "status": log.status}))
"""


def inspect_eval(
    python: str, base_url: str, requests: list[list[dict[str, str]]]
) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "requests.json"
        data.write_text(json.dumps(requests))
        script = Path(tmp) / "run_inspect.py"
        script.write_text(INSPECT_SCRIPT)
        env = {**os.environ, "BENCH_BASE_URL": base_url, "BENCH_API_KEY": "none"}
        done = subprocess.run(
            [python, str(script), str(data), str(Path(tmp) / "logs")],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            return 0.0, (done.stderr.strip().splitlines() or ["failed"])[-1]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        return len(requests) / result["seconds"], f"{result['samples']} samples, {result['status']}"


# -- the measurement -----------------------------------------------------------------------


def measure(
    name: str, runner: Runner, base_url: str, requests: list[list[dict[str, str]]]
) -> tuple[float, float]:
    """Requests per second (wall clock) and the client's CPU microseconds per request."""
    cpu = time.process_time()
    started = time.perf_counter()
    ok = asyncio.run(runner(base_url, requests))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if ok != len(requests):
        raise SystemExit(f"{name}: {ok}/{len(requests)} answers were right")
    return len(requests) / elapsed, cpu / len(requests) * 1e6


async def saved_by_cache_and_dedup(
    base_url: str, requests: list[list[dict[str, str]]]
) -> list[str]:
    lines = []
    prepared = chat_requests(requests)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.sqlite"
        with ResponseCache(path) as cache:
            async with toolkit_client(base_url, cache) as client:
                await workers(prepared, client.chat)
                first = client.stats.sent
        with ResponseCache(path) as cache:  # a resumed run: a new client, the same cache
            async with toolkit_client(base_url, cache) as client:
                started = time.perf_counter()
                await workers(prepared, client.chat)
                elapsed = time.perf_counter() - started
                lines.append(
                    f"  rerun of the same {len(prepared)} requests: {client.stats.summary()} "
                    f"({len(prepared) / elapsed:,.0f} req/s from the cache; first run sent {first})"
                )
        twice = chat_requests(requests, repeat=1) * 2  # colliding memories: identical prompts
        twice.sort(key=lambda r: r.messages[1].content)
        with ResponseCache(path) as cache:
            async with toolkit_client(base_url, cache) as client:
                await workers(twice, client.chat)
                lines.append(f"  every request twice at once: {client.stats.summary()}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    parser.add_argument(
        "--requests", type=int, default=6000, help="Requests per fast client and round."
    )
    parser.add_argument(
        "--slow-requests", type=int, default=1500, help="Requests for the slow clients."
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--delays", default="0,0.05", help="Server delays in seconds (comma list).")
    parser.add_argument(
        "--inspect-python", help="A Python with inspect_ai installed (a separate venv)."
    )
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}; concurrency {CONCURRENCY}; "
        f"~{len(json.dumps(make_messages(0)))} B of messages per request"
    )
    optional: list[tuple[str, Runner, bool]] = []
    for module, name, runner in (
        ("openai", "openai SDK (default)", openai_default),
        ("openai", "openai SDK (aiohttp)", openai_aiohttp),
        ("httpx", "httpx", raw_httpx),
    ):
        try:
            __import__(module)
            optional.append((name, runner, True))
        except ImportError:
            print(f"({name}: {module} not installed, skipped)")
    clients: list[tuple[str, Runner, bool]] = [
        ("raw aiohttp", raw_aiohttp, False),
        ("toolkit read path", toolkit, False),
        ("toolkit, no cache", toolkit_no_cache, False),
        *optional,
    ]
    for delay in (float(d) for d in args.delays.split(",")):
        server = Server(delay)
        try:
            print(f"\nserver delay {delay * 1000:.0f} ms ({server.base_url}):")
            rates: dict[str, list[float]] = {name: [] for name, _, _ in clients}
            cpus: dict[str, list[float]] = {name: [] for name, _, _ in clients}
            for round_ in range(args.rounds):
                for index, (name, runner, slow) in enumerate(clients):
                    count = args.slow_requests if slow else args.requests
                    offset = (round_ * 100 + index) * 100_000  # every request distinct
                    requests = [make_messages(offset + i) for i in range(count)]
                    rate, cpu = measure(name, runner, server.base_url, requests)
                    rates[name].append(rate)
                    cpus[name].append(cpu)
            medians = {name: statistics.median(values) for name, values in rates.items()}
            print(f"  {'req/s':<22} {'median':>8}  {'best':>8}  client CPU per request (median)")
            for name, rate in medians.items():
                print(
                    f"  {name:<22} {rate:>8,.0f}  {max(rates[name]):>8,.0f}  "
                    f"{statistics.median(cpus[name]):>8,.0f} us"
                )
            if args.inspect_python:
                requests = [make_messages(9_000_000 + i) for i in range(args.slow_requests)]
                rate, note = inspect_eval(args.inspect_python, server.base_url, requests)
                medians["inspect_ai"] = rate
                print(f"  {'inspect_ai':<22} {rate:>8,.0f} req/s   ({note})")
            base = medians["raw aiohttp"]
            toolkit_rate = medians["toolkit read path"]
            print(
                f"  toolkit / raw aiohttp = {toolkit_rate / base:.2f}x median, "
                f"{max(rates['toolkit read path']) / max(rates['raw aiohttp']):.2f}x best, "
                f"{statistics.median(cpus['raw aiohttp']) / statistics.median(cpus['toolkit read path']):.2f}x "
                "by client CPU (target >= 0.5x)"
            )
            for name in ("openai SDK (default)", "openai SDK (aiohttp)", "httpx", "inspect_ai"):
                if medians.get(name):
                    print(f"  toolkit / {name} = {toolkit_rate / medians[name]:.1f}x")
            for line in asyncio.run(
                saved_by_cache_and_dedup(server.base_url, [make_messages(i) for i in range(2000)])
            ):
                print(line)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
