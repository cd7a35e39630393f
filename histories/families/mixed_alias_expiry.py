"""mixed_alias_expiry: an alias chain where one link's validity differs.

Hidden distinction: the expiry of a middle link of a copy chain.  The query key
aliases a middle key, which aliases a source until some tick; after that the
middle key falls back to its own literal.

Worked example::

    both: e01 tick now=5
          e02 copy key_target src=key_link rev=1
          e03 set key_link="amber-101" rev=1
          e05 set key_source="onyx-303" rev=1
    A:    e04 copy key_link src=key_source rev=2 expires=7
    B:    e04 copy key_link src=key_source rev=2 expires=20
    current  -> both onyx-303
    reveal   e06 tick now=9 -> A: amber-101  B: onyx-303
    override e07 set key_target="jade-404" rev=2 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories._records import Record
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target, link, source = b.key("target"), b.key("link"), b.key("source")
    now = rng.randint(3, 9)
    early = now + rng.randint(1, 4)
    reveal_now = early + rng.randint(1, 4)
    late = reveal_now + rng.randint(1, 10)
    shared: list[Record] = [
        b.tick(now),
        b.copy(target, link, 1),
        b.set(link, b.value(), 1),
        b.set(source, b.value(), 1),
    ]
    link_id = b.new_id()
    return b.draft(
        query=[target],
        variant_a=[*shared, b.copy(link, source, 2, id=link_id, expires=early)],
        variant_b=[*shared, b.copy(link, source, 2, id=link_id, expires=late)],
        reveal=[b.tick(reveal_now)],
        override=[b.set(target, b.value(), 2)],
    )


FAMILY = Family(
    name="mixed_alias_expiry",
    summary="an alias chain where one link's validity differs; reveal advances the clock",
    paper=True,
    build=build,
)
