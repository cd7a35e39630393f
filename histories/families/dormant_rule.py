"""dormant_rule: a guarded rule that is not in force yet differs; reveal triggers it.

Hidden distinction: the value a dormant conditional rule (record kind ``when``)
would install.  Today the condition is false, so the rule changes nothing and a
memory that keeps only live bindings drops it.

Worked example::

    both: e01 set key_mode="day" rev=1
          e02 set key_target="amber-101" rev=1
    A:    e03 when key_target if key_mode="night" then "cedar-202" rev=2
    B:    e03 when key_target if key_mode="night" then "slate-303" rev=2
    current  -> both amber-101
    reveal   e04 set key_mode="night" rev=2 -> A: cedar-202  B: slate-303
    override e05 set key_target="jade-404" rev=3 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    mode, target = b.key("mode"), b.key("target")
    today, trigger = rng.sample(["day", "night", "weekend", "holiday", "peak", "idle"], 2)
    shared = [b.set(mode, today, 1), b.set(target, b.value(), 1)]
    rule_id = b.new_id()
    return b.draft(
        query=[target],
        variant_a=[*shared, b.when(target, mode, trigger, b.value(), 2, id=rule_id)],
        variant_b=[*shared, b.when(target, mode, trigger, b.value(), 2, id=rule_id)],
        reveal=[b.set(mode, trigger, 2)],
        override=[b.set(target, b.value(), 3)],
    )


FAMILY = Family(
    name="dormant_rule",
    summary="a dormant conditional rule's value differs; reveal makes its condition true",
    paper=False,
    build=build,
)
