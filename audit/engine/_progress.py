"""What a run tells its console while it works: one progress line per stage.

A run has two stages, and they count different things: the deterministic stage counts
jobs (one per source pair, every condition, budget and transform of it), the LLM stage
counts LLM units (one pair instance, condition, budget and repeat: written, then read
on every branch) and the requests they send.  The executor reports both through a
``RunProgress``; the console (``audit.cli._console``) draws them.  Request tallies are
read from the backend clients' own counters when drawn, so a stage of slow requests
still shows its requests moving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from audit.rundir import ClientCounters
from compressors import ChatClient

Stage = Literal["deterministic", "llm"]


@dataclass(frozen=True)
class RequestTally:
    """One backend's requests so far in this invocation."""

    role: str
    """``writer``, ``reader``, or ``writer+reader`` (one backend serving both)."""
    requests: int
    """Requests asked so far (answered by the server, the cache, or a duplicate)."""
    sent: int
    """Of these, sent to the server."""
    cache_hits: int
    failed: int
    """Infrastructure failures after retries: NA reads."""


Tallies = Callable[[], list[RequestTally]]


class RunProgress(Protocol):
    """Receives a run's progress (the console draws it; ``None`` draws nothing)."""

    def begin(self, stage: Stage, done: int, total: int, tallies: Tallies | None = None) -> None:
        """A stage starts with ``done`` of ``total`` already finished (a resume)."""

    def advance(self, stage: Stage, done: int) -> None:
        """``done`` of the stage's units are finished."""


def client_counters(client: object) -> ClientCounters | None:
    """A backend client's request counters, when it keeps them (a ``BackendClient``):
    the one reading of them, for the progress display and for costs.json alike."""
    stats = getattr(client, "stats", None)
    as_dict = getattr(stats, "as_dict", None)
    return ClientCounters.model_validate(as_dict()) if callable(as_dict) else None


def request_tallies(writer: ChatClient | None, reader: ChatClient | None) -> Tallies:
    """The clients' counters, read when called (a client without counters is left out)."""

    def tallies() -> list[RequestTally]:
        roles: list[tuple[str, ChatClient]] = []
        if writer is not None and writer is reader:
            roles.append(("writer+reader", writer))
        else:
            roles += [(r, c) for r, c in (("writer", writer), ("reader", reader)) if c is not None]
        found = []
        for role, client in roles:
            counters = client_counters(client)  # re-read: the determinism probe replaces stats
            if counters is None:
                continue
            found.append(
                RequestTally(
                    role=role,
                    requests=counters.requests,
                    sent=counters.sent,
                    cache_hits=counters.cache_hits,
                    failed=counters.failed,
                )
            )
        return found

    return tallies
