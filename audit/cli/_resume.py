"""``audit resume``: finish a run from its own directory, with no options to repeat.

The plan comes from ``RUN_DIR/config.json`` and the pairs are rebuilt from the source
it records (checked against its sha256), so a stopped run, a run with NA reads from
an outage, or a run whose result files were damaged is finished with one command.
Finished jobs are never redone; the result files are written again from the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from audit.cli._common import (
    DEFAULT_WORKERS,
    DeterminismOption,
    ExecutorOption,
    QuietOption,
    RayAddressOption,
    VerboseOption,
    WorkersOption,
)
from audit.errors import MemoryAuditError, RunDirectoryError

if TYPE_CHECKING:
    from audit.plan import RunPlan


def resume_command(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="A run directory written by `audit run`.")
    ],
    workers: WorkersOption = DEFAULT_WORKERS,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="Backends TOML for an LLM stage (default: ./audit.toml)."),
    ] = None,
    retry_na: Annotated[
        bool,
        typer.Option(
            "--retry-na/--keep-na",
            help="Ask again for reads an outage left NA (LLM backends, external memory systems).",
        ),
    ] = True,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    determinism: DeterminismOption = True,
) -> None:
    """Finish a stopped run, retry its NA reads and rewrite its result files.

    Exit status 0 when the run is complete, 3 when LLM reads are still NA, 5 when a
    compressor raised (its reads are errors; a fixed compressor is audited in a new run,
    with its version raised), 2 when the pairs or a compressor's version changed since
    the run began.
    """
    from audit.cli._run import (
        BackendOpener,
        Invocation,
        check_executor,
        execute_and_print,
        load_backends,
        withhold_keys,
    )
    from audit.rundir import read_config_file, rebuild_pairs

    chosen = check_executor(executor, ray_address)
    invocation = Invocation(
        chosen, ray_address, retry_na=retry_na, determinism=determinism, verbose=verbose,
        workers=workers, quiet=quiet, config_file=config_file,
    )  # fmt: skip
    config = read_config_file(run_dir)  # RunDataError: one line naming the file
    plan = config.config
    try:
        pairs, digest = rebuild_pairs(plan.pairs, run_dir)
    except (OSError, ValueError) as error:  # PairFileError is a ValueError
        raise RunDirectoryError(
            f"{run_dir}: the run's pairs cannot be rebuilt from config.json ({error})"
        ) from None
    if digest != plan.pairs_sha256:
        restore = (
            "install the tzdata package the run derived its pairs from"
            if "natural" in plan.pairs
            else "restore the pair file"
        )
        raise RunDirectoryError(
            f"{run_dir}: the pairs config.json names have changed since the run began "
            f"(sha256 {digest[:12]}, the run's {plan.pairs_sha256[:12]}): resuming would mix "
            f"two datasets; {restore} or start a new run"
        )
    _check_versions(run_dir, plan)
    opener = None
    if plan.llm is not None:
        backends = load_backends(config_file, plan.llm.writer, plan.llm.reader)
        opener = BackendOpener(backends, plan.llm.writer, plan.llm.reader)
    withhold_keys(plan, config_file)
    execute_and_print(run_dir, plan, pairs, opener, invocation)


def _check_versions(run_dir: Path, plan: RunPlan) -> None:
    """Refuse to resume with a compressor whose installed version is not the run's: its
    jobs are keyed by the run's versions, so the rest would be written by other code
    under the same name.  (A condition that cannot be built now fails where a job needs
    it.)"""
    from audit.plan import compressor_versions

    try:
        installed = compressor_versions(plan.conditions)
    except MemoryAuditError:
        return
    changed = [
        f"{was} is now {now}"
        for label, now in installed.items()
        if (was := plan.compressor_versions.get(label, now)) != now
    ]
    if changed:
        raise RunDirectoryError(
            f"{run_dir}: {'; '.join(changed)} (its name or version changed since the run "
            "began): resuming would mix two compressors under one condition; bring back "
            "the run's to resume, or audit this one in a new run (`audit report` reads "
            "this run as it is)"
        )
