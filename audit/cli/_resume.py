"""``audit resume``: finish a run from its own directory, with no options to repeat.

The plan comes from ``RUN_DIR/config.json`` and the pairs are rebuilt from the source
it records (checked against its sha256), so a stopped run, a run with NA reads from
an outage, or a run whose result files were damaged is finished with one command.
Finished jobs are never redone; the result files are written again from the store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from audit.cli._common import MAX_WORKERS
from audit.errors import RunDirectoryError


def resume_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `audit run`.")],
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=MAX_WORKERS, help="Processes (default: every core; never more than jobs)."
        ),
    ] = max(1, os.cpu_count() or 1),
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="Backends TOML for an LLM stage (default: ./audit.toml)."),
    ] = None,
    retry_na: Annotated[
        bool,
        typer.Option(
            "--retry-na/--keep-na", help="Ask again for LLM reads that an outage left NA."
        ),
    ] = True,
    determinism: Annotated[
        bool,
        typer.Option(
            "--determinism/--no-determinism",
            help="Measure each LLM backend's determinism before its reads (kept in "
            "config.json: the first measurement stays).",
        ),
    ] = True,
) -> None:
    """Finish a stopped run, retry its NA reads and rewrite its result files.

    Exit status 0 when the run is complete, 3 when LLM reads are still NA.
    """
    from audit.cli._run import backend_opener, execute_and_print, load_backends
    from audit.rundir import read_config_file, rebuild_pairs

    config = read_config_file(run_dir)  # RunDataError: one line naming the file
    plan = config.config
    try:
        pairs, digest = rebuild_pairs(plan.pairs, run_dir)
    except (OSError, ValueError) as error:  # PairFileError is a ValueError
        raise RunDirectoryError(
            f"{run_dir}: the run's pairs cannot be rebuilt from config.json ({error})"
        ) from None
    if digest != plan.pairs_sha256:
        raise RunDirectoryError(
            f"{run_dir}: the pairs config.json names have changed since the run began "
            f"(sha256 {digest[:12]}, the run's {plan.pairs_sha256[:12]}): resuming would mix "
            "two datasets; restore the pair file or start a new run"
        )
    opener = None
    if plan.llm is not None:
        backends = load_backends(config_file, plan.llm.writer, plan.llm.reader)
        opener = backend_opener(backends, plan.llm.writer, plan.llm.reader)
    execute_and_print(run_dir, plan, pairs, workers, quiet, opener, retry_na, determinism)
