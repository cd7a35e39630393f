"""``audit generate``, ``audit families`` and ``audit pairs validate``: the pair data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from audit.cli._common import echo_fitted, fail, first_validation_message, new_app
from histories import (
    FAMILIES,
    MANIFEST_FILE,
    PAIRS_FILE,
    PRESETS,
    GenerationConfig,
    PairFileError,
    dataset_bytes,
    generate_lines,
    iter_pair_file,
    resolve_families,
    write_files_atomically,
)

pairs_app = new_app("pairs", "Inspect and check pair files.")


def generate(
    out: Annotated[
        Path, typer.Option("--out", help="Directory for pairs.jsonl and manifest.json.")
    ],
    preset: Annotated[
        str | None,
        typer.Option(help=f"Named configuration: {', '.join(PRESETS)} (or give --families)."),
    ] = None,
    families: Annotated[
        str | None,
        typer.Option(
            help="'all', 'paper', or a comma list of family ids (see `audit families`), "
            "with --pairs-per-family (or give --preset)."
        ),
    ] = None,
    pairs_per_family: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Pairs to build per family (required with --families; a preset sets its own).",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Same seed, same bytes (default: the preset's, else 0).")
    ] = None,
    distractors: Annotated[
        int | None, typer.Option(min=0, help="Shuffled distractor records per prefix.")
    ] = None,
    chunk_size: Annotated[
        int | None, typer.Option(min=1, help="Prefix records per streamed chunk.")
    ] = None,
    render: Annotated[
        str | None, typer.Option(help="How chunks are shown: json, log or prose.")
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option(
            help="Identifier scheme: random (random strings), words (readable names, one "
            "distribution for task and distractors; cca-pilot) or readable (the paper's "
            "key_*/noise_* labels; cca-pilot-paper)."
        ),
    ] = None,
    distractor_mix: Annotated[
        str | None,
        typer.Option(
            help="Distractor kinds: mixed (every record kind), plain (sets only) or task-like "
            "(every kind, revisions and values drawn like the task's)."
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Processes to build pairs with.")] = 1,
    force: Annotated[bool, typer.Option(help="Replace an existing, different dataset.")] = False,
) -> None:
    """Generate verified paired histories into OUT (pairs.jsonl + manifest.json)."""
    if preset is not None and families is not None:
        fail("give --preset or --families, not both")
    overrides = {
        name: value
        for name, value in {
            "pairs_per_family": pairs_per_family,
            "seed": seed,
            "distractors": distractors,
            "chunk_size": chunk_size,
            "render": render,
            "labels": labels,
            "distractor_mix": distractor_mix,
        }.items()
        if value is not None
    }
    if preset is not None:
        if preset not in PRESETS:
            fail(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        base = PRESETS[preset].model_dump()
    elif families is not None:
        base = {"families": resolve_families(families)}  # UnknownFamilyError: one line
        if pairs_per_family is None:
            fail("--pairs-per-family is required with --families")
    else:
        fail("give --preset NAME or --families LIST (see `audit families`)")
    try:
        config = GenerationConfig.model_validate({**base, **overrides})
    except ValueError as error:  # pydantic.ValidationError is a ValueError
        fail(first_validation_message(error))

    lines = generate_lines(config, workers=workers)  # GenerationError: one line, exit 1
    body, manifest = dataset_bytes(
        (line for _, line in lines), config, (family for family, _ in lines)
    )
    existing = out / PAIRS_FILE
    if existing.exists() and not force:
        if existing.read_bytes() == body and (out / MANIFEST_FILE).exists():
            _print_summary(config, lines, preset)
            echo_fitted(f"{out} already holds this exact dataset (unchanged)")
            return
        fail(f"{out} already holds a different dataset; use --force to replace it")
    write_files_atomically(out, {PAIRS_FILE: body, MANIFEST_FILE: manifest})
    _print_summary(config, lines, preset)
    echo_fitted(f"wrote {out / PAIRS_FILE} and {out / MANIFEST_FILE}")


def _print_summary(
    config: GenerationConfig, lines: list[tuple[str, str]], preset: str | None
) -> None:
    """What was built, under the preset's name as asked (``cca-pilot-paper`` keeps the
    ``preset`` field of the configuration it reproduces, which reads ``cca-pilot``)."""
    counts = Counter(family for family, _ in lines)
    echo_fitted(
        f"{len(lines)} verified pairs "
        f"({preset or 'custom'}; seed {config.seed}; {config.distractors} distractors; "
        f"chunk size {config.chunk_size}; {config.labels} labels; {config.render} rendering)"
    )
    width = max(len(name) for name in counts)
    for family, count in counts.items():
        echo_fitted(
            f"  {family:<{width}}  {count:>5}  {FAMILIES[family].summary}", indent=width + 11
        )


def list_families() -> None:
    """List the pair families, one line each (paper families marked *)."""
    width = max(len(name) for name in FAMILIES)
    for name, family in FAMILIES.items():
        mark = "*" if family.paper else " "
        echo_fitted(f"{mark} {name:<{width}}  {family.summary}", indent=width + 4)
    typer.echo("* = one of the six families of arXiv 2609.20045")


@pairs_app.command("validate")
def validate_pairs(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A pairs.jsonl file.")],
) -> None:
    """Check a pair file: schema, unique ids, gold answers and the pair property (E_q)."""
    counts: Counter[str] = Counter()
    try:
        for pair in iter_pair_file(file):
            counts[pair.family] += 1
    except PairFileError as error:  # names file, line and field; the check failed: exit 1
        fail(str(error), code=1)
    total = sum(counts.values())
    typer.echo(
        f"{file}: {total} pairs OK (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
    )
