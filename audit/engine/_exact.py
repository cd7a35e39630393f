"""The exact reader: parse the memory as records and apply E_q.

It is ground truth for what a memory *retained*: if E_q on the memory gives the
gold answer, the memory is adequate, whatever any LLM reader later makes of it.

A chat memory (a transcript an adapter of a chat-memory library left) is read through
the record lines its tool results still hold.  When nothing else in it can carry
state (no summary, no other tool output), a wrong answer is the memory's
(``wrong_log``); otherwise only a right one is conclusive, and a wrong one is
``unparsed``: the summary may hold what the record lines lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from compressors import load
from histories import Answer, LogIndex, Record, RenderParseError, chat_records, is_chat, parse_chat

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
    records, complete = memory_records(memory)
    if records is None:
        return ExactRead("unparsed", None)
    answer = LogIndex(records).resolve(query)
    if answer == dict(gold):
        return ExactRead("pass", answer)
    return ExactRead("wrong_log" if complete else "unparsed", answer)


def memory_records(memory: str) -> tuple[Sequence[Record] | None, bool]:
    """The records E_q reads in a memory, and whether they are all it holds: a record
    log's records; a chat transcript's record lines; None for anything else."""
    try:
        return load(memory), True
    except RenderParseError:
        pass
    if not is_chat(memory):
        return None, False
    found = chat_records(parse_chat(memory))
    return found.records, found.complete
