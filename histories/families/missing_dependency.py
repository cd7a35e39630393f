"""missing_dependency: an unselected option exists in A and is missing in B.

Hidden distinction: whether a dependency exists at all.  After the reveal, B's
winning record depends on something missing, so the exact answer is null: the
key never falls back to its older value.  A reader (or memory) that falls back
answers B wrongly; a memory that drops the unselected option answers A wrongly.

Worked example::

    both: e01 set key_target="amber-101" rev=1
          e02 set key_mode="x" rev=1
          e03 set key_opt_x="onyx-303" rev=1
          e05 choose key_target selector=key_mode options={x: key_opt_x, y: key_opt_y} rev=2
    A:    e04 set key_opt_y="cedar-202" rev=1      B: (no record for key_opt_y)
    current  -> both onyx-303
    reveal   e06 set key_mode="y" rev=2 -> A: cedar-202  B: null
    override e07 set key_target="jade-404" rev=3 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target, mode = b.key("target"), b.key("mode")
    opt_x, opt_y = b.key("opt_x"), b.key("opt_y")
    label_x, label_y = rng.sample(["x", "y", "left", "right", "red", "blue"], 2)
    older = b.set(target, b.value(), 1)
    selector = b.set(mode, label_x, 1)
    chosen = b.set(opt_x, b.value(), 1)
    hidden = b.set(opt_y, b.value(), 1)
    rule = b.choose(target, mode, {label_x: opt_x, label_y: opt_y}, 2)
    return b.draft(
        query=[target],
        variant_a=[older, selector, chosen, hidden, rule],
        variant_b=[older, selector, chosen, rule],
        reveal=[b.set(mode, label_y, 2)],
        override=[b.set(target, b.value(), 3)],
    )


FAMILY = Family(
    name="missing_dependency",
    summary="an unselected option exists in A, is missing in B; reveal selects it (B: null)",
    paper=False,
    build=build,
)
