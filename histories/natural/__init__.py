"""Natural packs: pairs derived from real data (one module per source), each record
carrying its source's words, each pair its provenance (``docs/pair-format.md``)."""

from histories.natural._pack import (
    NATURAL_VERSION,
    NaturalDataset,
    NaturalManifest,
    NaturalSourceError,
    manifest_bytes,
)
from histories.natural._preset import (
    NATURAL_PRESETS,
    PRESET_NAMES,
    NaturalPreset,
    NaturalPresetManifest,
    natural_pairs,
    ontology,
    preset_bytes,
)
from histories.natural._sources import SOURCES, derive

__all__ = [
    "NATURAL_PRESETS",
    "NATURAL_VERSION",
    "PRESET_NAMES",
    "SOURCES",
    "NaturalDataset",
    "NaturalManifest",
    "NaturalPreset",
    "NaturalPresetManifest",
    "NaturalSourceError",
    "derive",
    "manifest_bytes",
    "natural_pairs",
    "ontology",
    "preset_bytes",
]
