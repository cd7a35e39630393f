"""What a run tells its console while it works: one progress line per stage.

The deterministic stage counts jobs, the determinism probe and the LLM stage count
requests (read from the clients' own counters when drawn, so slow requests still show
movement); a step with nothing to count is one status line (``note``) at each end.  The
console (``audit.cli._console``) draws what the executor reports through ``RunProgress``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from audit.rundir import ClientCounters
from compressors import ChatClient

Stage = Literal["deterministic", "probe", "llm"]


@dataclass(frozen=True)
class RequestTally:
    """One backend's requests so far in this invocation."""

    role: str
    """``writer``, ``reader``, or ``writer+reader`` (one backend serving both)."""
    requests: int
    """Requests asked so far (to be answered by the server, the cache, or a duplicate)."""
    sent: int
    """Of these, sent to the server."""
    cache_hits: int
    failed: int
    """Infrastructure failures after retries: NA reads."""
    answered: int = 0
    """Requests answered so far (the rest are queued or in flight)."""


Tallies = Callable[[], list[RequestTally]]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class RequestEstimate:
    """The LLM stage's requests, counted from its plan before it starts, and how long
    they take: at a pace measured before (the determinism probe's), then at the stage's
    own as its requests are answered."""

    units: int
    """Units left to run."""
    by_role: tuple[tuple[str, int], ...]
    """Requests each role will ask: a writer one per update, a reader one per read."""
    probe_s: float | None = None
    """Seconds a probe request took (short requests: the stage's take longer)."""

    @property
    def requests(self) -> int:
        return sum(count for _, count in self.by_role)

    def before(self) -> str:
        """The line printed as the stage starts."""
        roles = ", ".join(f"{role} {count}" for role, count in self.by_role)
        units = f"{self.units} unit{'' if self.units == 1 else 's'}"
        line = f"LLM stage: {units}, about {self.requests} requests ({roles})"
        if self.probe_s is None or not self.requests:
            return line + "; time: measured as they are answered"
        at_probe = _duration(self.requests * self.probe_s)
        return (
            f"{line}; at the probe's pace ({self.probe_s:.1f} s a short request) "
            f"{at_probe}, more for longer prompts"
        )

    def left(self, answered: int, elapsed: float, finished: bool = False) -> str:
        """What is left, at the pace of the requests answered so far (once the stage
        has finished: what it took)."""
        pace = elapsed / answered if answered else None
        if finished:
            took = f", {pace:.1f} s a request" if pace is not None else ""
            return f"{answered} requests answered (about {self.requests} counted before){took}"
        remaining = max(0, self.requests - answered)
        if pace is None:
            return f"about {remaining} of {self.requests} requests left"
        return (
            f"about {remaining} of {self.requests} requests left: about "
            f"{_duration(remaining * pace)} at {pace:.1f} s a request so far"
        )


class RunProgress(Protocol):
    """Receives a run's progress (the console draws it; ``None`` draws nothing)."""

    def begin(
        self,
        stage: Stage,
        done: int,
        total: int,
        tallies: Tallies | None = None,
        estimate: RequestEstimate | None = None,
    ) -> None:
        """A stage starts with ``done`` of ``total`` already finished (a resume)."""

    def advance(self, stage: Stage, done: int) -> None:
        """``done`` of the stage's units are finished."""

    def note(self, text: str) -> None:
        """A status line: a step starts or ends (printed as it comes, never redrawn)."""


def client_counters(client: object) -> ClientCounters | None:
    """A copy of a backend client's request counters, when it keeps them (a
    ``BackendClient``): the one reading of them, for the progress display and costs.json."""
    stats = getattr(client, "stats", None)
    return stats.model_copy(deep=True) if isinstance(stats, ClientCounters) else None


def client_roles(
    writer: ChatClient | None, reader: ChatClient | None
) -> list[tuple[str, ChatClient]]:
    """Each backend client with its role: ``writer+reader`` once when one serves both."""
    if writer is not None and writer is reader:
        return [("writer+reader", writer)]
    return [(r, c) for r, c in (("writer", writer), ("reader", reader)) if c is not None]


def request_tallies(writer: ChatClient | None, reader: ChatClient | None) -> Tallies:
    """The clients' counters, read when called (a client without counters is left out)."""

    def tallies() -> list[RequestTally]:
        found = []
        for role, client in client_roles(writer, reader):
            counters = client_counters(client)  # re-read: the determinism probe replaces stats
            if counters is not None:
                found.append(
                    RequestTally(role, counters.requests, counters.sent, counters.cache_hits,
                                 counters.failed, counters.answered)
                )  # fmt: skip
        return found

    return tallies
