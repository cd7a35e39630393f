"""``audit run``: turn the options into a run plan, run it, print what it found."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from audit.cli._common import fail
from audit.plan import (
    LLMStagePlan,
    RunPlan,
    parse_budgets,
    parse_conditions,
    parse_transforms,
)
from compressors import ConditionSpec, build, deterministic_builtins, parse_spec
from histories import PRESETS, Pair

DEFAULT_TRANSFORMS = "identity,rename:40,permute:40"
BARE_LLM_CONDITIONS = "structured_high:max_tokens=160,frontier"
"""The default audit's LLM stage (1 pair, 1 repeat): one model-written record log, one
deterministic memory, both read by the model; a 135M model on 2 cores needs minutes
for even this much (every writer call is one per chunk)."""
DEFAULT_LLM_CONDITIONS = (
    "prose_high,prose_off,structured_high,direct_prose,frontier,frontier_latest,full"
)


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
    from audit.cli._console import print_summary, progress_bar
    from audit.engine import execute
    from audit.rundir import default_run_dir, file_source, named_run_dir, preset_source

    if preset is not None and pairs is not None:
        fail("give --preset or --pairs, not both")
    if out is not None and name is not None:
        fail("give --out or --name, not both")
    transform_specs = parse_transforms(transforms)
    budgets = parse_budgets(budget)
    specs = (
        parse_conditions(conditions)
        if conditions is not None
        else [parse_spec(label) for label in deterministic_builtins()]
    )
    versions = {spec.label: build(spec).label for spec in specs}

    if pairs is not None:
        source, pair_list, digest = file_source(pairs)
    else:
        preset_name = preset or "cca-pilot"
        if preset_name not in PRESETS:
            fail(f"unknown preset {preset_name!r}; known: {', '.join(PRESETS)}")
        source, pair_list, digest = preset_source(preset_name)

    llm_stage, open_llm = _llm_stage_options(
        ctx, reader, writer, config_file, repeats, llm_sample, llm_conditions, schema, pair_list
    )
    plan = RunPlan(
        llm=llm_stage,
        pairs=source,
        pairs_sha256=digest,
        conditions=specs,
        compressor_versions=versions,
        budgets=budgets,
        transforms=transform_specs,
        seed=seed,
    )
    run_dir = out or (named_run_dir(name) if name is not None else default_run_dir())
    started = time.perf_counter()
    with progress_bar(len(pair_list), enabled=not quiet) as advance:
        summary = execute(
            run_dir, plan, pair_list, workers=workers, progress=advance, open_clients=open_llm
        )
    print_summary(summary, run_dir, time.perf_counter() - started)


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
) -> tuple[LLMStagePlan | None, Any]:
    """The LLM stage plan and a client opener; (None, None) when there is no LLM stage.

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
    from audit.backends import load_config
    from audit.engine.clients import declared_model, open_clients

    backends = load_config(config_file)  # BackendError: one line
    if reader is not None:
        backends.get(reader, "reader")
    if writer is not None:
        backends.get(writer, "writer")
    specs: list[ConditionSpec] = parse_conditions(
        llm_conditions or DEFAULT_LLM_CONDITIONS, "--llm-conditions"
    )
    classes = {spec.label: build(spec) for spec in specs}
    if writer is None:
        specs = [s for s in specs if not classes[s.label].uses_llm]
    if reader is None:
        specs = [s for s in specs if classes[s.label].uses_llm]
    if not specs:
        fail("--llm-conditions: nothing to run with the given --reader/--writer")
    stage = LLMStagePlan(
        reader=reader,
        reader_model=declared_model(backends, reader) if reader else None,
        writer=writer,
        writer_model=declared_model(backends, writer) if writer else None,
        conditions=specs,
        sample=min(llm_sample, len(pairs)),
        repeats=repeats,
        use_schema=schema,
    )
    cache_path = backends.resolved_cache_path()

    def opener() -> Any:
        return open_clients(backends, writer, reader, cache_path)

    return stage, opener
