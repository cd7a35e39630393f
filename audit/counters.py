"""The request counters of one LLM backend client, one type for every reader of them.

``audit.backends``' client counts into it as it answers (``BackendClient.stats``);
``audit.rundir`` writes it into ``costs.json`` per invocation and reads it back; the
progress display and the report's cost table read it.  A module of its own, importing
nothing of ``audit``, so that the backends and the run directory share it without
importing each other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClientCounters(BaseModel):
    """One backend client's counters, for the run summary and ``costs.json``."""

    model_config = ConfigDict(extra="allow")

    requests: int = 0
    """``chat()`` calls."""
    answered: int = 0
    """Of these, answered (by the server, the cache or a twin; NA included): with
    ``requests``, what is still queued or in flight."""
    sent: int = 0
    """Distinct requests that went to a server."""
    cache_hits: int = 0
    """Answered from the response cache: not sent."""
    deduplicated: int = 0
    """Answered by an identical request of this run (in flight, or earlier without a
    cache): not sent."""
    attempts: int = 0
    """HTTP attempts, retries included."""
    retries: int = 0
    failed: int = 0
    """Infrastructure failures after retries (NA)."""
    rejected: int = 0
    """Requests the server refused as invalid (a 4xx outcome)."""
    length_cutoffs: int = 0
    """Answers cut off at ``max_tokens`` (finish_reason ``length``)."""
    reasoning_only: int = 0
    """Answers with no content but reasoning text."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_chars: int = 0
    status_counts: dict[int, int] = Field(default_factory=dict)
    """HTTP attempts by status code."""

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
        extra = [
            f"{count} {what}"
            for count, what in (
                (self.retries, "retries"),
                (self.failed, "failed (NA)"),
                (self.rejected, "rejected"),
                (self.length_cutoffs, "cut off at max_tokens"),
                (self.reasoning_only, "answered only in reasoning"),
            )
            if count
        ]
        return line + ("; " + ", ".join(extra) if extra else "")
