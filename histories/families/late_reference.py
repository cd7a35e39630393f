"""late_reference: an unrelated key differs; reveal makes the query key copy it.

Hidden distinction: the value of a key that nothing in the prefix connects to the
query.  A future-hidden writer has no reason to keep it, which makes this the hard
family: only a memory that keeps "unrelated" state survives the late reference.

Worked example::

    both: e01 set key_target="amber-101" rev=1
    A:    e02 set key_other="cedar-202" rev=1     B: e02 set key_other="slate-303" rev=1
    current  -> both amber-101
    reveal   e03 copy key_target src=key_other rev=2 -> A: cedar-202  B: slate-303
    override e04 set key_target="jade-404" rev=2 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target, other = b.key("target"), b.key("other")
    rev = rng.randint(1, 4)
    current = b.set(target, b.value(), rev)
    other_id = b.new_id()
    other_rev = rng.randint(1, 4)
    return b.draft(
        query=[target],
        variant_a=[current, b.set(other, b.value(), other_rev, id=other_id)],
        variant_b=[current, b.set(other, b.value(), other_rev, id=other_id)],
        reveal=[b.copy(target, other, rev + 1)],
        override=[b.set(target, b.value(), rev + 1)],
    )


FAMILY = Family(
    name="late_reference",
    summary="an unrelated key differs; reveal makes the query key copy it",
    paper=True,
    build=build,
)
