"""Is a backend deterministic?  The same requests, sent twice in two different ways.

Greedy decoding does not make a server reproducible: llama.cpp reuses the KV cache of a
previous prompt's shared prefix, vLLM batches concurrent requests, and both change the
floating-point path of an answer.  So the probe sends a fixed set of requests twice: once
one at a time in order, once all at once in a shuffled order, and counts the answers that
came back identical (content, reasoning and finish reason).  The requests share a long
prefix, like the audit's reader prompts, so prefix reuse has something to reuse.

The figure is a property of the server and its configuration as much as of the model, so
``audit run`` measures it for every LLM backend it uses and records it in ``config.json``;
``audit backends check`` prints it.  No response cache is involved: the two passes differ
in ``repeat`` (part of the cache key, never of the request body), so the client sends both.
"""

from __future__ import annotations

import asyncio
import copy
import random
from dataclasses import dataclass

from compressors import ChatClient, ChatMessage, ChatRequest, ChatResponse

PROBE_REQUESTS = 16
"""The probe's size: 16 requests, 32 sent."""

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


async def measure_determinism(
    client: ChatClient, count: int = PROBE_REQUESTS, *, seed: int = 0
) -> DeterminismResult:
    """Send ``count`` probe requests one at a time, then all at once shuffled; compare.

    The client's counters (``stats``, when it has them) are left as they were: the
    probe is not part of the audit's requests or costs.
    """
    stats = getattr(client, "stats", None)
    saved = copy.deepcopy(stats)
    try:
        return await _measure(client, count, seed)
    finally:
        if saved is not None:
            client.stats = saved  # type: ignore[attr-defined]


async def _measure(client: ChatClient, count: int, seed: int) -> DeterminismResult:
    requests = probe_requests(count)
    sequential = [await client.chat(_pass(r, 1)) for r in requests]
    order = list(range(count))
    random.Random(seed).shuffle(order)
    shuffled = await asyncio.gather(*(client.chat(_pass(requests[i], 2)) for i in order))
    concurrent: list[ChatResponse | None] = [None] * count
    for position, index in enumerate(order):
        concurrent[index] = shuffled[position]
    identical = compared = 0
    differing = []
    for index, (first, second) in enumerate(zip(sequential, concurrent, strict=True)):
        a = _answer(first)
        b = _answer(second) if second is not None else None
        if a is None or b is None:
            continue
        compared += 1
        if a == b:
            identical += 1
        else:
            differing.append(index)
    return DeterminismResult(identical, compared, count, tuple(differing))


def _pass(request: ChatRequest, number: int) -> ChatRequest:
    # repeat is part of the cache key, never of the body: the server sees the same request
    return ChatRequest(
        messages=request.messages,
        json_schema=request.json_schema,
        thinking=request.thinking,
        max_tokens=request.max_tokens,
        repeat=1_000_000 + number,
        tag=request.tag,
    )
