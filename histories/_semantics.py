"""The public semantics of the record kinds, as shown to LLM writers and readers.

Target-aware writers and readers may know how records are resolved (this text);
they never see the future, the gold answer or the family.  It states every rule E_q
applies (``histories/_interpreter.py``), since LLM readers are scored against E_q:
``RESOLUTION_RULES`` names each rule and the words of this text that state it, and a
test checks that every rule of the interpreter's docstring is one of them.
"""

from __future__ import annotations

PUBLIC_SEMANTICS = """\
The history is an append-only log of records. Log order carries no meaning; precedence
comes only from revision numbers (rev) and the clock.
Record kinds:
- set {key, value, rev, expires?, starts?}: proposes the literal value for key.
- copy {key, src, rev, expires?, starts?}: key takes whatever key src resolves to.
- choose {key, selector, options {label: key}, rev}: key takes the value of the option
  whose label equals the current value of the selector key (no such option: null).
- revoke {target}: permanently invalidates record target; it also blocks any replay of it.
  A revoke that targets another revoke has no effect: a revocation cannot be undone.
- replay {key, target, rev}: re-asserts record target at revision rev, with target's
  validity window (starts, expires) and, for a when, its condition: it counts only while
  target is not revoked and would itself count. A replay whose target is missing, or is
  not a set, copy, choose, replay or when, still counts and gives null.
- tick {now}: the clock is the largest now among ticks that are not revoked (0 if none):
  a revoked tick does not advance the clock.
- add {key, delta, rev, expires?}: every add that is valid, not revoked and has a rev
  greater than the winner's is summed onto the key's winning value, which must then be
  an integer (else null).
- when {key, cond_key, cond_value, value, rev, expires?}: binds key to value only while
  cond_key resolves to cond_value; otherwise it is dormant.
A record is valid while starts <= clock <= expires (each bound optional).
To resolve a key: among its records that are not revoked and are valid (and active),
the highest rev wins. Two winners with the same rev give null. If the winner depends
on something missing, the answer is null: never fall back to an older record. A key
that depends on itself (a cycle) is null.
A key with no such record is null. Values are strings."""

RESOLUTION_RULES: dict[str, str] = {
    "clock": "the clock is the largest now among ticks that are not revoked (0 if none)",
    "revoked_tick": "a revoked tick does not advance the clock",
    "time_valid": "A record is valid while starts <= clock <= expires",
    "revoke": "permanently invalidates record target",
    "revoke_of_revoke": "A revoke that targets another revoke has no effect",
    "candidates": "among its records that are not revoked and are valid (and active)",
    "when_active": "binds key to value only while cond_key resolves to cond_value",
    "replay_active": "it counts only while target is not revoked and would itself count",
    "replay_window": "with target's validity window (starts, expires) and, for a when, its "
    "condition",
    "replay_missing": "A replay whose target is missing, or is not a set, copy, choose, "
    "replay or when, still counts and gives null",
    "highest_rev": "the highest rev wins",
    "tie": "Two winners with the same rev give null",
    "copy": "key takes whatever key src resolves to",
    "choose": "whose label equals the current value of the selector key (no such option: null)",
    "no_fallback": "never fall back to an older record",
    "cycle": "A key that depends on itself (a cycle) is null",
    "add": "every add that is valid, not revoked and has a rev greater than the winner's "
    "is summed onto the key's winning value",
    "add_integer": "which must then be an integer (else null)",
}
"""Every resolution rule E_q applies -> the words of ``PUBLIC_SEMANTICS`` that state it
(compared with whitespace collapsed).  A rule added to the interpreter needs an entry
here and its statement in the text (``tests/audit/scoring/test_llm_validity.py``)."""
