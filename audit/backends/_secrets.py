"""Keeping an API key out of everything the backends return, print or store.

A server may echo the ``Authorization`` header whole, cut short, hex- or base64-encoded
(docs/security.md).  ``Scrubber`` masks every run of text that lies inside an 8+
character piece of the key (or of an encoding of it).  Why windows: such a piece is the
union of its 8-character windows, each a window of the key, so marking every 8-character
window of the text that is also one of the key's covers exactly that text.  The windows
are one regular expression built as a trie, so a scan costs about one step per character
whatever the key's length: never quadratic in the answer.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from compressors import ChatResponse

FRAGMENT = 8
"""The shortest piece of a key that is scrubbed (shorter ones occur in ordinary text)."""
MASK = "***"


def _trie_pattern(words: Iterable[str]) -> str:
    """A regex matching exactly ``words``, factored by common prefixes (a trie)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if "" in node:  # every word has the same length: an end is a leaf
            return ""
        if len(branches) == 1:
            return branches[0]
        return "(?:" + "|".join(branches) + ")"

    return emit(trie)


def encodings(secret: str) -> list[str]:
    """The forms a key may come back in: itself, its hex, and the characters of its
    base64 that the key alone sets, at each alignment (URL-safe too)."""
    raw = secret.encode("utf-8")
    forms = [secret, raw.hex(), raw.hex().upper()]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            encoded = encode(b"\0" * offset + raw).decode("ascii").rstrip("=")
            whole = len(raw) + offset - (len(raw) + offset) % 3  # bytes in whole groups
            forms.append(encoded[4 if offset else 0 : whole // 3 * 4])
    return [form for form in forms if form]


class Scrubber:
    """``scrubber(text)``: ``text`` with the secret and each 8+ character piece of it
    replaced by ``***``.  An empty secret scrubs nothing."""

    __slots__ = ("_pattern", "_secret")

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        self._pattern: re.Pattern[str] | None = None
        if len(self._secret) >= FRAGMENT:
            windows = {
                form[i : i + FRAGMENT]
                for form in encodings(self._secret)
                for i in range(len(form) - FRAGMENT + 1)
            }
            # a lookahead: every position a window starts at, overlapping ones included
            self._pattern = re.compile(f"(?={_trie_pattern(windows)})")

    def __bool__(self) -> bool:
        return bool(self._secret)

    def __call__(self, text: str) -> str:
        secret = self._secret
        if not secret or not text:
            return text
        pattern = self._pattern
        if pattern is None:  # a key shorter than a fragment: only whole occurrences
            return text.replace(secret, MASK)
        spans: list[list[int]] = []
        for found in pattern.finditer(text):
            start = found.start()
            if spans and start <= spans[-1][1]:  # inside (or right after) the last: extends it
                spans[-1][1] = start + FRAGMENT
            else:
                spans.append([start, start + FRAGMENT])
        parts, at = [], 0
        for start, end in spans:
            parts += [text[at:start], MASK]
            at = end
        return "".join(parts) + text[at:]

    def deep(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every string in it, keys included, scrubbed."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.deep(item) for item in value]
        if isinstance(value, dict):
            return {self(str(k)): self.deep(v) for k, v in value.items()}
        return value


def scrub(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` and every 8+ character piece of it replaced by ``***``."""
    return Scrubber(secret)(text)


def scrub_answer(answer: ChatResponse, scrub: Callable[[str], str]) -> ChatResponse:
    """``answer`` with every text it shows passed through ``scrub`` (a live answer, a
    cached one written before scrubbing existed, a batch's)."""

    def clean(text: str | None) -> str | None:
        return None if text is None else scrub(text)

    return replace(
        answer,
        content=clean(answer.content),
        reasoning=clean(answer.reasoning),
        finish_reason=clean(answer.finish_reason),
        model=clean(answer.model),
    )


def has_control_characters(value: str) -> bool:
    """Whether ``value`` holds CR, LF, NUL or another control character (not a header value)."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value)
