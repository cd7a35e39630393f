"""``audit batch export`` and ``audit batch import``: a run's LLM requests as offline
batches (the OpenAI Batch API's JSONL, which ``vllm run-batch`` reads and writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from audit.cli._backends import CacheOption, ConfigOption, EnvFileOption, _config
from audit.cli._common import new_app

batch_app = new_app(
    "batch",
    "A run's LLM requests as offline batches (OpenAI Batch API JSONL; vllm run-batch): "
    "export a round, run it, import the answers into the response cache.",
)


@batch_app.command("export")
def export_batch(
    run_dir: Annotated[
        Path, typer.Argument(metavar="RUN_DIR", help="A run directory (see audit run --plan-only).")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The batch file (default: RUNDIR/batch/round-NNN.jsonl)."),
    ] = None,
    config: ConfigOption = None,
    env_file: EnvFileOption = Path(".env"),
    cache: CacheOption = None,
) -> None:
    """Write the LLM requests of the run's next round as batch JSONL (custom_id = the
    request's cache key): every request `audit run` would send now and cannot answer
    from the cache. LLM writers need one round per update (each request holds the
    previous answer); the export says which round this is and what is still to come."""
    from audit.backends import ResponseCache
    from audit.engine.batch import export_round

    settings = _config(config, env_file)
    path = cache if cache is not None else settings.resolved_cache_path()
    with ResponseCache(path, log_misses=False) as store:
        found, written = export_round(run_dir, out, settings, store)
    done = f"{found.units_finished} of {found.units} LLM units already in the run store"
    if written is None:
        refused = (
            f"; {found.refused} request(s) a batch refused are left to `audit run`, which "
            "sends them live"
            if found.refused
            else ""
        )
        typer.echo(
            f"nothing to export: every LLM request of {run_dir} is answered in {path} "
            f"({done}){refused}. The same `audit run` command completes the run from the "
            "cache."
        )
        return
    typer.echo(
        f"round {found.round}: {len(found.requests)} requests ({found.writer_requests} writer "
        f"updates of {found.streams_waiting} streams, {found.reader_requests} reader reads) "
        f"-> {written}"
    )
    if found.rounds_after:
        typer.echo(
            f"still to come: {found.rounds_after} more round(s), at most "
            f"{found.writer_requests_after} writer requests and {found.reader_requests_after} "
            f"reader reads ({found.streams} writer streams, {done})"
        )
    else:
        typer.echo(f"still to come: nothing; this is the last round ({done})")
    if found.refused:
        typer.echo(f"{found.refused} request(s) refused by an earlier batch are not exported")
    typer.echo(
        "next: run the batch (e.g. vllm run-batch -i FILE -o OUT --model ...), then "
        "`audit batch import OUT`, then export again"
    )


@batch_app.command("import")
def import_batch(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A batch output file (JSONL).")],
    config: ConfigOption = None,
    env_file: EnvFileOption = Path(".env"),
    cache: CacheOption = None,
) -> None:
    """Load a batch output file's answers into the response cache, each under its
    custom_id (the key of a request `audit batch export` wrote). A line that is not an
    output line, or that answers a request never exported, stops the import: nothing
    is stored, and so does an answer from a model other than the one its request was
    exported for. Every configured backend's API key is scrubbed from what is stored."""
    from audit.backends import ResponseCache, key_scrubber
    from audit.engine.batch import import_answers

    # the configuration is read even with --cache: it names the keys to scrub
    settings = _config(config, env_file)
    path = cache if cache is not None else settings.resolved_cache_path()
    with ResponseCache(path, log_misses=False) as store:
        report = import_answers(file, store, key_scrubber(settings))
    answered, refused, already = report.answered, report.refused, report.already
    shown_refused = (
        f", {refused} refused by the batch (not cached: `audit run` sends them live)"
        if refused
        else ""
    )
    shown_already = f", {already} already in the cache" if already else ""
    typer.echo(f"{file}: {answered} answers imported into {path}{shown_refused}{shown_already}")
