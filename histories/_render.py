"""Renderings: the same records as canonical JSON lines, agent tool-log lines, or chat prose.

A compressor or reader may see a history in any of these forms (``docs/method.md``),
so the audit can check that a result does not hinge on the surface form.  The
structured forms (``json``, ``log``) round-trip exactly to records through
``parse_records``; ``prose`` keeps every field but is not meant to be parsed back.

Lines are separated by ``"\\n"`` only: canonical JSON keeps characters such as U+2028
unescaped, so splitting with ``str.splitlines`` would break a json rendering.  The log
and prose forms escape those characters, so their lines survive ``splitlines`` too.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Literal

from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import ValidationError

from histories._errors import MemoryAuditError
from histories._labels import pick
from histories._pair import RenderStyle
from histories._records import RECORD_ADAPTER, RECORD_KINDS, Record

__all__ = [
    "RenderParseError",
    "parse_record_line",
    "parse_records",
    "render_record_line",
    "render_records",
]

LOG_NAMESPACE = "memory"
"""Log lines are calls ``memory.<op>(...)``."""

PROSE_TEMPLATE = "prose.j2"
"""Template in ``histories/templates`` holding one macro per (op, phrasing)."""

_Phrasing = Callable[[dict[str, Any]], str]

# Characters that str.splitlines() treats as line breaks and that json.dumps leaves
# unescaped with ensure_ascii=False (it always escapes the C0 controls).
_LINE_BREAK_ESCAPES = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}

_LINE_BREAK_TEXT = dict.fromkeys([0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, *_LINE_BREAK_ESCAPES], " ")
"""Every other character ``str.splitlines`` breaks at, made a space in a natural text."""

_CALL = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*")
_ARGUMENT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_SEPARATOR = re.compile(r"\s*([,)])\s*")
_PHRASING_NAME = re.compile(r"^([a-z]+)_([0-9]+)$")
_DECODER = json.JSONDecoder()
_KNOWN_OPS = ", ".join(RECORD_KINDS)


class RenderParseError(MemoryAuditError, ValueError):
    """A rendered line does not parse back to a record; ``line`` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason

    def __reduce__(self) -> tuple[type[RenderParseError], tuple[int, str]]:
        return (type(self), (self.line, self.reason))


# --------------------------------------------------------------------------- rendering


def render_records(
    records: Sequence[Record], style: RenderStyle, seed: int | Sequence[int] = 0
) -> str:
    """Render ``records`` one per line (joined by ``"\\n"``, no trailing newline).

    ``seed`` only matters for ``prose``: it picks the phrasings, so the same records
    and seed always give the same text.  One seed per record (a sequence) phrases each
    record on its own: the audit seeds a record by its canonical line, so a record
    shared by both variants is worded the same everywhere, and a seed says nothing the
    record does not.
    """
    if style == "json":
        return "\n".join([record.canonical_json() for record in records])
    if style == "log":
        return "\n".join([_log_line(record) for record in records])
    if style == "prose":
        if isinstance(seed, int):
            rng = random.Random(seed)
            return "\n".join([_prose_line(record, rng) for record in records])
        if len(seed) != len(records):
            raise ValueError(f"{len(seed)} phrasing seeds for {len(records)} records")
        return "\n".join(
            [_prose_line(record, random.Random(s)) for record, s in zip(records, seed, strict=True)]
        )
    raise ValueError(f"unknown render style {style!r}; expected json, log or prose")


def render_record_line(record: Record, style: RenderStyle, rng: random.Random | None = None) -> str:
    """One record as one line; ``rng`` picks the prose phrasing (default: seed 0)."""
    if style == "json":
        return record.canonical_json()
    if style == "log":
        return _log_line(record)
    if style == "prose":
        return _prose_line(record, rng if rng is not None else random.Random(0))
    raise ValueError(f"unknown render style {style!r}; expected json, log or prose")


def _quote(value: Any) -> str:
    """A JSON literal that stays on one line even under ``str.splitlines``."""
    return json.dumps(value, ensure_ascii=False).translate(_LINE_BREAK_ESCAPES)


def _log_line(record: Record) -> str:
    fields = record.to_dict()
    op = fields.pop("op")
    arguments = ", ".join([f"{name}={_quote(value)}" for name, value in fields.items()])
    return f"{LOG_NAMESPACE}.{op}({arguments})"


def _prose_line(record: Record, rng: random.Random) -> str:
    if record.text is not None:  # a natural record: its source's own words
        text = record.text.replace("\n", " ").translate(_LINE_BREAK_TEXT)
        return f"({record.id}) {text}"
    phrasing = pick(rng, _prose_phrasings()[record.op])
    return phrasing(record.to_dict())


@cache
def _prose_phrasings() -> dict[str, tuple[_Phrasing, ...]]:
    """Every ``<op>_<n>`` macro of the prose template, per op, in ``n`` order."""
    env = Environment(
        loader=PackageLoader("histories", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        keep_trailing_newline=False,
    )
    env.filters["q"] = _quote
    module = env.get_template(PROSE_TEMPLATE).module
    found: dict[str, list[tuple[int, _Phrasing]]] = {op: [] for op in RECORD_KINDS}
    for name in dir(module):
        match = _PHRASING_NAME.match(name)
        if match and match.group(1) in found:
            found[match.group(1)].append((int(match.group(2)), getattr(module, name)))
    missing = sorted(op for op, phrasings in found.items() if not phrasings)
    if missing:
        raise RuntimeError(f"{PROSE_TEMPLATE} has no phrasing for: {', '.join(missing)}")
    return {
        op: tuple(_as_text(macro) for _, macro in sorted(phrasings, key=lambda p: p[0]))
        for op, phrasings in found.items()
    }


def _as_text(macro: Callable[..., Any]) -> _Phrasing:
    return lambda fields: str(macro(fields))


# --------------------------------------------------------------------------- parsing


def parse_records(text: str, style: Literal["json", "log"]) -> list[Record]:
    """Parse a json or log rendering back to records; blank lines are skipped.

    Raises ``RenderParseError`` naming the 1-based line and what is wrong with it, and
    ``ValueError`` for ``prose``, which does not round-trip.
    """
    parse = _line_parser(style)
    return [
        parse(line, number)
        for number, line in enumerate(text.split("\n"), start=1)
        if line and not line.isspace()
    ]


def parse_record_line(line: str, style: Literal["json", "log"], number: int = 1) -> Record:
    """Parse one rendered line; ``number`` is the line number used in errors."""
    return _line_parser(style)(line, number)


def _line_parser(style: str) -> Callable[[str, int], Record]:
    if style == "json":
        return _parse_json_line
    if style == "log":
        return _parse_log_line
    if style == "prose":
        raise ValueError("prose renderings do not round-trip to records; use json or log")
    raise ValueError(f"unknown render style {style!r}; expected json or log")


def _parse_json_line(line: str, number: int) -> Record:
    try:
        return RECORD_ADAPTER.validate_json(line)
    except ValidationError as exc:
        failure = exc
    # Slow path, only on failure: find a precise reason.
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RenderParseError(number, f"bad JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(data, dict):
        raise RenderParseError(number, f"expected a JSON object, got {type(data).__name__}")
    _validate(data, number)
    raise RenderParseError(number, _describe(failure, data.get("op")))


def _parse_log_line(line: str, number: int) -> Record:
    call = _CALL.match(line)
    if call is None:
        raise RenderParseError(number, f"expected a call like {LOG_NAMESPACE}.set(...)")
    namespace, op = call.groups()
    if namespace != LOG_NAMESPACE or op not in RECORD_KINDS:
        raise RenderParseError(
            number,
            f"unknown function {namespace}.{op}; expected {LOG_NAMESPACE}.<op> "
            f"with op one of {_KNOWN_OPS}",
        )
    fields: dict[str, Any] = {"op": op}
    position = call.end()
    closed = line.startswith(")", position)
    if closed:
        position += 1
    while not closed:
        argument = _ARGUMENT.match(line, position)
        if argument is None:
            raise RenderParseError(number, f"expected name=value at column {position + 1}")
        name = argument.group(1)
        if name in fields:
            what = "op is the function name" if name == "op" else "given twice"
            raise RenderParseError(number, f"argument {name}: {what}")
        try:
            fields[name], position = _DECODER.raw_decode(line, argument.end())
        except json.JSONDecodeError as exc:
            raise RenderParseError(
                number, f"argument {name}: bad JSON value: {exc.msg} at column {exc.colno}"
            ) from None
        separator = _SEPARATOR.match(line, position)
        if separator is None:
            raise RenderParseError(
                number, f"expected ',' or ')' after argument {name} at column {position + 1}"
            )
        position = separator.end()
        closed = separator.group(1) == ")"
    if line[position:].strip():
        raise RenderParseError(number, f"unexpected text after ')' at column {position + 1}")
    return _validate(fields, number)


def _validate(data: dict[str, Any], number: int) -> Record:
    """Validate plain data as a record, naming the op and field that fail."""
    if "op" not in data:
        raise RenderParseError(number, "missing field 'op'")
    op = data["op"]
    if not isinstance(op, str) or op not in RECORD_KINDS:
        raise RenderParseError(number, f"unknown op {op!r}; expected one of {_KNOWN_OPS}")
    try:
        return RECORD_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise RenderParseError(number, _describe(exc, op)) from None


def _describe(exc: ValidationError, op: Any) -> str:
    """Pydantic's errors as ``field <loc>: <msg>``, the union tag dropped from the loc."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = list(error["loc"])
        if loc and loc[0] == op:
            loc = loc[1:]
        where = ".".join(str(part) for part in loc) or "record"
        problems.append(f"field {where}: {error['msg']} ({error['type']})")
    detail = "; ".join(problems)
    return f"{op} record: {detail}" if isinstance(op, str) else detail
