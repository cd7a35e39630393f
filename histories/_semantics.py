"""The public semantics of the record kinds, as shown to LLM writers and readers.

Target-aware writers and readers may know how records are resolved (this text);
they never see the future, the gold answer or the family.
"""

from __future__ import annotations

PUBLIC_SEMANTICS = """\
The history is an append-only log of records. Log order carries no meaning; precedence
comes only from revision numbers (rev) and the clock.
Record kinds:
- set {key, value, rev, expires?, starts?}: proposes the literal value for key.
- copy {key, src, rev, expires?, starts?}: key takes whatever key src resolves to.
- choose {key, selector, options {label: key}, rev}: key takes the value of the option
  whose label equals the current value of the selector key.
- revoke {target}: permanently invalidates record target; it also blocks any replay of it.
- replay {key, target, rev}: re-asserts record target at revision rev, unless target was
  revoked (then the replay has no effect).
- tick {now}: the clock is the largest now present (0 if none).
- add {key, delta, rev, expires?}: adds the integer delta to the key's winning value
  when rev is greater than the winner's rev.
- when {key, cond_key, cond_value, value, rev, expires?}: binds key to value only while
  cond_key resolves to cond_value; otherwise it is dormant.
A record is valid while starts <= clock <= expires (each bound optional).
To resolve a key: among its records that are not revoked and are valid (and active),
the highest rev wins. Two winners with the same rev give null. If the winner depends
on something missing, the answer is null: never fall back to an older record.
A key with no such record is null. Values are strings."""
