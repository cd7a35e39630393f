"""The ``natural`` preset: a seeded sample of every natural pack that needs no file.

MultiWOZ and the tau2 airline and retail domains come from the packs committed inside
this package (derived once, with their licence notices); tzdata is derived from the
installed ``tzdata`` package.  Each pack keeps its own family, so every score is per
pack.  A sample, not the whole packs, and as many from each: the run must stay within
twice the default audit's CPU time (``docs/performance.md``), and 75 a pack keep the
preset at 300 independent pairs (``docs/method.md``).
"""

from __future__ import annotations

import gzip
import json
import random
from functools import cache
from importlib import resources
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from histories._generate import PRESETS
from histories._io import PairFileError, parse_pair_line
from histories._pair import Pair
from histories.natural._pack import NaturalSourceError

PackName = Literal["multiwoz", "tau2", "tau2-retail", "tzdata"]


class NaturalPreset(BaseModel):
    """Every parameter of a natural preset's pairs (stored in a run's config.json)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    packs: list[PackName] = Field(min_length=1)
    """In output order; each pack's pairs keep their family (the pack's name)."""
    pairs_per_pack: int = Field(ge=1, le=100_000)
    """At most this many from each pack (a pack with fewer gives all it has)."""
    seed: int = 0
    """Draws the sample; the packs themselves are derived with seed 0."""


NATURAL_PRESETS: dict[str, NaturalPreset] = {
    "natural": NaturalPreset(
        packs=["multiwoz", "tau2", "tau2-retail", "tzdata"], pairs_per_pack=75
    ),
}
"""Named natural configurations (``audit run --preset natural``)."""

PRESET_NAMES: tuple[str, ...] = (*PRESETS, *NATURAL_PRESETS)
"""Every preset a run or ``audit generate`` may name: generated ones, then natural."""


def _committed(pack: PackName) -> str:
    from histories.natural import multiwoz, tau2, tau2_retail

    return {"multiwoz": multiwoz.PACK, "tau2": tau2.PACK, "tau2-retail": tau2_retail.PACK}[pack]


def committed_lines(pack: PackName) -> tuple[str, list[str]]:
    """A committed pack's display path and its pair lines (``NaturalSourceError``
    naming the file when it cannot be read)."""
    path = resources.files("histories.natural").joinpath(_committed(pack), "pairs.jsonl.gz")
    where = str(path)
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise NaturalSourceError(f"{where}: the {pack} pack cannot be read ({error})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise NaturalSourceError(f"{where}: the {pack} pack holds no pairs")
    return where, lines


@cache
def ontology(source: str) -> dict[str, tuple[str, ...]]:
    """Key -> every value the source's committed pack binds it to, for the keys its
    pack names an entity slot (``ENTITY_SLOTS``): what the ``entity`` transform draws
    from.  Empty for a source without a committed pack or without entity slots."""
    from histories.natural import multiwoz, tau2

    slots: frozenset[str] = {"multiwoz": multiwoz.ENTITY_SLOTS, "tau2": tau2.ENTITY_SLOTS}.get(
        source, frozenset()
    )
    if not slots:
        return {}
    found: dict[str, set[str]] = {}
    for line in committed_lines(cast(PackName, source))[1]:
        data = json.loads(line)
        parts = [data["variants"]["A"], data["variants"]["B"]]
        for chunks in [*(part["chunks"] for part in parts), *data["futures"].values()]:
            for record in (r for chunk in chunks for r in chunk):
                key, value = record.get("key", ""), record.get("value")
                if record["op"] != "set" or key.rsplit(".", 1)[-1] not in slots:
                    continue
                if "|" not in value and value != "dontcare":  # several, or none
                    found.setdefault(key, set()).add(value)
    return {key: tuple(sorted(values)) for key, values in sorted(found.items())}


def _sample(count: int, wanted: int, pack: str, seed: int) -> list[int]:
    """Which of a pack's ``count`` pairs the preset keeps, in the pack's order."""
    if wanted >= count:
        return list(range(count))
    return sorted(random.Random(f"natural/{seed}/{pack}").sample(range(count), wanted))


def natural_pairs(preset: NaturalPreset) -> list[Pair]:
    """The preset's verified pairs (``NaturalSourceError`` names a pack that fails to
    load, and the file and line of a committed pair that does not verify)."""
    pairs: list[Pair] = []
    for pack in preset.packs:
        if pack == "tzdata":
            from histories.natural import tzdata

            derived = tzdata.derive(0, 8).pairs
            if not derived:
                raise NaturalSourceError("tzdata: the installed tzdata package gives no pair")
            kept = _sample(len(derived), preset.pairs_per_pack, pack, preset.seed)
            pairs += [derived[index] for index in kept]
            continue
        where, lines = committed_lines(pack)
        for index in _sample(len(lines), preset.pairs_per_pack, pack, preset.seed):
            try:
                pairs.append(parse_pair_line(lines[index], where, index + 1))
            except PairFileError as error:
                raise NaturalSourceError(str(error)) from None
    return pairs


class NaturalPresetManifest(BaseModel):
    """manifest.json of ``audit generate --preset natural``: the preset, and per pack
    its source version and how many pairs it gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator_version: str
    package_version: str
    preset: str
    config: NaturalPreset
    n_pairs: int
    pairs_per_family: dict[str, int]
    source_versions: dict[str, str]
    """family -> the version of the source its pairs were derived from."""
    pairs_sha256: str


def preset_bytes(name: str, preset: NaturalPreset, pairs: list[Pair]) -> tuple[bytes, bytes]:
    """The exact bytes of pairs.jsonl and manifest.json (no timestamps: reproducible)."""
    from histories._io import _package_version
    from histories.natural._pack import NATURAL_VERSION, sha256_hex

    body = "".join(pair.to_json() + "\n" for pair in pairs).encode("utf-8")
    counts: dict[str, int] = {}
    versions: dict[str, str] = {}
    for pair in pairs:
        counts[pair.family] = counts.get(pair.family, 0) + 1
        if pair.provenance is not None:
            versions.setdefault(pair.family, pair.provenance.version)
    manifest = NaturalPresetManifest(
        generator_version=NATURAL_VERSION, package_version=_package_version(), preset=name,
        config=preset, n_pairs=len(pairs), pairs_per_family=counts,
        source_versions=versions, pairs_sha256=sha256_hex(body),
    )  # fmt: skip
    return body, (manifest.model_dump_json(indent=2) + "\n").encode("utf-8")
