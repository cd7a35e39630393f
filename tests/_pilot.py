"""The pilot the adapter figures were measured on."""

from __future__ import annotations

from pathlib import Path

from histories import PRESETS, generate


def pilot_of_24(folder: Path) -> str:
    """The pilot's first 4 pairs a family in ``folder``/pairs.jsonl: the 24 pairs the
    documented adapter figures were measured on (``cca-pilot`` before it drew 14 a family;
    each family's pairs are a prefix of its 14, pair for pair)."""
    config = PRESETS["cca-pilot"].model_copy(update={"pairs_per_family": 4})
    path = folder / "pairs.jsonl"
    path.write_text("".join(pair.to_json() + "\n" for pair in generate(config)))
    return str(path)
