"""Keeping an API key out of everything the backends return, print or store.

A server (or a careless proxy) may echo the ``Authorization`` header in an error, in a
model list or in an answer, whole or cut short.  ``Scrubber`` replaces the key and every
run of text that is a piece of it at least ``FRAGMENT`` characters long with ``***``.

Why windows: a piece of the key of length L >= 8 is the union of its L - 7 windows of 8
characters, each of which is a window of the key.  So marking every 8-character window
of the text that is also one of the key's covers exactly the text that lies inside some
8+ character piece of the key.  The windows are matched by one regular expression built
as a trie (one branch per distinct next character), so a scan costs about one step per
character of the text whatever the key's length: never quadratic in the answer.

A server may also send the key back encoded: the same windows are taken of its hex
(both cases) and of its base64 (standard and URL-safe, at each of the three
alignments a key inside a longer string can have, e.g. ``Basic`` credentials or a
base64 of ``Bearer <key>``), so those are masked too.

``has_control_characters`` is the header check: a key with CR, LF or another control
character would be refused by aiohttp at the first request (or split the header).
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
            self._pattern = re.compile(_trie_pattern(windows))

    def __bool__(self) -> bool:
        return bool(self._secret)

    def __call__(self, text: str) -> str:
        secret = self._secret
        if not secret or not text:
            return text
        pattern = self._pattern
        if pattern is None:  # a key shorter than a fragment: only whole occurrences
            return text.replace(secret, MASK)
        spans: list[tuple[int, int]] = []
        at = 0
        while (found := pattern.search(text, at)) is not None:
            start = found.start()
            end = start + FRAGMENT
            at = start + 1
            while at <= end:  # windows starting inside (or right after) this one extend it
                if pattern.match(text, at) is not None:
                    end = at + FRAGMENT
                at += 1
            spans.append((start, end))
        if not spans:
            return text
        parts: list[str] = []
        at = 0
        for start, end in spans:
            parts.append(text[at:start])
            parts.append(MASK)
            at = end
        parts.append(text[at:])
        return "".join(parts)

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
