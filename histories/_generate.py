"""Pair generation: family draft + shuffled distractors + chunking + futures, verified by E_q.

Each pair draws from its own random stream, seeded by (seed, family, index), so a
pair does not change when other families or counts are added to a run, and the
same command with the same seed gives byte-identical files.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

from pydantic import BaseModel, ConfigDict, Field, field_validator

from histories._distractors import DistractorMix, DistractorPool
from histories._errors import MemoryAuditError
from histories._labels import LabelScheme, make_labels
from histories._pair import (
    Futures,
    Pair,
    PairPropertyError,
    RenderStyle,
    Variant,
    Variants,
    check_pair,
    slot_chunks,
)
from histories._records import Record, TickRecord
from histories.families import FAMILIES, PAPER_FAMILIES, Family

GENERATOR_VERSION = "1"
"""Bumped whenever the same config would produce different pairs."""


class UnknownFamilyError(MemoryAuditError, ValueError):
    """A family id that is not registered; the message lists the known ones."""


class GenerationError(MemoryAuditError, RuntimeError):
    """A family produced a pair that E_q does not verify: a bug in that family."""

    exit_code = 1


def resolve_families(names: Sequence[str] | str) -> list[str]:
    """``all``, or a comma list / sequence of family ids, checked against the registry."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if list(names) == ["all"]:
        return list(FAMILIES)
    if list(names) == ["paper"]:
        return list(PAPER_FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise UnknownFamilyError(
            f"unknown family {', '.join(map(repr, unknown))}; known: "
            + ", ".join(FAMILIES)
            + " (or 'all', 'paper')"
        )
    if not names:
        raise UnknownFamilyError("no family named; known: " + ", ".join(FAMILIES))
    return list(dict.fromkeys(names))


class GenerationConfig(BaseModel):
    """Every parameter of a generated dataset (stored in manifest.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    families: list[str] = Field(min_length=1)
    """Family ids, in output order."""
    pairs_per_family: int = Field(ge=1, le=100_000)
    seed: int = 0
    distractors: int = Field(default=32, ge=0, le=10_000)
    """Shuffled distractor records per prefix."""
    chunk_size: int = Field(default=8, ge=1, le=100_000)
    """Records per streamed prefix chunk (slots, aligned across A and B)."""
    future_distractors: int = Field(default=4, ge=0, le=10_000)
    """Distractor records in the second chunk of each future."""
    labels: LabelScheme = "random"
    distractor_mix: DistractorMix = "mixed"
    """``mixed``: distractors of every record kind; ``plain``: literal sets only;
    ``task-like``: decoy drafts, built by the families themselves on distractor labels
    (``histories._distractors``)."""
    render: RenderStyle = "json"
    preset: str | None = None

    @field_validator("families")
    @classmethod
    def _known_families(cls, value: list[str]) -> list[str]:
        return resolve_families(value)


PRESETS: dict[str, GenerationConfig] = {
    "cca-pilot": GenerationConfig(
        families=list(PAPER_FAMILIES),
        pairs_per_family=14,
        distractors=32,
        labels="words",
        distractor_mix="task-like",
        preset="cca-pilot",
    ),
    "cca-pilot-paper": GenerationConfig(
        families=list(PAPER_FAMILIES),
        pairs_per_family=4,
        distractors=32,
        labels="readable",
        distractor_mix="plain",
        preset="cca-pilot",
    ),
}
"""Named configurations.

``cca-pilot`` is the pilot of arXiv 2609.20045, powered: the six paper families x 14
pairs (84, where the paper's 24 give 19 % power for a 20-point difference), 2
variants, 32 shuffled distractors per prefix, with nothing but meaning to tell task
records from distractors: readable labels from one distribution for both (``words``:
length, shape and order) and distractors drawn like task records (``task-like``:
decoy drafts that the families build as they build the task, on distractor labels).  Earlier
versions drew its distractors as plain literal sets (as the paper describes them),
so that every revoke, choice, copy, expiry and tick, every value not shaped
``word-123`` and nearly every small revision was the task's: a heuristic that kept
those beat every packer, and the packers' "control records first" rested on it.

``cca-pilot-paper`` is the same pilot with the paper's own label shape
(``readable``): task keys ``key_*`` sort before distractor keys ``noise_*`` and task
ids are shorter than distractor ids, accidents a naming shortcut exploits.  Its
configuration is exactly the one earlier versions called ``cca-pilot`` (its
``preset`` field included), so pair files and run directories made with them
regenerate byte for byte.
"""


def build_pair(family: Family, index: int, config: GenerationConfig) -> Pair:
    """Build and verify one pair; raises GenerationError if E_q rejects it."""
    rng = random.Random(f"{config.seed}/{family.name}/{index}")
    labels = make_labels(config.labels, rng)
    draft = family.build(rng, labels)
    ticks = [r.now for r in (*draft.variant_a, *draft.variant_b) if isinstance(r, TickRecord)]
    pool = DistractorPool(
        rng,
        labels,
        n_keys=max(3, config.distractors // 2),
        mix=config.distractor_mix,
        tick_below=min(ticks, default=None),
        task_keys=draft.task_keys,
        decoys=(family.build, *(FAMILIES[name].build for name in PAPER_FAMILIES)),
    )
    distractors = pool.draw(config.distractors)

    a = {r.id: r for r in draft.variant_a}
    b = {r.id: r for r in draft.variant_b}
    shared = {r.id: r for r in distractors}
    order = list(dict.fromkeys([*a, *b, *shared]))
    rng.shuffle(order)
    a.update(shared)
    b.update(shared)

    def future(real: Sequence[Record]) -> list[list[Record]]:
        chunks = [list(real)]
        if config.future_distractors:
            chunks.append([pool.fresh_set() for _ in range(config.future_distractors)])
        return chunks

    pair = Pair(
        pair_id=f"{family.name}-{index:04d}",
        family=family.name,
        query=list(draft.query),
        variants=Variants(
            A=Variant(chunks=slot_chunks(order, a, config.chunk_size)),
            B=Variant(chunks=slot_chunks(order, b, config.chunk_size)),
        ),
        futures=Futures(reveal=future(draft.reveal), override=future(draft.override)),
        task_keys=list(draft.task_keys),
        chunk_size=config.chunk_size,
        render=config.render,
    )
    try:
        gold = check_pair(pair)
    except PairPropertyError as error:
        raise GenerationError(
            f"family {family.name!r} produced an unverifiable pair (index {index}, "
            f"seed {config.seed}): {error}"
        ) from error
    return pair.model_copy(update={"gold": gold})


def iter_pairs(config: GenerationConfig) -> Iterator[Pair]:
    """Verified pairs, family by family, in index order."""
    for name in config.families:
        family = FAMILIES[name]
        for index in range(config.pairs_per_family):
            yield build_pair(family, index, config)


def generate(config: GenerationConfig) -> list[Pair]:
    """All pairs of a config (each verified before it is returned)."""
    return list(iter_pairs(config))


_BATCH = 64


def _build_lines(job: tuple[GenerationConfig, str, int, int]) -> list[str]:
    config, name, start, stop = job
    family = FAMILIES[name]
    return [build_pair(family, index, config).to_json() for index in range(start, stop)]


def generate_lines(config: GenerationConfig, workers: int = 1) -> list[tuple[str, str]]:
    """``(family, pairs.jsonl line)`` for every pair, in order; ``workers`` > 1 builds
    batches in parallel processes (each pair has its own seed, so bytes do not change)."""
    jobs = [
        (config, name, start, min(start + _BATCH, config.pairs_per_family))
        for name in config.families
        for start in range(0, config.pairs_per_family, _BATCH)
    ]
    if workers <= 1 or len(jobs) == 1:
        batches = [_build_lines(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            batches = list(pool.map(_build_lines, jobs))
    return [(job[1], line) for job, batch in zip(jobs, batches, strict=True) for line in batch]
