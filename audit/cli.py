"""The ``audit`` command line: the one place that wires the four packages together."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from histories import FAMILIES, PRESETS, GenerationConfig, Pair, UnknownFamilyError
from histories import generate as generate_pairs
from histories._generate import GenerationError, generate_lines, resolve_families
from histories._io import (
    MANIFEST_FILE,
    PAIRS_FILE,
    PairFileError,
    dataset_bytes,
    iter_pair_file,
    load_pairs,
    write_files_atomically,
)

app = typer.Typer(
    name="audit",
    help="Audit agent-memory compressors with paired histories: correct now, sufficient later?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
pairs_app = typer.Typer(help="Inspect and check pair files.", no_args_is_help=True)
app.add_typer(pairs_app, name="pairs")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error to stderr and exit (no traceback for user errors)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def generate(
    out: Annotated[
        Path, typer.Option("--out", help="Directory for pairs.jsonl and manifest.json.")
    ],
    preset: Annotated[
        str | None, typer.Option(help=f"Named configuration: {', '.join(PRESETS)}.")
    ] = None,
    families: Annotated[
        str | None,
        typer.Option(help="'all', 'paper', or a comma list of family ids (see `audit families`)."),
    ] = None,
    pairs_per_family: Annotated[int | None, typer.Option(min=1)] = None,
    seed: Annotated[int | None, typer.Option(help="Same seed, same bytes.")] = None,
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
        str | None, typer.Option(help="Identifier scheme: random or readable.")
    ] = None,
    distractor_mix: Annotated[
        str | None,
        typer.Option(help="Distractor kinds: mixed (every record kind) or plain (sets only)."),
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
    try:
        if preset is not None:
            if preset not in PRESETS:
                fail(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
            base = PRESETS[preset].model_dump()
        elif families is not None:
            base = {"families": resolve_families(families)}
            if pairs_per_family is None:
                fail("--pairs-per-family is required with --families")
        else:
            fail("give --preset NAME or --families LIST (see `audit families`)")
        config = GenerationConfig.model_validate({**base, **overrides})
    except UnknownFamilyError as error:
        fail(str(error))
    except ValueError as error:  # pydantic.ValidationError is a ValueError
        fail(_first_validation_message(error))

    try:
        lines = generate_lines(config, workers=workers)
    except GenerationError as error:
        fail(str(error), code=1)
    body, manifest = dataset_bytes(
        (line for _, line in lines), config, (family for family, _ in lines)
    )
    existing = out / PAIRS_FILE
    if existing.exists() and not force:
        if existing.read_bytes() == body and (out / MANIFEST_FILE).exists():
            _print_summary(config, lines)
            typer.echo(f"{out} already holds this exact dataset (unchanged)")
            return
        fail(f"{out} already holds a different dataset; use --force to replace it")
    write_files_atomically(out, {PAIRS_FILE: body, MANIFEST_FILE: manifest})
    _print_summary(config, lines)
    typer.echo(f"wrote {out / PAIRS_FILE} and {out / MANIFEST_FILE}")


def _first_validation_message(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first["loc"]).replace("_", "-")
        return f"--{field}: {first['msg']}"
    return str(error)


def _print_summary(config: GenerationConfig, lines: list[tuple[str, str]]) -> None:
    counts = Counter(family for family, _ in lines)
    typer.echo(
        f"{len(lines)} verified pairs "
        f"({config.preset or 'custom'}; seed {config.seed}; {config.distractors} distractors; "
        f"chunk size {config.chunk_size}; {config.labels} labels; {config.render} rendering)"
    )
    width = max(len(name) for name in counts)
    for family, count in counts.items():
        typer.echo(f"  {family:<{width}}  {count:>5}  {FAMILIES[family].summary}")


@app.command("families")
def list_families() -> None:
    """List the pair families, one line each (paper families marked *)."""
    width = max(len(name) for name in FAMILIES)
    for name, family in FAMILIES.items():
        mark = "*" if family.paper else " "
        typer.echo(f"{mark} {name:<{width}}  {family.summary}")
    typer.echo("* = one of the six families of arXiv 2609.20045")


@pairs_app.command("validate")
def validate_pairs(
    file: Annotated[Path, typer.Argument(help="A pairs.jsonl file.")],
) -> None:
    """Check a pair file: schema, unique ids, gold answers and the pair property (E_q)."""
    counts: Counter[str] = Counter()
    try:
        for pair in iter_pair_file(file):
            counts[pair.family] += 1
    except PairFileError as error:
        fail(str(error), code=1)
    total = sum(counts.values())
    typer.echo(
        f"{file}: {total} pairs OK (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
    )


DEFAULT_TRANSFORMS = "identity,rename:40,permute:40"


@app.command("run")
def run_audit(
    preset: Annotated[str | None, typer.Option(help="Generate the pairs of a preset.")] = None,
    pairs: Annotated[Path | None, typer.Option("--pairs", help="A pairs.jsonl file.")] = None,
    conditions: Annotated[
        str | None,
        typer.Option(help="Comma list of conditions (name[:k=v], or package.module:Class)."),
    ] = None,
    transforms: Annotated[
        str, typer.Option(help="identity, rename:K, permute:K, decoy:K (comma list).")
    ] = DEFAULT_TRANSFORMS,
    budget: Annotated[
        str, typer.Option(help="Memory budgets in UTF-8 bytes (comma list).")
    ] = "1200",
    seed: Annotated[int, typer.Option(help="Seed of the transforms.")] = 0,
    out: Annotated[
        Path | None, typer.Option("--out", help="Run directory (default: runs/<timestamp>).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Run directory runs/NAME (instead of --out).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Processes (default: every core).")] = max(
        1, os.cpu_count() or 1
    ),
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    reader: Annotated[
        str | None, typer.Option(help="Backend for the LLM reader (local, or one in --config).")
    ] = None,
    writer: Annotated[
        str | None, typer.Option(help="Backend for LLM-written memories (prose_*, structured_*).")
    ] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="Backends TOML (default: ./audit.toml).")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="LLM repeats, each with its own seed.")] = 2,
    llm_sample: Annotated[
        int, typer.Option(min=1, help="Source pairs in the LLM stage (round-robin over families).")
    ] = 6,
    llm_conditions: Annotated[
        str | None, typer.Option(help="Conditions of the LLM stage (comma list).")
    ] = None,
    schema: Annotated[
        bool, typer.Option(help="Ask the reader for its envelope via JSON schema.")
    ] = True,
    *,
    ctx: typer.Context,
) -> None:
    """Audit memory conditions on paired histories: exact reader, plus LLMs if asked.

    With no options at all this is the default audit: the cca-pilot pairs, every
    deterministic condition under identity + 40 renamings + 40 permutations through
    the exact reader, and an LLM stage with the embedded local model.
    """
    from audit._console import print_summary, progress_bar
    from audit._run import RunConfig, RunDirectoryError, default_run_dir, execute, named_run_dir
    from audit._transforms_spec import SpecError, parse_budgets, parse_transforms
    from compressors import UnknownCompressorError, build, deterministic_builtins, parse_spec
    from compressors._protocol import InvalidParamsError

    if preset is not None and pairs is not None:
        fail("give --preset or --pairs, not both")
    try:
        transform_specs = parse_transforms(transforms)
        budgets = parse_budgets(budget)
        labels = (
            [c.strip() for c in conditions.split(",") if c.strip()]
            if conditions
            else deterministic_builtins()
        )
        if not labels:
            fail("--conditions: no condition given")
        if len(set(labels)) != len(labels):
            fail("--conditions: a condition is listed twice")
        versions = {label: build(parse_spec(label)).label for label in labels}
    except (SpecError, UnknownCompressorError, InvalidParamsError) as error:
        fail(str(error))

    if pairs is not None:
        try:
            pair_list = load_pairs(pairs)
        except PairFileError as error:
            fail(str(error))
        digest = hashlib.sha256(pairs.read_bytes()).hexdigest()
        source: dict[str, object] = {"file": str(pairs)}
    else:
        preset_name = preset or "cca-pilot"
        if preset_name not in PRESETS:
            fail(f"unknown preset {preset_name!r}; known: {', '.join(PRESETS)}")
        generation = PRESETS[preset_name]
        pair_list = generate_pairs(generation)
        digest = hashlib.sha256("".join(p.to_json() + "\n" for p in pair_list).encode()).hexdigest()
        source = {"preset": preset_name, "generation": generation.model_dump(mode="json")}

    llm_stage, open_llm = _llm_stage_options(
        ctx, reader, writer, config_file, repeats, llm_sample, llm_conditions, schema, pair_list
    )
    config = RunConfig(
        llm=llm_stage,
        pairs=source,
        pairs_sha256=digest,
        conditions=labels,
        compressor_versions=versions,
        budgets=budgets,
        transforms=[str(t) for t in transform_specs],
        seed=seed,
    )
    if out is not None and name is not None:
        fail("give --out or --name, not both")
    try:
        run_dir = out or (named_run_dir(name) if name is not None else default_run_dir())
    except RunDirectoryError as error:
        fail(str(error))
    started = time.perf_counter()
    try:
        with progress_bar(len(pair_list), enabled=not quiet) as advance:
            summary = execute(
                run_dir, config, pair_list, workers=workers, progress=advance,
                open_clients=open_llm,
            )  # fmt: skip
    except RunDirectoryError as error:
        fail(str(error))
    except Exception as error:  # a backend that cannot start: named, no traceback
        from audit.backends import BackendError

        if isinstance(error, BackendError):
            fail(str(error), code=1)
        raise
    print_summary(summary, run_dir, time.perf_counter() - started)


BARE_LLM_CONDITIONS = "structured_high:max_tokens=160,frontier"
"""The default audit's LLM stage (1 pair, 1 repeat): one model-written record log, one
deterministic memory, both read by the model; a 135M model on 2 cores needs minutes
for even this much (every writer call is one per chunk)."""
DEFAULT_LLM_CONDITIONS = (
    "prose_high,prose_off,structured_high,direct_prose,frontier,frontier_latest,full"
)


def _llm_stage_options(
    ctx: typer.Context | None,
    reader: str | None,
    writer: str | None,
    config_file: Path | None,
    repeats: int,
    llm_sample: int,
    llm_conditions: str | None,
    schema: bool,
    pairs: list[Pair],
) -> tuple[Any, Any]:
    """The LLM stage config and a client opener; (None, None) when there is no LLM stage.

    There is one when --reader or --writer is given, and in the bare default audit.
    """
    sources = [ctx.get_parameter_source(p) for p in ctx.params] if ctx is not None else []
    bare = ctx is not None and all(s is None or s.name == "DEFAULT" for s in sources)
    if bare:  # the default audit: a small, stated LLM sample on the embedded model
        reader, writer = "local", "local"
        llm_sample, llm_conditions, repeats = 1, BARE_LLM_CONDITIONS, 1
    if reader is None and writer is None:
        if llm_conditions:
            fail("--llm-conditions needs --reader and/or --writer")
        return None, None
    # imported only now: the backends (aiohttp and friends) cost half a second to import
    from audit._llm_clients import declared_model, open_clients
    from audit._llm_stage import LLMStageConfig
    from audit.backends import BackendError, load_config
    from compressors import build, parse_spec

    try:
        backends = load_config(config_file)
        if reader is not None:
            backends.get(reader, "reader")
        if writer is not None:
            backends.get(writer, "writer")
    except BackendError as error:
        fail(str(error))
    labels = [c.strip() for c in (llm_conditions or DEFAULT_LLM_CONDITIONS).split(",") if c.strip()]
    try:
        classes = {label: build(parse_spec(label)) for label in labels}
    except ValueError as error:
        fail(f"--llm-conditions: {error}")
    if writer is None:
        labels = [c for c in labels if not classes[c].uses_llm]
    if reader is None:
        labels = [c for c in labels if classes[c].uses_llm]
    if not labels:
        fail("--llm-conditions: nothing to run with the given --reader/--writer")
    stage = LLMStageConfig(
        reader=reader,
        reader_model=declared_model(backends, reader) if reader else None,
        writer=writer,
        writer_model=declared_model(backends, writer) if writer else None,
        conditions=labels,
        sample=min(llm_sample, len(pairs)),
        repeats=repeats,
        use_schema=schema,
    )
    cache_path = backends.resolved_cache_path()

    def opener() -> Any:
        return open_clients(backends, writer, reader, cache_path)

    return stage, opener


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


def _register_command_modules() -> None:
    """Command groups that live in their own modules add themselves to ``app``."""
    import importlib

    for name in ("audit._plugins_cli", "audit._backends_cli", "audit._report_cli"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise


_register_command_modules()
