"""``audit run``: turn the options into a run plan, run it, print what it found."""

from __future__ import annotations

import dataclasses
import json
import shlex
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import typer

from audit.cli._common import (
    DEFAULT_WORKERS,
    DeterminismOption,
    ExecutorOption,
    QuietOption,
    RayAddressOption,
    VerboseOption,
    WorkersOption,
    echo_fitted,
    fail,
    terminal_text,
)
from audit.errors import MemoryAuditError, PlanError
from audit.plan import DEFAULT_TRANSFORMS as DEFAULT_TRANSFORMS
from audit.plan import PRESET_TRANSFORMS as PRESET_TRANSFORMS
from audit.plan import (
    PROMPT_LAYOUT,
    LLMStagePlan,
    RunPlan,
    TransformSpec,
    compressor_versions,
    default_conditions,
    parse_budgets,
    parse_conditions,
    parse_transforms,
    preregistered,
)
from compressors import ConditionSpec, build
from histories import Pair, transform_usage
from histories.natural import PRESET_NAMES

if TYPE_CHECKING:
    from audit.rundir import Invocation as InvocationCost

EXECUTORS = ("local", "ray")
Executor = Literal["local", "ray"]


@dataclass(frozen=True)
class Invocation:
    """How this invocation runs the plan (never part of the plan itself)."""

    executor: Executor = "local"
    ray_address: str | None = None
    retry_na: bool = True
    """When resuming: ask again for LLM reads that an outage left NA."""
    determinism: bool = True
    """Measure each LLM backend's determinism before its reads."""
    csv: bool = False
    """Write results.csv too (a resume keeps writing it once a run has one)."""
    verbose: bool = False
    """Print every score after the verdicts (``--verbose``)."""
    workers: int = 1
    quiet: bool = False
    config_file: Path | None = None
    """The backends file (API keys in it are withheld from external systems)."""
    raising_exits: bool = True
    """Exit 5 when a compressor raised (a replication exits after its last seed)."""


def check_executor(executor: str, ray_address: str | None) -> Executor:
    """``--executor`` and ``--ray-address``, checked (one line and exit 2 when wrong)."""
    if executor not in EXECUTORS:
        fail(f"--executor: {executor!r} is not one of {', '.join(EXECUTORS)}")
    if ray_address is not None and executor != "ray":
        fail("--ray-address needs --executor ray")
    return cast(Executor, executor)


def _spaced(transforms: str) -> str:
    """A transform list as help text: a space after each comma, so it wraps between items."""
    return transforms.replace(",", ", ")


DEFAULT_LLM_TRANSFORMS = "identity,relabel:1"
"""The LLM stage's instances: each sampled pair as it is and relabelled once, so LLM
writers and readers face the same naming check as the deterministic stage."""
DEFAULT_LLM_CONDITIONS = (
    "prose_high,prose_off,structured_high,direct_prose,frontier,frontier_latest,full"
)


def run_audit(
    preset: Annotated[
        str | None,
        typer.Option(
            help=f"Generate the pairs of a preset: {', '.join(PRESET_NAMES)} (default: "
            "cca-pilot; natural: the MultiWOZ, tau2 airline and retail, and tzdata packs)."
        ),
    ] = None,
    pairs: Annotated[
        Path | None,
        typer.Option("--pairs", help="A pairs.jsonl file (audit generate), instead of --preset."),
    ] = None,
    conditions: Annotated[
        str | None,
        typer.Option(
            help="Comma list of conditions (name[:k=v], or package.module:Class); "
            "'baselines' adds every archive (the ceiling) and shortcut probe (the floor) "
            "(default: every deterministic built-in, baselines included).",
        ),
    ] = None,
    transforms: Annotated[
        str | None,
        typer.Option(
            help=f"{transform_usage()} "
            "(comma list, identity among them; a kind without :K is K = 1; "
            f"default {_spaced(DEFAULT_TRANSFORMS)}; with "
            f"--preset cca-pilot-paper {_spaced(PRESET_TRANSFORMS['cca-pilot-paper'])}; "
            f"with --preset natural {_spaced(PRESET_TRANSFORMS['natural'])})."
        ),
    ] = None,
    budget: Annotated[
        str, typer.Option(help="Memory budgets in UTF-8 bytes (comma list).")
    ] = "1200",
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the transforms (default: drawn at random for each new run and "
            "recorded in config.json, so no compressor can know the transformed instances "
            "in advance; the same --out reuses it; cca-pilot-paper: 0, the paper's)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Run directory (default: runs/<timestamp>).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Run directory runs/NAME (instead of --out).")
    ] = None,
    workers: WorkersOption = DEFAULT_WORKERS,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
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
    llm_transforms: Annotated[
        str,
        typer.Option(help="Transforms of the LLM stage's pairs (comma list)."),
    ] = DEFAULT_LLM_TRANSFORMS,
    reference: Annotated[
        str | None,
        typer.Option(
            help="The condition every other is compared with, fixed before the run "
            "(preregistered; stored in config.json). Default: the best strict condition."
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Replicate on datasets generated with each of these seeds (comma list; "
            "a preset only): one run directory per seed, then per-seed and pooled scores."
        ),
    ] = None,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    plan_only: Annotated[
        bool,
        typer.Option(
            "--plan-only",
            help="Write the run directory's plan (config.json) and stop: nothing runs and "
            "no LLM request is sent. Then `audit batch export RUNDIR` writes its LLM "
            "requests as a batch, and the same command without --plan-only runs it.",
        ),
    ] = False,
    retry_na: Annotated[
        bool,
        typer.Option(
            "--retry-na/--keep-na",
            help="When resuming: ask again for reads an outage left NA (LLM backends, "
            "external memory systems).",
        ),
    ] = True,
    determinism: DeterminismOption = True,
    csv: Annotated[
        bool,
        typer.Option(
            "--csv",
            help="Also write results.csv (one row per read, memories by sha256) beside "
            "results.parquet; `audit export RUN --csv` writes it later.",
        ),
    ] = False,
) -> None:
    """Audit memory conditions on paired histories: exact reader, plus LLMs if asked.

    With no options this is the default audit: the 84 cca-pilot pairs, every
    deterministic condition and shortcut probe under identity + 5 renamings + 5
    permutations + 5 relabellings + 10 revision remaps + 10 value redraws + 5 disguises,
    read by the exact interpreter (about 35 CPU seconds, no model; cca-pilot-paper keeps
    40 renamings, permutations and relabellings).  --preset natural runs the same
    conditions over 75 pairs each of the MultiWOZ, tau2 airline, tau2 retail and tzdata
    packs (entity renamings in place of value redraws, which do not apply to natural
    pairs).  LLM reads are an opt-in: --reader local and
    --writer local for the embedded model, --config for vLLM.
    """
    from audit.cli._console import print_replication
    from audit.rundir import (
        default_run_dir,
        file_source,
        named_run_dir,
        preset_source,
        seed_run_dir,
    )

    if preset is not None and pairs is not None:
        fail("give --preset or --pairs, not both")
    if out is not None and name is not None:
        fail("give --out or --name, not both")
    chosen = check_executor(executor, ray_address)
    preset_name = preset or "cca-pilot"
    if transforms is None:
        transforms = PRESET_TRANSFORMS.get(preset_name if pairs is None else "", DEFAULT_TRANSFORMS)
    transform_specs = parse_transforms(transforms, with_identity=True)
    budgets = parse_budgets(budget)
    specs = parse_conditions(conditions) if conditions is not None else default_conditions()
    versions = compressor_versions(specs)
    reference = preregistered(reference, specs)

    generation_seeds = parse_seeds(seeds) if seeds is not None else [None]
    if pairs is not None and seeds is not None:
        fail("--seeds generates a dataset per seed: give a --preset, not --pairs")
    if pairs is None and preset_name not in PRESET_NAMES:
        fail(f"unknown preset {preset_name!r}; known: {', '.join(PRESET_NAMES)}")
    root = out or (named_run_dir(name) if name is not None else default_run_dir())
    from audit.api import transform_seed

    seed = transform_seed(seed, root, preset_name if pairs is None else None, seeds is not None)
    llm_transform_specs = parse_transforms(llm_transforms, "--llm-transforms")
    invocation = Invocation(
        chosen, ray_address, retry_na, determinism, csv, verbose, workers, quiet,
        config_file, raising_exits=seeds is None,
    )  # fmt: skip
    summaries: dict[int, dict[str, Any]] = {}
    for generation_seed in generation_seeds:
        if pairs is not None:
            entry, pair_list, digest = file_source(pairs)
        else:
            entry, pair_list, digest = preset_source(preset_name, generation_seed)
        llm_stage, open_llm = _llm_stage_options(
            reader, writer, config_file, repeats, llm_sample, llm_conditions, schema, pair_list,
            llm_transform_specs,
        )  # fmt: skip
        plan = RunPlan(
            llm=llm_stage, pairs=entry, pairs_sha256=digest, conditions=specs,
            compressor_versions=versions, budgets=budgets, transforms=transform_specs,
            seed=seed, reference=reference,
        )  # fmt: skip
        run_dir = root if generation_seed is None else seed_run_dir(root, generation_seed)
        if plan_only:
            _plan_only(run_dir, plan)
            continue
        withhold_keys(plan, invocation.config_file)
        summary = execute_and_print(run_dir, plan, pair_list, open_llm, invocation)
        if generation_seed is not None:
            summaries[generation_seed] = summary
    if summaries and not plan_only:
        print_replication(write_replication(root, summaries), root)
        if any(summary.get("compressor_errors") for summary in summaries.values()):
            from audit.rundir import EXIT_COMPRESSOR_RAISED

            raise typer.Exit(EXIT_COMPRESSOR_RAISED)


def parse_seeds(text: str) -> list[int]:
    """``--seeds 1,2,3``: distinct integer generation seeds, at least two."""
    try:
        found = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PlanError(f"--seeds: {text!r} is not a comma list of integers") from None
    if len(set(found)) != len(found):
        raise PlanError("--seeds: a seed is listed twice")
    if len(found) < 2:
        raise PlanError("--seeds: a replication needs at least two seeds")
    return found


def write_replication(root: Path, summaries: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """replication.json in the replication's parent directory; returns its rows."""
    from audit.rundir import REPLICATION_FILE, write_atomically
    from audit.scoring import replicate

    rows = replicate(summaries)
    payload = {"seeds": sorted(summaries), "systems": rows}
    write_atomically(root / REPLICATION_FILE, json.dumps(payload, indent=2) + "\n")
    return rows


def _plan_only(run_dir: Path, plan: RunPlan) -> None:
    """``--plan-only``: the run directory's plan written, nothing run."""
    from audit.rundir import prepare_directory
    from audit.scoring import SCORING_VERSION

    resumed, _run_id = prepare_directory(run_dir, plan, scoring=SCORING_VERSION)
    print(
        f"{'plan unchanged' if resumed else 'planned'}: {run_dir} (nothing run); "
        f"`audit batch export {run_dir}` (with the same --config) writes its LLM requests as "
        "a batch"
    )


EXTERNAL = frozenset({"cmd", "http"})
"""The conditions that hand the audit's data to a system outside it."""


def withhold_keys(plan: RunPlan, config_file: Path | None) -> None:
    """Before an external system (``cmd:``, ``http:``) runs: every API key the backends
    configuration names is kept out of its environment (unless its ``env=`` passes it)
    and scrubbed from what it says, as a server's answers are (docs/adapters.md)."""
    specs = [*plan.conditions, *(plan.llm.conditions if plan.llm is not None else [])]
    if not any(spec.target in EXTERNAL for spec in specs):
        return
    from audit.backends import key_scrubber, load_config
    from compressors.adapters.command import withhold

    backends = load_config(config_file)  # BackendError: one line
    names = {b.api_key_env for b in backends.backends.values() if b.api_key_env is not None}
    withhold(names, key_scrubber(backends))


def execute_and_print(
    run_dir: Path,
    plan: RunPlan,
    pair_list: Sequence[Pair],
    open_llm: BackendOpener | None,
    invocation: Invocation,
) -> dict[str, Any]:
    """Run or resume ``plan`` in ``run_dir`` and print its summary; exit 3 when the run
    ends incomplete (LLM reads NA for want of a server), else 5 when a compressor raised
    (``raising_exits``; a replication exits after its last seed)."""
    from audit.backends import BackendStartError
    from audit.cli._console import print_summary, run_progress
    from audit.cli._errors import error_block
    from audit.engine import execute
    from audit.rundir import (
        EXIT_COMPRESSOR_RAISED,
        EXIT_INCOMPLETE,
        SUMMARY_FILE,
        is_whole,
        read_manifest,
        remove_stale_temps,
    )

    def run(opener: BackendOpener | None, measure: bool) -> dict[str, Any]:
        with run_progress(enabled=not invocation.quiet) as progress:
            return execute(
                run_dir, plan, pair_list, workers=invocation.workers, progress=progress,
                open_clients=opener, retry_na=invocation.retry_na, measure_backends=measure,
                executor=invocation.executor, ray_address=invocation.ray_address,
                csv=invocation.csv,
            )  # fmt: skip

    started = time.perf_counter()
    whole = is_whole(run_dir, plan.model_dump(mode="json"), invocation.csv)
    if whole:
        remove_stale_temps(run_dir)  # a killed writer's leftovers, as every invocation does
    try:
        # a whole run is left as it is: no backend started, no file written again
        summary = (
            json.loads((run_dir / SUMMARY_FILE).read_bytes())
            if whole
            else run(open_llm, invocation.determinism)
        )
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (audit.errors.Terminated)
        if (run_dir / "manifest.json").exists():
            echo_fitted(
                f"stopped: what finished is kept in {run_dir}; `audit resume {run_dir}` "
                "finishes the run",
                err=True,
            )
        raise
    except BackendStartError as error:  # raised before any work: nothing was run
        offline = _from_cache(run_dir, plan, open_llm) if open_llm is not None else None
        if offline is None:
            raise
        typer.echo(
            f"note: {str(error).split('; nothing was run')[0]}, but the response cache answers "
            "every LLM request of this run (run as batches): completing it from the cache "
            "(no determinism measurement: there is no server to measure)",
            err=True,
        )
        summary = run(offline, False)
    last = None if whole else _last_invocation(run_dir)
    if last is not None and (dropped := last.dropped_jobs):
        echo_fitted(
            f"warning: dropped {len(dropped)} job record(s) its plan never made from "
            f"{run_dir / 'store.sqlite'} (damage, first {dropped[0]}); costs.json lists them",
            err=True,
        )
    if whole:  # its answer again, from summary.json (asked for by running it again)
        typer.echo(f"complete: nothing to do; {run_dir} is whole and was left as it is")
        print_summary(summary, run_dir, None, invocation.verbose)
    elif _did_nothing(last):
        typer.echo(
            f"complete: every job of {run_dir} was already finished; its result files "
            "were written again"
        )
    else:
        print_summary(summary, run_dir, time.perf_counter() - started, invocation.verbose)
        slow = last.deterministic.conditions if last and last.deterministic else {}
        if note := slow_condition(slow):
            echo_fitted(note)
    for line in error_block(summary, run_dir):  # a compressor raised: its first error
        typer.echo(line, err=True)
    manifest = read_manifest(run_dir)
    if manifest is not None and (manifest.na_units or manifest.na_jobs):
        held = [
            *([f"{manifest.na_jobs} job(s)"] if manifest.na_jobs else []),
            *([f"{manifest.na_units} LLM unit(s)"] if manifest.na_units else []),
        ]
        echo_fitted(
            f"warning: {' and '.join(held)} hold reads that are NA for want of a server or "
            "of an external memory system's answer (their scores are bounds): "
            f"`audit resume {run_dir}` asks again",
            err=True,
        )
        raise typer.Exit(EXIT_INCOMPLETE)
    for line in next_steps(run_dir, plan, llm=not whole):
        typer.echo(terminal_text(line))
    if invocation.raising_exits and summary.get("compressor_errors"):
        raise typer.Exit(EXIT_COMPRESSOR_RAISED)
    return summary


def slow_condition(seconds: Mapping[str, float]) -> str | None:
    """A note naming the condition that took far longer than the others (at least 2 s
    and 5 times the median of the rest), so a slow plugin is found by name."""
    if len(seconds) < 2:
        return None
    name, top = max(seconds.items(), key=lambda item: item[1])
    rest = statistics.median(v for k, v in seconds.items() if k != name)
    if top < 2.0 or top < 5 * rest:
        return None
    times = f"{top / rest:.0f} times" if rest > 0 else "far more than"
    return (
        f"note: {name} took {top:.1f} s, summed over its jobs (which ran side by side), "
        f"{times} the median of the other conditions: costs.json and the report's costs "
        "list each"
    )


def _last_invocation(run_dir: Path) -> InvocationCost | None:
    """costs.json's entry of the invocation that just ended (None: there is none)."""
    from audit.rundir import read_costs

    costs = read_costs(run_dir)
    return costs.invocations[-1] if costs is not None and costs.invocations else None


def _did_nothing(last: InvocationCost | None) -> bool:
    """This invocation (``last``) ran no job and no LLM unit (the run was already whole)."""
    if last is None:
        return False
    jobs = last.deterministic.jobs if last.deterministic is not None else 0
    units = last.llm.units if last.llm is not None else 0
    return jobs == 0 and units == 0


def next_steps(run_dir: Path, plan: RunPlan, llm: bool = True) -> list[str]:
    """What to do next with this run: the report, and LLM reads when it has none
    (``llm``: said once, when the run is made, not on every look at a whole one)."""
    lines = [
        f"next: audit report {shlex.quote(str(run_dir))}",
        "      (report.html and report.md in its report/)",
    ]
    if plan.llm is None and llm:
        lines += [
            "      LLM reads (the embedded 135M model checks the pipeline; vLLM: --config):",
            "      audit run --transforms identity --reader local --llm-sample 1 \\",
            "        --repeats 1 --llm-transforms identity --llm-conditions full",
        ]
    return lines


def _llm_stage_options(
    reader: str | None,
    writer: str | None,
    config_file: Path | None,
    repeats: int,
    llm_sample: int,
    llm_conditions: str | None,
    schema: bool,
    pairs: Sequence[Pair],
    transforms: list[TransformSpec],
) -> tuple[LLMStagePlan | None, Any]:
    """The LLM stage plan and a client opener; (None, None) when there is no LLM stage:
    there is one only when --reader or --writer names a backend (``local`` is the
    embedded model)."""
    if reader is None and writer is None:
        if llm_conditions:
            fail("--llm-conditions needs --reader and/or --writer")
        return None, None
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
    from audit.scoring import READER_CONTROL

    if reader is not None and not any(spec.target == READER_CONTROL for spec in specs):
        # every LLM reader reads the whole history first: below READ_THRESHOLD of the
        # exact reader there, its scores are no verdict (docs/method.md)
        specs += parse_conditions(READER_CONTROL, "--llm-conditions")
    backends = load_backends(config_file, writer, reader)
    from audit.engine.clients import declared_model

    stage = LLMStagePlan(
        reader=reader,
        reader_model=declared_model(backends, reader) if reader else None,
        writer=writer,
        writer_model=declared_model(backends, writer) if writer else None,
        conditions=specs,
        sample=min(llm_sample, len(pairs)),
        repeats=repeats,
        transforms=transforms,
        use_schema=schema,
        prompt_layout=PROMPT_LAYOUT,
    )
    return stage, BackendOpener(backends, writer, reader)


def load_backends(config_file: Path | None, writer: str | None, reader: str | None) -> Any:
    """The backends configuration, checked before any work: each named backend exists
    and may serve its role, its API key is set, and the response cache opens."""
    # imported only now: the backends (aiohttp and friends) cost half a second to import
    from audit.backends import ResponseCache, load_config, resolve_api_key

    backends = load_config(config_file)  # BackendError: one line
    if reader is not None:
        resolve_api_key(reader, backends.get(reader, "reader"), backends)
    if writer is not None:
        resolve_api_key(writer, backends.get(writer, "writer"), backends)
    with ResponseCache(backends.resolved_cache_path()):
        pass  # a damaged cache fails here, not after the deterministic stage
    return backends


@dataclass(frozen=True)
class BackendOpener:
    """Opens the writer and reader clients (``engine.execute`` calls it), checking first
    that each server answers (``check_reachable``)."""

    backends: Any
    writer: str | None
    reader: str | None
    check_reachable: bool = True

    def __call__(self, status: Callable[[str], object] | None = None) -> Any:
        from audit.engine.clients import open_clients

        return open_clients(
            self.backends, self.writer, self.reader, self.backends.resolved_cache_path(),
            check_reachable=self.check_reachable, status=status,
        )  # fmt: skip


def _from_cache(run_dir: Path, plan: RunPlan, opener: BackendOpener) -> BackendOpener | None:
    """An opener without the reachability check, when the run planned in ``run_dir`` is
    ``plan`` and the response cache answers every request it would send (its LLM
    requests were run as batches, ``audit batch``); else None."""
    from audit.backends import ResponseCache
    from audit.engine.batch import live_requests
    from audit.rundir import CONFIG_FILE, read_config_file

    if not (run_dir / CONFIG_FILE).exists():
        return None
    try:
        stored = read_config_file(run_dir).config.model_dump(mode="json")
        if stored != plan.model_dump(mode="json"):  # another run: execute refuses it
            return None
        path = opener.backends.resolved_cache_path()
        with ResponseCache(path, log_misses=False) as cache:
            if live_requests(run_dir, opener.backends, cache):
                return None
    except MemoryAuditError:
        return None
    return dataclasses.replace(opener, check_reachable=False)
