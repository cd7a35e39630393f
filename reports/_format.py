"""Text formatting shared by the HTML and Markdown renderings.

``visible`` is the one gate for untrusted text (model output, memories, answers):
control and invisible formatting characters become visible escapes, so nothing
can hide, reorder or break the page; HTML escaping itself is jinja2's autoescape
(HTML) or ``md`` (Markdown).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

CLIP = 20_000
"""Characters of one untrusted text shown; the rest is counted, not shown."""

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


def is_missing(value: Any) -> bool:
    """None, NaN, or anything that is not a number (an undefined template value included)."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except Exception:  # TypeError, ValueError, jinja2's UndefinedError
        return True


def _int(value: Any) -> int:
    return 0 if is_missing(value) else int(value)


def kn(row: Mapping[str, Any], metric: str) -> str:
    """``k/n``; with NA bounds ``k_low..k_high/n (bounds)``; ``-`` when not measured."""
    n = _int(row.get(f"{metric}_n"))
    if n == 0:
        return "-"
    k = _int(row.get(f"{metric}_k"))
    k_high = _int(row.get(f"{metric}_k_high", k))
    if k_high != k:
        return f"{k}..{k_high}/{n} (bounds)"
    return f"{k}/{n}"


def interval(low: Any, high: Any, digits: int = 2) -> str:
    """``[0.49, 0.94]``; empty when unknown."""
    if is_missing(low) or is_missing(high):
        return ""
    return f"[{float(low):.{digits}f}, {float(high):.{digits}f}]"


def ci(row: Mapping[str, Any], metric: str) -> str:
    return interval(row.get(f"{metric}_low"), row.get(f"{metric}_high"))


def rate(value: Any, digits: int = 2) -> str:
    return "-" if is_missing(value) else f"{float(value):.{digits}f}"


def signed(value: Any, digits: int = 2) -> str:
    return "-" if is_missing(value) else f"{float(value):+.{digits}f}"


def pvalue(value: Any) -> str:
    if is_missing(value):
        return "-"
    value = float(value)
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def number(value: Any, digits: int = 0) -> str:
    if is_missing(value):
        return ""
    if digits == 0:
        return f"{round(float(value)):,}"
    return f"{float(value):,.{digits}f}"


def system_label(row: Mapping[str, Any], with_reader: bool = False) -> str:
    label = f"{row.get('condition')} @ {row.get('budget')} B"
    return f"{label} ({row.get('reader')})" if with_reader else label
