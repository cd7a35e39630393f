"""Is a backend deterministic?  The same requests, sent twice in two different ways.

Greedy decoding does not make a server reproducible (llama.cpp reuses a previous prompt's
KV cache, vLLM batches concurrent requests), so fixed requests sharing a long prefix are
sent one at a time in order and all at once shuffled, the client's cache set aside, and
identical answers counted (docs/backends.md, "Reproducible reads").
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass

from compressors import ChatClient, ChatMessage, ChatRequest, ChatResponse

PROBE_REQUESTS = 16
"""The probe's size for a server that may batch: 16 requests, 32 sent."""
SERIAL_PROBE_REQUESTS = 4
"""The probe's size for a client that sends one request at a time: 4 requests, 8 sent."""

PROBE_MAX_TOKENS = 48

_PREFIX = (
    "You read a memory of key-value records and answer what each key holds now. "
    "A record sets a key to a value at a revision; a later revision replaces an earlier "
    "one; a revoked record no longer counts. Answer with one line per key, key=value, "
    "in the order asked, and nothing else."
)
_KEYS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "garnet", "harbor")
_VALUES = ("red-101", "blue-202", "green-303", "gold-404", "grey-505", "teal-606")


@dataclass(frozen=True)
class DeterminismResult:
    """How many of the probe's answers came back identical in both passes."""

    identical: int
    compared: int
    """Requests answered in both passes (a failed request is not compared)."""
    requests: int
    differing: tuple[int, ...] = ()
    """Indices of the requests whose two answers differ."""

    @property
    def share(self) -> float | None:
        return self.identical / self.compared if self.compared else None

    def summary(self) -> str:
        if not self.compared:
            return f"not measured: none of the {self.requests} probe requests was answered twice"
        failed = self.requests - self.compared
        text = (
            f"{self.identical}/{self.compared} answers identical when the same requests were "
            f"sent one at a time and all at once in shuffled order"
        )
        return text + (f" ({failed} failed, not compared)" if failed else "")

    def as_dict(self) -> dict[str, int | float | None]:
        return {
            "identical": self.identical,
            "compared": self.compared,
            "requests": self.requests,
            "share": self.share,
        }


def probe_requests(count: int = PROBE_REQUESTS, *, tag: str = "determinism") -> list[ChatRequest]:
    """``count`` fixed requests with a shared prefix (the same on every machine)."""
    requests = []
    for index in range(count):
        lines = [  # every request its own memory: no two are the same request
            f"{_KEYS[(index + step) % len(_KEYS)]} = "
            f"{_VALUES[(index * 3 + step) % len(_VALUES)]} @ rev {index + step + 1}"
            for step in range(4 + index % 4)
        ]
        asked = ", ".join(sorted({_KEYS[(index + step) % len(_KEYS)] for step in range(2)}))
        prompt = "Memory:\n" + "\n".join(lines) + f"\n\nWhat do these keys hold now: {asked}?"
        requests.append(
            ChatRequest(
                messages=[ChatMessage("system", _PREFIX), ChatMessage("user", prompt)],
                thinking=False,
                max_tokens=PROBE_MAX_TOKENS,
                tag=tag,
            )
        )
    return requests


def _answer(response: ChatResponse) -> tuple[str | None, str | None, str | None] | None:
    if response.error is not None or response.rejected is not None:
        return None
    return (response.content, response.reasoning, response.finish_reason)


def probe_size(client: ChatClient) -> int:
    """How many requests the probe sends twice to ``client``'s server: 4 when the client
    sends one request at a time to one URL (a one-slot server cannot batch), else 16."""
    backend = getattr(client, "backend", None)
    urls = getattr(client, "base_urls", ())
    serial = getattr(backend, "max_concurrency", None) == 1 and len(urls) == 1
    return SERIAL_PROBE_REQUESTS if serial else PROBE_REQUESTS


async def measure_determinism(
    client: ChatClient,
    count: int | None = None,
    *,
    seed: int = 0,
    answered: Callable[[], object] | None = None,
) -> DeterminismResult:
    """Send ``count`` probe requests (default ``probe_size``) one at a time, then all at
    once shuffled; compare.  ``answered()`` hears each of the ``2 * count`` answers
    arrive, for a progress display.

    The client's counters (``stats``, when it has them) are left as they were: the
    probe is not part of the audit's requests or costs; and its response cache
    (``cache``, when it has one) is set aside: every probe request goes to the server.
    """
    stats = getattr(client, "stats", None)
    saved = copy.deepcopy(stats)
    cache = getattr(client, "cache", None)
    if cache is not None:
        client.cache = None  # type: ignore[attr-defined]
    try:
        return await _measure(client, probe_size(client) if count is None else count, seed,
                              answered)  # fmt: skip
    finally:
        if saved is not None:
            client.stats = saved  # type: ignore[attr-defined]
        if cache is not None:
            client.cache = cache  # type: ignore[attr-defined]


async def _measure(
    client: ChatClient, count: int, seed: int, answered: Callable[[], object] | None
) -> DeterminismResult:
    requests = probe_requests(count)

    async def ask(request: ChatRequest) -> ChatResponse:
        response = await client.chat(request)
        if answered is not None:
            answered()
        return response

    sequential = [await ask(_pass(r, 1)) for r in requests]
    order = list(range(count))
    random.Random(seed).shuffle(order)
    shuffled = await asyncio.gather(*(ask(_pass(requests[i], 2)) for i in order))
    concurrent = dict(zip(order, shuffled, strict=True))
    pairs = [(_answer(first), _answer(concurrent[i])) for i, first in enumerate(sequential)]
    compared = [(i, a == b) for i, (a, b) in enumerate(pairs) if a is not None and b is not None]
    differing = tuple(i for i, same in compared if not same)
    return DeterminismResult(len(compared) - len(differing), len(compared), count, differing)


def _pass(request: ChatRequest, number: int) -> ChatRequest:
    # repeat is part of the cache key, never of the body: the server sees the same request
    return dataclasses.replace(request, repeat=1_000_000 + number)
