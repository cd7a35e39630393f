"""Shared hypothesis strategies and helpers for record logs.

Logs are drawn over a deliberately tiny alphabet (4 keys, 10 record ids, a few
values, revisions 0..3, ticks 0..4) so that random logs are dense in the cases
E_q must get right: revision ties, copy / choose / ``when`` cycles, self
references, dangling references (revokes and replays of ids that are absent),
revokes of revokes, replays of replays, ``add`` on non-integer bases, expiry and
``starts`` boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from histories import (
    AddRecord,
    ChooseRecord,
    CopyRecord,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    WhenRecord,
)

KEYS: tuple[str, ...] = ("a", "b", "c", "d")
"""Keys a random log may bind or read."""

IDS: tuple[str, ...] = tuple(f"r{i}" for i in range(10))
"""Record ids; a log uses a subset, so revokes / replays of the rest dangle."""

NAMES: tuple[str, ...] = KEYS + IDS
"""Every identifier a random log can contain (what a renaming permutes)."""

VALUES: tuple[str, ...] = ("x", "y", "0", "7", "-2")
"""Literal values; also the option labels and condition values, so selectors match."""

ALL_KINDS: tuple[str, ...] = ("set", "copy", "choose", "revoke", "replay", "tick", "add", "when")

keys = st.sampled_from(KEYS)
ids = st.sampled_from(IDS)
values = st.sampled_from(VALUES)
revs = st.integers(min_value=0, max_value=3)
ticks = st.integers(min_value=0, max_value=4)
optional_ticks = st.none() | ticks
deltas = st.integers(min_value=-3, max_value=3)


_PLACEHOLDER_ID = st.just("placeholder")

_BUILDERS: dict[str, st.SearchStrategy[Record]] = {
    "set": st.builds(
        SetRecord,
        id=_PLACEHOLDER_ID,
        key=keys,
        value=values,
        rev=revs,
        expires=optional_ticks,
        starts=optional_ticks,
    ),
    "copy": st.builds(
        CopyRecord,
        id=_PLACEHOLDER_ID,
        key=keys,
        src=keys,
        rev=revs,
        expires=optional_ticks,
        starts=optional_ticks,
    ),
    "choose": st.builds(
        ChooseRecord,
        id=_PLACEHOLDER_ID,
        key=keys,
        selector=keys,
        options=st.dictionaries(values, keys, min_size=1, max_size=3),
        rev=revs,
    ),
    "revoke": st.builds(RevokeRecord, id=_PLACEHOLDER_ID, target=ids),
    "replay": st.builds(ReplayRecord, id=_PLACEHOLDER_ID, key=keys, target=ids, rev=revs),
    "tick": st.builds(TickRecord, id=_PLACEHOLDER_ID, now=ticks),
    "add": st.builds(
        AddRecord, id=_PLACEHOLDER_ID, key=keys, delta=deltas, rev=revs, expires=optional_ticks
    ),
    "when": st.builds(
        WhenRecord,
        id=_PLACEHOLDER_ID,
        key=keys,
        cond_key=keys,
        cond_value=values,
        value=values,
        rev=revs,
        expires=optional_ticks,
    ),
}

_BODIES: dict[tuple[str, ...], st.SearchStrategy[Record]] = {}


def record_bodies(kinds: Sequence[str] = ALL_KINDS) -> st.SearchStrategy[Record]:
    """Records of any of ``kinds`` with a placeholder id (built once per ``kinds``:
    constructing strategies per draw dominated the run time)."""
    kinds = tuple(kinds)
    if kinds not in _BODIES:
        _BODIES[kinds] = st.one_of(*(_BUILDERS[kind] for kind in kinds))
    return _BODIES[kinds]


@st.composite
def logs(
    draw: st.DrawFn,
    min_size: int = 0,
    max_size: int = 10,
    kinds: Sequence[str] = ALL_KINDS,
) -> list[Record]:
    """A random log with unique record ids drawn from ``IDS``."""
    size = draw(st.integers(min_value=min_size, max_value=min(max_size, len(IDS))))
    chosen = draw(st.permutations(IDS))[:size]
    bodies = record_bodies(kinds)
    return [draw(bodies).model_copy(update={"id": rid}) for rid in chosen]


@st.composite
def renamings(draw: st.DrawFn) -> dict[str, str]:
    """A bijection on ``NAMES`` (keys may even swap names with record ids)."""
    return dict(zip(NAMES, draw(st.permutations(NAMES)), strict=True))


@st.composite
def splits(draw: st.DrawFn, log: Sequence[Record]) -> tuple[list[Record], list[Record]]:
    """A random (prefix, future) split of ``log``: each record goes to one side."""
    to_future = draw(st.lists(st.booleans(), min_size=len(log), max_size=len(log)))
    prefix = [r for r, f in zip(log, to_future, strict=True) if not f]
    future = [r for r, f in zip(log, to_future, strict=True) if f]
    return prefix, future


def rename_record(record: Record, mapping: Mapping[str, str]) -> Record:
    """Apply ``mapping`` to every identifier of ``record`` (never to values or labels).

    Renamed: ``id``, ``key``, ``src``, ``selector``, the option *targets*,
    ``target``, ``cond_key``.  Not renamed: ``value``, option labels, ``cond_value``.
    The mapping must be total on the record's identifiers (a KeyError otherwise).
    """
    update: dict[str, object] = {"id": mapping[record.id]}
    for field in ("key", "src", "selector", "target", "cond_key"):
        if hasattr(record, field):
            update[field] = mapping[getattr(record, field)]
    if isinstance(record, ChooseRecord):
        update["options"] = {label: mapping[src] for label, src in record.options.items()}
    return record.model_copy(update=update)


def rename_log(log: Iterable[Record], mapping: Mapping[str, str]) -> list[Record]:
    return [rename_record(r, mapping) for r in log]


def _key_dependencies(
    record: Record, by_id: Mapping[str, Record], seen: frozenset[str] = frozenset()
) -> list[tuple[str, bool]]:
    """Keys a binding record's activity or payload reads, flagged True for ``when`` conditions."""
    match record:
        case CopyRecord():
            return [(record.src, False)]
        case ChooseRecord():
            return [(record.selector, False)] + [(k, False) for k in record.options.values()]
        case WhenRecord():
            return [(record.cond_key, True)]
        case ReplayRecord():
            target = by_id.get(record.target)
            if target is None or record.id in seen:
                return []
            return _key_dependencies(target, by_id, seen | {record.id})
        case _:
            return []


def has_when_cycle(log: Sequence[Record]) -> bool:
    """Whether some dependency cycle among keys passes through a ``when`` condition.

    Only such cycles can make E_q's result depend on evaluation order: a cycle made
    of copy / choose edges evaluates to null at every key on it however it is
    entered, but a ``when`` condition cut to null makes the rule dormant and lets
    another candidate win.
    """
    by_id = {r.id: r for r in log}
    edges: dict[str, set[str]] = {}
    when_edges: set[tuple[str, str]] = set()
    for record in log:
        if isinstance(record, SetRecord | CopyRecord | ChooseRecord | ReplayRecord | WhenRecord):
            for dep, is_when in _key_dependencies(record, by_id):
                edges.setdefault(record.key, set()).add(dep)
                if is_when:
                    when_edges.add((record.key, dep))

    def reaches(start: str, goal: str) -> bool:
        stack, visited = [start], set()
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node in visited:
                continue
            visited.add(node)
            stack.extend(edges.get(node, ()))
        return False

    return any(reaches(cond, key) for key, cond in when_edges)
