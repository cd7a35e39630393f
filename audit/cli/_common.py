"""What every command shares: the app, one-line errors, and the error boundary.

A ``MemoryAuditError`` raised by any command becomes one line on stderr, ``error:
...``, and exit status 2 (bad input) or 1 (a setup that failed: a backend that did
not start, a generator that could not build a pair).  Anything else is a bug: the
console entry point prints its traceback and asks for a report.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import sys
import textwrap
import traceback
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from histories import MemoryAuditError

MAX_WORKERS = 256
"""``--workers`` above this is refused: each worker is a process of about 100 MB."""

WorkersOption = Annotated[
    int,
    typer.Option(
        min=1,
        max=MAX_WORKERS,
        show_default=False,
        help="Processes (default: every core; never more than jobs).",
    ),
]
DEFAULT_WORKERS = max(1, os.cpu_count() or 1)
DeterminismOption = Annotated[
    bool,
    typer.Option(
        "--determinism/--no-determinism",
        help="Before LLM reads: measure each backend's determinism (16 fixed requests sent "
        "twice; 4 to a one-slot server such as the embedded model) and record it in "
        "config.json (the lowest of every invocation stays).",
    ),
]

ExecutorOption = Annotated[
    str,
    typer.Option(
        help="Where the deterministic jobs run: local (a process pool of --workers) or "
        "ray (Ray tasks; needs the ray extra). Not part of the plan: a run started "
        "with one resumes with the other, with identical results."
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        help="With --executor ray: the cluster (HOST:PORT, as `ray start --head` prints "
        "it). Default: RAY_ADDRESS, else a private local Ray with --workers CPUs."
    ),
]

QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        help="No progress display (per stage: bars on a terminal; in a log, a line every "
        "30 s while a stage runs).",
    ),
]

VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="After the verdicts, every score by metric and transform, the floor check's "
        "tests and the equivariance notes (summary.json and the report hold them too).",
    ),
]

BUG_HINT = (
    "this is a bug in memory-audit, not a problem with your input: please report it "
    "with the traceback above"
)


_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
"""Anything but printable ASCII: only then is a line checked for control characters."""


def terminal_text(text: str) -> str:
    """One line as a terminal must get it when it holds text a user or a plugin chose
    (a path, a condition name): control characters as escapes, never acted on (an
    escape sequence can set the window title; a newline can fake a line of output)."""
    if not _UNPRINTABLE.search(text):
        return text
    from reports import visible  # a heavy import, only for a line that needs it

    return visible(text).replace("\n", "\\n").replace("\t", " ")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error to stderr and exit (no traceback for user errors)."""
    typer.echo(f"error: {terminal_text(message)}", err=True)
    raise typer.Exit(code)


def stdout_closed() -> bool:
    """Whether the reader of our standard output has gone (its pipe reports an error):
    a ``BrokenPipeError`` from a socket or pipe of the command's own is not that."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a file (a test's capture)
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


SIGPIPE_STATUS = 128 + signal.SIGPIPE
"""The status a shell gives a process that SIGPIPE ended."""


def silence_stdout() -> None:
    """Standard output to /dev/null, once its reader has gone: later writes and the
    exit's own flush must not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class GuardedGroup(TyperGroup):
    """A command group whose commands' ``MemoryAuditError`` becomes one clean line, and
    so does a file the system refuses (a path that cannot be created, a full disk, no
    permission): that is the machine's answer, not a bug."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except MemoryAuditError as error:
            fail(str(error), error.exit_code)
        except BrokenPipeError as error:
            if stdout_closed():  # our reader went (`audit families | head -1`): stop quietly
                silence_stdout()  # with the status SIGPIPE gives, as Unix tools do
                raise typer.Exit(SIGPIPE_STATUS) from None
            fail(os_error_text(error), 1)  # a socket or pipe of the command's own
        except OSError as error:
            fail(os_error_text(error), 1)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its whole first sentence, wrapped: click's default cuts it
        to the terminal's width with "...", which left most of them unreadable."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            rows.append((name, first_sentence(command.short_help or command.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def echo_fitted(text: str, indent: int = 2, err: bool = False) -> None:
    """A line of plain output wrapped to the terminal (80 columns when piped), later
    lines indented by ``indent``; paths and hyphenated words are never split; ``err``:
    on stderr (a warning, the ``stopped:`` message)."""
    width = max(40, shutil.get_terminal_size((80, 24)).columns)
    # a command in backquotes stays on one line, to be copied whole (terminal_text has
    # escaped every control character, so NUL marks a kept space)
    kept = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), terminal_text(text))
    filled = textwrap.fill(
        kept,
        width=width,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    typer.echo(filled.replace("\0", " "), err=err)


def plural(count: int, noun: str) -> str:
    """``1 drill-down page``, ``2 drill-down pages``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def first_sentence(help_text: str) -> str:
    """The first sentence of a help text (its first paragraph up to ". "), one line."""
    paragraph = " ".join(help_text.strip().split("\n\n", 1)[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def os_error_text(error: OSError) -> str:
    """``PATH: reason``, naming both files of a rename."""
    reason = error.strerror or str(error)
    names = [str(n) for n in (error.filename, error.filename2) if n is not None]
    return f"{' -> '.join(names)}: {reason}" if names else reason


def new_app(name: str, help_text: str) -> typer.Typer:
    """A (sub-)command group with the error boundary."""
    return typer.Typer(
        name=name,
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        cls=GuardedGroup,
    )


def report_bug(error: BaseException) -> NoReturn:
    """An unexpected exception: its traceback, then what to do about it."""
    traceback.print_exception(error, file=sys.stderr)
    print(f"error: {BUG_HINT}", file=sys.stderr)
    sys.exit(1)


def first_validation_message(error: ValueError) -> str:
    """The first problem of a pydantic ``ValidationError``, named by its option."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first["loc"]).replace("_", "-")
        return f"--{field}: {first['msg']}"
    return str(error)
