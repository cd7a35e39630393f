"""Text formatting shared by the HTML and Markdown renderings.

``visible`` is the one gate for untrusted text (model output, memories, answers):
control and invisible formatting characters become visible escapes, so nothing
can hide, reorder or break the page; HTML escaping itself is jinja2's autoescape
(HTML) or ``_markdown.md`` (Markdown).  ``cell`` turns one table value into what
both renderings show, so a number reads the same in ``report.html`` and ``report.md``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reports._document import Code, Column, Flag, Strong, Text

CLIP = 20_000
"""Characters of one untrusted text shown; the rest is counted, not shown."""
LABEL_CLIP = 200
"""Characters of a label (a table's ``label`` cell) shown: labels never wrap, so a
hostile one must not make its table endless."""
CELL_CLIP = 1000
"""Characters of a ``text`` table cell shown: long texts belong in the drill-down."""

_KEEP = {"\n", "\t"}


def _escape_char(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _needs_escape(char: str) -> bool:
    if char in _KEEP:
        return False
    category = unicodedata.category(char)
    # Cc control, Cf format (bidi overrides, zero-width), Zl/Zp separators,
    # Cs surrogates, Co private use, Cn unassigned
    return category in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


_SUSPECT = re.compile(r"[^\t\n\x20-\x7e]")


def visible(value: object) -> str:
    """Text with control/format characters shown as escapes (``\\x1b``, ``\\u202e``)."""
    text = value if isinstance(value, str) else str(value)
    if not _SUSPECT.search(text):
        return text
    return "".join(_escape_char(c) if _needs_escape(c) else c for c in text)


def clip(value: object, limit: int = CLIP) -> str:
    """At most ``limit`` characters, with a count of what is left out."""
    text = "" if value is None else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit:,} more characters not shown]"


def shorten(value: object, limit: int) -> str:
    """One line of at most ``limit`` characters (``...`` marks a cut): for labels that
    must stay on one line (chart ticks, legends)."""
    text = " ".join(visible("" if value is None else value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_missing(value: Any) -> bool:
    """None, NaN, pandas NA, or anything that is not a number."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except Exception:  # TypeError, ValueError, jinja2's UndefinedError
        return True


def truthy(value: Any) -> bool:
    """A flag's value: missing (None, NaN, pandas NA), 0 and "" are false."""
    if isinstance(value, str):
        return bool(value)
    if value is None:
        return False
    try:
        if math.isnan(float(value)):
            return False
    except (TypeError, ValueError):
        pass
    try:
        return bool(value)
    except (TypeError, ValueError):  # pandas NA
        return False


def _int(value: Any) -> int:
    return 0 if is_missing(value) else int(value)


def kn(row: Mapping[str, Any], metric: str) -> str:
    """``k/n``; with NA bounds ``k..k_high/n (bounds)``; ``-`` when not measured."""
    n = _int(row.get(f"{metric}_n"))
    if n == 0:
        return "-"
    k = _int(row.get(f"{metric}_k"))
    k_high = _int(row.get(f"{metric}_k_high", k))
    if k_high != k:
        return f"{k}..{k_high}/{n} (bounds)"
    return f"{k}/{n}"


def proportion_rate(row: Mapping[str, Any], metric: str) -> float | None:
    """``m_rate`` if present, else ``m_k / m_n``; None when not measured."""
    n = _int(row.get(f"{metric}_n"))
    if n == 0:
        return None
    value: Any = row.get(f"{metric}_rate")
    return _int(row.get(f"{metric}_k")) / n if is_missing(value) else float(value)


def interval(low: Any, high: Any, digits: int = 2) -> str:
    """``[0.49, 0.94]``; empty when unknown."""
    if is_missing(low) or is_missing(high):
        return ""
    return f"[{float(low):z.{digits}f}, {float(high):z.{digits}f}]"


# "z" in a format: a value that rounds to zero is 0.00, never -0.00 (a bootstrap bound of
# -1e-17 printed as "-0.00" read as a negative difference)


def rate(value: Any, digits: int = 2) -> str:
    return "-" if is_missing(value) else f"{float(value):z.{digits}f}"


def signed(value: Any, digits: int = 2) -> str:
    return "-" if is_missing(value) else f"{float(value):+z.{digits}f}"


def pvalue(value: Any) -> str:
    if is_missing(value):
        return "-"
    number = float(value)
    return "<0.0001" if number < 1e-4 else f"{number:.4f}"


def number(value: Any, digits: int = 0) -> str:
    if is_missing(value):
        return ""
    if digits == 0:
        return f"{round(float(value)):,}"
    return f"{float(value):z,.{digits}f}"


NUMERIC = frozenset({"integer", "number", "rate", "signed", "pvalue", "proportion", "count"})
"""Formats shown right-aligned; like labels, they never wrap."""


@dataclass(frozen=True)
class Cell:
    """One table value as both renderings show it.

    ``text`` is the value itself (``3/12``, ``0.33``, a label), ``detail`` its 95 %
    interval, ``extra`` the column's second interval with its label (``boot [0.1,
    0.5]``); ``rate`` (proportions) sizes a bar; ``bounds``: NA reads make ``text``
    a range; ``flagged``: a ``flag`` column that is set.
    """

    text: str
    detail: str = ""
    extra: str = ""
    rate: float | None = None
    bounds: bool = False
    flagged: bool = False


def cell(column: Column, row: Mapping[str, Any]) -> Cell:
    """The value of ``column`` in ``row``, formatted by the column's ``format``."""
    kind, key, digits = column.format, column.key, column.digits
    extra = ""
    if column.interval is not None:
        low, high = (row.get(name) for name in column.interval)
        shown = interval(low, high, digits)
        extra = f"{column.interval_label} {shown}".strip() if shown else ""
    if kind == "proportion":
        text = kn(row, key)
        if text == "-":
            return Cell("-")
        detail = interval(row.get(f"{key}_low"), row.get(f"{key}_high"), digits)
        return Cell(text, detail, extra, proportion_rate(row, key), bounds="(bounds)" in text)
    if kind == "count":
        n = _int(row.get(f"{key}_n"))
        return Cell(f"{_int(row.get(f'{key}_k'))}/{n}" if n else "-", extra=extra)
    value = row.get(key)
    if kind == "flag":
        on = truthy(value)
        return Cell(column.flag_text if on else "", flagged=on)
    if kind in ("text", "label"):
        missing = value is None or (not isinstance(value, str) and is_missing(value))
        text = "" if missing else clip(value, LABEL_CLIP if kind == "label" else CELL_CLIP)
        return Cell(text, extra=extra)
    shown = {
        "integer": lambda: number(value),
        "number": lambda: number(value, digits),
        "rate": lambda: rate(value, digits),
        "signed": lambda: signed(value, digits),
        "pvalue": lambda: pvalue(value),
    }[kind]()
    return Cell(shown, extra=extra)


Piece = tuple[str, str]
"""An inline piece of text: (kind, text), kind one of ``text strong code flag``."""


def pieces(text: Text) -> list[Piece]:
    """A ``Text`` as (kind, text) pieces, each text clipped (renderers escape them)."""
    if isinstance(text, str):
        return [("text", clip(text))] if text else []
    out: list[Piece] = []
    for piece in text:
        if isinstance(piece, str):
            out.append(("text", clip(piece)))
        elif isinstance(piece, Strong | Code | Flag):
            out.append((type(piece).__name__.lower(), clip(piece.text)))
        else:
            raise TypeError(f"not an inline piece of text: {type(piece).__name__}")
    return out


def plain(text: Text) -> str:
    """A ``Text`` without its markup (chart titles, attribute values)."""
    return "".join(t for _, t in pieces(text))
