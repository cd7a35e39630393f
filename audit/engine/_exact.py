"""The exact reader: parse the memory as records and apply E_q.

It is ground truth for what a memory *retained*: if E_q on the memory gives the
gold answer, the memory is adequate, whatever any LLM reader later makes of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from compressors import load
from histories import Answer, LogIndex, RenderParseError

ExactOutcome = Literal["pass", "wrong_log", "unparsed"]


@dataclass(frozen=True)
class ExactRead:
    outcome: ExactOutcome
    answer: Answer | None
    """E_q's answer on the memory; None when the memory is not a record log."""

    @property
    def adequate(self) -> bool:
        return self.outcome == "pass"


def read_exact(memory: str, query: Sequence[str], gold: Mapping[str, str | None]) -> ExactRead:
    """``pass`` when E_q(memory) equals gold; ``wrong_log`` when it parses but differs;
    ``unparsed`` when the memory is not a record log at all (never scored as wrong)."""
    try:
        records = load(memory)
    except RenderParseError:
        return ExactRead("unparsed", None)
    answer = LogIndex(records).resolve(query)
    return ExactRead("pass" if answer == dict(gold) else "wrong_log", answer)
