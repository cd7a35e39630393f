"""Where a run's pairs come from, and getting them back.

A run records its pair source in ``config.json``: a preset (its generation config,
regenerated on demand: same config, same bytes) or a pair file, with the sha256 of
the pairs either way, so a report can rebuild exactly the pairs the run used and
refuse any others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from histories import PRESETS, GenerationConfig, Pair, generate, generate_lines, iter_pair_file
from histories.natural import NATURAL_PRESETS, NaturalPreset, natural_pairs


class PairLines(Sequence[Pair]):
    """Pairs held as their JSON lines, each parsed only when asked for.

    A ``Pair`` object takes about 13x the memory of its JSON (91 KB against 6.8 KB in
    the default audit): a run of many pairs holds their lines, and the engine hands
    each line to the worker that parses it (docs/scaling.md)."""

    __slots__ = ("lines",)

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines: tuple[str, ...] = tuple(lines)
        """Each pair's ``to_json()``, in order."""

    def __len__(self) -> int:
        return len(self.lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PairLines) and other.lines == self.lines

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, index: int) -> Pair: ...
    @overload
    def __getitem__(self, index: slice) -> PairLines: ...
    def __getitem__(self, index: int | slice) -> Pair | PairLines:
        if isinstance(index, slice):
            return PairLines(self.lines[index])
        return Pair.model_validate_json(self.lines[index])


def pair_lines(pairs: Sequence[Pair]) -> Iterable[str]:
    """Each pair's JSON line, without parsing pairs held as lines."""
    if isinstance(pairs, PairLines):
        return pairs.lines
    return (pair.to_json() for pair in pairs)


def pairs_sha256(pairs: Sequence[Pair]) -> str:
    """The sha256 of pairs as a pair file would hold them (one JSON line each)."""
    digest = hashlib.sha256()
    for line in pair_lines(pairs):
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def preset_source(
    name: str, seed: int | None = None, pairs_per_family: int | None = None
) -> tuple[dict[str, Any], PairLines, str]:
    """A preset's source entry, its pairs and their sha256 (``KeyError`` if unknown);
    ``seed`` generates the preset's dataset with another seed (a replication; for a
    natural preset, another sample of its packs), ``pairs_per_family`` a smaller or
    larger one (a generated preset only: ``ValueError`` for a natural one).
    ``NaturalSourceError`` names a natural pack that fails to load."""
    if name in NATURAL_PRESETS and pairs_per_family is not None:
        raise ValueError(f"{name} is a natural preset: its pairs per family are its packs'")
    given = {"seed": seed, "pairs_per_family": pairs_per_family}
    update = {field: value for field, value in given.items() if value is not None}
    if name in NATURAL_PRESETS:
        natural = NATURAL_PRESETS[name].model_copy(update=update)
        source: dict[str, Any] = {"preset": name, "natural": natural.model_dump(mode="json")}
    else:
        generation = PRESETS[name].model_copy(update=update)
        source = {"preset": name, "generation": generation.model_dump(mode="json")}
    return source, *rebuild_pairs(source, Path())


def file_source(path: Path) -> tuple[dict[str, Any], PairLines, str]:
    """A pair file's source entry, its pairs and the file's sha256
    (``histories.PairFileError`` names the line and field of a bad file)."""
    # the absolute path: a report or a resume from another directory still finds it
    source = {"file": str(path.resolve())}
    return source, *rebuild_pairs(source, path.parent)


def _pair_file(source: Mapping[str, Any], directory: Path) -> Path:
    """A recorded pair file: a relative path as given, else inside the run directory."""
    path = Path(str(source["file"]))
    if not path.is_absolute() and not path.exists():
        path = directory / path
    return path


def rebuild_pairs(source: Mapping[str, Any], directory: Path) -> tuple[PairLines, str]:
    """The pairs a recorded source names, and their sha256 (``_pair_file`` finds a file).

    Raises ``ValueError`` (a bad generation config, a natural pack that fails to load
    or an unknown source form), ``OSError`` or ``histories.PairFileError``.
    """
    if "generation" in source:
        config = GenerationConfig.model_validate(source["generation"])
        pairs = PairLines(line for _family, line in generate_lines(config))
        return pairs, pairs_sha256(pairs)
    if "natural" in source:
        natural = natural_pairs(NaturalPreset.model_validate(source["natural"]))
        pairs = PairLines(pair.to_json() for pair in natural)
        return pairs, pairs_sha256(pairs)
    if "file" in source:
        path = _pair_file(source, directory)
        pairs = PairLines(pair.to_json() for pair in iter_pair_file(path))
        return pairs, hashlib.sha256(path.read_bytes()).hexdigest()
    raise ValueError("the pair source names no generation config, natural preset or file")


def rebuild_pair_objects(source: Mapping[str, Any], directory: Path) -> tuple[list[Pair], str]:
    """``rebuild_pairs`` for a reader of every pair (a report): the pairs as built, not
    parsed back from their lines (that took a tenth of a report's loading)."""
    if "generation" in source:
        pairs = generate(GenerationConfig.model_validate(source["generation"]))
    elif "natural" in source:
        pairs = natural_pairs(NaturalPreset.model_validate(source["natural"]))
    elif "file" in source:
        path = _pair_file(source, directory)
        return list(iter_pair_file(path)), hashlib.sha256(path.read_bytes()).hexdigest()
    else:
        raise ValueError("the pair source names no generation config, natural preset or file")
    return pairs, pairs_sha256(pairs)
