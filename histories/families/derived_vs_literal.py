"""derived_vs_literal: the same value, derived in A and literal in B; reveal changes the source.

Hidden distinction: whether the query key's value is a copy of another key or a
literal that happens to be equal.  A memory that stores the resolved value loses
the dependency.

Worked example::

    both: e01 set key_source="amber-101" rev=1
    A:    e02 copy key_target src=key_source rev=1
    B:    e02 set key_target="amber-101" rev=1
    current  -> both amber-101
    reveal   e03 set key_source="cedar-202" rev=2 -> A: cedar-202  B: amber-101
    override e04 set key_target="jade-404" rev=2 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    source, target = b.key("source"), b.key("target")
    value, rev = b.value(), rng.randint(1, 4)
    origin = b.set(source, value, rev)
    target_id = b.new_id()
    return b.draft(
        query=[target],
        variant_a=[origin, b.copy(target, source, rev, id=target_id)],
        variant_b=[origin, b.set(target, value, rev, id=target_id)],
        reveal=[b.set(source, b.value(), rev + 1)],
        override=[b.set(target, b.value(), rev + 1)],
    )


FAMILY = Family(
    name="derived_vs_literal",
    summary="same value, derived (copy) in A and literal in B; reveal changes the source",
    paper=False,
    build=build,
)
