"""Where a run's pairs come from, and getting them back.

A run records its pair source in ``config.json``: a preset (its generation config,
regenerated on demand: same config, same bytes) or a pair file, with the sha256 of
the pairs either way, so a report can rebuild exactly the pairs the run used and
refuse any others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from histories import PRESETS, GenerationConfig, Pair, generate, load_pairs
from histories.natural import NATURAL_PRESETS, NaturalPreset, natural_pairs


def pairs_sha256(pairs: Sequence[Pair]) -> str:
    """The sha256 of pairs as a pair file would hold them (one JSON line each)."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(pair.to_json().encode() + b"\n")
    return digest.hexdigest()


def preset_source(
    name: str, seed: int | None = None, pairs_per_family: int | None = None
) -> tuple[dict[str, Any], list[Pair], str]:
    """A preset's source entry, its pairs and their sha256 (``KeyError`` if unknown);
    ``seed`` generates the preset's dataset with another seed (a replication; for a
    natural preset, another sample of its packs), ``pairs_per_family`` a smaller or
    larger one (a generated preset only: ``ValueError`` for a natural one).
    ``NaturalSourceError`` names a natural pack that fails to load."""
    if name in NATURAL_PRESETS and pairs_per_family is not None:
        raise ValueError(f"{name} is a natural preset: its pairs per family are its packs'")
    if name in NATURAL_PRESETS:
        natural = NATURAL_PRESETS[name]
        if seed is not None:
            natural = natural.model_copy(update={"seed": seed})
        found = natural_pairs(natural)
        entry = {"preset": name, "natural": natural.model_dump(mode="json")}
        return entry, found, pairs_sha256(found)
    generation = PRESETS[name]
    if seed is not None:
        generation = generation.model_copy(update={"seed": seed})
    if pairs_per_family is not None:
        generation = generation.model_copy(update={"pairs_per_family": pairs_per_family})
    pairs = generate(generation)
    source = {"preset": name, "generation": generation.model_dump(mode="json")}
    return source, pairs, pairs_sha256(pairs)


def file_source(path: Path) -> tuple[dict[str, Any], list[Pair], str]:
    """A pair file's source entry, its pairs and the file's sha256
    (``histories.PairFileError`` names the line and field of a bad file)."""
    pairs = load_pairs(path)
    # the absolute path: a report or a resume from another directory still finds it
    source = {"file": str(path.resolve())}
    return source, pairs, hashlib.sha256(path.read_bytes()).hexdigest()


def rebuild_pairs(source: Mapping[str, Any], directory: Path) -> tuple[list[Pair], str]:
    """The pairs a recorded source names, and their sha256.

    A relative file path is looked up as given, then inside the run directory.
    Raises ``ValueError`` (a bad generation config, a natural pack that fails to load
    or an unknown source form), ``OSError`` or ``histories.PairFileError``.
    """
    if "generation" in source:
        pairs = generate(GenerationConfig.model_validate(source["generation"]))
        return pairs, pairs_sha256(pairs)
    if "natural" in source:
        pairs = natural_pairs(NaturalPreset.model_validate(source["natural"]))
        return pairs, pairs_sha256(pairs)
    if "file" in source:
        path = Path(str(source["file"]))
        if not path.is_absolute() and not path.exists():
            path = directory / path
        pairs = load_pairs(path)
        return pairs, hashlib.sha256(path.read_bytes()).hexdigest()
    raise ValueError("the pair source names no generation config, natural preset or file")
