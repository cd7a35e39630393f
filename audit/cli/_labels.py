"""Short aliases for condition names that do not fit the terminal, as few as need one.

A condition's name is its label (a ``cmd:`` spec, ``name=``, a plugin's name); one
long name must not rename every other condition: the longest names are aliased first,
one at a time, until the table fits, and the others keep their own names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

ALIAS_LONGER_THAN = 16
"""Only a condition name longer than this is ever given an alias."""


def fitting_aliases(names: Sequence[str], fits: Callable[[dict[str, str]], bool]) -> dict[str, str]:
    """Aliases (``c1``, ``c2``... in table order) for the fewest long names, longest
    first, with which ``fits`` says the table fits (every long name when none does)."""
    distinct = list(dict.fromkeys(names))
    long = sorted((n for n in distinct if len(n) > ALIAS_LONGER_THAN), key=len, reverse=True)
    aliases: dict[str, str] = {}
    for count in range(1, len(long) + 1):
        chosen = set(long[:count])
        aliases = {
            name: f"c{index}"
            for index, name in enumerate((n for n in distinct if n in chosen), start=1)
        }
        if fits(aliases):
            break
    return aliases
