"""The paired history: two variants, one query, two shared futures, gold answers.

A pair is the unit of the audit.  Its *pair property* makes a failure provable:
both variants give the same current answer, the reveal future makes their answers
differ, and the override future makes them equal again.  ``check_pair`` verifies
it with E_q and names the field or property that fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from histories._errors import MemoryAuditError
from histories._interpreter import Answer, LogIndex
from histories._records import IDENTIFIER_PATTERN, Identifier, Record

VariantName = Literal["A", "B"]
FutureName = Literal["reveal", "override"]
Branch = Literal["current", "reveal", "override"]
RenderStyle = Literal["json", "log", "prose"]


def _registered(kind: str) -> str:
    from histories._transforms import TRANSFORMS  # the registry imports this module

    if kind == "identity" or kind not in TRANSFORMS:
        raise ValueError(f"unknown transform {kind!r}; known: {', '.join(TRANSFORMS)}")
    return kind


TransformKind = Annotated[str, AfterValidator(_registered)]
"""A registered transform's name (``histories._transforms.TRANSFORMS``)."""

VARIANTS: tuple[VariantName, VariantName] = ("A", "B")
FUTURES: tuple[FutureName, FutureName] = ("reveal", "override")
BRANCHES: tuple[Branch, Branch, Branch] = ("current", "reveal", "override")

Chunk = list[Record]
PairId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:~\-]{1,200}$")]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Variant(_Model):
    """One variant's prefix, cut into the chunks a compressor streams."""

    chunks: list[Chunk] = Field(min_length=1)

    def records(self) -> list[Record]:
        return list(chain.from_iterable(self.chunks))


class Futures(_Model):
    """The shared futures; each is two chunks: the real operation, then distractors."""

    reveal: list[Chunk] = Field(min_length=1)
    """Exposes the hidden distinction: the answers of A and B differ after it."""
    override: list[Chunk] = Field(min_length=1)
    """Control: installs a new answer that is the same for both variants."""

    def of(self, name: FutureName) -> list[Chunk]:
        return self.reveal if name == "reveal" else self.override


def slot_chunks(
    order: Sequence[str], records: Mapping[str, Record], chunk_size: int
) -> list[Chunk]:
    """Cut a slot order shared by A and B into chunks; a variant keeps the records it has."""
    return [
        [records[rid] for rid in order[start : start + chunk_size] if rid in records]
        for start in range(0, len(order), chunk_size)
    ]


class Variants(_Model):
    A: Variant
    B: Variant

    def of(self, name: VariantName) -> Variant:
        return self.A if name == "A" else self.B


class Gold(_Model):
    """E_q's answers for one variant on each branch."""

    current: Answer
    reveal: Answer
    override: Answer

    def of(self, branch: Branch) -> Answer:
        return getattr(self, branch)  # type: ignore[no-any-return]


class GoldPair(_Model):
    A: Gold
    B: Gold

    def of(self, name: VariantName) -> Gold:
        return self.A if name == "A" else self.B


class TransformInfo(_Model):
    """How a transformed pair was derived from its source pair (stored, invertible)."""

    kind: TransformKind
    index: int = Field(ge=0)
    mapping: dict[str, str] = Field(default_factory=dict)
    """Old label -> new label (renamings and ``disguise``); empty for permutations,
    ``rerev`` and ``revalue`` (they change no label)."""

    def inverse_mapping(self) -> dict[str, str]:
        return {new: old for old, new in self.mapping.items()}


RESERVED_FAMILY = "all"
"""No family may be called this: it names the all-families cell of every score."""


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class SourceRef(_Model):
    """Where one variant of a natural pair comes from, exactly."""

    file: Annotated[str, Field(min_length=1, max_length=500)]
    """The source file, as the source names it (``test.json``, ``Europe/Paris``)."""
    sha256: Sha256
    """Of that file's bytes, so a reader can tell the same source from another."""
    item: Annotated[str, Field(min_length=1, max_length=200)]
    """The dialogue, reservation or zone id inside the file."""
    turn: int | None = Field(default=None, ge=0)
    """The source turn the pair is cut at (a dialogue), if any."""


class Provenance(_Model):
    """What a natural pair was derived from, and the one edit that made it a pair."""

    source: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    """The pack: ``tzdata``, ``multiwoz``, ``tau2``."""
    version: Annotated[str, Field(min_length=1, max_length=100)]
    """Of the source data (``tzdata 2026.6``), since other versions give other pairs."""
    licence: Annotated[str, Field(min_length=1, max_length=1000)]
    """The source's licence and the attribution it asks for."""
    A: SourceRef
    B: SourceRef
    edit: Annotated[str, Field(min_length=1, max_length=1000)]
    """How B differs from A, in words (a second zone; one slot value replaced)."""


class Pair(_Model):
    """One matched-prefix pair (one line of ``pairs.jsonl``)."""

    pair_id: PairId
    family: Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
    """A family id; ``all`` is reserved (scores name the all-families cell so)."""
    query: list[Identifier] = Field(min_length=1, max_length=64)
    variants: Variants
    futures: Futures
    gold: GoldPair | None = None
    """Filled by the generator and re-checked on load; hand-written pairs may omit it."""
    task_keys: list[Identifier] = Field(default_factory=list)
    """Keys the task uses; every other key belongs to a distractor (used by decoy renaming)."""
    chunk_size: int = Field(default=8, ge=1, le=100_000)
    render: RenderStyle = "json"
    source_pair_id: PairId | None = None
    """The independent source pair this one was transformed from (None: it is a source)."""
    transform: TransformInfo | None = None
    provenance: Provenance | None = None
    """Set on natural pairs (``histories.natural``): every record then carries ``text``."""

    @field_validator("family")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value == RESERVED_FAMILY:
            raise ValueError(
                f"family {value!r} is reserved: the scores name the all-families cell so"
            )
        return value

    @property
    def source_id(self) -> str:
        """The id that counts toward n: transforms never add independent pairs."""
        return self.source_pair_id or self.pair_id

    def prefix(self, variant: VariantName) -> list[Record]:
        return self.variants.of(variant).records()

    def future(self, name: FutureName) -> list[Record]:
        return list(chain.from_iterable(self.futures.of(name)))

    def history(self, variant: VariantName, branch: Branch) -> list[Record]:
        """The whole log a reader needs for ``branch``: prefix, plus the future if any."""
        records = self.prefix(variant)
        return records if branch == "current" else records + self.future(branch)

    def all_records(self) -> Iterator[Record]:
        for variant in VARIANTS:
            yield from self.prefix(variant)
        for future in FUTURES:
            yield from self.future(future)

    def to_json(self) -> str:
        """One line of pairs.jsonl (optional fields that are unset left out)."""
        return self.model_dump_json(exclude_none=True)


class PairPropertyError(MemoryAuditError, ValueError):
    """A pair fails verification; ``field`` names where and ``reason`` says what."""

    def __init__(self, pair_id: str, field: str, reason: str) -> None:
        super().__init__(f"pair {pair_id}: {field}: {reason}")
        self.pair_id, self.field, self.reason = pair_id, field, reason


def compute_gold(pair: Pair) -> GoldPair:
    """E_q on each variant and branch; one index per history."""
    golds = {}
    for variant in VARIANTS:
        prefix = LogIndex(pair.prefix(variant))
        answers = {
            "current": prefix.resolve(pair.query),
            "reveal": prefix.extended(pair.future("reveal")).resolve(pair.query),
            "override": prefix.extended(pair.future("override")).resolve(pair.query),
        }
        golds[variant] = Gold(**answers)
    return GoldPair(**golds)


WrongAnswer = Literal[
    "other_variant", "stale", "resurrected", "bound_elsewhere", "invented", "no_answer",
    "right_values",
]  # fmt: skip
WRONG_ANSWERS: dict[WrongAnswer, str] = {
    "other_variant": "the other variant's right answer on this branch: the collision shows "
    "through (what a memory that cannot tell the variants apart answers)",
    "stale": "this variant's answer before the future: the update not taken",
    "resurrected": "a value a revoked or expired record of this history binds",
    "bound_elsewhere": "a value this history binds, but not here and now: an outranked "
    "revision, a record not yet valid or whose condition fails, another key's value",
    "invented": "a value this history never binds",
    "no_answer": "no value: null where the answer is a value, or no answer at all (a "
    "memory E_q cannot read, a compressor that raised, a writer that failed, an LLM "
    "answer with no values)",
    "right_values": "the right values in a wrong form (the report's format failure)",
}
"""What the answer of a wrong read is, for the results' ``wrong_answer`` column.  Each
wrong key of an answer gets the first class that fits, in this order, and the answer
the first of its keys' (``AnswerClasses``)."""
_RANK: dict[WrongAnswer, int] = {name: rank for rank, name in enumerate(WRONG_ANSWERS)}


class AnswerClasses:
    """Classes wrong answers by what they are (``WRONG_ANSWERS``), exactly: from a pair's
    gold answers and, for an answer that is none of them, the values each history binds
    (``LogIndex.asserted``, worked out once per history and only when needed; a
    history is known by its pair's id, so the pairs one of these sees have distinct ids,
    as the instances of one job do)."""

    def __init__(self) -> None:
        self._bound: dict[tuple[str, str, str], tuple[set[str], set[str]]] = {}

    def classify(
        self, pair: Pair, variant: VariantName, branch: Branch, answer: object
    ) -> WrongAnswer:
        """The class of ``answer`` (``{key: value}``; anything else is no answer) read
        wrong on ``variant`` after ``branch``; ``right_values`` when no key is wrong."""
        if not isinstance(answer, dict):
            return "no_answer"
        assert pair.gold is not None, f"{pair.pair_id} has no gold answers"
        golds = pair.gold.of(variant)
        right, other = golds.of(branch), pair.gold.of("B" if variant == "A" else "A").of(branch)
        found: list[WrongAnswer] = []
        for key, want in right.items():
            value = answer.get(key)
            if value == want:
                continue
            if value == other[key]:
                found.append("other_variant")
            elif branch != "current" and value == golds.current[key]:
                found.append("stale")
            elif value is None:
                found.append("no_answer")
            elif not isinstance(value, str):
                found.append("invented")
            else:
                live, dead = self.bound(pair, variant, branch)
                found.append(
                    "resurrected" if value in dead
                    else "bound_elsewhere" if value in live
                    else "invented"
                )  # fmt: skip
        return min(found, key=_RANK.__getitem__) if found else "right_values"

    def bound(self, pair: Pair, variant: VariantName, branch: Branch) -> tuple[set[str], set[str]]:
        """(live, dead): the values the history of ``variant`` after ``branch`` binds."""
        key = (pair.pair_id, variant, branch)
        found = self._bound.get(key)
        if found is None:
            found = self._bound[key] = LogIndex(pair.history(variant, branch)).asserted()
        return found


def _chunk_places(
    pair: Pair, variants: tuple[VariantName, ...] = VARIANTS
) -> list[tuple[str, list[Chunk]]]:
    """(field path, chunks) of the variants' prefixes and of both futures."""
    places = [(f"variants.{v}.chunks", pair.variants.of(v).chunks) for v in variants]
    return places + [(f"futures.{f}", pair.futures.of(f)) for f in FUTURES]


def _locate(pair: Pair, variant: VariantName, record_id: str) -> list[str]:
    """Every field path at which ``record_id`` occurs in ``variant``'s histories."""
    return [
        f"{path}.{ci}.{ri}.id"
        for path, chunks in _chunk_places(pair, (variant,))
        for ci, chunk in enumerate(chunks)
        for ri, record in enumerate(chunk)
        if record.id == record_id
    ]


def _check_unique_ids(pair: Pair) -> None:
    """Ids are unique within each history (a variant's prefix plus either future)."""
    for variant in VARIANTS:
        prefix_ids = [r.id for r in pair.prefix(variant)]
        for future in FUTURES:
            ids = prefix_ids + [r.id for r in pair.future(future)]
            if len(set(ids)) != len(ids):
                seen: set[str] = set()
                duplicate = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
                places = _locate(pair, variant, duplicate)
                raise PairPropertyError(
                    pair.pair_id,
                    places[-1],
                    f"duplicate record id {duplicate!r} (also at {places[0]})",
                )
    if len(set(pair.query)) != len(pair.query):
        raise PairPropertyError(pair.pair_id, "query", "query keys repeat")


def _check_natural(pair: Pair) -> None:
    """A natural pair's records all carry their source's words: a reader of text
    must see what E_q reads, and a record without text would be invented data."""
    if pair.provenance is None:
        return
    for path, chunks in _chunk_places(pair):
        for ci, chunk in enumerate(chunks):
            for ri, record in enumerate(chunk):
                if record.text is None:
                    raise PairPropertyError(
                        pair.pair_id,
                        f"{path}.{ci}.{ri}.text",
                        f"a natural pair ({pair.provenance.source}) needs the text of every record",
                    )


def check_pair(pair: Pair) -> GoldPair:
    """Verify ids and the pair property with E_q; return the gold answers.

    Raises ``PairPropertyError`` naming the failing field or property.  A pair that
    carries gold answers must carry exactly E_q's.
    """
    _check_unique_ids(pair)
    _check_natural(pair)
    gold = compute_gold(pair)
    if gold.A.current != gold.B.current:
        raise PairPropertyError(
            pair.pair_id,
            "property same-current-answer",
            f"current answers differ (A: {gold.A.current}, B: {gold.B.current})",
        )
    if gold.A.reveal == gold.B.reveal:
        raise PairPropertyError(
            pair.pair_id,
            "property reveal-answers-differ",
            f"reveal answers are equal (A and B: {gold.A.reveal})",
        )
    if gold.A.override != gold.B.override:
        raise PairPropertyError(
            pair.pair_id,
            "property override-answers-equal",
            f"override answers differ (A: {gold.A.override}, B: {gold.B.override})",
        )
    if pair.gold is not None:
        for variant in VARIANTS:
            for branch in BRANCHES:
                stated, exact = pair.gold.of(variant).of(branch), gold.of(variant).of(branch)
                if stated != exact:
                    raise PairPropertyError(
                        pair.pair_id,
                        f"gold.{variant}.{branch}",
                        f"stated {stated} but E_q gives {exact}",
                    )
    return gold


def distinguishing_ids(pair: Pair) -> set[str]:
    """Record ids whose content differs between A and B, or that only one variant has."""
    a = {r.id: r for r in pair.prefix("A")}
    b = {r.id: r for r in pair.prefix("B")}
    return {rid for rid in a.keys() | b.keys() if a.get(rid) != b.get(rid)}
