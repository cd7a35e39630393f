"""Parsing ``--transforms identity,rename:40,permute:40,decoy:10`` and ``--budget``."""

from __future__ import annotations

from dataclasses import dataclass

from histories._transforms import TRANSFORM_KINDS


class SpecError(ValueError):
    """A command-line list that does not parse; the message names the item."""


@dataclass(frozen=True)
class TransformSpec:
    kind: str
    count: int

    def __str__(self) -> str:
        return self.kind if self.kind == "identity" else f"{self.kind}:{self.count}"


def parse_transforms(text: str) -> list[TransformSpec]:
    specs: list[TransformSpec] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        kind, _, count_text = item.partition(":")
        if kind not in TRANSFORM_KINDS:
            raise SpecError(
                f"--transforms: unknown transform {kind!r}; known: {', '.join(TRANSFORM_KINDS)}"
            )
        if kind == "identity":
            if count_text:
                raise SpecError("--transforms: identity takes no count")
            specs.append(TransformSpec("identity", 1))
            continue
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise SpecError(f"--transforms: {item!r}: K must be an integer") from None
        if count <= 0:
            raise SpecError(f"--transforms: {item!r}: K must be positive")
        specs.append(TransformSpec(kind, count))
    if not specs:
        raise SpecError("--transforms: no transform given")
    if len({s.kind for s in specs}) != len(specs):
        raise SpecError("--transforms: a transform is listed twice")
    return specs


def parse_budgets(text: str) -> list[int]:
    budgets: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            raise SpecError(f"--budget: {item!r} is not an integer number of bytes") from None
        if value <= 0:
            raise SpecError(f"--budget: {value} must be positive")
        budgets.append(value)
    if not budgets:
        raise SpecError("--budget: no budget given")
    return list(dict.fromkeys(budgets))
