"""What a family is: a recipe for the task records of one matched-prefix pair.

A family builds only the records that carry the task (both variants, the query,
the real operation of each future).  The generator adds the shuffled distractors,
the distractor chunk of each future, chunking, gold answers and verification.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from histories._labels import Labels
from histories._records import (
    AddRecord,
    ChooseRecord,
    CopyRecord,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    WhenRecord,
)


@dataclass(frozen=True)
class Draft:
    """The task records of one pair, before distractors.

    Records that share an id across ``variant_a`` and ``variant_b`` occupy the same
    slot in the shuffled log; a record present in only one variant is the kind of
    hidden distinction a family may use.
    """

    query: tuple[str, ...]
    variant_a: tuple[Record, ...]
    variant_b: tuple[Record, ...]
    reveal: tuple[Record, ...]
    override: tuple[Record, ...]
    task_keys: tuple[str, ...]


@dataclass(frozen=True)
class Family:
    """A registered family: its id, a one-line summary and its builder."""

    name: str
    summary: str
    paper: bool
    build: Callable[[random.Random, Labels], Draft]
    doc: str = ""
    """The family's description with its worked example (default: ``build``'s module's
    docstring)."""

    def __post_init__(self) -> None:
        if not self.doc:
            module = sys.modules.get(self.build.__module__)
            object.__setattr__(self, "doc", getattr(module, "__doc__", None) or "")


@dataclass
class Builder:
    """Small helper so family modules read like their worked examples."""

    labels: Labels
    task_keys: list[str] = field(default_factory=list)

    def key(self, role: str) -> str:
        label = self.labels.task_key(role)
        self.task_keys.append(label)
        return label

    def value(self) -> str:
        return self.labels.value()

    def _id(self, record_id: str | None) -> str:
        return record_id if record_id is not None else self.labels.task_id()

    def new_id(self) -> str:
        return self.labels.task_id()

    def set(
        self, key: str, value: str, rev: int, *, id: str | None = None, **extra: Any
    ) -> SetRecord:
        return SetRecord(id=self._id(id), key=key, value=value, rev=rev, **extra)

    def copy(
        self, key: str, src: str, rev: int, *, id: str | None = None, **extra: Any
    ) -> CopyRecord:
        return CopyRecord(id=self._id(id), key=key, src=src, rev=rev, **extra)

    def choose(
        self, key: str, selector: str, options: dict[str, str], rev: int, *, id: str | None = None
    ) -> ChooseRecord:
        return ChooseRecord(id=self._id(id), key=key, selector=selector, options=options, rev=rev)

    def revoke(self, target: str, *, id: str | None = None) -> RevokeRecord:
        return RevokeRecord(id=self._id(id), target=target)

    def replay(self, key: str, target: str, rev: int, *, id: str | None = None) -> ReplayRecord:
        return ReplayRecord(id=self._id(id), key=key, target=target, rev=rev)

    def tick(self, now: int, *, id: str | None = None) -> TickRecord:
        return TickRecord(id=self._id(id), now=now)

    def add(self, key: str, delta: int, rev: int, *, id: str | None = None) -> AddRecord:
        return AddRecord(id=self._id(id), key=key, delta=delta, rev=rev)

    def when(
        self,
        key: str,
        cond_key: str,
        cond_value: str,
        value: str,
        rev: int,
        *,
        id: str | None = None,
    ) -> WhenRecord:
        return WhenRecord(
            id=self._id(id), key=key, cond_key=cond_key, cond_value=cond_value, value=value, rev=rev
        )

    def draft(
        self,
        query: list[str],
        variant_a: list[Record],
        variant_b: list[Record],
        reveal: list[Record],
        override: list[Record],
    ) -> Draft:
        return Draft(
            query=tuple(query),
            variant_a=tuple(variant_a),
            variant_b=tuple(variant_b),
            reveal=tuple(reveal),
            override=tuple(override),
            task_keys=tuple(self.task_keys),
        )
