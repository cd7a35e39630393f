"""Label makers: the identifiers and values a family draws when it builds a pair.

Two schemes exist because the audit must expose a naming shortcut:

* ``RandomLabels`` (the default): keys and record ids are random strings, so task
  keys and distractor keys have no ordering relation a compressor could exploit.
* ``WordLabels`` (the ``cca-pilot`` preset): readable names (``amber_kelp_3``,
  ``r04172``) drawn from one distribution for task and distractor labels alike, so
  neither their length, their prefix nor their order says which is which.
* ``ReadableLabels`` (the ``cca-pilot-paper`` preset): the paper's shape, where every
  task key (``key_*``) sorts before every distractor key (``noise_*``), task record
  ids (``e*``) are shorter than distractor ids (``n*``), and both come first: the
  accidents a naming shortcut exploits, kept to reproduce the paper.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

T = TypeVar("T")

LabelScheme = Literal["random", "words", "readable"]

WORDS = (
    "amber", "basalt", "cedar", "cobalt", "copper", "coral", "delta", "ember", "fern",
    "flint", "garnet", "harbor", "indigo", "ivory", "jade", "juniper", "kelp", "lumen",
    "maple", "marble", "meadow", "nickel", "onyx", "orchid", "pebble", "quartz", "raven",
    "saffron", "slate", "spruce", "tidal", "umber", "velvet", "willow", "zephyr", "zinc",
)  # fmt: skip

_LOWER = string.ascii_lowercase
_ALNUM = string.ascii_lowercase + string.digits


_BYTE_TO_ALNUM = bytes(ord(_ALNUM[b % len(_ALNUM)]) for b in range(256))


def pick(rng: random.Random, items: Sequence[T]) -> T:
    """``rng.choice`` without its Python-level rejection loop (generation's hot path)."""
    return items[int(rng.random() * len(items))]


def between(rng: random.Random, low: int, high: int) -> int:
    """Uniform integer in [low, high], like ``randint`` but one C call."""
    return low + int(rng.random() * (high - low + 1))


def random_label(rng: random.Random, length: int, first: str = _LOWER) -> str:
    """A label of ``length`` chars: a letter from ``first``, then letters and digits.

    One ``randbytes`` call mapped through a table: label drawing dominated
    generation time when done a character at a time.
    """
    return pick(rng, first) + rng.randbytes(length - 1).translate(_BYTE_TO_ALNUM).decode()


class Labels(Protocol):
    """What a family and the distractor pool may ask for; each answer is unique in a pair."""

    def task_key(self, role: str) -> str:
        """A key that takes part in the task (query, dependencies, hidden distinction)."""
        ...

    def task_id(self) -> str:
        """A record id for a task record (prefix or future)."""
        ...

    def distractor_key(self) -> str:
        """A key that only distractor records touch."""
        ...

    def distractor_id(self) -> str:
        """A record id for a distractor record."""
        ...

    def value(self) -> str:
        """A fresh literal value, never equal to one drawn before in this pair."""
        ...


class _ValueSource:
    """Unique readable values (``amber-417``); shared by both schemes, never renamed."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def value(self) -> str:
        while True:
            candidate = f"{pick(self._rng, WORDS)}-{between(self._rng, 100, 999)}"
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate


class _UniformLabels(_ValueSource):
    """Task and distractor labels from one distribution (no tell), none drawn twice."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self._labels: set[str] = set()

    def _draw_key(self) -> str:
        raise NotImplementedError

    def _draw_id(self) -> str:
        raise NotImplementedError

    def _fresh(self, draw: Callable[[], str]) -> str:
        label = draw()
        while label in self._labels:
            label = draw()
        self._labels.add(label)
        return label

    def task_key(self, role: str) -> str:
        return self._fresh(self._draw_key)

    def task_id(self) -> str:
        return self._fresh(self._draw_id)

    def distractor_key(self) -> str:
        return self._fresh(self._draw_key)

    def distractor_id(self) -> str:
        return self._fresh(self._draw_id)


class RandomLabels(_UniformLabels):
    """Random keys (6 chars) and ids (8 chars) with no task/distractor ordering."""

    KEY_LENGTH = 6
    ID_LENGTH = 8

    def _draw_key(self) -> str:
        return random_label(self._rng, self.KEY_LENGTH)

    def _draw_id(self) -> str:
        return random_label(self._rng, self.ID_LENGTH)


class ReadableLabels(_ValueSource):
    """The paper's style: ``key_<role>`` / ``e01`` for the task, ``noise_00`` / ``n001``
    for distractors, so task labels sort first (the accident renaming exposes)."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self._keys: set[str] = set()
        self._task_ids = 0
        self._distractor_keys = 0
        self._distractor_ids = 0

    def task_key(self, role: str) -> str:
        base = f"key_{role}"
        label, suffix = base, 2
        while label in self._keys:
            label, suffix = f"{base}{suffix}", suffix + 1
        self._keys.add(label)
        return label

    def task_id(self) -> str:
        self._task_ids += 1
        return f"e{self._task_ids:02d}"

    def distractor_key(self) -> str:
        self._distractor_keys += 1
        return f"noise_{self._distractor_keys:02d}"

    def distractor_id(self) -> str:
        self._distractor_ids += 1
        return f"n{self._distractor_ids:03d}"


class WordLabels(_UniformLabels):
    """Readable labels with no tell: every key is ``word_word_digit`` and every record
    id ``r`` plus five random digits, task and distractor alike, from one distribution
    (12,960 keys and 100,000 ids: room for any pair the generator builds)."""

    def _draw_key(self) -> str:
        return f"{pick(self._rng, WORDS)}_{pick(self._rng, WORDS)}_{between(self._rng, 0, 9)}"

    def _draw_id(self) -> str:
        return f"r{between(self._rng, 0, 99_999):05d}"


def make_labels(scheme: LabelScheme, rng: random.Random) -> Labels:
    """The label maker for a scheme name."""
    if scheme == "readable":
        return ReadableLabels(rng)
    if scheme == "words":
        return WordLabels(rng)
    return RandomLabels(rng)
