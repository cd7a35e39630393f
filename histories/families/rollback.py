"""rollback: earlier values differ, the latest is shared; reveal revokes the latest.

Hidden distinction: the value the query key had *before* its current value.
A memory that keeps only the latest binding answers today correctly and cannot
say what the key falls back to.

Worked example (readable labels)::

    A: e01 set key_target="amber-101" rev=1     B: e01 set key_target="cedar-202" rev=1
       e02 set key_target="onyx-303"  rev=2        e02 set key_target="onyx-303"  rev=2
    current  -> A: onyx-303    B: onyx-303
    reveal   e03 revoke e02          -> A: amber-101   B: cedar-202
    override e04 set key_target="jade-404" rev=3 -> A: jade-404  B: jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target = b.key("target")
    old_id, latest_id = b.new_id(), b.new_id()
    old_rev = rng.randint(1, 3)
    latest_rev = old_rev + rng.randint(1, 3)
    shared = b.set(target, b.value(), latest_rev, id=latest_id)
    old_a = b.set(target, b.value(), old_rev, id=old_id)
    old_b = b.set(target, b.value(), old_rev, id=old_id)
    return b.draft(
        query=[target],
        variant_a=[old_a, shared],
        variant_b=[old_b, shared],
        reveal=[b.revoke(latest_id)],
        override=[b.set(target, b.value(), latest_rev + 1)],
    )


FAMILY = Family(
    name="rollback",
    summary="earlier values differ, latest shared; reveal revokes the latest",
    paper=True,
    build=build,
)
