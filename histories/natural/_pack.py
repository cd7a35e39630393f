"""What every natural pack shares: the dataset it returns, its manifest, its chunking.

A pack (one module per source) derives pairs from real data, verifies each with E_q
and with its own independent check, and counts what it could not use and why: a
source item is skipped and counted, never turned into a pair that does not verify.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from histories._errors import MemoryAuditError
from histories._io import _package_version
from histories._pair import Pair, PairPropertyError, check_pair
from histories._records import Record

NATURAL_VERSION = "1"
"""Bumped whenever the same source and seed would give different pairs."""


class NaturalSourceError(MemoryAuditError, ValueError):
    """A source file a pack cannot read at all; the message names the file (and item)."""


class NaturalManifest(BaseModel):
    """manifest.json of a natural dataset: the source exactly, and every skip, counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator_version: str
    package_version: str
    source: str
    source_version: str
    source_file: str
    source_sha256: str
    licence: str
    seed: int
    chunk_size: int
    n_pairs: int
    skipped: dict[str, int]
    """Reason -> how many source items were left out for it."""
    pairs_sha256: str


@dataclass
class NaturalDataset:
    """A pack's verified pairs, what it skipped, and exactly what it read."""

    source: str
    licence: str
    source_version: str = ""
    source_file: str = ""
    source_sha256: str = ""
    pairs: list[Pair] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, pair: Pair) -> None:
        """Verify with E_q and keep; a pair E_q refuses is counted, never kept."""
        try:
            gold = check_pair(pair)
        except PairPropertyError as error:
            self.skipped[f"does not verify ({error.field})"] += 1
            return
        self.pairs.append(pair.model_copy(update={"gold": gold}))


def slot_chunks(
    a: Sequence[Record],
    b: Sequence[Record],
    shared: Sequence[Record],
    rng: random.Random,
    chunk_size: int,
) -> tuple[list[list[Record]], list[list[Record]]]:
    """A's and B's prefixes in one shuffled slot order (a shared id is one slot), cut
    into chunks; each variant keeps the records it has, as generated pairs do."""
    by_a = {r.id: r for r in [*a, *shared]}
    by_b = {r.id: r for r in [*b, *shared]}
    order = sorted(by_a.keys() | by_b.keys())
    rng.shuffle(order)

    def cut(records: dict[str, Record]) -> list[list[Record]]:
        chunks = [
            [records[rid] for rid in order[start : start + chunk_size] if rid in records]
            for start in range(0, len(order), chunk_size)
        ]
        return [chunk for chunk in chunks if chunk] or [[]]

    return cut(by_a), cut(by_b)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(dataset: NaturalDataset, seed: int, chunk_size: int) -> tuple[bytes, bytes]:
    """The exact bytes of pairs.jsonl and manifest.json (no timestamps: reproducible)."""
    body = "".join(pair.to_json() + "\n" for pair in dataset.pairs).encode("utf-8")
    manifest = NaturalManifest(
        generator_version=NATURAL_VERSION,
        package_version=_package_version(),
        source=dataset.source,
        source_version=dataset.source_version,
        source_file=dataset.source_file,
        source_sha256=dataset.source_sha256,
        licence=dataset.licence,
        seed=seed,
        chunk_size=chunk_size,
        n_pairs=len(dataset.pairs),
        skipped=dict(sorted(dataset.skipped.items())),
        pairs_sha256=sha256_hex(body),
    )
    return body, (manifest.model_dump_json(indent=2) + "\n").encode("utf-8")
