"""choice_switch: the unselected option differs; reveal switches the selector.

Hidden distinction: the value behind the option that is *not* selected today.

Worked example::

    both: e01 set key_mode="x" rev=1
          e02 set key_opt_x="amber-101" rev=1
          e04 choose key_target selector=key_mode options={x: key_opt_x, y: key_opt_y} rev=1
    A:    e03 set key_opt_y="cedar-202" rev=1      B: e03 set key_opt_y="slate-303" rev=1
    current  -> both amber-101
    reveal   e05 set key_mode="y" rev=2 -> A: cedar-202  B: slate-303
    override e06 set key_target="jade-404" rev=2 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    mode, opt_x, opt_y, target = b.key("mode"), b.key("opt_x"), b.key("opt_y"), b.key("target")
    label_x, label_y = rng.sample(["x", "y", "primary", "backup", "on", "off"], 2)
    rev = rng.randint(1, 3)
    selector = b.set(mode, label_x, rev)
    chosen = b.set(opt_x, b.value(), rev)
    hidden_id = b.new_id()
    rule = b.choose(target, mode, {label_x: opt_x, label_y: opt_y}, rev)
    return b.draft(
        query=[target],
        variant_a=[selector, chosen, b.set(opt_y, b.value(), rev, id=hidden_id), rule],
        variant_b=[selector, chosen, b.set(opt_y, b.value(), rev, id=hidden_id), rule],
        reveal=[b.set(mode, label_y, rev + 1)],
        override=[b.set(target, b.value(), rev + 1)],
    )


FAMILY = Family(
    name="choice_switch",
    summary="the unselected option differs; reveal switches the selector",
    paper=True,
    build=build,
)
