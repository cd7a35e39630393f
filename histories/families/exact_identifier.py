"""exact_identifier: long identifiers that differ in one character; reveal replays the old one.

Hidden distinction: one character deep inside a superseded 40-character
identifier (a commit hash, an account number).  A memory that abbreviates,
paraphrases or drops superseded values cannot reproduce it exactly.

Worked example::

    A: e01 set key_target="sha-3f9c...a41e...77" rev=1
    B: e01 set key_target="sha-3f9c...a47e...77" rev=1     (one character differs)
    both: e02 set key_target="sha-90b2...1c" rev=2
    current  -> both sha-90b2...1c
    reveal   e03 replay key_target target=e01 rev=3 -> A and B get their own old hash
    override e04 set key_target="sha-5d1e...0a" rev=3 -> both sha-5d1e...0a
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family

_HEX = "0123456789abcdef"


def _identifier(rng: random.Random) -> str:
    return "sha-" + "".join(rng.choice(_HEX) for _ in range(40))


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target = b.key("target")
    old_a = _identifier(rng)
    position = rng.randrange(12, 36)
    swapped = rng.choice([c for c in _HEX if c != old_a[position]])
    old_b = old_a[:position] + swapped + old_a[position + 1 :]
    old_id = b.new_id()
    latest = b.set(target, _identifier(rng), 2)
    return b.draft(
        query=[target],
        variant_a=[b.set(target, old_a, 1, id=old_id), latest],
        variant_b=[b.set(target, old_b, 1, id=old_id), latest],
        reveal=[b.replay(target, old_id, 3)],
        override=[b.set(target, _identifier(rng), 3)],
    )


FAMILY = Family(
    name="exact_identifier",
    summary="superseded 40-char identifiers differ in one character; reveal replays the old one",
    paper=False,
    build=build,
)
