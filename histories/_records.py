"""Record kinds of the append-only log, as pydantic models.

Log order carries no meaning: precedence comes from ``rev`` and the clock, which
is why a prefix can be permuted without changing any answer.  The canonical JSON
of a record is one object with ``id``, ``op`` and that op's fields, in the order
declared here, with absent optional fields left out.

Kinds beyond the paper's six (``add``, ``when``, and ``starts`` on ``set`` and
``copy``) are each needed by one family; ``docs/pair-format.md`` documents them.

Every kind may carry ``text``, last: a *natural* record (``histories.natural``)
holds the words its source wrote (a dialogue turn, a tool observation, a rule
line) and, in its other fields, the structured annotation E_q reads.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

_R = TypeVar("_R", bound="_Record")

IDENTIFIER_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
"""Keys and record ids: short, whitespace-free labels (they are what renaming rewrites)."""

Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
Revision = Annotated[int, Field(ge=0, le=10**12)]
Tick = Annotated[int, Field(ge=0, le=10**12)]
Value = Annotated[str, Field(max_length=10_000)]
Text = Annotated[str, Field(min_length=1, max_length=10_000)]
"""The words of a natural record, as its source wrote them (``histories.natural``)."""


class _Record(BaseModel):
    """Common shape: every record has a unique id within its history."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Identifier
    """Unique record id within one history (prefix plus future)."""

    def to_dict(self) -> dict[str, Any]:
        """Canonical field order, optional fields that are unset left out."""
        return self.model_dump(exclude_none=True)

    def canonical_json(self) -> str:
        """One compact JSON object; the byte form that budgets count.

        Same bytes as ``json.dumps(to_dict(), separators=(",", ":"),
        ensure_ascii=False)``, produced by pydantic's serializer (3x faster).
        """
        return self.model_dump_json(exclude_none=True)

    # Derived once per record and kept in the instance (records are immutable): a
    # packer measures and writes the same records on every update, and an attribute
    # of the record is cheaper to reach than any table keyed by it.  Copies drop
    # them (``__copy__``, ``replace_fields``), so a changed copy never inherits them.

    @cached_property
    def canonical_line(self) -> str:
        """``canonical_json()``, computed on first use."""
        return self.canonical_json()

    @cached_property
    def canonical_size(self) -> int:
        """UTF-8 bytes of ``canonical_line``: what the record takes in a memory."""
        line = self.canonical_line
        return len(line) if line.isascii() else len(line.encode("utf-8"))

    def __copy__(self: _R) -> _R:
        copied = super().__copy__()
        _drop_derived(copied)
        return copied

    def __deepcopy__(self: _R, memo: dict[int, Any] | None = None) -> _R:
        copied = super().__deepcopy__(memo)
        _drop_derived(copied)
        return copied

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        return {**state, "__dict__": _fields_only(self)}


_DERIVED = ("canonical_line", "canonical_size")
"""Values cached in a record's ``__dict__`` beside its fields."""


def _drop_derived(record: _Record) -> None:
    for name in _DERIVED:
        record.__dict__.pop(name, None)


def _fields_only(record: _Record) -> dict[str, Any]:
    data = record.__dict__
    if _DERIVED[0] in data or _DERIVED[1] in data:
        return {k: v for k, v in data.items() if k not in _DERIVED}
    return data


class SetRecord(_Record):
    """Proposes a literal value for ``key``."""

    op: Literal["set"] = "set"
    key: Identifier
    value: Value
    rev: Revision
    expires: Tick | None = None
    """Last tick (inclusive) at which the record is valid."""
    starts: Tick | None = None
    """First tick at which the record is valid (extension: scheduled changes)."""
    text: Text | None = None
    """Natural records only: the source's own words; the other fields annotate them."""


class CopyRecord(_Record):
    """``key`` takes whatever ``src`` resolves to (an alias or dependency)."""

    op: Literal["copy"] = "copy"
    key: Identifier
    src: Identifier
    rev: Revision
    expires: Tick | None = None
    starts: Tick | None = None
    text: Text | None = None


class ChooseRecord(_Record):
    """``key`` takes the option whose label equals the selector key's value."""

    op: Literal["choose"] = "choose"
    key: Identifier
    selector: Identifier
    options: dict[Value, Identifier] = Field(min_length=1, max_length=64)
    """Map from selector value (an option label) to the key it points at."""
    rev: Revision
    text: Text | None = None


class RevokeRecord(_Record):
    """Permanently invalidates ``target``; also blocks any replay of it."""

    op: Literal["revoke"] = "revoke"
    target: Identifier
    text: Text | None = None


class ReplayRecord(_Record):
    """Re-asserts record ``target`` for ``key`` at revision ``rev``, unless revoked."""

    op: Literal["replay"] = "replay"
    key: Identifier
    target: Identifier
    rev: Revision
    text: Text | None = None


class TickRecord(_Record):
    """Advances the clock; the clock is the largest ``now`` present."""

    op: Literal["tick"] = "tick"
    now: Tick
    text: Text | None = None


class AddRecord(_Record):
    """Extension: adds ``delta`` to the key's winning integer value if ``rev`` is newer."""

    op: Literal["add"] = "add"
    key: Identifier
    delta: Annotated[int, Field(ge=-(10**12), le=10**12)]
    rev: Revision
    expires: Tick | None = None
    text: Text | None = None


class WhenRecord(_Record):
    """Extension: binds ``key`` to ``value`` only while ``cond_key`` equals ``cond_value``."""

    op: Literal["when"] = "when"
    key: Identifier
    cond_key: Identifier
    cond_value: Value
    value: Value
    rev: Revision
    expires: Tick | None = None
    text: Text | None = None


Record = Annotated[
    SetRecord
    | CopyRecord
    | ChooseRecord
    | RevokeRecord
    | ReplayRecord
    | TickRecord
    | AddRecord
    | WhenRecord,
    Field(discriminator="op"),
]
"""Any record kind, discriminated by ``op``."""

BindingRecord = SetRecord | CopyRecord | ChooseRecord | ReplayRecord | WhenRecord
"""Kinds that compete, by revision, to decide a key's value."""

KeyedRecord = BindingRecord | AddRecord
"""Kinds that name a ``key``."""

RECORD_KINDS: dict[str, type[_Record]] = {
    kind.model_fields["op"].default: kind for kind in get_args(get_args(Record)[0])
}
"""Each kind's class by ``op``, in ``Record``'s order."""

LABEL_FIELDS: dict[str, tuple[str, ...]] = {
    "set": ("key",),
    "copy": ("key", "src"),
    "choose": ("key", "selector"),
    "revoke": ("target",),
    "replay": ("key", "target"),
    "tick": (),
    "add": ("key",),
    "when": ("key", "cond_key"),
}
"""Scalar fields holding a label (besides ``id``), per op; ``choose`` options too."""

_DEFAULTS: dict[type[_Record], dict[str, Any]] = {
    kind: {name: info.default for name, info in kind.model_fields.items()}
    for kind in RECORD_KINDS.values()
}

RECORD_ADAPTER: TypeAdapter[Record] = TypeAdapter(Record)
RECORD_LIST_ADAPTER: TypeAdapter[list[Record]] = TypeAdapter(list[Record])


def replace_fields(record: _R, update: dict[str, Any]) -> _R:
    """A copy of ``record`` with ``update`` applied, without re-validation.

    For values already known to be valid (labels from a bijective renaming).
    ``model_copy`` costs ~10x more here, and renaming 40 copies of every pair is
    the audit's hot path.
    """
    return _unvalidated(
        type(record), {**_fields_only(record), **update}, record.__pydantic_fields_set__
    )


def trusted(cls: type[_R], **fields: Any) -> _R:
    """Build a record from values the caller guarantees valid, without validation.

    For generator-internal records only (labels from the label makers, ints from the
    generator's own arithmetic); every generated pair is still verified by E_q, and
    every loaded pair is fully validated.  ~3x cheaper than validating constructors,
    which dominated generation time.
    """
    return _unvalidated(cls, {**_DEFAULTS[cls], **fields}, set(fields))


def _unvalidated(cls: type[_R], data: dict[str, Any], fields_set: set[str]) -> _R:
    new = cls.__new__(cls)
    object.__setattr__(new, "__dict__", data)
    object.__setattr__(new, "__pydantic_fields_set__", fields_set)
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def record_from_json(line: str) -> Record:
    """Validate one canonical JSON line."""
    return RECORD_ADAPTER.validate_json(line)


def referenced_keys(record: Record) -> tuple[str, ...]:
    """Keys a record reads or writes, in a stable order (used by closures and renaming).

    Dispatches on ``op`` (one literal per kind), not on the class: ``isinstance`` on a
    pydantic model goes through a Python-level ``__instancecheck__``, and closures ask
    this of every record on every update.
    """
    op = record.op
    if op == "set" or op == "add" or op == "replay":
        return (record.key,)  # type: ignore[union-attr]
    if op == "copy":
        return (record.key, record.src)  # type: ignore[union-attr]
    if op == "choose":
        return (record.key, record.selector, *record.options.values())  # type: ignore[union-attr]
    if op == "when":
        return (record.key, record.cond_key)  # type: ignore[union-attr]
    return ()
