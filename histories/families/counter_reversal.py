"""counter_reversal: the same total from different parts; reveal reverses an increment.

Hidden distinction: how a counter's current value decomposes into a base and
increments (record kind ``add``).  A memory that keeps only the total ``7``
cannot undo the last increment.

Worked example::

    A: e01 set key_counter="5" rev=1     B: e01 set key_counter="3" rev=1
       e02 add key_counter delta=2 rev=2    e02 add key_counter delta=4 rev=2
    current  -> both 7
    reveal   e03 revoke e02 -> A: 5   B: 3
    override e04 set key_counter="40" rev=3 -> both 40 (older increments no longer apply)
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    counter = b.key("counter")
    total = rng.randint(10, 90)
    delta_a, delta_b = rng.sample(range(1, 9), 2)
    base_id, add_id = b.new_id(), b.new_id()
    return b.draft(
        query=[counter],
        variant_a=[
            b.set(counter, str(total - delta_a), 1, id=base_id),
            b.add(counter, delta_a, 2, id=add_id),
        ],
        variant_b=[
            b.set(counter, str(total - delta_b), 1, id=base_id),
            b.add(counter, delta_b, 2, id=add_id),
        ],
        reveal=[b.revoke(add_id)],
        override=[b.set(counter, str(total + rng.randint(100, 900)), 3)],
    )


FAMILY = Family(
    name="counter_reversal",
    summary="same counter total from different base and increment; reveal revokes the increment",
    paper=False,
    build=build,
)
