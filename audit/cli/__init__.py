"""The ``audit`` command line: the one place that wires the four packages together.

Each command lives in a module of its own; this module assembles them into one
``app``.  Commands raise ``MemoryAuditError`` for bad input, and the app prints it as
one line (``audit.cli._common``); anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import os

# OpenBLAS on one thread unless set (read once, as the imports below load numpy): its
# threads spun on our small products, against the workers too, for the same numbers.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import signal
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from types import FrameType
from typing import Annotated

import typer

from audit.cli._backends import backends_app, cache_app
from audit.cli._batch import batch_app
from audit.cli._common import (
    SIGPIPE_STATUS,
    fail,
    new_app,
    os_error_text,
    report_bug,
    silence_stdout,
    stdout_closed,
)
from audit.cli._export import export_command
from audit.cli._generate import generate, list_families, pairs_app
from audit.cli._plugins import list_compressors, new_compressor
from audit.cli._power import power_command
from audit.cli._report import compare_command, report_command
from audit.cli._resume import resume_command
from audit.cli._run import run_audit
from audit.cli._runs import runs_app
from audit.errors import Terminated

app = new_app(
    "audit", "Audit agent-memory compressors with paired histories: correct now, sufficient later?"
)


def _print_version(asked: bool) -> None:
    """``audit --version``: the installed distribution's version, for bug reports."""
    if not asked:
        return
    try:
        found = distribution_version("memory-audit")
    except PackageNotFoundError:  # imported from a checkout that was never installed
        found = "unknown (not installed)"
    print(f"memory-audit {found}")
    raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options of ``audit`` itself (the help text is the app's)."""


app.command("run")(run_audit)
app.command("resume")(resume_command)
app.command("report")(report_command)
app.command("compare")(compare_command)
app.command("export")(export_command)
app.command("generate")(generate)
app.command("families")(list_families)
app.command("power")(power_command)
app.add_typer(pairs_app, name="pairs")
app.command("compressors")(list_compressors)
app.command("new-compressor")(new_compressor)
app.add_typer(backends_app, name="backends")
app.add_typer(cache_app, name="cache")
app.add_typer(batch_app, name="batch")
app.add_typer(runs_app, name="runs")


_SIGNALLED: list[int] = []
"""The signal that ended the command (typer turns any KeyboardInterrupt into exit 130)."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the command like Ctrl-C does: a run records why it stopped.  While
    an event loop runs (the LLM stage) the signal is raised by the loop itself, between
    callbacks: raised here it would end whichever task happened to run (an HTTP write),
    which then printed its traceback as an exception never retrieved."""
    _SIGNALLED.append(signum)
    asyncio = sys.modules.get("asyncio")  # not imported: no loop can be running
    try:
        loop = asyncio.get_running_loop() if asyncio is not None else None
    except RuntimeError:
        loop = None
    if loop is None:
        raise Terminated(signum)
    loop.call_soon_threadsafe(_raise, Terminated(signum))


def _raise(error: BaseException) -> None:
    raise error


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("PYTHONIOENCODING", "utf-8")
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    except SystemExit:
        if _SIGNALLED:  # 128 + the signal, as a shell reports a process it killed
            sys.exit(128 + _SIGNALLED[0])
        raise
    except KeyboardInterrupt:
        sys.exit(128 + _SIGNALLED[0] if _SIGNALLED else 130)
    except OSError as error:  # --help or --version, printed before any command runs
        if isinstance(error, BrokenPipeError) and stdout_closed():
            silence_stdout()
            sys.exit(SIGPIPE_STATUS)
        print(f"error: {os_error_text(error)}", file=sys.stderr)
        sys.exit(1)
    except Exception as error:  # not a MemoryAuditError (those end in one line): a bug
        report_bug(error)


__all__ = ["app", "fail", "main"]
