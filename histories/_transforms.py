"""Metamorphic transforms: meaning-preserving rewrites that expose shortcuts.

``rename``, ``permute``, ``decoy``, ``relabel``, ``rerev``, ``revalue``, ``disguise``,
``entity`` (natural pairs) and ``rechunk``: each is described in ``docs/method.md``
("Metamorphic transforms") and declared once in ``TRANSFORMS`` below.  Every
transformed pair is re-verified by E_q: gold answers are recomputed and must equal
the transformed source gold, and the pair property must still hold.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from histories._errors import MemoryAuditError
from histories._labels import WORDS, between, pick, random_label
from histories._pair import (
    VARIANTS,
    Futures,
    Gold,
    GoldPair,
    Pair,
    PairPropertyError,
    TransformInfo,
    Variant,
    VariantName,
    Variants,
    check_pair,
    slot_chunks,
)
from histories._records import LABEL_FIELDS, Record, referenced_keys, replace_fields

_DISTRACTOR_FIRST = string.ascii_lowercase[:13]  # a-m
_TASK_FIRST = string.ascii_lowercase[13:]  # n-z


class TransformError(MemoryAuditError, ValueError):
    """A transform produced a pair E_q does not verify (a bug, never expected)."""


def record_labels(record: Record) -> Iterator[str]:
    """Every label a record carries: its id, the keys it names, the record it targets."""
    yield record.id
    yield from referenced_keys(record)
    if record.op in ("revoke", "replay"):
        yield record.target


def pair_labels(pair: Pair) -> list[str]:
    """All labels of a pair in first-seen order (query first)."""
    labels: dict[str, None] = dict.fromkeys(pair.query)
    labels.update(dict.fromkeys(pair.task_keys))
    for record in pair.all_records():
        labels.update(dict.fromkeys(record_labels(record)))
    return list(labels)


def rename_record(record: Record, mapping: Mapping[str, str]) -> Record:
    """The record with every label replaced through ``mapping`` (values untouched)."""
    update: dict[str, object] = {"id": mapping[record.id]}
    for name in LABEL_FIELDS[record.op]:
        update[name] = mapping[getattr(record, name)]
    if record.op == "choose":
        update["options"] = {label: mapping[key] for label, key in record.options.items()}
    return replace_fields(record, update)


def apply_mapping(pair: Pair, mapping: Mapping[str, str]) -> Pair:
    """Rename every label of ``pair`` (no verification, no provenance)."""
    return _map_records(
        pair,
        lambda record: rename_record(record, mapping),
        _gold(pair, lambda answer: {mapping[key]: value for key, value in answer.items()}),
        query=[mapping[k] for k in pair.query],
        task_keys=[mapping[k] for k in pair.task_keys],
    )


def task_labels(pair: Pair) -> set[str]:
    """Labels that belong to the task: its keys, and ids of records that write them.

    A record that only reads a task key (a task-like distractor's copy or choice) is
    not the task's: it writes a distractor key."""
    task_keys = set(pair.task_keys) | set(pair.query)
    labels = set(task_keys)
    records = list(pair.all_records())
    for record in records:
        if record.op == "tick" or getattr(record, "key", None) in task_keys:
            labels.add(record.id)
    for record in records:  # revokes of task records are task records
        if record.op == "revoke" and record.target in labels:
            labels.add(record.id)
    return labels


def _bijection(labels: Iterable[str], draw: Callable[[str], str]) -> dict[str, str]:
    """Each label to a fresh one from ``draw(label)``, redrawn until unused."""
    used: set[str] = set()
    mapping: dict[str, str] = {}
    for label in labels:
        new = draw(label)
        while new in used:
            new = draw(label)
        used.add(new)
        mapping[label] = new
    return mapping


def _verified(
    source: Pair, pair: Pair, kind: str, index: int, mapping: dict[str, str] | None = None
) -> Pair:
    """``pair`` as the ``index``-th ``kind`` of ``source`` (its provenance), checked by E_q."""
    pair = pair.model_copy(
        update={
            "pair_id": f"{source.pair_id}~{kind}{index:02d}",
            "source_pair_id": source.pair_id,
            "transform": TransformInfo(kind=kind, index=index, mapping=mapping or {}),
        }
    )
    try:
        check_pair(pair)
    except PairPropertyError as error:
        raise TransformError(f"transform broke the pair: {error}") from error
    return pair


def _rng(pair: Pair, kind: str, index: int, seed: int) -> random.Random:
    """The transform's generator; refuses a pair that is already transformed."""
    if pair.transform is not None:
        raise ValueError(f"pair {pair.pair_id} is already transformed; transform its source")
    return random.Random(f"{seed}/{pair.pair_id}/{kind}/{index}")


def rename(pair: Pair, index: int, seed: int = 0) -> Pair:
    """The ``index``-th random renaming of a source pair, verified."""
    rng = _rng(pair, "rename", index, seed)
    mapping = _bijection(pair_labels(pair), lambda label: random_label(rng, len(label)))
    return _verified(pair, apply_mapping(pair, mapping), "rename", index, mapping)


def decoy(pair: Pair, index: int, seed: int = 0) -> Pair:
    """A renaming under which every distractor label sorts before every task label."""
    rng = _rng(pair, "decoy", index, seed)
    task = task_labels(pair)

    def draw(label: str) -> str:
        return random_label(rng, len(label), _TASK_FIRST if label in task else _DISTRACTOR_FIRST)

    mapping = _bijection(pair_labels(pair), draw)
    return _verified(pair, apply_mapping(pair, mapping), "decoy", index, mapping)


def _reshaped_label(rng: random.Random) -> str:
    """A label of a random shape and length: every label, task or distractor, key or
    record id, is drawn from this one distribution."""
    shape = between(rng, 0, 3)
    if shape == 0:
        return random_label(rng, between(rng, 3, 12))
    if shape == 1:
        return f"{pick(rng, WORDS)}_{between(rng, 0, 999)}"
    if shape == 2:
        return f"{pick(rng, WORDS)}-{pick(rng, WORDS)}"
    return f"{pick(rng, string.ascii_lowercase)}{between(rng, 0, 999_999)}"


def relabel(pair: Pair, index: int, seed: int = 0) -> Pair:
    """A renaming onto labels of new lengths and shapes (one distribution for all)."""
    rng = _rng(pair, "relabel", index, seed)
    mapping = _bijection(pair_labels(pair), lambda _: _reshaped_label(rng))
    return _verified(pair, apply_mapping(pair, mapping), "relabel", index, mapping)


def _permuted(pair: Pair, rng: random.Random) -> Pair:
    """The prefix reordered (one slot order for A and B), not verified."""
    by_variant = {v: {r.id: r for r in pair.prefix(v)} for v in VARIANTS}
    order = list(dict.fromkeys([*by_variant["A"], *by_variant["B"]]))
    rng.shuffle(order)
    a, b = (  # the same valid records, in a new order
        Variant.model_construct(chunks=slot_chunks(order, by_variant[v], pair.chunk_size))
        for v in VARIANTS
    )
    return pair.model_copy(update={"variants": Variants.model_construct(A=a, B=b)})


def permute(pair: Pair, index: int, seed: int = 0) -> Pair:
    """The ``index``-th reordering of the prefix (same slot order for A and B), verified."""
    return _verified(pair, _permuted(pair, _rng(pair, "permute", index, seed)), "permute", index)


# ------------------------------------------------------------------ revisions


def _rev_of(record: Record) -> int | None:
    return getattr(record, "rev", None)


def rev_maps(records: Iterable[Record], rng: random.Random) -> dict[str, dict[int, int]]:
    """Per key, a random strictly increasing map of the revisions its records carry.

    Each key's distinct revisions get as many distinct new ones drawn from 1..R, R the
    largest revision of the log (at least the key's count): the pair's own range, so
    memories do not grow, and a key's revisions say nothing of what other keys have.
    """
    by_key: dict[str, set[int]] = {}
    for record in records:
        rev = _rev_of(record)
        if rev is not None:
            by_key.setdefault(record.key, set()).add(rev)  # type: ignore[union-attr]
    top = max((max(revs) for revs in by_key.values()), default=0)
    maps: dict[str, dict[int, int]] = {}
    for key in sorted(by_key):  # sorted: the draw must not depend on set order
        old = sorted(by_key[key])
        new = sorted(rng.sample(range(1, max(top, len(old)) + 1), len(old)))
        maps[key] = dict(zip(old, new, strict=True))
    return maps


def rerev_record(record: Record, maps: Mapping[str, Mapping[int, int]]) -> Record:
    """The record with its revision remapped through its key's map (others untouched)."""
    rev = _rev_of(record)
    if rev is None:
        return record
    return replace_fields(record, {"rev": maps[record.key][rev]})  # type: ignore[union-attr]


def _reversioned(pair: Pair, rng: random.Random) -> Pair:
    """Every revision through its key's ``rev_maps``, not verified."""
    maps = rev_maps(pair.all_records(), rng)
    return _map_records(pair, lambda record: rerev_record(record, maps))


def rerev(pair: Pair, index: int, seed: int = 0) -> Pair:
    """The ``index``-th per-key monotone remap of every revision, verified (answers are
    unchanged: E_q compares revisions only within a key)."""
    return _verified(pair, _reversioned(pair, _rng(pair, "rerev", index, seed)), "rerev", index)


def _variants(pair: Pair, change: Callable[[list[list[Record]]], list[list[Record]]]) -> Variants:
    """Both variants' chunks passed through ``change`` (built without validation)."""
    return Variants.model_construct(
        A=Variant.model_construct(chunks=change(pair.variants.A.chunks)),
        B=Variant.model_construct(chunks=change(pair.variants.B.chunks)),
    )


def _map_records(
    pair: Pair, change: Callable[[Record], Record], gold: GoldPair | None = None, **update: object
) -> Pair:
    """The pair with every record passed through ``change`` (and ``gold`` if given).

    The parts are built without validation (``model_construct``): the transformed
    pair is verified by E_q afterwards, and validating again cost a tenth of a renaming.
    """

    def chunks(parts: Iterable[list[Record]]) -> list[list[Record]]:
        return [[change(r) for r in chunk] for chunk in parts]

    return pair.model_copy(
        update={
            **update,
            "variants": _variants(pair, chunks),
            "futures": Futures.model_construct(
                reveal=chunks(pair.futures.reveal), override=chunks(pair.futures.override)
            ),
            "gold": pair.gold if gold is None else gold,
        }
    )


def _gold(
    pair: Pair, change: Callable[[Mapping[str, str | None]], dict[str, str | None]]
) -> GoldPair | None:
    """Both gold answers with every answer passed through ``change``."""
    if pair.gold is None:
        return None
    return GoldPair.model_construct(
        A=_map_gold(pair.gold.A, change), B=_map_gold(pair.gold.B, change)
    )


def _through(
    change: Callable[[str], str],
) -> Callable[[Mapping[str, str | None]], dict[str, str | None]]:
    """An answer with every value (not a missing one) passed through ``change``."""
    return lambda answer: {key: None if v is None else change(v) for key, v in answer.items()}


# --------------------------------------------------------------------- values

_INTEGER = re.compile(r"^-?[0-9]{1,18}$")
"""What E_q's ``add`` arithmetic accepts as an integer (``histories._interpreter``)."""
_LONG = 19
"""Values longer than this can never read as integers (at most a sign and 18 digits);
they keep their length."""


def record_values(record: Record) -> Iterator[str]:
    """Every literal value a record carries: what ``revalue`` redraws."""
    op = record.op
    if op == "set":
        yield record.value  # type: ignore[union-attr]
    elif op == "when":
        yield record.cond_value  # type: ignore[union-attr]
        yield record.value  # type: ignore[union-attr]
    elif op == "choose":
        yield from record.options  # type: ignore[union-attr]


def _fresh_value(rng: random.Random) -> str:
    """One value from the one distribution every redrawn value comes from (never an
    integer: its first character is a letter)."""
    shape = between(rng, 0, 3)
    if shape == 0:
        return f"{pick(rng, WORDS)}-{between(rng, 0, 999)}"
    if shape == 1:
        return pick(rng, WORDS)
    if shape == 2:
        return random_label(rng, between(rng, 1, 10))
    return f"{pick(rng, WORDS)}_{pick(rng, WORDS)}"


class ValueMap:
    """A bijection on value strings that E_q cannot tell from the identity.

    E_q compares values only for equality, except that ``add`` needs an integer: so
    non-integers map to fresh non-integers, and integers to integers by one offset
    (then a sum maps like its parts: (v + c) + d = (v + d) + c).  With an integer that
    is not in canonical form (``07``) in the log, integers are left as they are.
    """

    def __init__(self, values: Iterable[str], rng: random.Random) -> None:
        found = sorted(set(values))
        integers = [v for v in found if _INTEGER.fullmatch(v)]
        canonical = all(str(int(v)) == v and abs(int(v)) < 10**15 for v in integers)
        self.offset = between(rng, 100, 9_999) if canonical else 0
        self.table: dict[str, str] = {}
        used: set[str] = set()
        long_values = [v for v in found if len(v) > _LONG]
        ciphers: list[dict[str, str]] = []
        if long_values:
            alphabet = sorted({c for v in long_values for c in v})
            width = max(map(len, long_values))
            for _ in range(width):
                shuffled = alphabet[:]
                rng.shuffle(shuffled)
                ciphers.append(dict(zip(alphabet, shuffled, strict=True)))
        for value in found:
            if _INTEGER.fullmatch(value):
                continue
            if len(value) > _LONG:  # a substitution per position: lengths and shared
                new = "".join(ciphers[i][c] for i, c in enumerate(value))  # positions kept
            else:
                new = _fresh_value(rng)
                while new in used:
                    new = _fresh_value(rng)
            used.add(new)
            self.table[value] = new

    def __call__(self, value: str) -> str:
        found = self.table.get(value)
        if found is not None:
            return found
        if _INTEGER.fullmatch(value):  # a literal, or a sum E_q computed
            return str(int(value) + self.offset) if self.offset else value
        raise TransformError(f"revalue: no value was drawn for {value!r}")

    def answer(self, answer: Mapping[str, str | None]) -> dict[str, str | None]:
        return _through(self)(answer)


def revalue_record(record: Record, values: Callable[[str], str]) -> Record:
    """The record with every literal value passed through ``values``."""
    op = record.op
    if op == "set":
        return replace_fields(record, {"value": values(record.value)})  # type: ignore[union-attr]
    if op == "when":
        return replace_fields(
            record,
            {"cond_value": values(record.cond_value), "value": values(record.value)},  # type: ignore[union-attr]
        )
    if op == "choose":
        options = {values(label): key for label, key in record.options.items()}  # type: ignore[union-attr]
        return replace_fields(record, {"options": options})
    return record


def _revalued(pair: Pair, rng: random.Random) -> Pair:
    """Every value (and the gold answers) through one ``ValueMap``, not verified."""
    values = ValueMap((v for record in pair.all_records() for v in record_values(record)), rng)
    return _map_records(
        pair, lambda record: revalue_record(record, values), _gold(pair, values.answer)
    )


def revalue(pair: Pair, index: int, seed: int = 0) -> Pair:
    """The ``index``-th consistent redraw of every value (gold answers mapped alike),
    verified by E_q."""
    return _verified(pair, _revalued(pair, _rng(pair, "revalue", index, seed)), "revalue", index)


def _map_gold(
    gold: Gold, change: Callable[[Mapping[str, str | None]], dict[str, str | None]]
) -> Gold:
    return Gold.model_construct(
        current=change(gold.current), reveal=change(gold.reveal), override=change(gold.override)
    )


# ----------------------------------------------------------------- disguise


def disguise(pair: Pair, index: int, seed: int = 0) -> Pair:
    """``relabel``, ``rerev``, ``revalue`` and ``permute`` together, from one generator,
    verified: no part of a record is left as the public data has it (a natural pair's
    values stay: its text states them)."""
    rng = _rng(pair, "disguise", index, seed)
    mapping = _bijection(pair_labels(pair), lambda _: _reshaped_label(rng))
    changed = _reversioned(apply_mapping(pair, mapping), rng)
    if pair.provenance is None:
        changed = _revalued(changed, rng)
    return _verified(pair, _permuted(changed, rng), "disguise", index, mapping)


# ----------------------------------------------------------------- entities

_EDGE = "(?<![A-Za-z0-9]){}(?![A-Za-z0-9])"


def _word(value: str) -> str:
    """A regex for ``value`` as a whole word; case-blind for a lower-case value (an
    annotation normalised to lower case, written capitalised in the text)."""
    escaped = re.escape(value)
    return _EDGE.format(f"(?i:{escaped})" if value.islower() else escaped)


def _literals(record: Record) -> Iterator[tuple[str, str]]:
    """(key, value) of every literal a record binds or tests."""
    if record.op == "set":
        yield record.key, record.value
    elif record.op == "when":
        yield record.key, record.value
        yield record.cond_key, record.cond_value


def entity_values(pair: Pair) -> dict[str, list[str]]:
    """The entities ``entity`` may replace: value -> the values its source's ontology
    gives every key the value is bound to, less any the pair names anywhere.  An entity
    is the value of a key its source names an entity slot, stated in the text of every
    record that sets it, and never the value of any other key (nor a choice's option)."""
    if pair.provenance is None:
        return {}
    from histories.natural import ontology

    slots = ontology(pair.provenance.source)
    if not slots:
        return {}
    keys: dict[str, set[str]] = {}
    blocked: set[str] = set()
    records = list(pair.all_records())
    for record in records:
        if record.op == "choose":
            blocked.update(record.options)
        for key, value in _literals(record):
            if key in slots:
                keys.setdefault(value, set()).add(key)
            else:
                blocked.add(value)
    for record in records:
        if record.op != "set" or record.value not in keys:
            continue
        if not re.search(_word(record.value), record.text or ""):
            blocked.add(record.value)  # its words do not say it: the edit would contradict them
    seen = "\n".join(
        part for record in records
        for part in (record.text or "", *(value for _, value in _literals(record)))
    )  # fmt: skip
    lowered = seen.lower()
    found: dict[str, list[str]] = {}
    for value, bound in sorted(keys.items()):
        if value in blocked or not re.search("[A-Za-z0-9]", value):
            continue
        options = set.intersection(*(set(slots[key]) for key in bound))
        fresh = sorted(
            new for new in options  # the substring test first: most options are not there
            if new.lower() not in lowered or not re.search(_word(new), seen)
        )  # fmt: skip
        if fresh:  # a value named anywhere in the pair would merge two entities
            found[value] = fresh
    return found


def _substitution(table: Mapping[str, str]) -> Callable[[str], str]:
    """Every whole-word occurrence of an old value replaced by its new one, in one pass
    (longest first, so a name is replaced whole before a shorter value inside it)."""
    olds = sorted(table, key=lambda value: (-len(value), value))
    pattern = re.compile("|".join(_word(value) for value in olds))
    lower = {value.lower(): new for value, new in table.items() if value.islower()}

    def replace(match: re.Match[str]) -> str:
        found = match.group(0)
        if found in table:
            return table[found]
        new = lower[found.lower()]  # written in the text's case: "Wednesday" -> "Friday"
        if found.isupper():
            return new.upper()
        return new.title() if found.istitle() else new[:1].upper() + new[1:]

    return lambda text: pattern.sub(replace, text)


def _entity_record(record: Record, change: Callable[[str], str]) -> Record:
    """Values as ``revalue`` maps them (not a choice's labels: never an entity), and text."""
    moved = record if record.op == "choose" else revalue_record(record, change)
    return moved if record.text is None else replace_fields(moved, {"text": change(record.text)})


def entity(
    pair: Pair, index: int, seed: int = 0, found: Mapping[str, list[str]] | None = None
) -> Pair:
    """The ``index``-th consistent replacement of a natural pair's entities by other
    values of their slots (``found``: ``entity_values``, computed once by ``transform``
    for all instances), in text, annotation and gold, verified.  Raises ``ValueError``
    for a pair with no entity (``transform`` gives it no instance)."""
    rng = _rng(pair, "entity", index, seed)
    table: dict[str, str] = {}
    for value, options in (entity_values(pair) if found is None else found).items():
        unused = [new for new in options if new not in table.values()]
        if unused:
            table[value] = unused[rng.randrange(len(unused))]
    if not table:
        raise ValueError(f"pair {pair.pair_id}: no entity to replace")
    change = _substitution(table)
    gold = _gold(pair, _through(change))
    changed = _map_records(pair, lambda record: _entity_record(record, change), gold)
    return _verified(pair, changed, "entity", index)


# ------------------------------------------------------------------ rechunk


def rechunk_size(chunk_size: int, index: int) -> int:
    """Records per update of the ``index``-th rechunking: the chunk size halved
    ``index + 1`` times, at least one (8 records: 4, 2, 1, 1, ...)."""
    return max(1, chunk_size >> (index + 1))


def _cut(chunks: Iterable[list[Record]], size: int) -> list[list[Record]]:
    return [chunk[i : i + size] for chunk in chunks for i in range(0, len(chunk), size)]


def rechunked_updates(pair: Pair, index: int, variant: VariantName = "A") -> int:
    """How many prefix updates the ``index``-th rechunking of ``pair`` streams."""
    return len(_cut(pair.variants.of(variant).chunks, rechunk_size(pair.chunk_size, index)))


def rechunk(pair: Pair, index: int, seed: int = 0) -> Pair:
    """The prefix of both variants cut into smaller chunks (``rechunk_size``), verified."""
    _rng(pair, "rechunk", index, seed)  # refuses a transformed pair
    size = rechunk_size(pair.chunk_size, index)
    cut = pair.model_copy(update={"variants": _variants(pair, lambda chunks: _cut(chunks, size))})
    return _verified(pair, cut, "rechunk", index)


@dataclass(frozen=True)
class Transform:
    """One metamorphic transform, declared once: every list of transforms (the plan's
    names, the help, which checks and scores apply) is read off these flags."""

    name: str
    apply: Callable[[Pair, int, int], Pair | None] | None
    """The ``index``-th copy of a source pair (``seed``), or None where this pair has no
    instance; None for ``identity``."""
    usage: str = ""
    """How ``--transforms`` names it, e.g. ``rename:K`` (default: ``NAME:K``)."""
    same_lengths: bool = False
    """A renaming that keeps every label's length: ``C(rename(H)) == rename(C(H))`` is
    checked for every condition (spelling dependence)."""
    order_only: bool = False
    """Changes only the arrival order: an order-invariance claim is checked."""
    reorders: bool = False
    """Changes the arrival order (alone or with more): memories compare as sets."""
    shortcut: bool = True
    """A shortcut test: in the floor check and the shortcut gaps (``rechunk``, repeated
    compaction, is not: a memory compacted more often may rightly keep less)."""
    natural: bool = True
    """Applies to natural pairs (their text states values as written)."""


TRANSFORMS: dict[str, Transform] = {}
"""Every transform by name, in the order the help and the tables give them."""


def register_transform(declared: Transform) -> Transform:
    """Add a transform: a function here (or anywhere) plus this one registration."""
    TRANSFORMS[declared.name] = declared
    return declared


def _entity_instance(pair: Pair, index: int, seed: int) -> Pair | None:
    found = entity_values(pair)  # none where the source names no entity (synthetic)
    return entity(pair, index, seed, found) if found else None


for _declared in (
    Transform("identity", None, usage="identity"),
    Transform("rename", rename, same_lengths=True),
    Transform("permute", permute, order_only=True, reorders=True),
    Transform("relabel", relabel),
    Transform("decoy", decoy, same_lengths=True),
    Transform("rerev", rerev),
    Transform("revalue", revalue, natural=False),
    Transform("disguise", disguise, reorders=True),
    Transform("entity", _entity_instance, usage="entity:K (natural pairs)"),
    Transform("rechunk", rechunk, shortcut=False),
):
    register_transform(_declared)

TransformName = str
"""A registered transform's name (``TRANSFORMS``)."""


def transform_usage() -> str:
    """The ``--transforms`` help's list of transforms, from the registry."""
    return ", ".join(t.usage or f"{t.name}:K" for t in TRANSFORMS.values())


def transform(pair: Pair, kind: TransformName, count: int = 1, seed: int = 0) -> list[Pair]:
    """``count`` transformed copies of a source pair (``identity`` returns the pair itself;
    a natural pair gets none of a transform that does not apply to it)."""
    declared = TRANSFORMS.get(kind)
    if declared is None:
        raise ValueError(f"unknown transform {kind!r}; known: {', '.join(TRANSFORMS)}")
    if declared.apply is None:
        return [pair]
    if count <= 0:
        raise ValueError(f"transform {kind}: K must be positive, got {count}")
    if not declared.natural and pair.provenance is not None:
        return []
    made = (declared.apply(pair, index, seed) for index in range(count))
    return [instance for instance in made if instance is not None]


def invert(pair: Pair) -> Pair:
    """Undo a renaming through the stored map: the source pair's labels come back.

    (A permutation keeps its new order: order carries no meaning; ``rerev`` and
    ``revalue`` keep their revisions and values: they store no label map; ``disguise``
    gets its labels back and keeps the rest.)
    """
    if pair.transform is None or pair.source_pair_id is None:
        return pair
    restored = apply_mapping(pair, pair.transform.inverse_mapping())
    return restored.model_copy(
        update={"pair_id": pair.source_pair_id, "source_pair_id": None, "transform": None}
    )
