"""The chat-message form of a chunk, and the transcript text chat memories are kept in.

Real compaction works on chat transcripts, so every chunk also has a chat form: a
request, a call of the tool ``read_log``, its result (the chunk's records in the
pair's rendering) and an acknowledgement, worded by the records' phrasing seeds so
that a chunk both variants share reads identically in A and B.  A chat memory is
its turns as text (``dump_chat`` / ``parse_chat``, an exact round trip) in which
record lines stay whole lines, so the exact reader can read what a transcript still
holds (``chat_records``).  ``docs/adapters.md`` shows both forms.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from histories._errors import MemoryAuditError
from histories._pair import RenderStyle
from histories._records import Record
from histories._render import RenderParseError, parse_record_line, render_records

ChatRole = Literal["system", "user", "assistant", "tool", "summary"]
TOOL_NAME = "read_log"
"""The tool every chunk's records arrive through."""

_ASK = (
    "Read the next log entries.",
    "New entries arrived in the log; read them.",
    "Check the log for new entries.",
    "More records came in; take a look.",
)
_ACK = (
    "Read {n} new {entries}.",
    "Noted {n} {entries}.",
    "Got {n} more {entries} from the log.",
)
_HEADER = re.compile(r"\[(system|user|assistant|tool|summary)(?: ([^\]\s]+))?\]")
_CALL = re.compile(r"\[call ([^\]\s]+)\] (\S+) (.*)")
_CLEARED = re.compile(r"\(.*\)")
"""A tool result a library cleared: a parenthesised placeholder such as
``(Tool result removed)``, which carries no state."""


class ChatParseError(MemoryAuditError, ValueError):
    """A text that is not a chat transcript (``line`` is 1-based)."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an assistant turn; ``arguments`` is a JSON object's text."""

    id: str
    function: str
    arguments: str = "{}"


@dataclass(frozen=True)
class ChatTurn:
    """One chat message: a role, its text, an assistant's tool calls, a tool result's
    call id."""

    role: ChatRole
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


def chunk_seed(seeds: Sequence[int]) -> int:
    """One seed for a chunk's framing, from its records' phrasing seeds."""
    return zlib.crc32(",".join(map(str, seeds)).encode())


def chat_messages(
    records: Sequence[Record], style: RenderStyle = "json", seed: int | Sequence[int] = 0
) -> tuple[ChatTurn, ...]:
    """The chat form of one chunk: request, tool call, tool result, acknowledgement.

    ``seed`` is one seed for the chunk, or one per record (the audit's phrasing seeds):
    the same records and seeds always give the same turns.
    """
    seeds = [seed + i for i in range(len(records))] if isinstance(seed, int) else list(seed)
    if len(seeds) != len(records):
        raise ValueError(f"{len(seeds)} phrasing seeds for {len(records)} records")
    framing = chunk_seed(seeds)
    rng = random.Random(framing)
    call_id = f"call_{framing:08x}"
    n = len(records)
    ack = rng.choice(_ACK).format(n=n, entries="entry" if n == 1 else "entries")
    return (
        ChatTurn("user", rng.choice(_ASK)),
        ChatTurn("assistant", "", (ToolCall(call_id, TOOL_NAME),)),
        ChatTurn("tool", render_records(records, style, seeds), tool_call_id=call_id),
        ChatTurn("assistant", ack),
    )


def _escape(line: str) -> str:
    return "\\" + line if line.startswith(("[", "\\")) else line


def dump_chat(turns: Sequence[ChatTurn]) -> str:
    """Turns as transcript text (no trailing newline); ``parse_chat`` reads it back."""
    lines: list[str] = []
    for turn in turns:
        if turn.role == "tool":
            lines.append(f"[tool {turn.tool_call_id or '-'}]")
        else:
            lines.append(f"[{turn.role}]")
        if turn.content:
            lines.extend(_escape(line) for line in turn.content.split("\n"))
        for call in turn.tool_calls:
            lines.append(f"[call {call.id}] {call.function} {call.arguments}")
    return "\n".join(lines)


def parse_chat(text: str) -> list[ChatTurn]:
    """Transcript text -> turns (raises ``ChatParseError`` for anything else)."""
    turns: list[ChatTurn] = []
    if not text:
        return turns
    role: ChatRole | None = None
    call_id: str | None = None
    content: list[str] = []
    calls: list[ToolCall] = []

    def close() -> None:
        if role is not None:
            turns.append(ChatTurn(role, "\n".join(content), tuple(calls), call_id))

    for number, line in enumerate(text.split("\n"), start=1):
        header = _HEADER.fullmatch(line)
        if header is not None:
            close()
            role, content, calls = header.group(1), [], []  # type: ignore[assignment]
            given = header.group(2)
            if (role == "tool") != (given is not None):
                raise ChatParseError(f"line {number}: only a tool result names a call id")
            call_id = None if given is None or given == "-" else given
            continue
        if role is None:
            raise ChatParseError(f"line {number}: a transcript starts with a [role] line")
        call = _CALL.fullmatch(line)
        if call is not None:
            if role != "assistant":
                raise ChatParseError(f"line {number}: a tool call outside an assistant turn")
            calls.append(ToolCall(call.group(1), call.group(2), call.group(3)))
            continue
        if calls:
            raise ChatParseError(f"line {number}: content after an assistant's tool calls")
        if line.startswith("\\"):
            line = line[1:]
        elif line.startswith("["):
            raise ChatParseError(f"line {number}: unknown header {line[:40]!r}")
        content.append(line)
    close()
    return turns


def is_chat(text: str) -> bool:
    """Whether ``text`` is a chat transcript (``parse_chat`` reads it)."""
    if not _HEADER.match(text):
        return False
    try:
        parse_chat(text)
    except ChatParseError:
        return False
    return True


@dataclass(frozen=True)
class ChatRecords:
    """What the exact reader can take from a chat memory."""

    records: tuple[Record, ...]
    """Every record line of its tool results, in order."""
    complete: bool
    """True when nothing else in it can carry state: no summary, and every tool-result
    line is a record line or a cleared placeholder.  Then E_q on ``records`` is what
    the memory retained; otherwise a wrong answer cannot be blamed on the memory."""


def chat_records(turns: Sequence[ChatTurn]) -> ChatRecords:
    """The record lines of a transcript's tool results, and whether that is all."""
    records: list[Record] = []
    complete = True
    for turn in turns:
        if turn.role == "summary":
            complete = False
        if turn.role != "tool":
            continue
        for line in turn.content.split("\n"):
            if not line.strip():
                continue
            record = _record(line)
            if record is not None:
                records.append(record)
            elif not _CLEARED.fullmatch(line.strip()):
                complete = False
    return ChatRecords(tuple(records), complete)


def _record(line: str) -> Record | None:
    style: Literal["json", "log"] = "json" if line.lstrip().startswith("{") else "log"
    try:
        return parse_record_line(line, style)
    except RenderParseError:
        return None
