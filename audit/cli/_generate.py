"""``audit generate``, ``audit families`` and ``audit pairs validate``: the pair data."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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
from histories.natural import (
    NATURAL_PRESETS,
    PRESET_NAMES,
    SOURCES,
    NaturalSourceError,
    derive,
    manifest_bytes,
    natural_pairs,
    preset_bytes,
)

pairs_app = new_app("pairs", "Inspect and check pair files.")


def generate(
    out: Annotated[
        Path, typer.Option("--out", help="Directory for pairs.jsonl and manifest.json.")
    ],
    file: Annotated[
        Path | None,
        typer.Argument(
            metavar="[FILE]",
            help="The source file of --source (multiwoz: a MultiWOZ 2.x JSON or zip).",
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="Derive natural pairs from real data instead: "
            + ", ".join(f"{name} ({summary})" for name, summary in SOURCES.items())
            + "."
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help=f"Named configuration: {', '.join(PRESET_NAMES)} (or give --families; "
            "natural: a seeded sample of the MultiWOZ, tau2 airline and retail, and tzdata "
            "packs, as `audit run --preset natural` runs it)."
        ),
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
            "(decoy drafts the families build as they build the task)."
        ),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Processes to build pairs with.")] = 1,
    force: Annotated[bool, typer.Option(help="Replace an existing, different dataset.")] = False,
) -> None:
    """Generate verified paired histories into OUT (pairs.jsonl + manifest.json)."""
    if source is not None:
        synthetic_only = {
            "--preset": preset, "--families": families, "--pairs-per-family": pairs_per_family,
            "--distractors": distractors, "--render": render, "--labels": labels,
            "--distractor-mix": distractor_mix,
        }  # fmt: skip
        given = [name for name, value in synthetic_only.items() if value is not None]
        if given:
            fail(f"--source derives natural pairs: {', '.join(given)} applies to synthetic ones")
        _generate_natural(source, file, out, seed or 0, chunk_size or 8, force)
        return
    if file is not None:
        fail(f"FILE ({file}) is the source file of --source: give --source NAME")
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
    if preset in NATURAL_PRESETS:
        given = [f"--{name.replace('_', '-')}" for name in overrides if name != "seed"]
        if given:
            fail(f"--preset {preset} samples natural packs: {', '.join(given)} applies to "
                 "generated pairs")  # fmt: skip
        _generate_preset(preset, seed, out, force)
        return
    if preset is not None:
        if preset not in PRESETS:
            fail(f"unknown preset {preset!r}; known: {', '.join(PRESET_NAMES)}")
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
    _write_dataset(out, body, manifest, force, lambda: _print_summary(config, lines, preset))
    _print_summary(config, lines, preset)
    echo_fitted(f"wrote {out / PAIRS_FILE} and {out / MANIFEST_FILE}")


def _generate_natural(
    source: str, file: Path | None, out: Path, seed: int, chunk_size: int, force: bool
) -> None:
    """``--source``: a pack's verified pairs, and a manifest that counts every skip."""
    dataset = derive(source, file, seed, chunk_size)  # NaturalSourceError: one line
    body, manifest = manifest_bytes(dataset, seed, chunk_size)
    if not dataset.pairs:
        where = file if file is not None else source
        fail(f"{where}: no usable pair in the source ({_skips(dataset.skipped)})", code=1)
    _write_dataset(out, body, manifest, force)
    echo_fitted(
        f"{len(dataset.pairs)} verified pairs ({source}: {dataset.source_version}; seed {seed}; "
        f"chunk size {chunk_size})"
    )
    if dataset.skipped:
        echo_fitted(f"skipped: {_skips(dataset.skipped)}")
    echo_fitted(f"wrote {out / PAIRS_FILE} and {out / MANIFEST_FILE}")


def _generate_preset(name: str, seed: int | None, out: Path, force: bool) -> None:
    """``--preset natural``: exactly the pairs ``audit run --preset natural`` runs."""
    preset = NATURAL_PRESETS[name]
    if seed is not None:
        preset = preset.model_copy(update={"seed": seed})
    try:
        pairs = natural_pairs(preset)
    except NaturalSourceError as error:
        fail(str(error), code=1)
    body, manifest = preset_bytes(name, preset, pairs)
    _write_dataset(out, body, manifest, force)
    counts = Counter(pair.family for pair in pairs)
    echo_fitted(
        f"{len(pairs)} verified pairs ({name}; sample seed {preset.seed}: "
        + ", ".join(f"{family} {count}" for family, count in counts.items())
        + ")"
    )
    echo_fitted(f"wrote {out / PAIRS_FILE} and {out / MANIFEST_FILE}")


def _write_dataset(
    out: Path, body: bytes, manifest: bytes, force: bool, said: Callable[[], object] = lambda: None
) -> None:
    """Write a dataset, leaving an identical one as it is (``said``: what it holds, then
    exit 0) and refusing a different one."""
    existing = out / PAIRS_FILE
    if existing.exists() and not force:
        if existing.read_bytes() == body and (out / MANIFEST_FILE).exists():
            said()
            echo_fitted(f"{out} already holds this exact dataset (unchanged)")
            raise typer.Exit(0)
        fail(f"{out} already holds a different dataset; use --force to replace it")
    write_files_atomically(out, {PAIRS_FILE: body, MANIFEST_FILE: manifest})


def _skips(skipped: Counter[str]) -> str:
    return "; ".join(f"{count} {reason}" for reason, count in sorted(skipped.items())) or "none"


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
